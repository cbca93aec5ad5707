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

import difflib as _difflib
import json as _json
import math as _math
from typing import Any, Callable, Dict, List, Optional

import numpy as _np

from . import _dropmc, audit, testing
from .checks.core import (
    _NORM_NAN_HINT,
    Result,
    _check_rate,
    _checked,
    _component,
    _declared_or_own_rate,
    _dtype_name,
    _input_row,
    _python_words,
    critical_z,
    mde_power,
)
from .checks.dropout import check_dropout
from .checks.attention import check_attention_dropout
from .checks.batchnorm import check_batchnorm

#: The package's version: the binding crate's (python/Cargo.toml), equal to the dropmc crate's
#: and to pyproject.toml's (python/tests/test_package.py checks all three).
__version__: str = _dropmc.__version__

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
