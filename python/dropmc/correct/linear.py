"""``dropmc.correct`` at linear-path sites (docs/linear-path.md,
docs/correct.md): a dropout whose output reaches its norm through a
``Linear`` (``Dropout(u) → Linear(W, b) → (+h) → norm``, further dropouts
on the way being the identity in eval), or an attention dropout whose
probabilities reach it through the value product, the heads and ``o_proj``.

The first-order output of src/formulas/linear_path.rs, applied live to the
norm's own eval output ``out``: ``β + c (out − β)`` (LayerNorm) or
``c · out`` (RMSNorm), per token

    c² = (V(ȳ) + ε) / (V(ȳ) + tr(CΣC)/d + ε)     (RMS: mean ȳ², tr Σ)

with ``ȳ`` the norm's eval input and ``tr(CΣC)`` from per-token quantities
and the weights only — no ``d × d`` matrix per token:

* linear: ``(p/q) Σ_j u_j² ‖C w_j‖²``; ``W``'s column norms once per
  forward (the live weight, so a fine-tuned model stays right), then
  ``O(m)`` per token (``u`` kept by a pre-hook on the dropout module);
* attention: ``(p/q) Σ_h Σ_s a_{hs}² ‖C W_h v_{hs}‖²`` (heads independent,
  ``W_h`` the head's columns of ``o_proj``): ``z = W_h v`` once per key and
  head of each batch row, then ``O(H S)`` per query. ``a`` and ``v`` are
  kept by a ``TorchFunctionMode`` the attention module's pre-hook enters
  (its ``F.dropout`` input and the ``matmul`` that reads its output).

Sites are found by the linear-path tracer (:func:`dropmc.model.linear_path.
find_linear_paths`) on the example inputs, with discovery's train-mode
rates (BERT's attention passes ``p = 0`` to ``F.dropout`` in eval). A norm
that is also an ordinary site's gets both noises in one first-order factor
(:func:`_scaled`); an ordinary compound or token-level site there refuses
the linear-path one. Refused too, with the reason: a
dropout or norm module called more than once per forward (its call cannot be
told apart live), a functional dropout that is not attention dropout. In
train mode every hook returns at once (training is bit for bit unchanged);
``uncorrect`` removes the hooks.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

__all__ = ["LinearPlan", "linear_plan"]


def _oriented(weight, transposed: bool):
    """The layer's ``W`` (d × m), float64: ``Conv1D`` keeps ``Wᵀ``."""
    w = weight.detach().double()
    return w.t() if transposed else w


def _in_width(weight, transposed: bool) -> int:
    """``m``, the width ``W`` (d × m) takes in, read off the stored weight."""
    return weight.shape[0] if transposed else weight.shape[1]


def _column_norms(weight, layer: bool, transposed: bool = False):
    """``‖C w_j‖²`` (``layer``) or ``‖w_j‖²`` per column of ``W`` (d × m;
    ``weight`` stores ``Wᵀ`` when ``transposed``), float64
    (:func:`dropmc.model.linear_path.column_norms`)."""
    from ..model.linear_path import column_norms

    centred, sq = column_norms(_oriented(weight, transposed))
    return centred if layer else sq


def _head_grams(weight, heads: int, layer: bool, transposed: bool = False):
    """Per head ``h`` the ``dh × dh`` matrix ``G_h = W_hᵀ C W_h`` (``layer``;
    else ``W_hᵀ W_h``), ``W_h`` the head's columns of ``o_proj``'s weight
    (e × H·dh), float64: ``‖C W_h v‖² = vᵀ G_h v``, so the attention
    trace needs ``O(dh²)`` per key and head instead of ``z = W_h v``'s
    ``O(e dh)``. With ``m_h = 1ᵀ W_h`` (column sums), ``C = I − 11ᵀ/e``:
    ``W_hᵀ C W_h = W_hᵀ W_h − m_hᵀ m_h / e``."""
    import torch

    w = _oriented(weight, transposed)
    e = w.shape[0]
    wh = w.reshape(e, heads, -1)
    g = torch.einsum("ehj,ehk->hjk", wh, wh)
    if layer:
        m = wh.sum(0)
        g = g - torch.einsum("hj,hk->hjk", m, m) / e
    return g


def _of_weight(owner, weight, make, *args):
    """``make(weight, *args)``, kept on ``owner`` until the weight changes
    (another tensor, or an in-place change: an optimizer step or
    ``load_state_dict`` bumps its version), so a fine-tuned model stays
    right and an unchanged one pays once."""
    key = (weight.data_ptr(), weight._version, weight.dtype, tuple(weight.shape), args)
    kept = owner.__dict__.get("_weight_kept")
    if kept is None or kept[0] != key:
        kept = owner._weight_kept = (key, make(weight, *args))
    return kept[1]


