"""PyTorch layers behind dropmc's callables: ``import dropmc.torch`` (needs torch).

::

    import torch, dropmc.torch

    torch.manual_seed(0)
    result = dropmc.torch.check_dropout(torch.nn.Dropout(0.1), 0.1)
    assert result.passed, str(result)

``Dropout(layer)`` wraps an ``nn.Module`` (switched with ``.train()`` /
``.eval()``) or a function ``f(x, training)`` on tensors into the
``forward``, ``backward`` and ``rng_state`` callables
:func:`dropmc.check_dropout` expects:

* ``forward(x, training)`` runs the layer on a tensor sharing ``x``'s
  memory (so an in-place layer is seen writing into its input) and, in
  training mode, keeps the input and output of the call;
* ``backward(x, grad, training)`` differentiates *that* call with
  ``torch.autograd.grad`` (the same mask);
* ``rng_state()`` is the generator's state as ``bytes`` — a value, not the
  generator (``torch.random.get_rng_state()``, or ``generator.get_state()``
  for a layer drawing from its own ``torch.Generator``).

``check_dropout(layer, p, ...)`` runs :func:`dropmc.check_dropout` on the
wrapped layer with torch at one intra-op thread (:func:`one_thread`):
dropmc calls the layer on small batches thousands of times, where torch's
thread pool costs more than it saves (issue 23 measured ``nn.Dropout`` at the default budget:
73 s with 2 threads, 7.8 s with 1, on a 2-core machine).
"""

from __future__ import annotations

import copy as _copy
from typing import Any, Callable, Optional, Union

import numpy as _np
import torch as _torch

import dropmc as _dropmc
from dropmc.assess import assess  # noqa: F401  (docs/correct.md)
from dropmc.audit.network import audit  # noqa: F401  (audit_torch + network=True: docs/audit.md)
from dropmc.correct import correct, corrected, uncorrect  # noqa: F401  (docs/correct.md)
from dropmc.checks.torch_common import _array, _device_of, _dtype_of, _tensor, one_thread  # noqa: F401
from dropmc.checks.torch_batchnorm import batchnorm_runner, check_batchnorm  # noqa: F401  (docs/python.md)

__all__ = [
    "Dropout",
    "audit",
    "batchnorm_runner",
    "check_batchnorm",
    "check_dropout",
    "check_norm_site",
    "check_sdpa",
    "norm_parameters",
    "one_thread",
    "sdpa_dropout",
]


