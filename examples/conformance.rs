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
//! `dropmc::ops::Rate` and `dropmc::ops::check_buffers` make the checks the
//! reference makes (a valid rate, buffers of the input's length).

use std::process::ExitCode;

use dropmc::Error;
use dropmc::conformance::{self, Options};
use dropmc::error::check_len;
use dropmc::ops::{DropoutLayer, Rate, check_buffers};
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

    fn forward_train(
        &self,
        x: &[f64],
        p: f64,
        rng: &mut dyn Rng,
        out: &mut [f64],
        mask: &mut [bool],
    ) -> Result<(), Error> {
        // dropmc's rule: 0 <= p < 1, p = 1 and NaN rejected.
        let q = Rate::new(p)?.q();
        check_buffers("output buffer", out, mask, x.len())?;
        for ((o, m), v) in out.iter_mut().zip(mask.iter_mut()).zip(x) {
            *m = rng.random::<f64>() >= p;
            *o = if *m { v / q } else { 0.0 };
        }
        Ok(())
    }

    fn forward_eval(
        &self,
        x: &[f64],
        p: f64,
        _: &mut dyn Rng,
        out: &mut [f64],
    ) -> Result<(), Error> {
        let q = Rate::new(p)?.q();
        check_len("eval output buffer", out, x.len())?;
        for (o, v) in out.iter_mut().zip(x) {
            *o = if self.scale_at_eval { v * q } else { *v };
        }
        Ok(())
    }

    fn backward(
        &self,
        grad_out: &[f64],
        p: f64,
        mask: &[bool],
        grad_in: &mut [f64],
    ) -> Result<(), Error> {
        let q = Rate::new(p)?.q();
        check_buffers("gradient buffer", grad_in, mask, grad_out.len())?;
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