class _WeightKept:
    """Leaves :func:`_of_weight`'s kept value out of a pickle or a deep copy
    (the copy's weight is another tensor: it makes its own)."""

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_weight_kept"}


def _scaled(out, y, trace, p: float, eps: float, beta, prior=None):
    """``β + c (out − β)`` / ``c · out`` with ``c`` per token from the
    norm's input ``y`` (tokens on the leading axes) and ``trace``
    (``tr(CΣC)`` or ``tr Σ`` per token, before the factor ``p/q``).

    ``prior``: the ordinary site hook of another dropout at the same norm
    (BERT's hidden dropout ``attention.output.dropout`` bypasses the
    attention's output into ``attention.output.LayerNorm``), which ran
    first: ``out`` is already ``β + c₀ (LN − β)``, ``c₀² = (V + ε) / (V +
    s₀ + ε)``, ``s₀ = (p₀/q₀) mean v²`` (:func:`dropmc.correct.forms._factor`).
    Both noises at once: with ``e₁`` the attention's noise after ``o_proj``
    and ``m`` the hidden dropout's mask, independent, the norm's input is
    ``h + (m/q₀) ⊙ (v + e₁)`` and its covariance ``(p₀/q₀) diag(v²) + Σ₁ +
    (p₀/q₀) diag(Σ₁)`` (cross terms vanish, ``E e₁ = 0``); the last term is
    of second order (``p₀ p₁``), so to first order the noise variances
    add: ``c² = (V + ε) / (V + s₀ + s₁ + ε)``. This hook scales by ``c /
    c₀``, i.e. its own factor with ``V + s₀`` in place of ``V``."""
    import torch

    q = 1.0 - p
    d = y.shape[-1]
    yy = y.detach().to(trace.dtype)
    v = yy.var(dim=-1, unbiased=False) if beta is not None else yy.square().mean(dim=-1)
    if prior is not None:
        v = v + _prior_noise(prior, y)
    v = v.add_(eps)  # V + ε; then c² = (V + ε) / (V + ε + (p/(q d)) tr)
    c = v.div_(torch.add(v, trace, alpha=p / (q * d))).sqrt_().unsqueeze(-1).to(out.dtype)
    if beta is None:
        return out * c
    return torch.lerp(beta, out, c) if beta.dtype == out.dtype else beta + c * (out - beta)


def _prior_noise(hook, y):
    """``s₀ = (p₀/q₀) mean_k v_k²`` per token of an ordinary site hook at
    the norm whose input is ``y`` (its dropout's kept input ``v``), float64."""
    v = hook.slot.take(hook.site, y, hook.steps)
    return (hook.p / (1.0 - hook.p)) * (v.detach().double() ** 2).mean(dim=-1)


def _composes(hook) -> bool:
    """Whether an ordinary site hook's correction is the plain first-order
    factor :func:`_scaled` composes with (not a compound site's, a
    token-level mask's or a second-order one)."""
    from .hooks import _LayerNormSite, _RmsNormSite

    return type(hook) in (_LayerNormSite, _RmsNormSite) and hook.order == 1 and getattr(hook, "state", None) is None


class _Keep:
    """Forward pre-hook on a dropout module: keeps its eval input ``u``."""

    def __init__(self) -> None:
        self.u = None

    def __call__(self, module, args):
        self.u = None if module.training else args[0]


class _LinearNorm(_WeightKept):
    """Forward hook on the norm of a ``Dropout → Linear → (+h)`` site."""

    def __init__(self, name: str, keep: _Keep, linear, p: float, eps: float, layer: bool, prior=None,
                 transposed: bool = False) -> None:
        self.name, self.keep, self.linear, self.p, self.eps, self.layer = name, keep, linear, p, eps, layer
        self.prior, self.transposed = prior, transposed

    def __call__(self, module, args, out):
        if module.training:
            return None
        u, y = self.keep.u, args[0]
        self.keep.u = None
        m = _in_width(self.linear.weight, self.transposed)
        if u is None or u.numel() // m != y.numel() // y.shape[-1]:
            raise RuntimeError(f"dropmc.correct: site {self.name}: the dropout's input was not seen "
                               "with the norm's tokens in this forward")
        norms = _of_weight(self, self.linear.weight, _column_norms, self.layer, self.transposed)
        trace = (u.detach().double().reshape(-1, m) ** 2) @ norms
        beta = getattr(module, "bias", None) if self.layer else None
        return _scaled(out, y, trace.reshape(y.shape[:-1]), self.p, self.eps, beta, self.prior)


