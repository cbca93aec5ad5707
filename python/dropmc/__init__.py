"""dropmc for Python: dropmc's statistical claims on any Python dropout.

``check_dropout(forward, p)`` runs the conformance claims of dropmc (a Rust
crate) on a dropout written in numpy, JAX/Flax, PyTorch or anything else
that maps a float array to a float array::

    import numpy as np, dropmc

    rng = np.random.default_rng(0)
    p = 0.1

    def forward(x, training):
        if not training:
            return x
        return np.where(rng.random(x.shape) >= p, x / (1 - p), 0.0)

    result = dropmc.check_dropout(forward, p,
                                  rng_state=lambda: rng.bit_generator.state)
    print(result)          # one line per claim
    assert result.passed

The verdicts are the Rust suite's: the same tests (Student-t for a mean,
exact binomial for counts, exact for rules that hold on every draw), the
same per-assertion level (from the suite's family alpha) and the same
minimum budgets below which a claim is "inconclusive" rather than judged.

Conventions
-----------
* ``forward(x, training)`` gets a C-contiguous ``(n, d)`` array of
  ``dtype`` (float64 by default) holding ``n`` copies of one input row, and
  must return an array of the same shape and dtype (anything
  ``numpy.asarray`` turns into one: a JAX array, a CPU tensor's
  ``.numpy()``). dropmc calls it on thousands of rows at a time.
* The keep mask is read off the output: unit ``k`` was kept when its
  output is nonzero. Units whose input is ``0`` therefore read as dropped
  (so does a subnormal input under a flush-to-zero float mode, as XLA uses
  on the CPU); the claims that judge the mask run on units of normal size.
* ``backward(x, grad, training)``, if given, returns the gradient with
  respect to ``x`` of the *most recent* ``forward(x, training)`` call with
  incoming gradient ``grad`` (a layer that caches its mask, or an autograd
  adapter that keeps its last output; see ``examples/torch_dropout.py``).
  dropmc calls ``forward(X, True)`` then ``backward(X, G, True)``. An
  omitted ``backward`` leaves ``semantics.backward_mask`` unchecked and
  ``result.passed`` false ("not checked: backward"); ``backward=False``
  declares a forward without one (``passed`` then judges the rest).
* ``rng_state()``, if given, returns a snapshot of your generator that
  compares with ``!=`` (``rng.bit_generator.state``,
  ``torch.random.get_rng_state``); dropmc takes one before and one after
  each ``forward(X, False)`` call to check that eval mode draws nothing.
  The snapshot must be a value: the generator object itself (``lambda:
  rng``) equals itself whatever it drew, so returning the same object twice
  raises ``TypeError``; a returned view is deep-copied.
* ``forward`` must not write into ``x`` (``semantics.forward_preserves_input``
  fails an in-place dropout: the caller's input would be lost).
* ``seed`` seeds dropmc's own streams (the gradients of the backward
  check). Your forward's randomness is yours: seed it for a repeatable run.
"""

from __future__ import annotations

import copy as _copy
import difflib as _difflib
import json as _json
import math as _math
import re as _re
from typing import Any, Callable, Dict, List, Optional

import numpy as _np

from . import _dropmc

__all__ = [
    "Result",
    "check_dropout",
    "check_attention_dropout",
    "check_batchnorm",
    "check_norm_site",
    "eval",
    "critical_z",
    "testing",
]



def critical_z() -> float:
    """The |z| a component must exceed to fail (the suite's per-assertion level)."""
    return _dropmc.critical_z()


def mde_power() -> float:
    """The power at which a claim's ``mde`` is quoted (the suite's ``stats::POWER``)."""
    return _dropmc.mde_power()


