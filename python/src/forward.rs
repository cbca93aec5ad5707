//! The user's Python dropout behind dropmc's claims.
//!
//! # Batches
//!
//! A Python call costs microseconds, a draw of a claim nanoseconds, so the
//! claims never call Python once per draw. A [`PyForward`] calls the user's
//! `forward(X, training)` on a batch `X` of [`rows_per_call`] copies of the
//! input `x` the claim asks for, keeps the output rows and serves them one
//! draw at a time; it calls again when the rows run out or the claim asks
//! for another `x`. Rows are consumed in the order the claims ask for them
//! (the run is on one thread, see [`crate::run_on_one_thread`]), so a run
//! is reproducible given the user's own seed.
//!
//! # The keep mask
//!
//! A Python forward returns only its output, so the mask is read off it:
//! unit `k` was kept when `z_k != 0`. A unit whose input is `x_k = 0`
//! therefore reads as dropped, and so does a subnormal input under a
//! flush-to-zero float mode (XLA on the CPU: Flax's kept output of a
//! float32 subnormal is 0); the claims that judge the mask (the kept count,
//! the backward mask) run on units of normal magnitude.
//!
//! # Errors from Python
//!
//! The Python side ([`dropmc/__init__.py`](../dropmc/__init__.py)) checks
//! each output (an array, the right shape and dtype, no NaN) and raises
//! `ValueError`/`TypeError`; any exception raised inside a call is kept
//! here, the claim running now stops with [`Error::Framework`], every later
//! call fails at once without calling Python, and the binding re-raises the
//! kept exception to the user when the run returns.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use dropmc::Error;
use numpy::ndarray::Array2;
use numpy::{IntoPyArray, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::prelude::*;

pub use crate::dtype::Dtype;

/// Elements per Python call the batch size aims at: large enough that the
/// call's fixed cost (tens of microseconds in numpy, more through a jitted
/// framework) is a small part of the elementwise work, and the bound on a
/// batch's memory: a batch of `x` with `d ≤ ELEMENTS_PER_CALL` units holds
/// at most `ELEMENTS_PER_CALL` elements per array (512 KiB in float64;
/// the input, output and, for backward, two gradient arrays), a wider `x`
/// one row per call.
const ELEMENTS_PER_CALL: usize = 1 << 16;
/// Rows per call at most: bounds the rows a run draws beyond its budget
/// (the rest of the last batch of each input is never read).
const MAX_ROWS_PER_CALL: usize = 8192;

/// Rows of one batch for inputs of `d` units: `ELEMENTS_PER_CALL / d`, at
/// least one and at most [`MAX_ROWS_PER_CALL`]. (Before issue 23 a batch
/// had at least 256 rows, so `d = 100 000` drew 2.6·10⁷ elements per call
/// and 1.1 GB for `samples = 2`.)
pub fn rows_per_call(d: usize) -> usize {
    (ELEMENTS_PER_CALL / d.max(1)).clamp(1, MAX_ROWS_PER_CALL)
}

/// One batch of output rows for one input `x`, served in order.
#[derive(Default)]
struct Rows {
    x: Vec<f64>,
    /// Row-major output rows (`d` each); for a backward batch, `extra`
    /// holds the gradients fed in and then those returned.
    out: Vec<f64>,
    extra: Vec<f64>,
    /// Per batch: whether the generator state changed (eval batches only).
    drew: Option<bool>,
    /// Per row: whether the call wrote into its input row.
    input_changed: Vec<bool>,
    next: usize,
    rows: usize,
}

impl Rows {
    fn holds(&self, x: &[f64]) -> bool {
        self.next < self.rows
            && self.x.len() == x.len()
            && self
                .x
                .iter()
                .zip(x)
                .all(|(a, b)| a.to_bits() == b.to_bits())
    }
}

/// One served row, borrowed from its batch.
pub struct Row<'r> {
    pub out: &'r [f64],
    /// The gradient fed to `backward` (backward rows only, else empty).
    pub grad_out: &'r [f64],
    /// The gradient `backward` returned (backward rows only, else empty).
    pub grad_in: &'r [f64],
    /// Whether the call this row came from changed the generator state
    /// (eval rows with an `rng_state`; `None` without one).
    pub drew: Option<bool>,
    /// Whether the call wrote into this row of the array it was given (an
    /// in-place dropout: the caller's input is lost).
    pub input_changed: bool,
}