class _AttentionKeep:
    """Pre- and forward hook of an attention module: inside its forward a
    ``TorchFunctionMode`` keeps the attention product of its dropped rows
    (the ``F.dropout`` input and the ``matmul``/``bmm``/``einsum`` that
    reads its output, or the SDPA call), in the node form of
    :func:`dropmc.model.attention_product.product_tensors`."""

    def __init__(self) -> None:
        self.rows = self.product = None
        self._mode = None

    def enter(self, module, args):
        if module.training:
            return
        self.rows = self.product = None
        self._mode = _mode_class()(self)
        self._mode.__enter__()

    def leave(self, module, args, out):
        if self._mode is not None:
            mode, self._mode = self._mode, None
            mode.__exit__(None, None, None)


_MODE = []  # the mode class, made once (torch is imported lazily)


def _mode_class():
    if _MODE:
        return _MODE[0]
    import torch
    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode

    from ..model.attention_product import SDPA_SIGNATURE

    matmuls = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.bmm, torch.Tensor.bmm}

    class _Mode(TorchFunctionMode):
        def __init__(self, keep: _AttentionKeep) -> None:
            super().__init__()
            self.keep, self.dropped = keep, None

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            keep = self.keep
            if keep.product is not None:
                return out
            if func is F.dropout and keep.rows is None:
                keep.rows, self.dropped = args[0], out
            elif func in matmuls and self.dropped is not None and len(args) == 2 and args[0] is self.dropped:
                keep.product = dict(op="matmul", x=args[0], v=args[1], out=out)
            elif func is torch.einsum and self.dropped is not None and len(args) == 3 \
                    and any(a is self.dropped for a in args[1:]):
                rows_at = 0 if args[1] is self.dropped else 1
                keep.product = dict(op="einsum", eq=args[0], operands=list(args[1:]), rows_at=rows_at, out=out)
            elif func is F.scaled_dot_product_attention and keep.rows is None:
                bound = SDPA_SIGNATURE.bind(*args, **kwargs)
                bound.apply_defaults()
                keep.product = dict(op="sdpa", call="sdpa", args=dict(bound.arguments, output=out), out=out)
            return out

    _MODE.append(_Mode)
    return _Mode


class _AttentionNorm(_WeightKept):
    """Forward hook on the norm of an attention → ``o_proj`` → (+h) site."""

    def __init__(self, name: str, keep: _AttentionKeep, o_proj, p: float, eps: float, layer: bool,
                 prior=None, transposed: bool = False) -> None:
        self.name, self.keep, self.o_proj, self.p, self.eps, self.layer = name, keep, o_proj, p, eps, layer
        self.prior, self.transposed = prior, transposed

    def __call__(self, module, args, out):
        import torch

        from ..model.attention_product import product_tensors

        if module.training:
            return None
        product, rows, y = self.keep.product, self.keep.rows, args[0]
        self.keep.rows = self.keep.product = None
        width = _in_width(self.o_proj.weight, self.transposed)
        got = None if product is None else product_tensors(product, rows, width, lambda a, b: torch.equal(a, b))
        if got is None or y.dim() != 3:
            raise RuntimeError(f"dropmc.correct: site {self.name}: the attention probabilities and values "
                               "were not seen in this forward")
        a, v, _ = got
        batch, heads, queries, _ = a.shape
        dh = v.shape[-1]
        if width != heads * dh or y.shape[:2] != (batch, queries):
            raise RuntimeError(f"dropmc.correct: site {self.name}: o_proj's width {width} is not "
                               f"heads × head dim {heads} × {dh}, or the tokens differ")
        vv = v.detach().double()
        grams = _of_weight(self, self.o_proj.weight, _head_grams, heads, self.layer, self.transposed)
        n = (vv @ grams).mul_(vv).sum(-1)
        trace = (a.detach().double().square_() @ n.unsqueeze(-1)).sum(1).squeeze(-1)  # Σ_h Σ_s a² n
        beta = getattr(module, "bias", None) if self.layer else None
        return _scaled(out, y, trace, self.p, self.eps, beta, self.prior)