class Result:
    """The verdicts of one check.

    ``passed``: nothing failed *and* everything was decided (skipped claims
    do not count). ``decided``: no claim ran below its minimum budget (an
    ``inconclusive`` claim, as ``dropmc report`` exits 3 for). ``claims``:
    one dict per claim with ``id``, ``verdict`` (``"pass"``, ``"fail"``,
    ``"inconclusive"``, ``"skipped"``), ``samples`` and ``min_samples``, and
    for the component with the largest ``|z|``: ``z``, ``p_value``, ``mde``
    (the smallest deviation the test detects with 80 % power at this
    budget: :func:`mde_power`), ``estimate``, ``analytic`` (the value it is
    tested against); ``note`` says why a claim was skipped or inconclusive,
    or what a failed one saw. ``to_json()``: the run as
    ``dropmc report --json`` lays it out.
    """

    def __init__(self, json_text: str, claims: List[Dict[str, Any]]):
        self._json = json_text
        self.claims = claims
        for c in claims:
            if c.get("verdict") == "fail" and not c.get("note"):
                c["note"] = _seen(c)

    @property
    def decided(self) -> bool:
        """No claim ran below its minimum budget."""
        return not self.inconclusive()

    @property
    def passed(self) -> bool:
        """Nothing failed, every claim that ran was decided, and none was left
        unchecked for want of an argument (``unchecked``: an omitted
        ``backward=``)."""
        return self.passed_as_run and self.decided and not self.unchecked

    @property
    def passed_as_run(self) -> bool:
        """Every claim that ran passed (skipped and unchecked claims aside)."""
        ran = [c for c in self.claims if c["verdict"] != "skipped"]
        return bool(ran) and all(c["verdict"] == "pass" for c in ran)

    @property
    def unchecked(self) -> dict:
        """Claims skipped because an argument was omitted: claim id -> what to pass."""
        return {c["id"]: c["unchecked"] for c in self.claims if c.get("unchecked")}

    @property
    def likely_causes(self) -> list:
        """The likely cause the set of failing claims points to, one line each."""
        return self.to_dict().get("likely_causes", [])

    def inconclusive(self) -> List[Dict[str, Any]]:
        """The claims that ran below their minimum budget."""
        return [c for c in self.claims if c["verdict"] == "inconclusive"]

    def minimum_budget(self) -> Optional[int]:
        """The ``samples`` that would decide every inconclusive claim (``None`` if all were decided)."""
        mins = [c.get("min_samples") for c in self.inconclusive() if c.get("min_samples") is not None]
        return max(mins) if mins else None

    def failed(self) -> List[Dict[str, Any]]:
        """The claims whose verdict is ``fail``."""
        return [c for c in self.claims if c["verdict"] == "fail"]

    def claim(self, claim_id: str) -> dict:
        """The dict of one claim by id (``KeyError`` if absent)."""
        for c in self.claims:
            if c["id"] == claim_id:
                return c
        raise KeyError(claim_id)

    def to_json(self) -> str:
        return self._json

    def to_dict(self) -> dict:
        return _json.loads(self._json)

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        counts = {}
        for c in self.claims:
            counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
        inner = ", ".join(f"{v}={n}" for v, n in sorted(counts.items()))
        return f"<dropmc.Result passed={self.passed} decided={self.decided} {inner}>"

    def __str__(self) -> str:
        ran = [c for c in self.claims if c["verdict"] != "skipped"]
        width = max((len(c["id"]) for c in ran), default=10)
        lines = [f"{'claim':<{width}}  {'verdict':<12}  {'estimate':>12}  {'analytic':>12}  {'z':>8}  note"]
        for c in ran:
            verdict = c["verdict"].upper() if c["verdict"] == "fail" else c["verdict"]
            lines.append(
                f"{c['id']:<{width}}  {verdict:<12}  {_num(c.get('estimate')):>12}  "
                f"{_num(c.get('analytic')):>12}  {_num(c.get('z'), 2):>8}  {c.get('note') or ''}".rstrip()
            )
        passed = sum(c["verdict"] == "pass" for c in ran)
        lines.append(
            f"{passed} of {len(ran)} claims pass; a component fails when |z| > {critical_z():.2f}."
        )
        for cause in self.likely_causes:
            lines.append(f"likely cause: {cause}")
        for claim_id, what in self.unchecked.items():
            lines.append(f"not checked: {what} ({claim_id}; not passed until checked)")
        reasons = {}
        for c in self.claims:
            if c["verdict"] == "skipped" and not c.get("unchecked"):
                reasons.setdefault(c.get("note") or "", []).append(c["id"])
        for reason, ids in reasons.items():
            lines.append(f"skipped {', '.join(ids)}: {reason}")
        undecided = self.inconclusive()
        if undecided:
            lines.append(
                f"inconclusive: {len(undecided)} claims below their minimum budget "
                f"(the largest is {self.minimum_budget()} draws): pass samples >= that, or samples=None"
            )
        return "\n".join(lines)


