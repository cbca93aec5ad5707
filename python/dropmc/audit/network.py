"""The network mode of the audit: ``dropmc.torch.audit(model, inputs,
network=True)`` (:func:`audit`; docs/audit.md, "Network mode"; issue 49).

The per-site audit asks, at each norm, what its own dropout does with
everything upstream of that dropout held fixed. In training every dropout
of the forward is on at once, and in a residual stack the noise each one
injects stays in the stream and reaches every later norm. The *network
truth* of a norm call is the expectation of its output over every mask of
the forward,

```text
T = E_masks[norm output]      (the model's own train-mode forward, every dropout on)
```

estimated per token and unit by the mean of ``N`` train-mode forwards of
the model itself (in torch, on the model's device, masks from torch's
generator seeded with ``seed``; BatchNorm layers held in eval mode, as
discovery's neutral forward holds them, so no buffer moves), with the
per-element standard error ``SE = sd / √N`` of those ``N`` outputs.

Estimates compared with it, each from one eval forward:

* ``gap_plain``: the model's eval output as it is (a corrected model's
  corrected output),
* ``gap_site``: the output of ``dropmc.torch.correct`` with per-site scope
  (``scope="site"`` when ``correct`` takes a ``scope``, else its default),
* ``gap_network``: the output of ``correct(..., scope="network")`` when
  ``correct`` takes that scope, else ``None``.

Each gap is the engine's (``dropmc._dropmc.gap_to_truth``, src/audit/gap.rs):
``G² = mean_t mean_k [(T̂ − P)² − SE²]`` (``E[(T̂ − P)²] = (T − P)² + SE²``:
subtracting ``SE²`` removes the bias the Monte Carlo noise adds to the
squared gap), its standard error from the spread over tokens, *resolved*
when ``G² > 3 SE(G²)`` and else reported as the bound ``G < G⁺``.

Which norms: every call of a norm module (recognised by
:func:`dropmc.model.norms.recognize_norm` via discovery) whose input depends on a
dropout call with ``p > 0`` (the data-flow dependencies of a
:class:`dropmc.model.trace.Trace` forward; an ``nn.MultiheadAttention`` with
``dropout > 0`` counts as one): a norm no dropout reaches has ``T`` equal
to its eval output when dropout is the model's only train/eval difference,
and is not listed.

Budget: the loop runs batches of :data:`BATCH` forwards and stops once
every gap of every norm is resolved, at ``forwards`` (default
:data:`NETWORK_FORWARDS`) or when ``time_budget`` ends (checked after
every forward once the first batch is done; the first batch always runs,
the SEs need it). No control variate was tried: plain Monte Carlo resolves
every eval gap of BERT-base in its first batch (docs/audit.md), and a
first-order linear response (one jvp per draw) would add at least a
forward's cost per draw.

Not covered (named): functional norm calls (``F.layer_norm`` outside a
norm module: discovery reads norms as modules), padding (every token
counts, padded ones too), and forwards whose norm
calls change from draw to draw (LayerDrop, drop-path skipping a layer): a
ValueError naming the norm call that did not run.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Dict, List, Optional

import numpy as _np

__all__ = ["NETWORK_FORWARDS", "BATCH", "reached_norms", "NetworkTally", "add_network_sites", "audit_network", "audit"]

#: Train-mode forwards the network truth uses at most by default (issue 49:
#: every plain gap of BERT-base 1 × 128 resolved within this many).
NETWORK_FORWARDS = 128

#: Forwards between two checks of the stop rule; the first batch always runs
#: (per-element SEs from fewer draws would be too rough for the ``SE²``
#: subtraction to be trusted per token).
BATCH = 16

_COLUMNS = ("gap_plain", "gap_site", "gap_network")


def _rates(trace) -> Dict[str, float]:
    return {**trace.dropout_p, **trace.sdpa_p}


def reached_norms(model, args, kwargs, found) -> List[dict]:
    """``[{"norm": call, "module": name, "kind", "dropouts": [calls]}]``:
    the norm calls (discovery's recognised norms, ``found``) whose input
    depends on a dropout call with ``p > 0``, in forward order, from the
    dependencies of one neutral traced forward (an ``nn.MultiheadAttention``
    with ``dropout > 0`` counts as a dropout call of its own name: its
    output is tagged with it)."""
    from ..model.discovery import Trace, run_neutral

    import torch.nn as nn

    trace = Trace(model)
    mha = {n: m for n, m in model.named_modules() if isinstance(m, nn.MultiheadAttention) and m.dropout > 0}

    def mark(name):  # its attention dropout is inside the module, not a traced call: tag its output
        def hook(module, a, out):
            t = out[0] if isinstance(out, tuple) else out
            deps, paths, origin = trace.rec(t)
            trace.tag(t, deps | {name}, paths, origin)

        return hook

    handles = [m.register_forward_hook(mark(n)) for n, m in mha.items()]
    try:
        run_neutral(model, trace, args, kwargs, training=True, norm_modules=set(found.norm_modules.values()))
    finally:
        for h in handles:
            h.remove()
    rates = {**_rates(trace), **{n: float(m.dropout) for n, m in mha.items()}}
    out = []
    for call, name, _, deps, _ in trace.norm_calls:
        live = sorted(d for d in deps if rates.get(d, 0.0) > 0)
        if call in found.norms and live:
            out.append({"norm": call, "module": name, "kind": found.norms[call].kind, "dropouts": live})
    return out


@contextlib.contextmanager
def _modes_restored(model):
    """Every module's ``training`` flag as it was on exit (also on
    KeyboardInterrupt)."""
    modes = {m: m.training for m in model.modules()}
    try:
        yield
    finally:
        for m, t in modes.items():
            m.training = t


class NetworkTally:
    """Per norm call, the running sums of ``y − ref`` and ``(y − ref)²`` of
    its output ``y`` (tokens × d, float64, on the model's device) over
    train-mode forwards; ``ref`` is the eval output (centring keeps the
    variance's cancellation small). Forward hooks on the norm modules name
    each call as discovery does (``name``, ``name#1``, …)."""

    def __init__(self, model, refs: Dict[str, "object"]):
        self.refs = refs
        self.s1 = {c: r.new_zeros(r.shape) for c, r in refs.items()}
        self.s2 = {c: r.new_zeros(r.shape) for c, r in refs.items()}
        self.n = 0
        self._model = model
        self._modules = {c.split("#")[0] for c in refs}
        self._counts: Dict[str, int] = {}
        self._seen: set = set()

    def _hook(self, name):
        def hook(module, args, out):
            k = self._counts.get(name, 0)
            self._counts[name] = k + 1
            call = name if k == 0 else f"{name}#{k}"
            ref = self.refs.get(call)
            if ref is None:
                return
            y = out.detach().to(ref.dtype).reshape(ref.shape) - ref
            self.s1[call] += y
            self.s2[call] += y * y
            self._seen.add(call)

        return hook

    def forward(self, args, kwargs) -> None:
        """One train-mode forward (the caller sets the modes) added to the sums."""
        import torch

        self._counts, self._seen = {}, set()
        modules = dict(self._model.named_modules())
        handles = [modules[n].register_forward_hook(self._hook(n)) for n in self._modules]
        try:
            with torch.no_grad():
                self._model(*args, **kwargs)
        finally:
            for h in handles:
                h.remove()
        missing = [c for c in self.refs if c not in self._seen]
        if missing:
            raise ValueError(f"norm call {missing[0]!r} did not run in a train-mode forward (a layer skipped "
                             "by LayerDrop / drop-path): the network audit needs the same norm calls every draw")
        self.n += 1

    def truth(self, call: str):
        """``(T̂, SE)`` of ``call``: numpy float64, tokens × d."""
        n = self.n
        s1, s2 = self.s1[call], self.s2[call]
        mean = self.refs[call] + s1 / n
        var = ((s2 - s1 * s1 / n) / (n - 1)).clamp_min(0.0)
        return mean.cpu().numpy(), (var / n).sqrt().cpu().numpy()


def _eval_outputs(model, args, kwargs, calls, scope: Optional[str], norms):
    """``({call: output}, None)`` of one eval forward (the model as it is
    when ``scope`` is None, else corrected with that scope for the forward
    and uncorrected after), or ``(None, reason)``."""
    from ..correct import _ATTRIBUTE, corrected, norm_outputs

    if scope is None:
        return norm_outputs(model, args, calls, **kwargs), None
    done = getattr(model, _ATTRIBUTE, None)
    if done is not None:  # docs/correct.md, "The audit of a corrected model"
        return None, (f"the model is already corrected (scope {done.scope!r}): gap eval is its corrected output's gap "
                      "to this truth")
    takes_scope = _correct_takes_scope()
    if scope == "network" and not takes_scope:
        return None, "this dropmc's correct has no network scope"
    extra = {"scope": scope} if takes_scope else {}
    try:
        with corrected(model, args, norms=norms, **extra, **kwargs) as m:
            return norm_outputs(m, args, calls, **kwargs), None
    except ValueError as e:
        return None, f"correct refused: {e}"


def _correct_takes_scope() -> bool:
    import inspect

    from ..correct import correct

    return "scope" in inspect.signature(correct).parameters


def _gap(truth, se, estimate) -> dict:
    from .. import _dropmc

    d = truth.shape[1]
    return dict(_dropmc.gap_to_truth(truth.ravel(), se.ravel(), _np.ascontiguousarray(estimate).ravel(), d))


def _rows(norms, tally, estimates) -> List[dict]:
    rows = []
    for s in norms:
        truth, se = tally.truth(s["norm"])
        row = dict(s, d=int(truth.shape[1]), tokens=int(truth.shape[0]), forwards=tally.n)
        for column, outs in zip(_COLUMNS, estimates):
            row[column] = None if outs is None else _gap(truth, se, outs[s["norm"]])
        rows.append(row)
    return rows


def _all_resolved(rows) -> bool:
    return all(r[c]["resolved"] for r in rows for c in _COLUMNS if r[c] is not None)


def _say(show: bool, text: str, end: str = "") -> None:
    if show:
        print(f"\rdropmc audit: network truth, {text}", end=end, file=sys.stderr, flush=True)


def run_network(model, args, kwargs, norms_reached, *, forwards: int, seed: int, seconds, show: bool,
                norms=None, adaptive: bool = True):
    """``(rows, truths, reasons)``: the network audit of the norm calls
    ``norms_reached`` (:func:`reached_norms`) — ``truths[i]`` the
    ``(T̂, SE)`` of row ``i``, ``reasons`` why a column is None (module
    docs; ``adaptive=False``: no early stop, all ``forwards`` run unless
    the time is up). The model's modes and torch's global RNG are as they were on
    exit, also on KeyboardInterrupt (Ctrl-C stops between forwards)."""
    import torch

    calls = [s["norm"] for s in norms_reached]
    start = time.perf_counter()
    with _modes_restored(model):
        estimates, reasons = [], {}
        for column, scope in zip(_COLUMNS, (None, "site", "network")):
            outs, why = _eval_outputs(model, args, kwargs, calls, scope, norms)
            estimates.append(outs)
            if why:
                reasons[column] = why
        refs = {c: estimates[0][c].reshape(-1, estimates[0][c].shape[-1]) for c in calls}
        estimates = [None if e is None else {c: e[c].reshape(refs[c].shape).cpu().numpy() for c in calls}
                     for e in estimates]
        tally = NetworkTally(model, refs)
        device = next(iter(refs.values())).device
        model.train(True)
        for m in model.modules():  # BatchNorm held in eval mode (discovery.run_neutral's rule)
            if isinstance(m, (torch.nn.modules.batchnorm._BatchNorm, torch.nn.modules.instancenorm._InstanceNorm)):
                m.eval()
        rows: List[dict] = []
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(seed)
            while tally.n < forwards:
                tally.forward(args, kwargs)
                late = seconds is not None and time.perf_counter() - start > seconds
                if tally.n < BATCH or (tally.n % BATCH and tally.n < forwards and not late):
                    continue  # the first batch always runs; then a check every BATCH forwards
                rows = _rows(norms_reached, tally, estimates)
                done = sum(r[c]["resolved"] for r in rows for c in _COLUMNS if r[c] is not None)
                total = sum(r[c] is not None for r in rows for c in _COLUMNS)
                _say(show, f"{tally.n}/{forwards} train-mode forwards, {done}/{total} gaps resolved, "
                           f"{time.perf_counter() - start:.0f} s")
                if late or (adaptive and _all_resolved(rows)):
                    break
        _say(show, f"{tally.n} train-mode forwards in {time.perf_counter() - start:.1f} s", end="\n")
    truths = [tally.truth(c) for c in calls]
    return rows, truths, reasons


def _check(forwards, seed) -> None:
    if isinstance(forwards, bool) or not isinstance(forwards, int) or forwards < BATCH:
        raise ValueError(f"forwards must be an int of at least {BATCH} (train-mode forwards), got {forwards!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")


def add_network_sites(audit, model, args, kwargs, found, *, seed: int = 0, forwards: int = NETWORK_FORWARDS,
                      time_budget=None, progress=False, norms=None, adaptive: bool = True) -> None:
    """Runs the network audit and gives ``audit`` its rows
    (``audit.network_sites``), truths (``audit.network_truth(i)``), the
    forwards spent (``audit.network_forwards``) and table."""
    from .network_report import network_table

    _check(forwards, seed)
    reached = reached_norms(model, args, kwargs, found)
    if reached:
        rows, truths, reasons = run_network(model, args, kwargs, reached, forwards=forwards, seed=seed,
                                            seconds=time_budget, show=progress, norms=norms, adaptive=adaptive)
    else:
        rows, truths, reasons = [], [], {}
    audit.network_sites, audit.network_truths = rows, truths
    audit.network_forwards = rows[0]["forwards"] if rows else 0
    audit.network_table = network_table(rows, audit.network_forwards, reasons, len(found.norms))


def audit_network(model, inputs=None, *, seed: int = 0, forwards: int = NETWORK_FORWARDS, time_budget=None,
                  progress=None, norms=None, adaptive: bool = True, **kwargs):
    """The network audit alone (no per-site audit): an
    :class:`~dropmc.audit.report.Audit` whose only rows are
    ``network_sites`` (module docs; arguments as :func:`dropmc.audit.audit_torch`;
    ``forwards`` at most that many train-mode forwards, all of them when
    ``adaptive=False``)."""
    import torch.nn as nn

    from .budget import seconds_of as _seconds
    from .budget import show_progress as _show_progress
    from .report import Audit
    from ..model.discovery import call_inputs, discover

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    _check(forwards, seed)
    if not isinstance(adaptive, bool):
        raise TypeError(f"adaptive must be a bool, got {type(adaptive).__name__}")
    seconds, show = _seconds(time_budget), _show_progress(progress)
    args, kw = call_inputs(inputs, kwargs)
    found = discover(model, *args, norms=norms, **kw)
    audit = Audit("", "[]", [], [])
    audit.discovery = found
    add_network_sites(audit, model, args, kw, found, seed=seed, forwards=forwards, time_budget=seconds,
                      progress=show, norms=norms, adaptive=adaptive)
    return audit


def audit(model, inputs=None, *, network: bool = False, **kwargs):
    """``dropmc.torch.audit``: :func:`dropmc.audit.audit_torch` (same
    arguments, docs/audit.md); ``network=True`` adds the network mode
    (module docs: ``audit.network_sites``, ``audit.network_truth(i)``, a
    second table), within what ``time_budget`` leaves after the per-site
    audit. (The mode lives in its own module: it runs ``dropmc.correct``,
    which the audit's layer may import, docs/architecture.md.)"""
    import inspect
    import time

    from . import audit_torch
    from .budget import budget_left as _budget_left
    from .budget import seconds_of as _seconds
    from .budget import show_progress as _show_progress
    from ..model.discovery import call_inputs

    if not isinstance(network, bool):
        raise TypeError(f"network must be a bool, got {type(network).__name__}")
    start = time.perf_counter()
    result = audit_torch(model, inputs, **kwargs)
    if network:
        options = {n for n, q in inspect.signature(audit_torch).parameters.items() if q.kind == q.KEYWORD_ONLY}
        args, kw = call_inputs(inputs, {k: v for k, v in kwargs.items() if k not in options})
        seconds = _seconds(kwargs.get("time_budget"))
        add_network_sites(result, model, args, kw, result.discovery, seed=kwargs.get("seed", 0),
                          time_budget=_budget_left(seconds, start), norms=kwargs.get("norms"),
                          progress=_show_progress(kwargs.get("progress")))
    return result
