"""What every checker of the package shares: ``Result``, the suite's critical z, and the
checks of a user's input and output (the dtype, the rate, the input row, the returned array,
the generator's state).

``check_dropout`` (``checks/dropout.py``), ``check_attention_dropout``, ``check_batchnorm`` and
``check_norm_site`` import these from here, and ``dropmc`` re-exports ``Result``,
``critical_z`` and ``mde_power``: the package's modules import downwards only, with no
circle through ``dropmc/__init__.py``.
"""

from __future__ import annotations

import copy as _copy
import json as _json
import math as _math
import re as _re
from typing import Any, Dict, List, Optional

import numpy as _np

from .. import _dropmc


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


# What a claim's components are, where they are not units of the input:
# the kept count's law has one component per count K, the mask-shape
# variance and zero-group claims one per mask group, BatchNorm one per channel.
_COMPONENT_NAMES = {
    "dropout.kept_count": "the count K = {}",
    "mask_shape.shared_variance": "mask group {}",
    "mask_shape.shared_zero_column": "mask group {}",
}


def _component(claim: Dict[str, Any]) -> str:
    """The worst component of a claim in words ("unit 2", "the count K = 1")."""
    name = _COMPONENT_NAMES.get(claim["id"])
    if name is None:
        name = "channel {}" if claim["id"].startswith("batchnorm.") else "unit {}"
    return name.format(claim["component"])


def _seen(claim: Dict[str, Any]) -> str:
    """What a failed claim without a note of its own saw, in one phrase."""
    unit = "" if claim.get("component") is None else f" at {_component(claim)}"
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
    # A bool is an int to Python and a numeric string converts through
    # float(): both were accepted silently as a rate (issue 44).
    if isinstance(p, (bool, _np.bool_, str, bytes)):
        raise TypeError(f"p must be a real number, got {type(p).__name__} {p!r}")
    try:
        p = float(p)
    except (TypeError, ValueError):
        raise TypeError(f"p must be a number, got {type(p).__name__}") from None
    if not (0.0 <= p < 1.0):  # NaN fails too
        remark = " (p = 1 would divide by the keep probability q = 0)" if p == 1.0 else ""
        raise ValueError(f"drop rate p = {p} is invalid: it must be a number with 0 <= p < 1{remark}")
    return p


#: The largest ``samples`` accepted: the draws are counted in a Rust u64,
#: and no budget near 2**63 could finish; larger is refused naming the argument.
MAX_SAMPLES = 2**63 - 1


def _check_samples(samples, name: str = "samples", least: int = 2):
    """``samples`` as an int (or ``None``), refused with a message naming
    ``name`` when it is not a whole number in ``[least, MAX_SAMPLES]``."""
    if samples is None:
        return None
    if isinstance(samples, (bool, _np.bool_, str, bytes)):
        raise TypeError(f"{name} must be an integer >= {least}, got {type(samples).__name__} {samples!r}")
    try:
        whole = int(samples)
    except (TypeError, ValueError, OverflowError):
        raise TypeError(f"{name} must be an integer >= {least}, got {samples!r}") from None
    if whole != samples or whole < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {samples!r}")
    if whole > MAX_SAMPLES:
        raise ValueError(f"{name} = {whole} is too large: at most 2**63 - 1 draws")
    return whole


def _declared_or_own_rate(p, own: Optional[float], what: str) -> float:
    """The rate to check a framework layer at: the declared ``p``, the
    layer's own rate ``own`` (read by the adapter, named ``what``) when none
    was declared; a declared ``p`` that contradicts the layer's is refused,
    naming both (the claims would judge the declaration, not the layer)."""
    if p is None:
        if own is None:
            raise TypeError(f"p is required: the layer states no rate of its own ({what} not found)")
        return _check_rate(own)
    p = _check_rate(p)
    if own is not None and own != p:
        raise ValueError(
            f"declared p = {p}, but the layer's own rate is {what} = {own}: pass p={own} "
            "(or omit p) to check the layer as it runs, or build the layer with the rate you mean"
        )
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


_FLAG = _re.compile(r"--([a-z][a-z0-9-]*)")


def _python_words(message: str) -> str:
    """A CLI message with its ``--flag`` names as the keyword arguments they came from."""
    return _FLAG.sub(lambda m: m.group(1).replace("-", "_"), message)