/// The user's callables, as the Python side wrapped them:
///
/// * `train(X) -> array`: `forward(X, True)`, checked;
/// * `evaluate(X) -> (array, drew)`: `forward(X, False)`, checked, with
///   `drew` the comparison of `rng_state()` before and after (`None`
///   without `rng_state`);
/// * `backward(X, G) -> (array, array)`: `forward(X, True)` then
///   `backward(X, G, True)`, both checked.
pub struct PyForward {
    train: Py<PyAny>,
    evaluate: Py<PyAny>,
    backward: Option<Py<PyAny>>,
    dtype: Dtype,
    train_rows: Mutex<Rows>,
    eval_rows: Mutex<Rows>,
    backward_rows: Mutex<Rows>,
    /// Gradients for the backward batches: a stream of dropmc's own,
    /// `(gradient_seed, batch number)`.
    gradient_seed: u64,
    /// Batches made so far (all passes).
    batches: Mutex<u64>,
    failure: Mutex<Option<PyErr>>,
    rows_served: AtomicU64,
    /// The last input tiled for a call, and its tiling ([`PyForward::tiled`]).
    last_tiled: Mutex<Option<TiledInput>>,
    progress: Mutex<Progress>,
    /// Rows per call, when fixed ([`PyForward::with_rows_per_call`]);
    /// otherwise [`rows_per_call`] of the input's width.
    fixed_rows: Option<usize>,
}

/// An input row and `n` copies of it rounded to the dtype, shared with
/// the calls that read it.
type TiledInput = (Vec<f64>, std::sync::Arc<Vec<f64>>);

/// Seconds of a run before a progress line appears, and between updates.
const PROGRESS_AFTER_SECONDS: f64 = 3.0;
const PROGRESS_EVERY_SECONDS: f64 = 1.0;

/// The progress line on stderr: shown only when stderr is a terminal (a
/// log or a captured stream gets nothing), after
/// [`PROGRESS_AFTER_SECONDS`], and cleared when the forward is dropped.
struct Progress {
    start: std::time::Instant,
    shown: Option<std::time::Instant>,
    terminal: bool,
}

impl Progress {
    fn new() -> Self {
        use std::io::IsTerminal;
        Progress {
            start: std::time::Instant::now(),
            shown: None,
            terminal: std::io::stderr().is_terminal(),
        }
    }

    fn update(&mut self, rows: u64, d: usize) {
        let elapsed = self.start.elapsed().as_secs_f64();
        let due = self
            .shown
            .is_none_or(|t| t.elapsed().as_secs_f64() >= PROGRESS_EVERY_SECONDS);
        if self.terminal && elapsed >= PROGRESS_AFTER_SECONDS && due {
            eprint!("\r\x1b[Kdropmc: {rows} rows of the forward (d = {d}) in {elapsed:.0} s");
            self.shown = Some(std::time::Instant::now());
        }
    }
}

impl Drop for PyForward {
    fn drop(&mut self) {
        if lock(&self.progress).shown.is_some() {
            eprint!("\r\x1b[K");
        }
    }
}

/// Which of the user's passes a batch is.
#[derive(Clone, Copy)]
enum Pass {
    Train,
    Eval,
    Backward,
}

impl PyForward {
    pub fn new(
        train: Py<PyAny>,
        evaluate: Py<PyAny>,
        backward: Option<Py<PyAny>>,
        dtype: Dtype,
        gradient_seed: u64,
    ) -> Self {
        PyForward {
            train,
            evaluate,
            backward,
            dtype,
            train_rows: Mutex::default(),
            eval_rows: Mutex::default(),
            backward_rows: Mutex::default(),
            gradient_seed,
            batches: Mutex::new(0),
            failure: Mutex::new(None),
            rows_served: AtomicU64::new(0),
            last_tiled: Mutex::new(None),
            progress: Mutex::new(Progress::new()),
            fixed_rows: None,
        }
    }

    /// The same forward calling the user's callable on `rows` rows at a
    /// time, whatever the input's width (the small calls of
    /// [`crate::small_calls`]).
    pub fn with_rows_per_call(mut self, rows: usize) -> Self {
        self.fixed_rows = Some(rows.max(1));
        self
    }

    /// Rows of each call for inputs of `d` units.
    pub fn call_rows(&self, d: usize) -> usize {
        self.fixed_rows.unwrap_or_else(|| rows_per_call(d))
    }

    /// A forward whose claims call training mode only (no eval pass, no
    /// backward): the train callable stands in for the eval one.
    pub fn train_only(py: Python<'_>, train: Py<PyAny>, dtype: Dtype, gradient_seed: u64) -> Self {
        let evaluate = train.clone_ref(py);
        PyForward::new(train, evaluate, None, dtype, gradient_seed)
    }

    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    pub fn has_backward(&self) -> bool {
        self.backward.is_some()
    }