def _seen(claim: Dict[str, Any]) -> str:
    """What a failed claim without a note of its own saw, in one phrase."""
    unit = "" if claim.get("component") is None else f" at unit {claim['component']}"
    return (
        f"saw {_num(claim.get('estimate'))}{unit} where {_num(claim.get('analytic'))} was expected "
        f"(z = {_num(claim.get('z'), 3)}, {claim.get('samples')} draws)"
    )


def _num(v, digits: int = 6) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and _math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:.{digits}g}"


_DTYPES = ("float64", "float32", "float16", "bfloat16")


def _numpy_dtype(dtype) -> _np.dtype:
    """``dtype`` as a numpy dtype, one of :data:`_DTYPES`; bfloat16 (a name
    or ``ml_dtypes.bfloat16``) comes from ``ml_dtypes``, numpy has none."""
    if (dtype == "bfloat16") if isinstance(dtype, str) else getattr(dtype, "__name__", None) == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:
            raise TypeError(
                "dtype bfloat16 needs the ml_dtypes package (pip install ml_dtypes), "
                "which gives numpy its bfloat16"
            ) from None
        return _np.dtype(ml_dtypes.bfloat16)
    try:
        dt = _np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}") from None
    if dt.name not in _DTYPES:
        raise TypeError(f"dtype must be one of {', '.join(_DTYPES)}, got {dt.name}")
    return dt


def _dtype_name(dtype, full_only: Optional[str] = None) -> str:
    """numpy's name of ``dtype``; ``full_only`` names a check that runs in
    float64 and float32 only (half precision is check_dropout's)."""
    name = _numpy_dtype(dtype).name
    if full_only is not None and name not in ("float64", "float32"):
        raise TypeError(
            f"{full_only} runs in float64 or float32, got {name} "
            "(check a half-precision dropout with check_dropout(..., dtype=...))"
        )
    return name


def _in_dtype(X: _np.ndarray, dt: _np.dtype) -> _np.ndarray:
    """The batch as the user's callable sees it: a float16 or bfloat16 batch
    travels from dropmc as float32, which holds each of its values exactly."""
    return X if X.dtype == dt else X.astype(dt)


def _written_back(X: _np.ndarray, seen: _np.ndarray) -> None:
    """Copies what a callable wrote into the batch it saw (``seen``, a cast
    of ``X``) back into ``X``, which dropmc reads after the call to check
    that the input was left alone (exact: float32 holds every value)."""
    if seen is not X:
        _np.copyto(X, seen, casting="unsafe")


def _float32_out(out: _np.ndarray, dt: _np.dtype) -> _np.ndarray:
    """A checked float16/bfloat16 output as the float32 dropmc reads (exact)."""
    return out if dt.name in ("float64", "float32") else out.astype(_np.float32)


def _check_rate(p) -> float:
    try:
        p = float(p)
    except (TypeError, ValueError):
        raise TypeError(f"p must be a number, got {type(p).__name__}") from None
    if not (0.0 <= p < 1.0):  # NaN fails too
        remark = " (p = 1 would divide by the keep probability q = 0)" if p == 1.0 else ""
        raise ValueError(f"drop rate p = {p} is invalid: it must be a number with 0 <= p < 1{remark}")
    return p


def _input_row(x, what: str) -> list:
    row = _np.asarray(x, dtype=_np.float64)
    if row.ndim != 1 or row.size == 0:
        raise ValueError(f"{what} must be a non-empty 1-D array of numbers, got shape {row.shape}")
    if not _np.all(_np.isfinite(row)):
        raise ValueError(f"{what} must be finite")
    return [float(v) for v in row]


_NAN_HINT = "a dropout output is never NaN for a finite input"
_NORM_NAN_HINT = (
    "with eps = 0 an all-dropped row is constant (0/0): use eps > 0, or return "
    "beta (LayerNorm) or 0 (RMSNorm) there, the eps -> 0+ limit dropmc's exact value uses"
)


