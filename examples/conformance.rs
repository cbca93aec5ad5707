//! Running dropmc's conformance kit on a dropout layer written outside the
//! crate.
//!
//! ```text
//! cargo run --release --example conformance            # a correct layer
//! cargo run --release --example conformance -- buggy   # one that scales at eval
//! ```
//!
//! Implement `dropmc::ops::DropoutLayer` for your layer, draw every random
//! number from the generator you are given, and hand the layer to
//! `dropmc::conformance::run`. The program exits 1 when a claim fails.
//! Each method gets its pass's buffers as one value (`TrainPass`, `EvalPass`,
//! `BackwardPass`); `dropmc::ops::Rate::new` and the pass's `check_lengths`
//! make the checks the reference makes, in its order (a valid rate, then
//! buffers of the input's length).

use std::process::ExitCode;

use dropmc::Error;
use dropmc::conformance::{self, Options};
use dropmc::ops::{BackwardPass, DropoutLayer, EvalPass, Rate, TrainPass};
use rand::{Rng, RngExt};

/// A user's own inverted dropout, with a switch for a classic bug.
struct MyDropout {
    /// Multiply by `1 − p` at evaluation (the bug of mixing the schemes).
    scale_at_eval: bool,
}

impl DropoutLayer for MyDropout {
    fn name(&self) -> &str {
        if self.scale_at_eval {
            "my-dropout (scales at eval)"
        } else {
            "my-dropout"
        }
    }

    fn forward_train(&self, pass: TrainPass<'_>, p: f64, rng: &mut dyn Rng) -> Result<(), Error> {
        // dropmc's rule: 0 <= p < 1, p = 1 and NaN rejected.
        let q = Rate::new(p)?.q();
        pass.check_lengths()?;
        let TrainPass { x, out, mask } = pass;
        for ((o, m), v) in out.iter_mut().zip(mask.iter_mut()).zip(x) {
            *m = rng.random::<f64>() >= p;
            *o = if *m { v / q } else { 0.0 };
        }
        Ok(())
    }

    fn forward_eval(&self, pass: EvalPass<'_>, p: f64, _: &mut dyn Rng) -> Result<(), Error> {
        let q = Rate::new(p)?.q();
        pass.check_lengths()?;
        for (o, v) in pass.out.iter_mut().zip(pass.x) {
            *o = if self.scale_at_eval { v * q } else { *v };
        }
        Ok(())
    }

    fn backward(&self, pass: BackwardPass<'_>, p: f64) -> Result<(), Error> {
        let q = Rate::new(p)?.q();
        pass.check_lengths()?;
        let BackwardPass {
            grad_out,
            mask,
            grad_in,
        } = pass;
        for ((gi, m), g) in grad_in.iter_mut().zip(mask).zip(grad_out) {
            *gi = if *m { g / q } else { 0.0 };
        }
        Ok(())
    }
}

fn main() -> ExitCode {
    let buggy = std::env::args().nth(1).as_deref() == Some("buggy");
    let layer = MyDropout {
        scale_at_eval: buggy,
    };
    match conformance::run(&layer, &Options::default()) {
        Ok(result) => {
            print!("{}", conformance::table(&result));
            if result.passed() {
                ExitCode::SUCCESS
            } else {
                println!("failed: {}", result.failed().join(", "));
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