class Dropout:
    """A torch dropout (``nn.Module`` or ``f(x, training)``) as dropmc's callables.

    ``generator``: the ``torch.Generator`` the layer draws from (default:
    torch's global CPU generator, which ``nn.Dropout`` and ``F.dropout``
    use). ``grad``: track gradients in training mode so ``backward`` can
    differentiate the call (an in-place layer cannot be differentiated from
    a leaf tensor; use ``grad=False`` to check its forward).
    """

    def __init__(
        self,
        layer: Union[_torch.nn.Module, Callable[[Any, bool], Any]],
        *,
        generator: Optional[_torch.Generator] = None,
        grad: bool = True,
        device=None,
    ):
        if not (isinstance(layer, _torch.nn.Module) or callable(layer)):
            raise TypeError("layer must be a torch.nn.Module or a function f(x, training)")
        if generator is not None and not isinstance(generator, _torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        self.layer = layer
        self.generator = generator
        self.grad = bool(grad)
        self.device = _torch.device("cpu" if device is None else device)
        if self.device.type == "meta":  # shapes without values: nothing to sample
            raise ValueError("device='meta' holds shapes without values: dropmc draws real masks; "
                             "give a real device (cpu or cuda)")
        self._last = None

    def _input(self, x):
        """``x`` as a tensor on the layer's device (sharing ``x``'s memory on the CPU)."""
        t = _tensor(x)
        return t if self.device.type == "cpu" else t.to(self.device)

    def _seen(self, x, xt) -> None:
        """Copies what the layer wrote into its device input back into ``x``
        (on the CPU they share memory), so an in-place layer is seen."""
        if self.device.type != "cpu":
            x[...] = _array(xt.detach())

    def _run(self, xt, training: bool):
        if isinstance(self.layer, _torch.nn.Module):
            self.layer.train(training)
            y = self.layer(xt)
        else:
            y = self.layer(xt, training)
        if not isinstance(y, _torch.Tensor):
            # A list or tuple of tensors, a numpy array, None: named as what
            # it is rather than failing inside torch (issue 44).
            what = "forward" if not isinstance(self.layer, _torch.nn.Module) else type(self.layer).__name__
            raise TypeError(
                f"{what} returned {type(y).__name__}, not a torch.Tensor: the dropout layer must "
                f"return one tensor of the input's shape {tuple(xt.shape)}"
            )
        return y

    def forward(self, x, training: bool):
        """The layer on ``x`` (a numpy array) in train or eval mode, as numpy."""
        xt = self._input(x)
        if training and self.grad:
            xt.requires_grad_(True)
            try:
                y = self._run(xt, True)
            except RuntimeError as e:
                if "in-place" not in str(e):
                    raise
                raise ValueError(
                    "the layer works in place on its input, which autograd cannot differentiate "
                    "from a leaf tensor; it also overwrites the caller's array: check its forward "
                    "with dropmc.torch.check_dropout(layer, p, backward=False) "
                    "(semantics.forward_preserves_input)"
                ) from e
            self._last = (xt, y)
            self._seen(x, xt)
            return _array(y)
        with _torch.no_grad():
            y = self._run(xt, training)
        self._seen(x, xt)
        return _array(y)

    def backward(self, x, grad, training: bool):
        """The gradient of the most recent training ``forward`` call."""
        if self._last is None:
            raise RuntimeError("backward called before a training forward (or with grad=False)")
        xt, y = self._last
        if not y.requires_grad:
            raise ValueError("the layer's training output does not depend on its input through autograd")
        (g,) = _torch.autograd.grad(y, xt, self._input(grad))
        self._last = None
        return _array(g)

    def rng_state(self) -> bytes:
        """The generator's state, by value."""
        if self.generator is not None:
            state = self.generator.get_state()
        elif self.device.type == "cuda":
            state = _torch.cuda.get_rng_state(self.device)
        else:
            state = _torch.random.get_rng_state()
        return state.numpy().tobytes()


def _own_rate(layer) -> Optional[float]:
    """The drop rate a torch layer states itself (``module.p``, as
    ``nn.Dropout`` and its relatives keep it), or ``None``."""
    module = layer.layer if isinstance(layer, Dropout) else layer
    rate = getattr(module, "p", None) if isinstance(module, _torch.nn.Module) else None
    return float(rate) if isinstance(rate, (int, float)) and not isinstance(rate, bool) else None


def check_dropout(
    layer: Union[_torch.nn.Module, Callable[[Any, bool], Any], Dropout],
    p: Optional[float] = None,
    *,
    backward: bool = True,
    generator: Optional[_torch.Generator] = None,
    device=None,
    **kwargs,
) -> "_dropmc.Result":
    """:func:`dropmc.check_dropout` on a torch layer, at one intra-op thread.

    ``p``: the drop rate; by default the module's own (``module.p``), and a
    declared ``p`` that contradicts it is refused, naming both (a function
    has no rate of its own: pass ``p``). ``backward``: check the backward
    pass through autograd (``False`` for a layer without one, or an in-place
    layer). ``device``: where the layer runs (inputs are made there, results
    brought back to the CPU; default the CPU). Other keyword arguments
    (``x``, ``samples``, ``seed``, ``dtype``, ``shared_axes``, ...) are
    :func:`dropmc.check_dropout`'s; ``dtype`` defaults to float64
    (``np.float16`` and ``"bfloat16"`` check torch's half-precision
    dropout).
    """
    p = _dropmc._declared_or_own_rate(p, _own_rate(layer), f"{type(getattr(layer, 'layer', layer)).__name__}.p")
    wrapped = layer if isinstance(layer, Dropout) else Dropout(layer, generator=generator, grad=backward, device=device)
    dtype = kwargs.pop("dtype", _np.float64)
    with one_thread():
        return _dropmc.check_dropout(
            wrapped.forward,
            p,
            rng_state=wrapped.rng_state,
            backward=wrapped.backward if backward else False,
            dtype=dtype,
            **kwargs,
        )


def _snake_cells(n: int, heads: int):
    """Row ``i`` of ``n`` as the cell ``(b, h)`` of a ``(B, heads)`` grid,
    ``B = ceil(n / heads)``, visited in a snake: batch ``b`` runs its heads
    forward when ``b`` is even, backward when odd. With an odd number of
    heads, every run of ``heads`` consecutive rows holds ``heads - 1`` steps
    within one batch (across heads) and one step across the batch (same
    head), and both kinds fall on even and on odd row pairs alike: the pairs
    ``(2i, 2i+1)`` the variance claims compare meet rows that share a batch
    and rows that share a head, wherever a claim's draws start."""
    i = _torch.arange(n)
    b, j = i // heads, i % heads
    h = _torch.where(b % 2 == 0, j, heads - 1 - j)
    return int(b.max()) + 1, b, h


def sdpa_dropout(
    p: float, *, attention: Optional[Callable[..., Any]] = None, heads: int = 3, kv_heads: Optional[int] = None,
    device=None,
) -> Callable[[Any], Any]:
    """``F.scaled_dot_product_attention(q, k, v, dropout_p=p)`` as the
    ``dropout(A)`` :func:`dropmc.check_attention_dropout` expects.

    For rows ``A`` of the softmax row ``a`` over ``T`` keys: one query per
    (batch, head), ``q = ln a``, the keys ``k = I_T`` and ``scale=1`` make
    the logits ``q k^T = ln a`` and the softmax ``a``; the values ``v = I_T``
    make the output the dropped attention row itself. The ``n`` rows are
    laid out as a ``(B, heads, 1, T)`` query (an odd ``heads``, default 3,
    in the snake order of :func:`_snake_cells`), so consecutive rows share a
    batch entry or a head: a mask shared across heads or across the batch
    makes them equal, and the variance claims fail. ``kv_heads``: grouped-
    query attention, ``heads / kv_heads`` query heads per key/value head
    (``enable_gqa=True``; default ``kv_heads = heads``). ``attention``: any
    function with SDPA's signature (``attention(q, k, v, dropout_p=p,
    scale=1.0)``, and ``enable_gqa=True`` when ``kv_heads < heads``; default
    torch's own). ``device``: where it runs (results come back to the CPU).
    """
    p = _dropmc._check_rate(p)
    attend = _torch.nn.functional.scaled_dot_product_attention if attention is None else attention
    if not callable(attend):
        raise TypeError("attention must be callable as attention(q, k, v, dropout_p=p, scale=1.0)")
    kv_heads = heads if kv_heads is None else kv_heads
    for name, value in (("heads", heads), ("kv_heads", kv_heads)):
        if isinstance(value, bool) or int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if heads % 2 == 0:
        raise ValueError(
            f"heads must be odd, got {heads}: the snake layout puts rows that share a head on both "
            "parities of row pairs only with an odd number of heads"
        )
    if heads % kv_heads:
        raise ValueError(f"kv_heads = {kv_heads} must divide heads = {heads} (grouped-query attention)")
    extra = {} if kv_heads == heads else {"enable_gqa": True}
    place = _torch.device("cpu" if device is None else device)

    def dropout(A):
        a = _torch.from_numpy(A).to(place)
        n, t = a.shape
        batches, b, h = _snake_cells(n, heads)
        b, h = b.to(place), h.to(place)
        q = _torch.log(a[:1]).expand(batches * heads, t).clone().view(batches, heads, 1, t)
        q[b, h, 0] = _torch.log(a)
        identity = _torch.eye(t, dtype=a.dtype, device=place).expand(batches, kv_heads, t, t)
        with _torch.no_grad():
            out = attend(q, identity, identity, dropout_p=p, scale=1.0, **extra)
        return _array(out[b, h, 0])

    return dropout


def check_sdpa(
    p: float, *, attention: Optional[Callable[..., Any]] = None, heads: int = 3, kv_heads: Optional[int] = None,
    device=None, **kwargs,
) -> "_dropmc.Result":
    """:func:`dropmc.check_attention_dropout` on SDPA (or ``attention``, a
    function with its signature) through :func:`sdpa_dropout` (``heads``
    query heads over ``kv_heads`` key/value heads, on ``device``), at one
    intra-op thread. Keyword arguments (``a``, ``values``, ``samples``,
    ``seed``, ``dtype``) are :func:`dropmc.check_attention_dropout`'s."""
    dropout = sdpa_dropout(p, attention=attention, heads=heads, kv_heads=kv_heads, device=device)
    with one_thread():
        return _dropmc.check_attention_dropout(dropout, p, **kwargs)


def norm_parameters(norm: _torch.nn.Module):
    """What a torch norm module computes, read off the module: ``(kind, gamma,
    beta, eps)`` with ``kind`` ``"layernorm"`` or ``"rmsnorm"``, ``gamma`` and
    ``beta`` as float64 lists (``None`` when the module has none) and ``eps``
    the ε it adds (RMSNorm's ``eps=None`` is ``torch.finfo(dtype).eps``, as
    torch computes it). Torch's own classes are read off their attributes;
    any other module is recognised by what it computes
    (:func:`dropmc.model.norms.norm_spec`, the one norm recogniser); a module
    that is neither is refused with the reason."""
    def values(t):
        return None if t is None else [float(v) for v in t.detach().double().cpu().reshape(-1)]

    if isinstance(norm, _torch.nn.LayerNorm):
        if len(norm.normalized_shape) != 1:
            raise ValueError(f"LayerNorm over {tuple(norm.normalized_shape)}: dropmc checks a norm over one axis of d units")
        return "layernorm", values(norm.weight), values(norm.bias), float(norm.eps)
    rms = getattr(_torch.nn, "RMSNorm", None)
    if rms is not None and isinstance(norm, rms):
        if len(norm.normalized_shape) != 1:
            raise ValueError(f"RMSNorm over {tuple(norm.normalized_shape)}: dropmc checks a norm over one axis of d units")
        dtype = norm.weight.dtype if norm.weight is not None else _torch.get_default_dtype()
        eps = _torch.finfo(dtype).eps if norm.eps is None else norm.eps
        return "rmsnorm", values(norm.weight), None, float(eps)
    from dropmc.model.norms import norm_spec  # any other module: by what it computes

    spec = norm_spec(norm)
    if spec is not None:
        kind = {"layer": "layernorm", "rms": "rmsnorm"}[spec.kind]
        return kind, [float(v) for v in spec.gamma], None if spec.kind == "rms" else [float(v) for v in spec.beta], \
            float(spec.eps)
    raise TypeError(
        f"{type(norm).__name__} is not a norm dropmc recognises (torch.nn.LayerNorm, torch.nn.RMSNorm, or a "
        "module whose output is a LayerNorm or RMSNorm of its own weight/bias/eps); "
        "check it with dropmc.check_norm_site(dropout, norm, x, p, kind=..., gamma=..., beta=..., eps=...)"
    )


def check_norm_site(
    dropout: Union[_torch.nn.Module, Callable[[Any], Any]],
    norm: _torch.nn.Module,
    x,
    p: Optional[float] = None,
    *,
    h=None,
    device=None,
    **kwargs,
) -> "_dropmc.Result":
    """:func:`dropmc.check_norm_site` on torch modules: ``E[norm(dropout(x))]``
    (or ``E[norm(h + dropout(x))]``), at one intra-op thread.

    ``dropout``: an ``nn.Module`` (run in training mode) or a function on
    tensors; ``p`` defaults to its own rate (``module.p``; a contradicting
    ``p`` is refused). ``norm``: ``nn.LayerNorm``, ``nn.RMSNorm`` or a module
    recognised as one by what it computes, whose γ, β and ε are read from
    the module (:func:`norm_parameters`). The check
    runs in the norm's dtype (float32 or float64; ``dtype=`` overrides) and
    on ``device`` (default the norm's own; results come back to the CPU).
    Other keyword arguments (``samples``, ``seed``) are
    :func:`dropmc.check_norm_site`'s.
    """
    if not isinstance(norm, _torch.nn.Module):
        raise TypeError(f"norm must be a torch.nn.Module (LayerNorm, RMSNorm), got {type(norm).__name__}")
    for given in ("kind", "gamma", "beta", "eps"):
        if given in kwargs:
            raise TypeError(f"{given} is read from the norm module; do not pass it")
    p = _dropmc._declared_or_own_rate(p, _own_rate(dropout), f"{type(dropout).__name__}.p")
    place = _device_of(norm) if device is None else _torch.device(device)
    dtype = kwargs.pop("dtype", None) or _dtype_of(
        norm, "norm", "pass dtype='float32' to check its formula on a float32 copy (its float16 rounding is then not checked)"
    ) or "float64"
    tdtype = {"float64": _torch.float64, "float32": _torch.float32}.get(_np.dtype(dtype).name)
    if tdtype is None:
        raise TypeError(f"check_norm_site runs in float64 or float32, got {dtype}")
    norm_copy = _copy.deepcopy(norm).to(device=place, dtype=tdtype)
    kind, gamma, beta, eps = norm_parameters(norm_copy)
    d = len(gamma) if gamma is not None else int(norm.normalized_shape[-1])
    if _np.ndim(x) == 1 and len(x) != d:
        raise ValueError(
            f"x has {len(x)} entries but the norm {type(norm).__name__} normalizes over "
            f"normalized_shape = ({d},): x must have {d} entries"
        )

    def on_device(fn):
        def run(X):
            with _torch.no_grad():
                return _array(fn(_torch.from_numpy(X).to(place)))

        return run

    def drop(t):
        if isinstance(dropout, _torch.nn.Module):
            dropout.train()
            return dropout(t)
        return dropout(t)

    with one_thread():
        return _dropmc.check_norm_site(
            on_device(drop), on_device(norm_copy), x, p,
            kind=kind, eps=eps, gamma=gamma, beta=beta, h=h, dtype=dtype, **kwargs,
        )
