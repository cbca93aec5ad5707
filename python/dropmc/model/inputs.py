"""What ``audit`` and ``correct`` check of the model and its inputs before
any site is looked at (issue 52): one place, run once, naming the
argument, so that no site-specific message (a masked softmax row, a
norm's spread) is ever the first to meet a bad input.

* :func:`unwrap_compiled`: a ``torch.compile``d model is its
  ``_orig_mod`` (the audit's hooks and tracing act on the original
  module; a warning says so).
* :func:`validate_inputs`: every tensor of the forward's inputs is
  non-empty, of a real dtype (no complex), on a real device (not
  ``meta``), and finite when it is floating point, except that −inf is
  let through in a positional input after the first and in a keyword
  input whose name holds ``mask``: that is how an additive attention mask
  (``nn.Transformer.generate_square_subsequent_mask``) hides a key; the
  model's parameters and buffers are on a real device.
"""

from __future__ import annotations

import warnings
from typing import Iterator, Tuple

__all__ = ["checked_model", "unwrap_compiled", "validate_inputs"]


def unwrap_compiled(model, what: str):
    """``model``, or the module a ``torch.compile`` wrapper holds (its
    ``_orig_mod``) with a warning that ``what`` acts on that module."""
    inner = getattr(model, "_orig_mod", None)
    if inner is None or type(model).__name__ != "OptimizedModule":
        return model
    then = ("corrects it in place and returns it: torch.compile the returned module again to run it compiled"
            if what == "correct" else "runs its forward uncompiled")
    warnings.warn(f"dropmc {what}: the model is a torch.compile wrapper; {what} acts on its original module "
                  f"(model._orig_mod) and {then}", stacklevel=3)
    return inner


def _tensors(value, name: str) -> Iterator[Tuple[str, object]]:
    import torch

    if isinstance(value, torch.Tensor):
        yield name, value
    elif isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            yield from _tensors(item, f"{name}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _tensors(item, f"{name}[{key!r}]")


def _check_tensor(name: str, t, masks_allowed: bool) -> None:
    import torch

    if t.device.type == "meta":
        raise ValueError(f"{name} is on the meta device (a shape without values): move it to a real device "
                         "(cpu or cuda) first")
    if t.is_complex():
        raise TypeError(f"{name} has the complex dtype {t.dtype}: dropmc audits real activations")
    if t.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(t.shape)}): the forward needs at least one token")
    if t.is_floating_point():
        x = t.detach()
        bad = torch.isnan(x) | (x == float("inf")) if masks_allowed else ~torch.isfinite(x)
        if bool(bad.any()):
            kind = "NaN" if bool(torch.isnan(x).any()) else "infinity"
            raise ValueError(f"{name}: {kind}, {int(bad.sum())} non-finite value(s) of {t.numel()}: the sites "
                             "and their values are read from a forward on these inputs; give finite inputs")


def validate_inputs(model, args: tuple, kwargs: dict) -> None:
    """Checks ``model``'s parameters and buffers and the forward's inputs
    (module docs); a ValueError or TypeError naming the argument
    (``inputs[0]``, ``inputs['attention_mask']``) or the parameter."""
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if t.device.type == "meta":
            raise ValueError(f"model's {name!r} is on the meta device (a shape without values): load the "
                             "weights onto a real device (cpu or cuda) before auditing or correcting")
    for i, arg in enumerate(args):
        for name, t in _tensors(arg, f"inputs[{i}]" if len(args) > 1 else "inputs"):
            _check_tensor(name, t, masks_allowed=i > 0)
    for key, arg in kwargs.items():
        for name, t in _tensors(arg, f"inputs[{key!r}]"):
            _check_tensor(name, t, masks_allowed="mask" in str(key).lower())


def checked_model(model, what: str, inputs=None, kwargs=None):
    """``model`` unwrapped (:func:`unwrap_compiled`) with its parameters and
    the forward's ``inputs``/``kwargs`` (as :func:`dropmc.model.discovery.call_inputs`
    reads them) validated (:func:`validate_inputs`)."""
    from .discovery import call_inputs

    model = unwrap_compiled(model, what)
    validate_inputs(model, *call_inputs(inputs, kwargs))
    return model


def check_call(model, args: tuple, kwargs: dict) -> None:
    """A TypeError naming ``inputs`` when they cannot bind to ``model``'s
    forward signature (``audit(model)`` with no inputs for a forward that
    needs one was the forward's own "missing 1 required positional
    argument"); a forward without a readable signature passes."""
    import inspect

    try:
        signature = inspect.signature(model.forward)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"inputs do not fit {type(model).__name__}.forward{signature}: {e} "
                        f"(got {len(args)} positional and {sorted(kwargs) or 'no'} keyword inputs)") from None


def eval_forward(model, args: tuple, kwargs: dict):
    """One eval-mode forward of ``model`` on ``args``/``kwargs`` under
    ``torch.no_grad``, its training mode restored after; returns the output."""
    import torch

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return model(*args, **kwargs)
    finally:
        model.train(was_training)
