"""Random draws and the masks made from them, in the data-flow trace
(:class:`dropmc.model.trace.Trace` mixes :class:`MaskDraws` in).

Every random draw of the forward is held at its likely outcome (the trace
is neutral: module docs of :mod:`dropmc.model.trace`) and followed as data:

* ``rand``/``rand_like`` are a uniform ``U`` held at ``1 − 2⁻²⁴``; a
  comparison with a threshold makes a mask (``U > p``: kept with
  probability ``q``), ``floor(c + U)`` one kept with probability ``c``;
* ``bernoulli``/``bernoulli_`` (``torch.empty_like(h).bernoulli_(q)``) a
  keep mask held at ones; ``1 − keep`` (SEW-D's ``XDropout``) a drop mask;
  casts keep either kind;
* a keep mask scaled by a number (``mask / q``) keeps its scale.

A mask meets its value in one of three ways, each a *mask product* (a
dropout call of its own, ``owner:rand_mask``, whose value ``v`` is the
other operand): ``mask · x``, ``torch.where(mask, x, 0)`` and
``x.masked_fill(drop_mask, 0)``. A number multiplying or dividing the
product right after it (``h · mask / (1 − p)``) is the mask's scale, not
the value's: ``(m ⊙ x) · c = (c m) ⊙ x``. The trace's product is held at
its eval value ``x`` (the scale divided back out), so the forward after it
is the eval one.

A drawn mask over another dropout's output (BEiT's drop-path after its
layer scale, ``M₂ ⊙ (λ ⊙ M₁ ⊙ v) / q₂``) leaves that dropout a site too:
a site is audited with every other dropout at its eval value (only its own
mask drawn, docs/linear-path.md), and at eval ``M₂ / q₂`` is the identity —
in eval mode drop-path makes no op at all. So ``Trace.nested`` keeps, per
such product, the inner output's origin with its tape up to the product
(a scale the mask took over, drop-path's ``div(q₂)``, left out: the held
product is the value before it), and :func:`dropmc.model.discovery.site_terms`
reads the inner dropout's term through it.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Optional, Tuple

import torch

__all__ = ["MaskDraws", "HELD_UNIFORM", "scalar", "OTHER", "ADD", "MUL", "DIV", "RAND", "BERNOULLI"]

ADD = {"add", "__add__", "__radd__", "add_", "__iadd__"}
MUL = {"mul", "__mul__", "__rmul__", "mul_", "__imul__"}
DIV = {"div", "__truediv__", "div_", "__itruediv__", "true_divide"}
RAND = {"rand", "rand_like"}
BERNOULLI = {"bernoulli", "bernoulli_"}
_COMPARE = {"ge": ">=", "__ge__": ">=", "gt": ">", "__gt__": ">", "le": "<=", "__le__": "<=",
            "lt": "<", "__lt__": "<"}
_NOT = {"logical_not", "__invert__", "bitwise_not"}
_RSUB = {"rsub", "__rsub__"}
#: Ops that keep a mask's values (casts and layout).
_MASK_KEEPS = {"to", "float", "half", "double", "bfloat16", "bool", "type_as", "contiguous", "clone", "expand",
               "expand_as", "view", "reshape", "type"}
#: A uniform draw held at its likely side: the largest float32 below 1.
HELD_UNIFORM = 1.0 - 2.0 ** -24
OTHER: tuple = ("other", None, ())
_MASKS = ("maskdrop", "keepmask")


def scalar(x) -> Optional[float]:
    """``x`` as a float when it is a Python number (not a bool), else None."""
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return float(x)
    return None


def _is_zero(x) -> bool:
    if isinstance(x, torch.Tensor):
        return x.numel() == 1 and float(x) == 0.0
    return scalar(x) == 0.0


def _value_scale(origin) -> Optional[float]:
    """``f`` when a mask's value is ``y · f`` for a number ``f`` (drop-path's
    ``input.div(q)``; ``y`` another dropout's output scaled as a gate step
    of :meth:`dropmc.model.trace.Trace.gate_step`), else None."""
    if origin[0] == "scaled":
        return origin[1]
    if origin[0] == "dropout" and origin[2]:
        func, args, _, pos = origin[2][-1]
        name, c = getattr(func, "__name__", ""), scalar(args[1 - pos]) if len(args) == 2 else None
        if c and (name in MUL or name in DIV and pos == 0):
            return c if name in MUL else 1.0 / c
    return None


class MaskDraws:
    """The draw and mask-product handling of the trace (module docs)."""

    @contextmanager
    def quietly(self):
        """Ops run outside the trace, without grad (the neutral forward's
        own edits of a traced tensor)."""
        self.quiet = True
        try:
            with torch.no_grad():
                yield
        finally:
            self.quiet = False

    def mask_meets_value(self, name, args, kwargs, first) -> Optional[tuple]:
        """The origin of ``where(keep, x, 0)`` or ``x.masked_fill(drop,
        0)`` when the mask is a traced one: a mask product; else None."""
        if name == "where" and len(args) == 3 and isinstance(args[0], torch.Tensor) \
                and isinstance(args[1], torch.Tensor) and _is_zero(args[2]):
            om = self.origin(args[0])
            if om[0] == "keepmask":
                return self.on_mask_product(om, args[0], args[1], first)
        if name in ("masked_fill", "masked_fill_") and len(args) >= 3 and isinstance(args[0], torch.Tensor) \
                and isinstance(args[1], torch.Tensor) and _is_zero(args[2]):
            om = self.origin(args[1])
            if om[0] == "dropmask":
                draw, p_drop, _ = om[1]
                return self.on_mask_product(("keepmask", (draw, p_drop, 1.0), om[2]), args[1], args[0], first)
        return None

    def fold_scale(self, name, args, origin, first) -> Optional[tuple]:
        """``(m ⊙ x) · c`` or ``/ c`` right after a mask product: ``c`` is
        the mask's scale (module docs); the product stays ``x``."""
        c = scalar(args[1]) if len(args) > 1 else None
        if c is None and name in MUL and args and not isinstance(args[0], torch.Tensor):
            c = scalar(args[0])
        if not c or origin[0] != "dropout" or origin[2] or origin[1] not in self.sources \
                or not (name in MUL or name in DIV) or not isinstance(first, torch.Tensor):
            return None
        src = self.sources[origin[1]]
        if src["kind"] not in ("rand mask",):
            return None
        factor = c if name in MUL else 1.0 / c
        src["scale"] *= factor
        with self.quietly():
            first.div_(factor)  # neutral: the product stays x, its eval value
        return origin

    def on_mask_product(self, om, mask, x, out) -> tuple:
        """``mask · x`` with a mask from a dropout of ones or from a draw:
        the product is a site's source (module docs of dropmc.model.masks)."""
        if om[0] == "maskdrop":
            call, p, _ = om[1]
            scale = 1.0 / (1.0 - p) if p < 1 else float("inf")
        else:
            draw, p, scale = om[1]
            ox = self.origin(x)
            f = _value_scale(ox)
            if f is not None and out is not None:  # x = y · f: the mask keeps y at scale · f
                scale *= f
                with self.quietly():
                    out.div_(f)  # neutral: the product is y, its eval value
            call = self.next_call(self.functional_base("rand_mask"))
            if ox[0] == "dropout":  # a dropout's output under this mask: held at its eval value, y
                self.nested[call] = (ox[0], ox[1], ox[2][:-1] if f is not None else ox[2])
            self.dropout_p[call] = p
            # a mask on softmax rows is an attention dropout (SEW-D's XDropout)
            self.dropout_origin[call] = ox if ox[0] == "softmax" and not ox[2] else OTHER
            self.mask_draws.add(draw)
        self.sources[call] = {"mask_shape": tuple(mask.shape), "value_shape": tuple(x.shape),
                              "out_shape": tuple(out.shape) if out is not None else (), "scale": scale,
                              "kind": "dropout of ones" if om[0] == "maskdrop" else "rand mask", "p": p,
                              "mask_tape": om[2]}
        if call in self.keep and out is not None:
            self.recorded[("input", call)] = self.copy(out)  # neutral: mask · x is x
        return ("dropout", call, ())

    # -- random draws, held at their likely side
    def on_draw(self, name, func, args, kwargs):
        out = func(*args, **kwargs)
        draw = self.next_call(self.functional_base("draw"))
        with self.quietly():
            if name in RAND:
                out.fill_(HELD_UNIFORM)
                origin = ("rand", (draw, 0.0), ())
            else:
                prob = kwargs.get("p", args[1] if len(args) > 1 else None)
                prob = float(prob) if scalar(prob) is not None else (
                    float(args[0].float().mean()) if name == "bernoulli" else 0.5)
                target = args[0] if name == "bernoulli_" else out
                target.fill_(1.0)
                self.draws.append((draw, 1.0 - prob, "bernoulli"))
                origin = ("keepmask", (draw, 1.0 - prob, 1.0), ())
        self.tag(out, frozenset(), {}, origin)
        return out

    def on_draw_op(self, name, args, o0, o1, out) -> Tuple[tuple, Any]:
        """An op on a draw: comparisons make masks, scalars scale them."""
        o = o0 if o0[0] in ("rand", "keepmask", "dropmask") else o1
        c = scalar(args[1]) if len(args) > 1 else None
        kind, payload, _ = o
        if kind == "rand" and name in ADD and c is not None:
            return ("rand", (payload[0], payload[1] + c), ()), out
        if kind == "rand" and name in ("floor", "floor_"):  # floor(c + U) = 1 with probability c
            p_keep = min(max(payload[1], 0.0), 1.0)
            return self.held_mask(payload[0], 1.0 - p_keep, out), out
        if kind == "rand" and name in _COMPARE and c is not None and o is o0:
            op, t = _COMPARE[name], c - payload[1]
            p_true = min(max(t, 0.0), 1.0) if op in ("<", "<=") else min(max(1.0 - t, 0.0), 1.0)
            if isinstance(out, torch.Tensor) and out.numel() == 1:
                self.draws.append((payload[0], min(p_true, 1 - p_true), "a one-draw decision (stochastic depth)"))
            if p_true >= 0.5:
                return self.held_mask(payload[0], 1.0 - p_true, out), out
            return ("dropmask", (payload[0], p_true, 1.0), ()), out
        if kind == "dropmask" and (name in _NOT or name in _RSUB):
            return self.held_mask(payload[0], payload[1], out), out
        if kind == "dropmask" and name in _MASK_KEEPS:
            return o, out
        if kind == "keepmask" and name in _RSUB and payload[2] == 1.0 and scalar(args[1]) == 1.0:
            return ("dropmask", (payload[0], payload[1], 1.0), ()), out  # 1 − keep: XDropout's drop mask
        if kind == "keepmask":
            scale = payload[2]
            if name in MUL and c is not None:
                scale *= c
            elif name in DIV and c is not None and o is o0:
                scale /= c
            elif name not in _MASK_KEEPS:
                return OTHER, out
            if isinstance(out, torch.Tensor) and out.dtype.is_floating_point:
                with self.quietly():
                    out.fill_(1.0)  # neutral: the mask's eval value
            return ("keepmask", (payload[0], payload[1], scale), ()), out
        return OTHER, out

    def held_mask(self, draw, p_drop, out) -> tuple:
        if isinstance(out, torch.Tensor) and out.numel() > 1:
            self.draws.append((draw, p_drop, "a mask"))
        return ("keepmask", (draw, p_drop, 1.0), ())