    /// The exception a call raised, if one did (taken: asked once).
    pub fn take_failure(&self) -> Option<PyErr> {
        lock(&self.failure).take()
    }

    /// Whether a call raised (the exception kept for [`PyForward::take_failure`]).
    pub fn failed(&self) -> bool {
        lock(&self.failure).is_some()
    }

    /// Rows the claims consumed so far (all passes).
    pub fn rows_served(&self) -> u64 {
        self.rows_served.load(Ordering::Relaxed)
    }

    /// `f` of the next training-mode output row for input `x`.
    pub fn train_row<R>(&self, x: &[f64], f: impl FnOnce(Row) -> R) -> Result<R, Error> {
        self.row(Pass::Train, x, f)
    }

    /// `f` of the next evaluation-mode output row for input `x`.
    pub fn eval_row<R>(&self, x: &[f64], f: impl FnOnce(Row) -> R) -> Result<R, Error> {
        self.row(Pass::Eval, x, f)
    }

    /// `f` of the next training output row for input `x` with the
    /// gradients `backward` was given and returned for it.
    pub fn backward_row<R>(&self, x: &[f64], f: impl FnOnce(Row) -> R) -> Result<R, Error> {
        self.row(Pass::Backward, x, f)
    }

    fn row<R>(&self, pass: Pass, x: &[f64], f: impl FnOnce(Row) -> R) -> Result<R, Error> {
        let cell = match pass {
            Pass::Train => &self.train_rows,
            Pass::Eval => &self.eval_rows,
            Pass::Backward => &self.backward_rows,
        };
        let mut rows = lock(cell);
        if !rows.holds(x) {
            *rows = self.call(pass, x)?;
        }
        let (d, k) = (x.len(), rows.next);
        rows.next += 1;
        self.rows_served.fetch_add(1, Ordering::Relaxed);
        let at = |v: &[f64], r: usize| (r + 1) * d <= v.len();
        // Backward batches keep [grad_out rows | grad_in rows] in `extra`.
        let (grad_out, grad_in): (&[f64], &[f64]) = if at(&rows.extra, rows.rows + k) {
            (
                &rows.extra[k * d..(k + 1) * d],
                &rows.extra[(rows.rows + k) * d..(rows.rows + k + 1) * d],
            )
        } else {
            (&[], &[])
        };
        Ok(f(Row {
            out: &rows.out[k * d..(k + 1) * d],
            grad_out,
            grad_in,
            drew: rows.drew,
            input_changed: rows.input_changed.get(k).copied().unwrap_or(false),
        }))
    }

    /// Calls Python for one batch of `x`.
    fn call(&self, pass: Pass, x: &[f64]) -> Result<Rows, Error> {
        if lock(&self.failure).is_some() {
            return Err(stopped());
        }
        let d = x.len();
        let n = self.call_rows(d);
        lock(&self.progress).update(self.rows_served(), d);
        let batch = {
            let mut b = lock(&self.batches);
            *b += 1;
            *b
        };
        let tiled = self.tiled(x, n);
        let tiled = tiled.as_slice();
        let result = Python::attach(|py| -> PyResult<Rows> {
            let input = self.array(py, tiled, n, d)?;
            let mut rows = Rows {
                x: x.to_vec(),
                next: 0,
                rows: n,
                ..Rows::default()
            };
            match pass {
                Pass::Train => {
                    let out = self.train.bind(py).call1((input.clone(),))?;
                    rows.out = self.read(&out, n, d)?;
                }
                Pass::Eval => {
                    let (out, drew): (Bound<PyAny>, Option<bool>) =
                        self.evaluate.bind(py).call1((input.clone(),))?.extract()?;
                    rows.out = self.read(&out, n, d)?;
                    rows.drew = drew;
                }
                Pass::Backward => {
                    let grad_out = self.gradients(batch, n * d);
                    let g = self.array(py, &grad_out, n, d)?;
                    let backward = self.backward.as_ref().ok_or_else(|| {
                        pyo3::exceptions::PyRuntimeError::new_err("no backward callable")
                    })?;
                    let (out, grad): (Bound<PyAny>, Bound<PyAny>) =
                        backward.bind(py).call1((input.clone(), g))?.extract()?;
                    rows.out = self.read(&out, n, d)?;
                    // extra = [grad_out rows | grad_in rows].
                    rows.extra = grad_out;
                    rows.extra.extend(self.read(&grad, n, d)?);
                }
            }
            // The input array after the call, row by row against what was
            // handed over (bit for bit: a signed zero rewritten counts).
            let after = self.read(&input, n, d)?;
            rows.input_changed = after
                .chunks(d)
                .zip(tiled.chunks(d))
                .map(|(a, b)| a.iter().zip(b).any(|(u, v)| u.to_bits() != v.to_bits()))
                .collect();
            Ok(rows)
        });
        result.map_err(|e| {
            let message = Python::attach(|py| e.value(py).to_string());
            *lock(&self.failure) = Some(e);
            Error::Framework {
                framework: "python",
                message,
            }
        })
    }

