"""``correct(model, inputs, scope="network")``: every norm corrected for the
noise of every dropout upstream of it, not only its own site's.

What it targets. In training a norm's input is ``y = ȳ + e``: ``ȳ`` the
eval value, ``e`` the sum of the noise every active dropout upstream
injected (in a pre-norm stack the residual stream carries each one to
every later norm). Per token, with ``V`` the spread of ``ȳ`` (LayerNorm:
its variance over the normalised axis; RMSNorm: its mean square) and
``s̄`` the noise variance it sees (:mod:`dropmc.model.network_ledger`: ``(1 −
1/d) mean_k s_k``, resp. ``mean_k s_k``), the first-order train-mode
expectation of the norm is its eval output with the spread ``V`` replaced
by ``V + s̄``:

1. LayerNorm: ``E[γ (y − μ_y)/σ_y + β] ≈ γ (ȳ − μ)/√(V + s̄ + ε) + β``
   (the numerator's noise has zero mean; the denominator's mean is ``V +
   s̄ + ε`` since ``E var_k y = V + s̄``; its fluctuation and its
   covariance with the numerator are second order: src/formulas/
   layernorm.rs derives the same step for one site). So the output is
   ``β + c (LN(ȳ) − β)`` with ``c² = (V + ε)/(V + s̄ + ε)`` — today's
   per-site form with ``s̄`` in place of one dropout's ``(p/q) mean v²``.
2. RMSNorm: ``γ ȳ / √(V + s̄ + ε)``, i.e. ``c · RMSNorm(ȳ)``, the same
   ``c``.

The live form. ``s̄`` per token needs the ledger carried through every
forward (a ``TorchFunctionMode``: many times a plain forward). Instead the
ledger runs once on the example inputs and each norm keeps one number,
the ratio ``κ = s̄ / V``:

3. Why a ratio is the quantity to carry: every injection ``(p/q) v²`` is
   the square of an activation of the same token, and the residual stream
   a norm normalises is the sum of those activations, so ``s̄`` and ``V``
   scale together when a token's activations do (exactly so for a
   positively homogeneous stack; a token twice as large has four times
   both). Their ratio is what stays put from token to token and input to
   input; ``V`` itself varies (GPT-2's first token is many times larger).
4. Which ratio: the ``κ`` minimising ``Σ_t (s̄_t − κ V_t)² / V_t`` over the
   example tokens (least squares with the spread of a ratio estimate, ∝
   ``V_t``, as weight): setting the derivative to zero, ``Σ_t (s̄_t − κ
   V_t) = 0``, so ``κ = Σ_t s̄_t / Σ_t V_t`` — the pooled ratio
   (:attr:`dropmc.model.network_ledger.NormNoise.kappa`), robust to a token with
   ``V ≈ 0`` where a mean of per-token ratios is not.
5. Applied live to each token's own ``V``: ``s̄ ≈ κ V``, so ``c² = (V +
   ε)/(V (1 + κ) + ε)`` (:func:`dropmc.correct.forms._network_factor`
   computes it from the norm's own ``rstd``, the same cost as the per-site
   factor).

8. The same output from the norm's own call on a scaled input, without
   ``c``: a norm is scale-invariant but for its ``ε``. With ``a > 0`` a
   constant of the token, ``LN(a x) = γ (a x − a μ)/√(a² V + ε) + β =
   γ (x − μ)/√(V + ε/a²) + β``. Take ``a = √(1 + κ)``, ``b = 1/a``: the
   corrected ``β + γ (x − μ)/√(V (1 + κ) + ε)`` is ``β + γ (x − μ) b /
   √(V + ε/a²)``, i.e. ``β + b (LN(a x) − β)``; for RMSNorm (``μ = 0``,
   ``V`` the mean square, no β) ``b · RMSNorm(a x)``. ``a`` and ``b``
   depend on the position only (step 7), so they are made once per input
   shape: the correction is then one product before the norm and one
   after it, whatever the norm's own form (:meth:`NetworkSite.forward`).
   Exact for every ``ε ≥ 0`` (``ε = 0``: ``LN(a x) = LN(x)``, and ``b =
   c``); a token with ``V = 0`` stays at ``β``. Half-precision inputs keep
   the factor form, whose statistics are taken in float32.

7. By position. The ratio of step 3 still differs from one position of a
   sequence to the next: the attention dropout's noise at a query is
   ``(p/q) Σ_s a_s² v_s²``, and ``Σ_s a_s²`` — the inverse breadth of its
   attention — is ``≈ 1/(t + 1)`` for diffuse causal attention at position
   ``t`` (the first token, attending to itself alone, takes a whole
   dropout's noise). So ``κ`` is pooled as in step 4 per position (the
   input's last-but-one axis) over the example's other leading axes (its
   batch rows): ``κ_t = Σ_b s̄_bt / Σ_b V_bt``; an input longer than the
   example takes the pooled ``κ`` past its length, and a 2-d input the
   pooled ``κ`` everywhere. (On a Llama-style model with attention
   dropout, ``s̄/V`` spans a factor 10 over positions and the per-position
   ``κ`` reaches the per-token ledger's correction; see docs/correct.md.)

6. A norm that is a plain or bypass site of one dropout (``h +
   dropout(v)``) keeps that dropout's noise live per token, as the
   per-site correction does: its ``(p/q) mean_k v_k²`` is exact per token
   and costs one norm of ``v``. Its share is taken out of the pooled
   ratio (the ledger's ``own``), ``κ_rest = max(0, Σ (s̄ − own)) / Σ V``,
   and ``c² = (V + ε)/(V (1 + κ_rest) + (p/q) mean_k v_k² + ε)``.

Which norms: every norm call :func:`dropmc.model.discovery.discover` recognised
(LayerNorm and RMSNorm, by what they compute) whose ``κ`` is positive —
some dropout's noise reaches it, directly or through the residual stream,
attention or a feed-forward block. The per-site hooks are not installed
(their noise is in ``s̄``, or live as in step 6); BatchNorm sites keep their fold. What
the ledger cannot follow is listed in ``Correction.network_uncovered``
(op, module): a norm behind such an op gets too small a ``κ``.
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

from . import forms as _forms
from .sites import _norm_params, _p_of

__all__ = ["NetworkSite", "network_norms", "network_arguments", "network_plan", "install_network"]


class NetworkSite:
    """A norm call's network correction: ``β + c (out − β)`` (LayerNorm) or
    ``c · out`` (RMSNorm), ``c² = (V + ε)/(V (1 + κ) + ε)`` per token from
    the norm's input (module docs); with its own site live (``slot``: the
    site's dropout input, rate ``p``), ``c² = (V + ε)/(V (1 + κ) + (p/q)
    mean v² + ε)``, ``κ`` then the rest's. ``site`` names the norm call
    (or the site)."""

    in_forward = True  # runs in a replaced forward (dropmc.correct.hooks.replace_forward)

    def __init__(self, site, params, kappa: float, profile=None, slot=None, p: float = 0.0) -> None:
        self.site, self.params, self.kappa, self.slot, self.p = site, params, float(kappa), slot, float(p)
        self.profile = profile  # κ per position (float64, step 7), or None: κ everywhere
        self.centred = params.kind == "layer"
        # Corrected by the norm of a scaled input (step 8) when it has no own site and
        # normalises the last axis: the per-position scales are laid out along x's
        # second-to-last axis, which a channels-first norm's input does not have.
        self.scaled = slot is None and params.axis == -1
        self._live: Dict[tuple, object] = {}  # (positions, dtype, device, ε) -> terms() / scales()

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_live"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.__dict__.setdefault("scaled", self.slot is None and self.params.axis == -1)
        self._live = {}

    def _kappa(self, key):
        """``κ`` in float64: per position as an ``(L, 1)`` tensor (positions
        past the example's the pooled ``κ``) when there is a profile and
        the input has a position axis (``key[0]``: its length), else 0-d."""
        import torch

        n = key[0]
        if self.profile is None or n == 0:
            return torch.tensor(self.kappa, dtype=torch.float64)
        prof = self.profile[:n].to(torch.float64)
        if prof.numel() < n:
            prof = torch.cat([prof, prof.new_full((n - prof.numel(),), self.kappa)])
        return prof.reshape(n, 1)

    def scales(self, x):
        """``(a, b) = (√(1 + κ), 1/√(1 + κ))`` for the input ``x`` (step 8),
        computed in float64 and held in ``x``'s dtype and device: ``(L,
        1)`` tensors per position, or Python floats; made once per input
        shape, dtype and device."""
        key = (x.shape[-2] if x.dim() >= 3 else 0, x.dtype, x.device, None)
        t = self._live.get(key)
        if t is None:
            import math

            if self.profile is None or key[0] == 0:
                a = math.sqrt(1.0 + self.kappa)
                t = (a, 1.0 / a)
            else:
                a = (1.0 + self._kappa(key)).sqrt()
                t = (a.to(dtype=x.dtype, device=x.device), a.reciprocal().to(dtype=x.dtype, device=x.device))
            self._live[key] = t
        return t

    def forward(self, own, x, args=(), kwargs=None):
        """The corrected eval output of the norm call ``own(x, *args,
        **kwargs)`` (``own``: the norm's uncorrected forward): with no own
        site, ``β + b (own(a x) − β)`` (step 8); else ``own``'s output times
        the factor (:meth:`__call__`)."""
        kwargs = kwargs or {}
        if self.scaled and x.dtype.itemsize >= 4:
            a, b = self.scales(x)
            return self._apply(b, own(x * a, *args, **kwargs))
        return self(None, (x,) + tuple(args), own(x, *args, **kwargs))

    def terms(self, x, eps: float):
        """``(1 + κ, −κ ε)`` for the input ``x`` (:func:`dropmc.correct.forms.
        _network_factor`), in ``x``'s dtype and device: per position as
        ``(L, 1)`` tensors (positions past the example's the pooled ``κ``)
        when there is a profile and ``x`` has a position axis, else 0-d;
        made once per input shape, dtype and device."""
        key = (x.shape[-2] if x.dim() >= 3 else 0, x.dtype, x.device, eps)
        t = self._live.get(key)
        if t is None:
            kappa = self._kappa(key).to(dtype=_forms._stats_dtype(x), device=x.device)
            t = self._live[key] = (1.0 + kappa, kappa * -eps)
        return t

    def __call__(self, module, args, out):
        x = args[0]
        v = None if self.slot is None else self.slot.take(self.site, x)
        axis = self.params.axis  # a channels-first norm: its rows moved last (dropmc.correct.forms._last)
        x, v, out = _forms._last(axis, x, v, out)
        eps = self.params.eps(x)
        c = _forms._network_factor(x, self.terms(x, eps), self.centred, eps, v=v, p=self.p)
        return _forms._back(axis, self._apply(c, out))

    def layer_norm(self, module, x):
        """The corrected eval output of a swapped ``nn.LayerNorm``'s call
        (:class:`dropmc.correct.fast._FusedPerCall`), its statistics read
        once: with no own site the norm of the scaled input (step 8); with
        one, the factor from ``native_layer_norm``'s own ``rstd`` (the κ
        term needs ``ε`` itself: ``V/(V + ε) = 1 − ε ρ²``)."""
        import torch
        import torch.nn.functional as F

        weight, bias, eps = module._parameters["weight"], module._parameters["bias"], module.eps
        beta = bias if bias is None or bias.dtype == x.dtype else bias.to(x.dtype)
        if self.scaled and x.dtype.itemsize >= 4:
            a, b = self.scales(x)
            return _forms._shrink_towards_beta(F.layer_norm(x * a, module.normalized_shape, weight, bias, eps), b, beta)
        out, _, rstd = torch.native_layer_norm(x, module.normalized_shape, weight, bias, eps)
        v = None if self.slot is None else self.slot.v
        if x.dtype.itemsize < 4 or v is None or v.shape != x.shape:
            return self(module, (x,), out)  # the general path (and its errors)
        return _forms._shrink_towards_beta(out, _forms._network_factor(x, self.terms(x, eps), True, eps, rstd, v,
                                                                       self.p), beta)

    def _apply(self, c, out):
        """``β + c (out − β)`` (LayerNorm) or ``c · out``; ``c`` a tensor or a float."""
        if not self.centred:
            return out * (c if isinstance(c, float) else c.to(out.dtype))
        return _forms._shrink_towards_beta(out, c, _forms._beta(self.params, out))


def _excluded(call: str, module: str, excluded: set) -> bool:
    return call in excluded or module in excluded


def network_norms(found, ledger, exclude: Sequence) -> Tuple[Dict[str, float], List[str]]:
    """``({norm call: κ}, [norm calls excluded])``: the norm calls the
    ledger saw some noise reach, minus ``exclude`` (norm call names or
    module names; a site ``(dropout, norm)`` or ``"dropout->norm"``
    excludes its norm). An entry naming no norm call is a ValueError
    listing them."""
    excluded = set()
    for e in exclude:
        if isinstance(e, str) and "->" in e:
            e = tuple(e.split("->"))
        if isinstance(e, (tuple, list)):
            excluded.update(e[1:])
        else:
            excluded.add(e)
    reached = {c: ledger.norms[c].kappa for c in ledger.reached()}
    names = set(found.norms) | set(found.norm_modules.values()) | set(found.dropouts)
    missing = [e for e in excluded if e not in names]
    if missing:
        raise ValueError(f"exclude: {missing[0]!r} names no norm call or module of the forward. Its norm "
                         f"calls: {list(found.norms)}")
    out, dropped = {}, []
    for call, kappa in reached.items():
        if _excluded(call, found.norm_modules[call], excluded):
            dropped.append(call)
        else:
            out[call] = kappa
    return out, dropped


def network_arguments(inputs, sites, order: int, linear, kwargs) -> None:
    """What ``correct(..., scope="network")`` refuses, each with its own message."""
    if inputs is None and not kwargs:
        raise ValueError("scope='network' needs example inputs (correct(model, inputs, scope='network')): "
                         "the noise reaching each norm is measured on one forward on them")
    if sites is not None:
        raise ValueError("scope='network' corrects every norm the noise reaches and takes no sites; name "
                         "per-site corrections with scope='site'")
    if linear:
        raise ValueError("scope='network' carries the linear paths' noise in its ledger: linear=True is "
                         "scope='site''s")


def network_plan(model, plan, exclude) -> tuple:
    """``({norm call: κ}, ledger)``: the noise ledger on ``plan``'s example
    inputs (run before any change to the model) and the norms to correct."""
    from ..model.network_ledger import network_ledger

    args, kw = plan.call
    ledger = network_ledger(model, args, kw, plan.found)
    return network_norms(plan.found, ledger, exclude)[0], ledger


def install_network(correction, build, plan, modules: dict, network, shift: bool = False) -> List[str]:
    """The hook of every norm call the noise reaches, through ``build``
    (:class:`dropmc.correct._Builder`: the per-call dispatch and the fused
    LayerNorm of the per-site corrections); a norm with its own site
    (step 6) reads that site's dropout input from its slot. ``shift``
    (``order=2``): also each activation module the noise reaches, by its
    mean shift (:mod:`dropmc.model.network_shift`; they are listed in
    ``correction.network_shifted``). Returns the modules hooked (to keep
    off a fused encoder-layer path)."""
    kappas, ledger = network
    hooked: List[str] = []
    correction.scope = "network"
    correction.network_uncovered = list(ledger.uncovered)
    if shift:
        from ..model.network_shift import install_shift

        correction.network_shifted = install_shift(correction, modules, ledger.activations)
        hooked += correction.network_shifted
    for call, kappa in kappas.items():
        nname, _, params = _norm_params(plan, modules, call)
        noise = ledger.norms[call]
        own = noise.own_site
        if own is not None and own in plan.sites:
            hook = NetworkSite(own, params, noise.kappa_rest, noise.kappa_by_position(rest=True),
                               build.slot(own[0]), _p_of(plan, modules, own[0]))
            owners = [plan.dropout_owner(own[0]), nname]
        else:
            hook, owners = NetworkSite(call, params, kappa, noise.kappa_by_position()), [nname]
        build.norm(nname, call, hook)
        hooked += owners
        correction.network[call] = kappa
    return hooked
