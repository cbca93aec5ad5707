"""Cheaper dispatch for :func:`dropmc.correct.correct` on torch's own
modules: instead of hooks, the corrected ``nn.Dropout``, ``nn.LayerNorm`` and
``nn.TransformerEncoderLayer`` objects get their class swapped to the small
subclasses below (``uncorrect`` restores the class and drops the attributes
they read), so a corrected call costs one ordinary module call and the
norm's own statistics come free.

* :class:`_KeepingDropout` — training: ``F.dropout`` exactly as
  ``nn.Dropout.forward`` calls it; eval: keeps its input for the norm
  (:class:`dropmc.correct.hooks._KeepInputs`) and returns it (an eval
  dropout is the identity: ``F.dropout(x, p, False)`` returns ``x`` itself;
  it is still called when a ``TorchFunctionMode`` is active, so that a
  trace such as the audit's sees the call).
* :class:`_CorrectedLayerNorm` — training: ``F.layer_norm`` as
  ``nn.LayerNorm.forward``; eval: ``torch.native_layer_norm`` gives the
  output and ``rstd = (σ² + ε)^(-1/2)`` in one op, and the site's factor
  (:func:`dropmc.correct.forms._factor`, given ``rstd``) is applied to that
  output — the same numbers as the hook path, which recomputes ``rstd``. A
  network norm's hook runs the norm itself
  (:meth:`dropmc.correct.network.NetworkSite.layer_norm`: with no own site,
  the norm of the scaled input, no factor).
* :class:`_CorrectedEncoderLayer` — an ``nn.TransformerEncoderLayer``
  holding a site: in eval, without grad and masks, when torch's own fast
  path conditions hold (its attention by ``torch._native_multi_head_attention``),
  one Python function runs the layer (post-LN or ``norm_first``), dropouts
  being the identity apart from keeping their input, norms corrected as
  above; otherwise (training, grad, masks, hooks on a submodule, tracing)
  the ordinary module path of ``nn.TransformerEncoderLayer.forward``, which
  ``correct`` keeps off torch's fused kernel (it cannot be corrected).

A site whose hooks are not of these plain kinds (a token-level mask, RMSNorm,
a norm recognised by what it computes with another ε, a subclass of these
modules) keeps the hook path of :mod:`dropmc.correct.hooks`.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class _KeepingDropout(nn.Dropout):
    """An ``nn.Dropout`` of a corrected site (``_dropmc_keep``: its
    :class:`~dropmc.correct.hooks._KeepInputs`)."""

    def forward(self, input):
        if self.training:
            return F.dropout(input, self.p, self.training, self.inplace)
        self._dropmc_keep(self, (input,))
        if torch._C._is_torch_function_mode_enabled():  # a mode watching F.dropout calls (dropmc's trace)
            return F.dropout(input, self.p, False, self.inplace)
        return input


class _CorrectedLayerNorm(nn.LayerNorm):
    """An ``nn.LayerNorm`` of a corrected site (``_dropmc_norm``: its
    :class:`_FusedPerCall`); ``_dropmc_own_forward`` is the norm's own
    computation, uncorrected (:func:`dropmc.model.norms.recognize_norm` reads it)."""

    _dropmc_own_forward = nn.LayerNorm.forward

    def forward(self, input):
        if self.training:
            return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)
        return self._dropmc_norm(self, input)


class _FusedPerCall:
    """A swapped LayerNorm's eval call: the site hook of this call's index
    (:class:`~dropmc.correct.hooks._PerCall`'s counting), fed the output and
    ``rstd`` of one ``native_layer_norm``; no site: the plain norm."""

    def __init__(self, calls, hooks) -> None:
        self.calls, self.hooks = calls, hooks

    def __call__(self, module, x):
        hook = self.hooks.get(self.calls.next())
        weight, bias = module._parameters["weight"], module._parameters["bias"]
        if hook is None:
            return F.layer_norm(x, module.normalized_shape, weight, bias, module.eps)
        own = getattr(hook, "layer_norm", None)  # the hook runs the norm itself
        if own is not None:
            return own(module, x)
        out, _, rstd = torch.native_layer_norm(x, module.normalized_shape, weight, bias, module.eps)
        fused = getattr(hook, "fused", None)
        return hook(module, (x,), out) if fused is None else fused(x, out, rstd)


def swappable_norm(module, hooks) -> bool:
    """Whether a norm's site hooks can run inside :class:`_CorrectedLayerNorm`:
    an ``nn.LayerNorm`` itself over the last dim, every hook a LayerNorm site
    kind whose ε is the module's (hooks that call the norm's forward again,
    such as a token-level mask's, keep the hook path)."""
    from .hooks import _CompoundSecond, _LayerNormSite
    from .network import NetworkSite

    if type(module) is not nn.LayerNorm or len(module.normalized_shape) != 1:
        return False
    for h in hooks.values():
        params = h.params if isinstance(h, (_LayerNormSite, NetworkSite)) else getattr(h, "ln2", None)
        if not isinstance(h, (_LayerNormSite, _CompoundSecond, NetworkSite)) or params._eps != float(module.eps):
            return False
    return True


def _keep(dropout, v):
    keep = dropout.__dict__.get("_dropmc_keep")
    if keep is not None:
        keep(dropout, (v,))
    return v


def _norm(norm, z):
    fused = norm.__dict__.get("_dropmc_norm")
    if fused is not None:
        return fused(norm, z)
    return F.layer_norm(z, norm.normalized_shape, norm._parameters["weight"], norm._parameters["bias"], norm.eps)


_PLAIN = (nn.Dropout, _KeepingDropout, nn.LayerNorm, _CorrectedLayerNorm, nn.Linear,
          nn.modules.linear.NonDynamicallyQuantizableLinear)
_SUBS = ("linear1", "dropout", "linear2", "norm1", "norm2", "dropout1", "dropout2")
_HOOKS = nn.modules.module


def _fast(layer, src):
    """The dedicated forward's operands ``(modules, weights)`` when torch's
    own fast-path conditions hold for the layer and its attention
    (``nn.TransformerEncoderLayer.forward``, ``nn.MultiheadAttention.forward``;
    the activation flag ``correct`` cleared aside), the submodules are of
    the plain types it computes by hand, without hooks (global ones
    included), and nothing traces; else None. Read through ``_modules`` /
    ``_parameters`` (``nn.Module.__getattr__`` costs a microsecond a name)."""
    if (layer.training or src.dim() != 3 or src.is_nested or not torch.backends.mha.get_fastpath_enabled()
            or torch.is_autocast_enabled() or torch._C._is_torch_function_mode_enabled()
            or torch.jit.is_tracing() or torch.compiler.is_compiling()
            or _HOOKS._global_forward_hooks or _HOOKS._global_forward_pre_hooks):
        return None
    sa = layer._modules["self_attn"]
    if (type(sa) is not nn.MultiheadAttention or not sa.batch_first or not sa._qkv_same_embed_dim
            or sa.num_heads % 2 or sa.add_zero_attn or sa.bias_k is not None or sa.bias_v is not None):
        return None
    subs = [layer._modules[n] for n in _SUBS] + [sa._modules["out_proj"]]
    for m in subs + [sa]:
        if type(m) not in _PLAIN and m is not sa or m._forward_hooks or m._forward_pre_hooks \
                or "forward" in m.__dict__:  # a replaced forward (dropmc.correct.hooks.replace_forward)
            return None
    lin1, _, lin2, _, _, _, _, out = subs
    weights = (src, sa._parameters["in_proj_weight"], sa._parameters["in_proj_bias"],
               out._parameters["weight"], out._parameters["bias"], lin1._parameters["weight"],
               lin1._parameters["bias"], lin2._parameters["weight"], lin2._parameters["bias"])
    if weights[1] is None or weights[2] is None or src.dtype != weights[1].dtype or src.dtype != weights[2].dtype \
            or torch.overrides.has_torch_function(weights) or src.device.type not in ("cpu", "cuda"):
        return None
    if torch.is_grad_enabled() and any(w is not None and w.requires_grad for w in weights):
        return None
    return subs, weights


class _CorrectedEncoderLayer(nn.TransformerEncoderLayer):
    """An ``nn.TransformerEncoderLayer`` holding a corrected site."""

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        if src_mask is None and src_key_padding_mask is None and not is_causal:
            operands = _fast(self, src)
            if operands is not None:
                return _eval_forward(self, src, *operands)
        return super().forward(src, src_mask, src_key_padding_mask, is_causal)


def _eval_forward(layer, x, subs, weights):
    """The layer's eval forward (Fig. 1 of arXiv:2002.04745, as
    ``nn.TransformerEncoderLayer.forward`` computes it, the attention as
    ``nn.MultiheadAttention``'s fast path calls it), dropouts the identity
    apart from keeping their inputs, norms by :func:`_norm`."""
    _, dropout, _, norm1, norm2, dropout1, dropout2, _ = subs
    _, in_w, in_b, out_w, out_b, w1, b1, w2, b2 = weights
    sa = layer._modules["self_attn"]
    activation = layer.activation

    def attention(y):
        return torch._native_multi_head_attention(y, y, y, sa.embed_dim, sa.num_heads, in_w, in_b,
                                                  out_w, out_b, None, False)[0]

    def feed_forward(y):
        h = F.linear(y, w1, b1)
        h = torch.relu(h) if activation is F.relu else activation(h)
        return F.linear(_keep(dropout, h), w2, b2)

    if layer.norm_first:
        x = x + _keep(dropout1, attention(_norm(norm1, x)))
        return x + _keep(dropout2, feed_forward(_norm(norm2, x)))
    x = _norm(norm1, x + _keep(dropout1, attention(x)))
    return _norm(norm2, x + _keep(dropout2, feed_forward(x)))


def swap(correction, module, cls, **attributes) -> None:
    """``module``'s class to ``cls`` with ``attributes`` set, recorded in
    ``correction`` so that ``undo`` restores the class and removes them."""
    for name, value in attributes.items():
        correction._add(module, name, value)
    correction._set(module, "__class__", cls)


def _ancestors(name: str):
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(len(parts))]


def module_path(correction, modules: dict, names) -> None:
    """Every ``nn.TransformerEncoderLayer`` holding one of ``names`` off
    torch's fused eval kernel (``activation_relu_or_gelu`` false is one of
    that path's conditions in every torch with it, and the module path
    ignores the flag) and, when it is one exactly, onto
    :class:`_CorrectedEncoderLayer`; every ``nn.TransformerEncoder`` off
    nested tensors."""
    done = set()
    for name in names:
        for a in _ancestors(name):
            m = modules.get(a)
            if id(m) in done:
                continue
            if isinstance(m, nn.TransformerEncoderLayer):
                correction._set(m, "activation_relu_or_gelu", 0)
                if type(m) is nn.TransformerEncoderLayer:
                    correction._set(m, "__class__", _CorrectedEncoderLayer)
                done.add(id(m))
            elif isinstance(m, nn.TransformerEncoder) and getattr(m, "use_nested_tensor", False):
                correction._set(m, "use_nested_tensor", False)
                done.add(id(m))
