//! The audit's cancellation and wall-time contract on the Rust side of
//! `dropmc.audit` (issue 52): [`supervised`] runs the engine on a helper
//! thread with the GIL released and a [`StopFlag`] installed, while the
//! calling thread asks Python's signal handlers and the clock every
//! [`POLL_SECONDS`] and raises the flag on Ctrl-C or when the budget runs
//! out. Every chunk of the samplers (on every worker, `engine::cancel`)
//! reads the flag, so the call returns within a chunk of the request:
//!
//! 1. the poll notices a signal or the deadline at most `POLL_SECONDS`
//!    (20 ms) after it;
//! 2. each worker stops at its next chunk boundary (a chunk of 4096 masks
//!    at `d` units is `4096 d` mask-units: a few ms at the audit's sizes);
//! 3. the helper thread returns `Error::Interrupted`, and this thread
//!    raises the signal's exception (`KeyboardInterrupt`) or, for the
//!    budget, a `TimeoutError` naming `time_budget`.
//!
//! A stopped run returns no partial result, so no bits depend on when it
//! was stopped.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dropmc::engine::cancel::{POLL_SECONDS, Stop, StopFlag, with_flag};
use pyo3::exceptions::{PyRuntimeError, PyTimeoutError};
use pyo3::prelude::*;

use crate::eval_args::interrupted_by_a_signal;
use crate::to_py;

/// Runs `body` as described in the module docs: `seconds` (when given)
/// is the wall time it may take; `what` names the step in the messages.
pub(crate) fn supervised<T: Send>(
    py: Python<'_>,
    seconds: Option<f64>,
    what: &str,
    body: impl FnOnce() -> Result<T, dropmc::Error> + Send,
) -> PyResult<T> {
    let pending = Arc::new(Mutex::new(None));
    let flag = StopFlag::new();
    let start = Instant::now();
    let outcome = py.detach(|| {
        std::thread::scope(|scope| {
            let (done, finished) = mpsc::channel();
            let worker_flag = flag.clone();
            scope.spawn(move || {
                let result = catch_unwind(AssertUnwindSafe(|| with_flag(worker_flag, body)));
                let _ = done.send(result);
            });
            let poll = Duration::from_secs_f64(POLL_SECONDS);
            loop {
                match finished.recv_timeout(poll) {
                    Ok(result) => return result,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        if interrupted_by_a_signal(&pending) {
                            flag.raise(Stop::Interrupted);
                        } else if seconds.is_some_and(|s| start.elapsed().as_secs_f64() > s) {
                            flag.raise(Stop::Deadline);
                        }
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => {
                        let why: Box<dyn std::any::Any + Send> =
                            Box::new("the audit's thread ended without a result");
                        return Err(why);
                    }
                }
            }
        })
    });
    let result = outcome.map_err(|_| {
        PyRuntimeError::new_err(format!(
            "dropmc panicked in the {what} (a bug: please report it)"
        ))
    })?;
    if let Some(signal) = pending.lock().ok().and_then(|mut p| p.take()) {
        return Err(signal);
    }
    match (result, flag.raised()) {
        (Err(dropmc::Error::Interrupted), Some(Stop::Deadline)) => {
            Err(PyTimeoutError::new_err(format!(
                "time_budget: the {what} was stopped at its wall-time bound ({:.1} s of the budget \
                 were left for it) before it finished; nothing of it is returned. Lower samples= or \
                 tokens=, or raise time_budget",
                seconds.unwrap_or(0.0)
            )))
        }
        (result, _) => result.map_err(to_py),
    }
}