def _checked(name: str, out, shape, dtype, nan_hint: str = _NAN_HINT) -> _np.ndarray:
    """``out`` as a C-contiguous array of ``shape`` and ``dtype``, or a clear error."""
    if out is None:
        raise TypeError(f"{name} returned None; it must return an array of shape {shape}")
    try:
        arr = _np.asarray(out)
    except Exception as e:  # an object numpy cannot read
        raise TypeError(f"{name} returned {type(out).__name__}, which numpy cannot read as an array: {e}") from e
    if (arr.dtype.kind not in "fiub" and arr.dtype.name not in _DTYPES) or (arr.ndim == 0 and not isinstance(out, (_np.ndarray, _np.generic))):
        raise TypeError(
            f"{name} returned {type(out).__name__} ({str(out)[:40]!r}), not an array; "
            f"it must return an array of shape {tuple(shape)}"
        )
    if arr.shape != tuple(shape):
        raise ValueError(f"{name} returned an array of shape {arr.shape}, expected {tuple(shape)} (the input's shape)")
    if arr.dtype != dtype:
        hint = ""
        if arr.dtype.name in _DTYPES:
            where = "ml_dtypes" if arr.dtype.name == "bfloat16" else "np"
            hint = f": pass dtype={where}.{arr.dtype.name} to check the layer in {arr.dtype.name}"
        raise TypeError(
            f"{name} returned dtype {arr.dtype}, expected {_np.dtype(dtype).name} (the input's dtype){hint}"
        )
    if _np.isnan(arr).any():
        k = int(_np.argwhere(_np.isnan(arr))[0][1])
        raise ValueError(f"{name} returned NaN (first at unit {k}); {nan_hint}")
    return _np.ascontiguousarray(arr)


_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None), tuple, frozenset)


def _snapshot(rng_state, previous=None):
    """``rng_state()`` as a value: a deep copy, and an error if it returns
    the very object it returned before (a live generator, which compares
    equal to itself whatever it drew)."""
    state = rng_state()
    if previous is not None and state is previous[0] and not isinstance(state, _IMMUTABLE):
        raise TypeError(
            f"rng_state() returned the same {type(state).__name__} object twice: it must "
            "return a snapshot of the generator's state by value (rng.bit_generator.state, "
            "torch.random.get_rng_state(), generator.get_state()), not the generator itself, "
            "which compares equal to itself whatever it drew"
        )
    try:
        return state, _copy.deepcopy(state)
    except Exception:  # an object that cannot be copied is compared as returned
        return state, state


def _changed(before, after) -> bool:
    """Whether two generator snapshots differ (``!=``, reduced with ``any`` for arrays)."""
    diff = before != after
    try:
        return bool(diff)
    except (ValueError, RuntimeError, TypeError):
        return bool(_np.asarray(diff).any())


