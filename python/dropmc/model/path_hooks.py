"""The module hooks of the linear-path tracer (:mod:`dropmc.model.linear_path`):
the module stack each recorded op is named by, the rate an attention module's
dropout call stands for, and the norms that compute their norm themselves
(recognised by :func:`dropmc.model.norms.norm_spec` on their own call)."""

from __future__ import annotations

from typing import Any, Dict

from .norms import norm_candidate, norm_spec

__all__ = ["path_hooks"]


def path_hooks(model, tracer):
    """Forward hooks: an attention module (one with a float
    ``attention_dropout``) sets the rate its dropout call stands for; a
    norm that computes its norm itself (not by ``F.layer_norm`` /
    ``F.rms_norm``, which the tracer records: T5's ``T5LayerNorm``,
    Mistral's ``…RMSNorm``, any hand-written one) records its input, its
    kind read by :func:`dropmc.model.norms.norm_spec` from the call's own
    input and output (the first call of each module decides)."""
    import torch

    handles = []
    specs: Dict[int, Any] = {}
    for name, mod in model.named_modules():
        def push(m, a, name=name):
            tracer.stack.append((name, m))
        def pop(m, a, o):
            tracer.stack.pop()
        handles += [mod.register_forward_pre_hook(push), mod.register_forward_hook(pop)]
        rate = getattr(mod, "attention_dropout", None)
        if isinstance(rate, float) and rate > 0.0:
            def enter(m, a, rate=rate):
                tracer.attention_p = rate
            def leave(m, a, o):
                tracer.attention_p = None
            handles += [mod.register_forward_pre_hook(enter), mod.register_forward_hook(leave)]
        if norm_candidate(mod):
            def record(m, a, o, name=name):
                done = tracer.producer.get(id(o))
                if not a or done is not None and done["op"] == "norm":
                    return  # an F.layer_norm / F.rms_norm call inside: recorded by the tracer
                spec = _own_norm(m, a[0], o, specs)
                if spec is not None:
                    tracer.norm_inputs.append(dict(
                        op="norm", kind=spec.kind, x=a[0], w=torch.from_numpy(spec.gamma),
                        b=None if spec.kind == "rms" else torch.from_numpy(spec.beta), eps=spec.eps,
                        name=tracer.call_name(name)))
            handles.append(mod.register_forward_hook(record))
    return handles


def _own_norm(mod, x, y, specs):
    """The :class:`~dropmc.model.norms.NormSpec` of a norm over the last
    axis from its first call (``specs`` caches it by module; None: not one),
    recognised on :data:`~dropmc.model.trace.RECOGNITION_ROWS` of its rows
    outside every tracer (no torch function mode sees its ops)."""
    import torch

    from .trace import RECOGNITION_ROWS, some_rows

    if id(mod) not in specs:
        spec = None
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape and x.dim() >= 1:
            with torch._C.DisableTorchFunction():
                spec = norm_spec(mod, some_rows(x.detach(), RECOGNITION_ROWS),
                                 some_rows(y.detach(), RECOGNITION_ROWS))
        specs[id(mod)] = spec if spec is None or spec.axis == -1 else None
    return specs[id(mod)]