class LinearPlan:
    """The linear-path sites of a model on example inputs: ``sites`` (site
    name → the captured :class:`~dropmc.model.linear_path.LinearPathSite`) and
    ``refused`` (site name → reason)."""

    def __init__(self, sites: Dict[str, dict], refused: Dict[str, str], call: Tuple[tuple, dict]) -> None:
        self.sites, self.refused, self.call = sites, refused, call

    def install(self, correction, model, ordinary: Optional[dict] = None) -> None:
        """Installs the hooks (their handles into ``correction``), adds the
        sites to ``correction.linear_sites`` (``(dropout, norm)``) and the refused
        ones to ``correction.refused``, then runs one eval forward on the
        example inputs (a site that cannot be corrected live is a
        ValueError now, not at the user's first forward). ``ordinary``:
        norm call → the ordinary site hook ``correct`` installed there (before
        these): a plain first-order one is composed with (:func:`_scaled`),
        any other refuses the linear-path site with the reason."""
        modules = dict(model.named_modules())
        correction.refused.update(self.refused)
        installed = False
        for name, s in self.sites.items():
            prior = (ordinary or {}).get(s["norm_call"])
            if prior is not None and not _composes(prior):
                correction.refused[name] = (f"its norm is also corrected for the ordinary site {prior.site!r} "
                                            "(a compound or token-level site), whose correction does not "
                                            "compose with this one's: exclude one of the two")
                continue
            installed = True
            norm = modules[s["norm_call"]]
            layer = s["norm"] == "layer"
            transposed = s.get("transposed", False)
            if s["kind"] == "attention":
                owner = modules[_attention_owner(s["dropout"], modules)]
                keep = _AttentionKeep()
                correction._handles += [owner.register_forward_pre_hook(keep.enter),  # leave even on an error:
                                        owner.register_forward_hook(keep.leave, always_call=True)]
                hook = _AttentionNorm(name, keep, modules[s["linear"]], s["p"], s["eps"], layer, prior, transposed)
            else:
                keep = _Keep()
                correction._handles.append(modules[s["dropout"]].register_forward_pre_hook(keep))
                hook = _LinearNorm(name, keep, modules[s["linear"]], s["p"], s["eps"], layer, prior, transposed)
            # prepend: the user's own hooks on the norm see the corrected output
            correction._handles.append(norm.register_forward_hook(hook, prepend=True))
            correction.linear_sites.append((s["dropout"], s["norm_call"]))
        if installed:
            from .hooks import rehearse

            rehearse(model, self.call, "exclude it (exclude=[...])")


def _attention_owner(call: str, modules: dict) -> str:
    """The module whose forward holds an attention dropout call and its
    value product: a functional call's owner (``owner:dropout``,
    ``owner:sdpa``), an ``nn.Dropout`` module's parent (GPT-2's
    ``attn.attn_dropout``: the product is computed outside the dropout)."""
    import torch.nn as nn

    if isinstance(modules.get(call), nn.modules.dropout._DropoutNd):
        return call.rsplit(".", 1)[0] if "." in call else ""
    return call.rsplit(":", 1)[0]


def _refusal(s: dict, modules: dict) -> Optional[str]:
    """Why site ``s`` cannot be corrected live, or None."""
    if max(s["calls"]) > 1:
        return "its dropout or norm module runs more than once per forward (calls not told apart live)"
    if s["norm_call"] not in modules or s["linear"] not in modules:
        return "its norm or linear layer is not a module of the model"
    if s["kind"] == "attention":
        return None if _attention_owner(s["dropout"], modules) in modules else "its attention owner is not a module"
    import torch.nn as nn

    if not isinstance(modules.get(s["dropout"]), nn.modules.dropout._DropoutNd):
        return "a functional dropout outside attention (its input is not kept live)"
    return None


def linear_plan(model, inputs, sites, order: int, exclude, kwargs: dict, found=None) -> Optional[LinearPlan]:
    """The linear-path sites of the model on ``inputs`` (as ``correct``
    takes them) that can be corrected, and the refused ones with their
    reason; None when ``correct`` names its sites, has no inputs or
    ``order`` is 2 (the family has no second-order form). ``exclude``:
    site names (``"dropout->norm"``), tuples or call names to leave alone.
    ``found``: ``correct``'s :class:`~dropmc.model.discovery.Discovery`, whose
    train-mode rates the tracer takes (:func:`dropmc.model.linear_path.rates_of`:
    BERT's attention passes ``p = 0`` to ``F.dropout`` in eval)."""
    from ..model.discovery import call_inputs
    from ..model.linear_path import find_linear_paths, rates_of

    if sites is not None or inputs is None or order != 1:
        return None
    args, kwargs = call_inputs(inputs, dict(kwargs))
    modules = dict(model.named_modules())
    skip = {str(e) if not isinstance(e, tuple) else "->".join(e) for e in exclude}
    chosen, refused = {}, {}
    rates = rates_of(found) if found is not None else None
    for s in find_linear_paths(model, args, kwargs, rates=rates):
        if s["name"] in skip or s["dropout"] in skip or s["name"] in chosen:
            continue
        if not 0.0 < s["p"] < 1.0:
            refused[s["name"]] = f"p = {s['p']:g} (no correction)"
            continue
        why = _refusal(s, modules)
        if why is None:
            chosen[s["name"]] = s
        else:
            refused[s["name"]] = why
    return LinearPlan(chosen, refused, (args, kwargs))