    /// `n` copies of `x` rounded to the dtype, row-major: kept from the
    /// last call for the same `x` (every call for one claim's input tiles
    /// the same rows; rebuilding them cost as much as reading the output).
    fn tiled(&self, x: &[f64], n: usize) -> std::sync::Arc<Vec<f64>> {
        let mut last = lock(&self.last_tiled);
        if let Some((seen, tiled)) = last.as_ref()
            && tiled.len() == n * x.len()
            && seen.len() == x.len()
            && seen.iter().zip(x).all(|(a, b)| a.to_bits() == b.to_bits())
        {
            return std::sync::Arc::clone(tiled);
        }
        let mut tiled = Vec::with_capacity(n * x.len());
        let row: Vec<f64> = x.iter().map(|&v| self.dtype.round(v)).collect();
        for _ in 0..n {
            tiled.extend_from_slice(&row);
        }
        let tiled = std::sync::Arc::new(tiled);
        *last = Some((x.to_vec(), std::sync::Arc::clone(&tiled)));
        tiled
    }

    /// The gradient rows of backward batch `batch`: uniform on [-2, 2) as in
    /// the Rust suite's `semantics.backward_mask`, rounded to the dtype.
    fn gradients(&self, batch: u64, len: usize) -> Vec<f64> {
        use rand::RngExt;
        let mut rng = dropmc::engine::stream(self.gradient_seed, batch);
        (0..len)
            .map(|_| self.dtype.round(4.0 * rng.random::<f64>() - 2.0))
            .collect()
    }

    fn array<'py>(
        &self,
        py: Python<'py>,
        values: &[f64],
        n: usize,
        d: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let shaped = |e: numpy::ndarray::ShapeError| {
            pyo3::exceptions::PyRuntimeError::new_err(format!("batch of {n} x {d}: {e}"))
        };
        Ok(if !self.dtype.travels_as_f32() {
            Array2::from_shape_vec((n, d), values.to_vec())
                .map_err(shaped)?
                .into_pyarray(py)
                .into_any()
        } else {
            let v: Vec<f32> = values.iter().map(|&a| a as f32).collect();
            Array2::from_shape_vec((n, d), v)
                .map_err(shaped)?
                .into_pyarray(py)
                .into_any()
        })
    }

    /// The output rows as `f64` (exact for every dtype). The Python side
    /// has checked the shape and dtype already; this checks them again so
    /// that a wrong array can never be read out of bounds.
    fn read(&self, out: &Bound<PyAny>, n: usize, d: usize) -> PyResult<Vec<f64>> {
        let values: Vec<f64> = if !self.dtype.travels_as_f32() {
            let a: PyReadonlyArray2<f64> = out.extract()?;
            check_shape(a.shape(), n, d)?;
            // A contiguous array is copied at once (row-major, the order
            // the element iterator gives).
            match a.as_slice() {
                Ok(contiguous) => contiguous.to_vec(),
                Err(_) => a.as_array().iter().copied().collect(),
            }
        } else {
            let a: PyReadonlyArray2<f32> = out.extract()?;
            check_shape(a.shape(), n, d)?;
            match a.as_slice() {
                Ok(contiguous) => contiguous.iter().map(|&v| v as f64).collect(),
                Err(_) => a.as_array().iter().map(|&v| v as f64).collect(),
            }
        };
        Ok(values)
    }
}

fn check_shape(shape: &[usize], n: usize, d: usize) -> PyResult<()> {
    if shape != [n, d] {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "forward returned an array of shape {shape:?}, expected ({n}, {d})"
        )));
    }
    Ok(())
}

fn stopped() -> Error {
    Error::Framework {
        framework: "python",
        message: "stopped after an exception in a Python callable".into(),
    }
}

/// Locks `m`, recovering the data if a panicking thread poisoned it (the
/// binding turns panics into Python exceptions; a buffer left half-written
/// is refilled on the next call or never read again).
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