def check_dropout(
    forward: Callable[[Any, bool], Any],
    p: float,
    *,
    x=None,
    samples: Optional[int] = None,
    seed: int = 1,
    rng_state: Optional[Callable[[], Any]] = None,
    backward: Optional[Callable[[Any, Any, bool], Any]] = None,
    dtype=_np.float64,
    shared_axes=None,
    rounding: str = "any",
) -> Result:
    """Runs dropmc's conformance claims on ``forward`` at drop rate ``p``.

    ``forward(x, training)`` takes **two** arguments (the ``(n, d)`` array
    and the mode); ``backward(x, grad, training)`` three; ``rng_state()``
    none (see the module docs).

    ``x``: the input row (default: the Rust suite's configurations, per-unit
    moments on ``[0.5, -1.2, 3, 0, 2]`` and the exactness rules on fixed
    values with a signed zero, a subnormal and a huge value). ``samples``
    caps every claim's draws (default: each claim's own budget, 10^6 for the
    moments, 2*10^4 for the rules); a cap below a claim's minimum budget
    makes it ``inconclusive``. ``dtype``: float64, float32, float16 or
    bfloat16 (``"bfloat16"`` or ``ml_dtypes.bfloat16``; needs ``ml_dtypes``):
    the dtype of the arrays ``forward`` gets and must return. In float16
    and bfloat16 the survivors may be any of the dtype's roundings of
    ``x/q`` (``semantics.survivors_exact``), and each moment claim is
    judged against the interval of targets those roundings span (a
    composite null: the estimate is tested against the nearest admissible
    target), so a correctly rounded layer passes; when the real-arithmetic
    target would have failed (PyTorch's bfloat16 survivors are
    ``x*1.109375`` at ``p = 0.1``, -0.16 %), the claims' notes and a
    ``likely_causes`` line starting ``warning:`` state the bias in numbers.
    ``rounding="once"``: admit only ``x/q`` rounded once to the dtype, so
    anything beyond one rounding fails (the best a dtype allows).

    The layer is also called with one row at a time (``calls.one_row_mean``,
    ``E[z_k] = x_k`` on 50 000 one-row calls): a scale or mask that depends
    on the call's size or kept count fails there. The result's JSON field
    ``call_rows`` lists the call sizes used.

    ``shared_axes``: for a dropout whose mask is shared over some axes
    (``nn.Dropout1d/2d/3d``, Flax ``broadcast_dims``, Keras ``noise_shape``).
    ``x`` is then one sample of any shape (say ``(C, H, W)``), ``forward``
    gets arrays of shape ``(n, *x.shape)`` and ``shared_axes`` names the
    axes of that batched array the mask is shared over (``(2, 3)`` for
    ``nn.Dropout2d``; axis 0, the batch, cannot be shared). The mask-shape
    claims run instead of the elementwise ones (which assume one
    independent mask per unit and are listed as skipped): ``mask_shape.mean``
    ``E[z] = x``, ``mask_shape.shared_variance`` ``Var S_k = (p/q)(sum x)^2``
    and ``mask_shape.shared_zero_column`` ``P(group all zero) = p`` per group
    ``k`` of entries sharing a mask. See ``docs/mask-shape.md``.
    """
    p = _check_rate(p)
    dtype_name = _dtype_name(dtype)
    if not callable(forward):
        raise TypeError("forward must be callable as forward(x, training)")
    if rounding not in ("any", "once"):
        raise ValueError(f'rounding must be "any" or "once", got {rounding!r}')
    if shared_axes is not None:
        return _check_shared_mask(forward, p, x, shared_axes, samples, seed, dtype_name)
    if backward is not None and backward is not False and not callable(backward):
        raise TypeError("backward must be callable as backward(x, grad, training), or False for a forward without one")
    if rng_state is not None and not callable(rng_state):
        raise TypeError("rng_state must be a zero-argument callable returning a snapshot")
    if samples is not None and (int(samples) != samples or samples < 2):
        raise ValueError(f"samples must be an integer >= 2, got {samples!r}")
    if int(seed) != seed or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    dt = _numpy_dtype(dtype)
    if x is None:
        moment_x, semantics_x = _dropmc.default_inputs(dtype_name)
    else:
        moment_x = semantics_x = _input_row(x, "x")
        if not _np.all(_np.isfinite(_np.asarray(moment_x).astype(dt))):
            raise ValueError(f"x overflows {dtype_name}")

    def train(X):
        seen = _in_dtype(X, dt)
        out = _checked("forward(x, True)", forward(seen, True), X.shape, dt)
        _written_back(X, seen)
        return _float32_out(out, dt)

    def evaluate(X):
        seen = _in_dtype(X, dt)
        before = _snapshot(rng_state) if rng_state is not None else None
        out = forward(seen, False)
        drew = _changed(before[1], _snapshot(rng_state, before)[0]) if rng_state is not None else None
        out = _checked("forward(x, False)", out, X.shape, dt)
        _written_back(X, seen)
        return _float32_out(out, dt), drew

    def train_and_backward(X, G):
        seen = _in_dtype(X, dt)
        out = _checked("forward(x, True)", forward(seen, True), X.shape, dt)
        grad = _checked("backward(x, grad, True)", backward(seen, _in_dtype(G, dt), True), X.shape, dt)
        _written_back(X, seen)
        return _float32_out(out, dt), _float32_out(grad, dt)

    text, claims = _dropmc.check_dropout(
        train,
        evaluate,
        train_and_backward if callable(backward) else None,
        p,
        dtype_name,
        moment_x,
        semantics_x,
        None if samples is None else int(samples),
        int(seed),
        rng_state is not None,
        rounding,
    )
    if backward is None:
        for c in claims:
            if c["id"] == "semantics.backward_mask" and c["verdict"] == "skipped":
                c["unchecked"] = "backward (pass backward=..., or backward=False for a forward without one)"
    return Result(text, claims)


def _shared_groups(shape: tuple, shared_axes) -> _np.ndarray:
    """Each entry's mask group for one sample of ``shape`` whose mask is
    shared over ``shared_axes`` (axes of the batched ``(n, *shape)`` array)."""
    try:
        axes = tuple(int(a) for a in shared_axes)
    except TypeError:
        raise TypeError("shared_axes must be a tuple of ints, e.g. (2, 3)") from None
    ndim = len(shape) + 1
    norm = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(f"shared_axes: axis {a} is out of range for the batched array of {ndim} dimensions (n, *x.shape)")
        a %= ndim
        if a == 0:
            raise ValueError("shared_axes: axis 0 is the batch axis; dropmc needs a fresh mask per sample")
        norm.append(a)
    if len(set(norm)) != len(norm) or not norm:
        raise ValueError(f"shared_axes must name distinct axes, at least one, got {shared_axes!r}")
    group_shape = [1 if (i + 1) in norm else n for i, n in enumerate(shape)]
    ids = _np.arange(int(_np.prod(group_shape))).reshape(group_shape)
    return _np.broadcast_to(ids, shape).ravel()


