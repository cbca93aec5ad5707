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
//!
//! # Worker threads: the stop flag
//!
//! The check above is asked only on the thread that installed it, and a
//! thread that hands a batch to rayon's pool from outside it blocks until
//! the batch is done: a batch of tokens at 10¹² masks each would never let
//! it ask. A [`StopFlag`] is what the workers see instead: a supervisor (the
//! Python bindings' calling thread, which polls Python's signal handlers
//! and the wall clock every [`POLL_SECONDS`], `python/src/supervise.rs`)
//! raises it, the run's thread installs it with [`with_flag`], and every
//! parallel loop hands it to the jobs it spawns with [`carry`] /
//! [`Carry::run`], so [`requested`] says yes on every worker at its next
//! chunk (a chunk is [`crate::engine::CHUNK`] draws: well under the 100 ms
//! of the contract at any `d` the audit reaches).

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::error::Error;

/// A cancellation check: true when the run should stop.
pub type CancelCheck = Box<dyn Fn() -> bool>;

/// How often a supervisor asks its check and the clock, in seconds: the
/// contract's 100 ms with a margin for the chunk in flight when the flag
/// is raised.
pub const POLL_SECONDS: f64 = 0.02;

/// Why a run was asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// A signal (Ctrl-C) or a caller's request.
    Interrupted,
    /// The run's wall-time budget ran out.
    Deadline,
}

/// A flag shared by a run's threads: raised once (the first reason is
/// kept), read with one atomic load per chunk.
#[derive(Debug, Clone, Default)]
pub struct StopFlag(Arc<AtomicU8>);

impl StopFlag {
    /// A flag not raised.
    pub fn new() -> StopFlag {
        StopFlag::default()
    }

    /// Raises the flag for `why` (a flag already raised keeps its reason).
    pub fn raise(&self, why: Stop) {
        let code = match why {
            Stop::Interrupted => 1,
            Stop::Deadline => 2,
        };
        let _ = self
            .0
            .compare_exchange(0, code, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Why the flag was raised, or `None`.
    pub fn raised(&self) -> Option<Stop> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            1 => Some(Stop::Interrupted),
            _ => Some(Stop::Deadline),
        }
    }
}

/// The flag of the run a thread is working for, to hand to the jobs it
/// spawns ([`carry`]).
#[derive(Debug, Clone, Default)]
pub struct Carry(Option<StopFlag>);

impl Carry {
    /// Runs `body` (a job on another thread) with the carried flag
    /// installed, as [`with_flag`] does.
    pub fn run<T>(&self, body: impl FnOnce() -> T) -> T {
        match &self.0 {
            Some(flag) => with_flag(flag.clone(), body),
            None => body(),
        }
    }
}

/// This thread's flag (if any), for [`Carry::run`] in the jobs of a
/// parallel loop.
pub fn carry() -> Carry {
    Carry(FLAG.with(|f| f.borrow().clone()))
}

/// Runs `body` with `flag` asked by [`requested`] on this thread (and on
/// the jobs its loops [`carry`] it to); the previous flag is restored.
pub fn with_flag<T>(flag: StopFlag, body: impl FnOnce() -> T) -> T {
    let previous = FLAG.with(|f| f.borrow_mut().replace(flag));
    let result = body();
    FLAG.with(|f| *f.borrow_mut() = previous);
    result
}

thread_local! {
    static FLAG: RefCell<Option<StopFlag>> = const { RefCell::new(None) };
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

/// Whether this thread's flag or check (if any) asks the run to stop.
pub fn requested() -> bool {
    if CANCELLED.with(Cell::get)
        || FLAG.with(|f| f.borrow().as_ref().is_some_and(|f| f.raised().is_some()))
    {
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

    /// A flag raised before the run, installed on a thread outside the
    /// pool: every chunk runs on rayon's workers, which see it only
    /// through [`carry`] (planted: without the runner's `carry.run` the
    /// workers never see the flag and every draw is made).
    #[test]
    fn a_raised_flag_reaches_the_pools_workers_through_carry() {
        let draws = AtomicU64::new(0);
        let budget = Budget::new(64 * crate::engine::CHUNK, 1).unwrap();
        let flag = StopFlag::new();
        flag.raise(Stop::Deadline);
        flag.raise(Stop::Interrupted);
        assert_eq!(
            flag.raised(),
            Some(Stop::Deadline),
            "the first reason is kept"
        );
        let result = std::thread::scope(|s| {
            s.spawn(|| with_flag(flag.clone(), || estimate(&Counting(&draws), budget)))
                .join()
                .unwrap()
        });
        assert_eq!(result.err(), Some(Error::Interrupted));
        assert_eq!(draws.load(Ordering::Relaxed), 0);
    }
}
