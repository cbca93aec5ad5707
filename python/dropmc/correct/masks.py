"""Mask-product sites in :func:`dropmc.correct.correct`: where their ``v``
is captured, which of them are refused, and the token-level correction.

A mask product ``v · m`` (ESMFold's row/column dropout ``x *
self.dropout(x.new_ones(shape))``, or a mask drawn with
``torch.rand``/``bernoulli`` and scaled by ``1/q``, as in drop-path) is a
dropout whose input is not ``v``: the dropout call sees ones, or there is
no call at all in eval mode. ``v`` is captured as the forward input of the
*value owner* (:func:`value_owner`): the module that makes the product (the
``nn.Dropout``'s parent for a dropout of ones, the module whose forward
draws the mask for a ``torch.rand`` mask). That is right only when the
owner's forward is ``x ↦ x · m``; in eval ``m`` is all ones, so the owner
is then the identity, and :func:`check_owners` verifies exactly that on
one eval forward of the example inputs: an owner whose eval output is not
bit for bit its input is refused, with the way out.

Which correction, by how the mask is shared (:mod:`dropmc.model.masks`):

* ``elementwise`` (each normalized channel its own draw for a token, the
  draw maybe shared with other tokens): today's per-token factors apply
  unchanged. Derivation: for one token, the norm's train-mode input is
  ``h + v ⊙ m`` with ``m_k = b_k / q``, ``b_k`` independent Bernoulli(q)
  over the channels ``k`` of that token — exactly the law of an ordinary
  dropout on ``v``. ``E[norm(h + v ⊙ m)]`` for that token is an integral
  over this per-token law only, so it is the same whether the draws are
  shared with other tokens or not (sharing changes the *joint* law of
  tokens, which matters for a standard error across tokens, not for any
  one token's expectation).
* ``token`` (one draw per token, broadcast over its channels): ``m = b/q``
  with one ``b ~ Bernoulli(q)``, so ``norm(h + m v)`` takes two values and
  ``E[norm(h + m v)] = q·norm(h + v/q) + p·norm(h)`` exactly (no
  approximation), ``h = x − v`` from the norm's eval input ``x``
  (:class:`_TokenSite`: two evaluations of the norm's own forward).
* ``groups`` (channels sharing a draw in groups): refused — no per-call
  closed form in torch (src/formulas/shared_mask.rs has the grouped
  ``E[V]`` in Rust, one numpy round trip per forward, which the overhead
  contract excludes).
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Tuple


def value_owner(found, call: str) -> str:
    """The module whose forward input is the value a mask product
    multiplies (module docs): the parent of an ``nn.Dropout`` called on
    ones, else the module that made the call (``""``: the model)."""
    module = found.module_of(call)
    if module in found.dropout_modules and ":" not in call:
        return module.rsplit(".", 1)[0] if "." in module else ""
    return module


def mask_refusal(found, site) -> Optional[str]:
    """Why a mask-product site has no correction here (None: it has one,
    pending :func:`check_owners`)."""
    mask = site.mask
    if mask.source not in ("dropout of ones", "rand mask"):  # a channel dropout, a dropout's entries repeated
        return (f"its mask ({mask.text}) is not a mask product of ones or of a draw: correct has no hook for "
                "it (the audit reads it); correct refuses it (exclude the site)")
    if mask.kind == "groups":
        return (f"its dropout mask is shared over groups of the normalized channels ({mask.text}): correct "
                "has no per-call closed form for grouped masks (src/formulas/shared_mask.rs gives the "
                "grouped E[V] only through numpy); correct refuses it (exclude the site)")
    if value_owner(found, site.dropout) == "":
        return (f"{site.dropout!r} is a mask ({mask.source}) multiplied in the model's own forward: no "
                "module's input is the value it multiplies, which correct captures; correct refuses it "
                "(move `x * mask` into a module of its own whose forward returns it, or exclude the site)")
    return None


def owner_counts(found, calls: Iterable[str]) -> Dict[str, int]:
    """Per value owner, how many of its mask calls one forward made."""
    out: Dict[str, int] = {}
    for c in calls:
        o = value_owner(found, c)
        out[o] = out.get(o, 0) + 1
    return out


class _IdentityCheck:
    """Temporary hooks on one owner: ``ok`` stays true while every eval call
    returns its first input bit for bit."""

    def __init__(self) -> None:
        self.ok, self.calls, self.x = True, 0, None

    def pre(self, module, args):
        self.x = args[0] if args else None

    def post(self, module, args, out):
        import torch

        x, self.x = self.x, None
        self.calls += 1
        same = isinstance(x, torch.Tensor) and isinstance(out, torch.Tensor) and out.shape == x.shape \
            and (out is x or torch.equal(out, x))
        self.ok = self.ok and bool(same)


def check_owners(model, modules: dict, call, owners: Iterable[str]) -> Dict[str, str]:
    """``{owner: reason}`` for the value owners that are not the identity
    on one eval forward of the example inputs ``call`` (``(args,
    kwargs)``), or that did not run."""
    import torch

    owners = sorted(set(owners))
    if not owners:
        return {}
    if call is None:
        return {o: "correct has no example inputs to check that it returns the value the mask multiplies "
                   "(give correct(model, inputs))" for o in owners}
    checks = {o: _IdentityCheck() for o in owners}
    handles = []
    for o, chk in checks.items():
        handles.append(modules[o].register_forward_pre_hook(chk.pre))
        handles.append(modules[o].register_forward_hook(chk.post))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(*call[0], **call[1])
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    out = {}
    for o, chk in checks.items():
        if chk.calls == 0:
            out[o] = f"the module {o!r} did not run in an eval forward"
        elif not chk.ok:
            out[o] = (f"the module {o!r}'s eval output is not its input, so its input is not the value the "
                      "mask multiplies")
    return out


def refuse_unchecked(plan, modules: dict, model, kept: List[Tuple[str, ...]]) -> List[Tuple[str, ...]]:
    """``kept`` without the mask-product sites whose value owner fails
    :func:`check_owners` (moved to ``plan.refused`` with the reason and the
    way out)."""
    masked = [s for s in kept if s[0] in plan.masks and s[0] not in plan.captures]  # gated: a module's output
    if not masked:
        return kept
    bad = check_owners(model, modules, plan.call, {value_owner(plan.found, s[0]) for s in masked})
    out = []
    for s in kept:
        owner = value_owner(plan.found, s[0]) if s in masked else None
        if owner in bad:
            plan.refused["->".join(s)] = (f"a mask product ({plan.masks[s[0]].source}) whose value correct "
                                          f"captures as its module's input: {bad[owner]}; correct refuses it "
                                          "(make `x * mask` a module of its own, or exclude the site)")
        else:
            out.append(s)
    return out


class _TokenSite:
    """A token-level mask's norm call: ``q·norm(h + v/q) + p·norm(h)``, ``h
    = x − v``, both terms by the norm module's own forward (hooks are not
    re-entered: ``module.forward`` is called directly)."""

    steps: tuple = ()

    def __init__(self, site, slot, p: float) -> None:
        self.site, self.slot, self.p = site, slot, p

    def __call__(self, module, args, out):
        import torch

        x = args[0]
        v = self.slot.take(self.site, x, self.steps)
        q = 1.0 - self.p
        h = x - v
        kept = module.forward(h + v / q, *args[1:])
        dropped = module.forward(h, *args[1:])
        return torch.add(kept * q, dropped, alpha=self.p)
