//! A clean cancellation hook: a caller that can be interrupted (the Python
//! bindings, which must notice Ctrl-C while the GIL is released) installs a
//! check on its thread with [`with_cancellation`]; the Monte Carlo loops
//! ask [`requested`] before each chunk and stop with
//! [`Error::Interrupted`] once it says yes.
//!
//! The check is per thread, like the progress observer of
//! [`crate::ops::fast::observe_progress`]: it is asked on the thread that
//! installed it (between blocks, and before every chunk that thread runs
//! itself, which is every chunk on the bindings' one-thread pool) and never
//! on another thread, so it may take a lock that thread holds (the GIL).
//! Without a check nothing is asked: the command line stops on Ctrl-C by
//! the signal's default action. A run the check stops returns an error,
//! never a partial result, so cancellation cannot change any bits.

use std::cell::{Cell, RefCell};

use crate::error::Error;

/// A cancellation check: true when the run should stop.
pub type CancelCheck = Box<dyn Fn() -> bool>;

thread_local! {
    static CHECK: RefCell<Option<CancelCheck>> = const { RefCell::new(None) };
    /// Set once the check said yes, so it is not asked again (Python's
    /// `check_signals` reports a signal once).
    static CANCELLED: Cell<bool> = const { Cell::new(false) };
}

/// Runs `body` with `check` asked by every Monte Carlo loop `body` runs on
/// this thread; the previous check (if any) is restored afterwards.
pub fn with_cancellation<T>(check: CancelCheck, body: impl FnOnce() -> T) -> T {
    let previous = CHECK.with(|c| c.borrow_mut().replace(check));
    let was_cancelled = CANCELLED.with(|c| c.replace(false));
    let result = body();
    CHECK.with(|c| *c.borrow_mut() = previous);
    CANCELLED.with(|c| c.set(was_cancelled));
    result
}

/// Whether this thread's check (if any) asks the run to stop.
pub fn requested() -> bool {
    if CANCELLED.with(Cell::get) {
        return true;
    }
    let yes = CHECK.with(|c| c.borrow().as_ref().is_some_and(|check| check()));
    if yes {
        CANCELLED.with(|c| c.set(true));
    }
    yes
}

/// `Err(Error::Interrupted)` when [`requested`], else `Ok(())`.
pub fn checkpoint() -> Result<(), Error> {
    if requested() {
        Err(Error::Interrupted)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Budget, Sampler, Stream, estimate};
    use std::sync::atomic::{AtomicU64, Ordering};

    struct Counting<'a>(&'a AtomicU64);

    impl Sampler for Counting<'_> {
        type Scratch = ();
        fn dim(&self) -> usize {
            1
        }
        fn scratch(&self) {}
        fn draw(&self, _: &mut Stream, _: &mut (), out: &mut [f64]) -> Result<(), Error> {
            self.0.fetch_add(1, Ordering::Relaxed);
            out[0] = 1.0;
            Ok(())
        }
    }

    #[test]
    fn a_check_that_says_yes_stops_the_run_before_its_next_chunk() {
        let draws = AtomicU64::new(0);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let budget = Budget::new(100 * crate::engine::CHUNK, 1).unwrap();
        let asked = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counter = std::sync::Arc::clone(&asked);
        // Yes on the third question: two chunks run, then the loop stops.
        let draws_ref = &draws;
        let result = pool.install(move || {
            let check: CancelCheck =
                Box::new(move || counter.fetch_add(1, Ordering::Relaxed) + 1 >= 3);
            with_cancellation(check, || estimate(&Counting(draws_ref), budget))
        });
        assert_eq!(result.err(), Some(Error::Interrupted));
        assert_eq!(draws.load(Ordering::Relaxed), 2 * crate::engine::CHUNK);
        assert_eq!(asked.load(Ordering::Relaxed), 3);
        // Without a check the same run completes.
        draws.store(0, Ordering::Relaxed);
        assert!(pool.install(|| estimate(&Counting(&draws), budget)).is_ok());
        assert_eq!(draws.load(Ordering::Relaxed), budget.samples);
    }
}