def _check_shared_mask(forward, p, x, shared_axes, samples, seed, dtype_name) -> Result:
    if x is None:
        raise ValueError("shared_axes needs x: one sample of the shape your layer takes, e.g. np.ones((C, L))")
    sample = _np.asarray(x, dtype=_np.float64)
    if sample.ndim < 1 or sample.size == 0:
        raise ValueError(f"x must be a non-empty array, got shape {sample.shape}")
    if not _np.all(_np.isfinite(sample)):
        raise ValueError("x must be finite")
    if samples is not None and (int(samples) != samples or samples < 2):
        raise ValueError(f"samples must be an integer >= 2, got {samples!r}")
    if int(seed) != seed or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    dt = _numpy_dtype(dtype_name)
    if not _np.all(_np.isfinite(sample.astype(dt))):
        raise ValueError(f"x overflows {dtype_name}")
    shape = sample.shape
    groups = _shared_groups(shape, shared_axes)

    def train(X):
        n = X.shape[0]
        seen = _in_dtype(X, dt)
        out = _checked("forward(x, True)", forward(seen.reshape((n,) + shape), True), (n,) + shape, dt)
        _written_back(X, seen)
        return _np.ascontiguousarray(_float32_out(out, dt).reshape(n, -1))

    text, claims = _dropmc.check_mask_shape(
        train, p, dtype_name, [float(v) for v in sample.ravel()], [int(g) for g in groups],
        None if samples is None else int(samples), int(seed),
    )
    return Result(text, claims)


def check_norm_site(
    dropout: Callable[[Any], Any],
    norm: Callable[[Any], Any],
    x,
    p: float,
    *,
    kind: str = "layernorm",
    eps: float = 0.0,
    gamma=None,
    beta=None,
    h=None,
    samples: Optional[int] = None,
    seed: int = 1,
    dtype=_np.float64,
) -> Result:
    """Checks ``E[norm(dropout(x))]`` (or ``E[norm(h + dropout(x))]``) against dropmc.

    ``dropout`` and ``norm`` map an ``(n, d)`` array to one of the same
    shape (``dropout`` in training mode, at rate ``p``; ``norm`` a LayerNorm
    or an RMSNorm with gains ``gamma`` (default 1), shifts ``beta``
    (LayerNorm only, default 0) and ``eps``). ``h``: the bypass (residual)
    row of a post-LN block, ``norm(h + dropout(x))``; dropmc adds it.
    ``d = len(x) <= 4096``. The reference is exact (enumeration of the
    ``2^d`` masks) for ``d <= 20`` with LayerNorm, RMSNorm or LayerNorm after
    a bypass; otherwise dropmc's reference sampler, one row paired with each
    of yours, and the test is on the mean difference (the result's JSON
    ``reference`` field and the claim's note say which). One claim, per
    component.

    ``dropout(x)`` and ``norm(x)`` take **one** argument (unlike
    ``check_dropout``'s ``forward(x, training)``): ``dropout`` is always
    called in training mode, so wrap a two-argument layer as
    ``lambda x: f(x, True)``.
    """
    p = _check_rate(p)
    dtype_name = _dtype_name(dtype)
    if kind not in ("layernorm", "rmsnorm"):
        raise ValueError(f'kind must be "layernorm" or "rmsnorm", got {kind!r}')
    if not (callable(dropout) and callable(norm)):
        raise TypeError("dropout and norm must be callables on (n, d) arrays")
    try:
        eps = float(eps)
    except (TypeError, ValueError):
        raise TypeError(f"eps must be a number, got {type(eps).__name__}") from None
    if not (eps >= 0.0 and _math.isfinite(eps)):
        raise ValueError(f"eps must be finite and >= 0, got {eps}")
    if samples is not None and (int(samples) != samples or samples < 2):
        raise ValueError(f"samples must be an integer >= 2, got {samples!r}")
    if int(seed) != seed or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    row = _input_row(x, "x")
    d = len(row)
    if kind == "rmsnorm" and beta is not None:
        raise ValueError("beta is a LayerNorm parameter; RMSNorm has only gamma")

    def same_length(v, what):
        if v is None:
            return None
        v = _input_row(v, what)
        if len(v) != d:
            raise ValueError(f"{what} must have len(x) = {d} entries, got {len(v)}")
        return v

    gamma, beta, h = same_length(gamma, "gamma"), same_length(beta, "beta"), same_length(h, "h")
    if dtype_name not in ("float64", "float32"):
        # A norm computed in half precision rounds its output by more than
        # the dropout gap it would be judged on.
        _dtype_name(dtype, "check_norm_site")
    dt = _np.dtype(dtype_name)
    h_row = None if h is None else _np.asarray(h, dtype=dt)

    def pipeline(X):
        y = _checked("dropout(x)", dropout(X), X.shape, dt)
        if h_row is not None:
            y = y + h_row
        return _checked("norm(dropout(x))", norm(y), X.shape, dt, _NORM_NAN_HINT)

    text, claims = _dropmc.check_norm_site(
        pipeline, row, h, gamma, beta, p, kind, eps, dtype_name,
        None if samples is None else int(samples), int(seed),
    )
    return Result(text, claims)


def _cli_value(key: str, value) -> str:
    """A keyword value in the CLI's notation, at full precision."""
    if isinstance(value, (list, tuple, _np.ndarray)):
        try:
            flat = _np.asarray(value, dtype=_np.float64).ravel()
        except (TypeError, ValueError):
            raise TypeError(f"{key} must be a list or array of numbers, got {value!r}") from None
        if flat.size == 0:
            raise ValueError(f"{key} is empty")
        return ",".join(repr(float(v)) for v in flat)
    if isinstance(value, (bool, _np.bool_)):
        raise TypeError(f"{key} takes a value, not {value!r}")
    if isinstance(value, (float, _np.floating)):
        return repr(float(value))
    if isinstance(value, (int, _np.integer)):
        return str(int(value))
    if isinstance(value, str):
        return value
    raise TypeError(f"{key} must be a number or a list of numbers, got {type(value).__name__}")


_FLAG = _re.compile(r"--([a-z][a-z0-9-]*)")


def _python_words(message: str) -> str:
    """A CLI message with its ``--flag`` names as the keyword arguments they came from."""
    return _FLAG.sub(lambda m: m.group(1).replace("-", "_"), message)


def eval(quantity: str, **kwargs: Any) -> Dict[str, Any]:  # noqa: A001 - the CLI's name
    """``dropmc eval <quantity> --json`` as a dict.

    Keyword arguments are the CLI's options: ``x``, ``p``, ``gamma``,
    ``beta``, ``eps``, ``h``, ``v``, ``a``, ``gamma1``, ``samples``,
    ``seed``, ... (``running_mean`` is ``--running-mean``); lists and arrays
    are passed comma-joined at full precision, ``True`` as a bare flag.

    An unknown or missing keyword raises ``TypeError`` (``unknown argument
    gama; did you mean gamma?``, ``missing argument p``); a bad value
    raises ``ValueError`` naming the keyword (``x is empty``).
    """
    known = {name: (required, takes_value) for name, required, takes_value in _dropmc.eval_arguments(str(quantity))}
    args = []
    for key, value in kwargs.items():
        # The result is always the JSON's dict, so a `json` flag is moot.
        if key == "json":
            continue
        if key not in known:
            close = _difflib.get_close_matches(key, list(known), n=1)
            hint = f"; did you mean {close[0]}?" if close else f" (eval {quantity} takes {', '.join(known)})"
            raise TypeError(f"unknown argument {key}{hint}")
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if not known[key][1]:
            if value is not True:
                raise TypeError(f"{key} is a flag: pass {key}=True")
            args.append(flag)
        else:
            args.extend([flag, _cli_value(key, value)])
    missing = [name for name, (required, _) in known.items() if required and kwargs.get(name) is None]
    if missing:
        raise TypeError(f"missing argument{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    try:
        text = _dropmc.eval_json(str(quantity), args)
    except ValueError as e:
        raise ValueError(_python_words(str(e))) from None
    return _json.loads(text)


# The model audit (docs/audit.md); torch is imported only when it runs.
from . import audit  # noqa: E402
from . import testing  # noqa: E402  (after Result and check_dropout, which it imports)
from .attention import check_attention_dropout  # noqa: E402  (after Result)
from .batchnorm import check_batchnorm  # noqa: E402  (after Result)
