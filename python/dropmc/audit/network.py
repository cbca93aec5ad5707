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
the SEs need it). From the second batch on, each norm's estimate carries a
control variate (:mod:`dropmc.audit.network_cv`: its first-order response to the
injections ``drop(a) − a`` of the residual-stream dropouts reaching it,
mean exactly zero, coefficients fitted on earlier batches only, used only
when it lowers the measured variance): unbiased, with the residuals'
``sd/√N`` as its SE, and nearly free (the injections come from the same
forwards). ``control=False``: plain Monte Carlo.

Padding: when the forward has an ``attention_mask`` (``decoder_attention_mask``
under a ``decoder`` module) with one entry per row of a norm's input, the
padded rows are left out of that norm's truth and gaps and counted in its
row (``padded``), as the per-site audit leaves them out.

Not covered (listed): functional norm calls (``F.layer_norm``,
``F.rms_norm``, ``F.group_norm`` outside a norm module; the tally hooks
norm modules) that a dropout reaches are listed in
``audit.network_uncovered`` and under the table with that reason; an
RMSNorm written as raw ops outside any module is not recognised as a norm
at all (no row, no listing). Forwards whose norm calls change from draw
to draw (LayerDrop, drop-path skipping a layer): a ValueError naming the
norm call that did not run.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Dict, List, Optional

import numpy as _np

from ..model.calls import call_name, module_of

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


def reached_norms(model, args, kwargs, found, functional: Optional[Dict[str, str]] = None) -> List[dict]:
    """``[{"norm": call, "module": name, "kind", "dropouts": [calls]}]``:
    the norm calls (discovery's recognised norms, ``found``) whose input
    depends on a dropout call with ``p > 0``, in forward order, from the
    dependencies of one neutral traced forward (an ``nn.MultiheadAttention``
    with ``dropout > 0`` counts as a dropout call of its own name: its
    output is tagged with it). ``functional`` (a dict) receives the
    functional norm calls outside a norm module (:data:`dropmc.audit.network_scope.FUNCTIONAL_NORMS`)
    that a dropout reaches, each with the reason it has no row."""
    from ..model.discovery import Trace, run_neutral
    from .network_scope import FunctionalNorms

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
    seen: Dict[str, frozenset] = {}
    try:
        run_neutral(model, trace, args, kwargs, training=True, norm_modules=set(found.norm_modules.values()),
                    inner=FunctionalNorms(trace, set(found.norm_modules.values()), seen))
    finally:
        for h in handles:
            h.remove()
    rates = {**_rates(trace), **{n: float(m.dropout) for n, m in mha.items()}}
    for call, deps in seen.items():
        live = [d for d in deps if rates.get(d, 0.0) > 0]
        if live and functional is not None:
            functional[call] = (f"a functional norm call outside a norm module, reached by {len(live)} dropout "
                                "call(s): the network audit reads norm modules' outputs (forward hooks)")
    out = []
    for call, name, _, deps, _ in trace.norm_calls:
        live = sorted(d for d in deps if rates.get(d, 0.0) > 0)
        if call in found.norms and live:
            out.append({"norm": call, "module": name, "kind": found.norms[call].kind, "dropouts": live,
                        "injections": {k: trace.dropout_shape.get(k) for k in live if k in trace.dropout_module}})
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
    """Per norm call, the controlled sums (:class:`dropmc.audit.network_cv.ControlVariate`)
    of its output ``y − ref`` (tokens × d, float64, on the model's device)
    over train-mode forwards; ``ref`` is the eval output (centring keeps the
    variance's cancellation small). Forward hooks on the norm modules name
    each call as discovery does (``name``, ``name#1``, …); forward hooks on
    the dropout modules of ``plan`` (``{norm call: [dropout calls]}``) keep
    each forward's injections ``drop(a) − a``, the regressors' raw matter
    (``jacobians``: ``{norm call: J}``, :func:`dropmc.audit.network_cv.eval_jacobians`)."""

    def __init__(self, model, refs: Dict[str, "object"], plan=None, jacobians=None):
        from .network_cv import ControlVariate

        plan = {c: (plan or {}).get(c, []) if c in (jacobians or {}) else [] for c in refs}
        self.refs, self.plan, self.jacobians = refs, plan, jacobians or {}
        self.cv = {c: ControlVariate(r, len(plan[c]), BATCH, self.jacobians.get(c)) for c, r in refs.items()}
        self.n = 0
        self._model = model
        self._modules = {module_of(c) for c in refs}
        self._dropouts = {module_of(k) for ks in plan.values() for k in ks}
        self._wanted = {k for ks in plan.values() for k in ks}
        self._counts: Dict[str, int] = {}
        self._seen: set = set()
        self._injections: Dict[str, object] = {}

    def _call(self, name):
        k = self._counts.get(name, 0)
        self._counts[name] = k + 1
        return call_name(name, k)

    def _hook(self, name):
        def hook(module, args, out):
            call = self._call(name)
            ref = self.refs.get(call)
            if ref is None:
                return
            y = out.detach().to(ref.dtype).reshape(ref.shape) - ref
            ns = []
            for k in self.plan[call]:  # a dropout that did not run this draw: a zero regressor (mean 0)
                n = self._injections.get(k)
                ns.append(n.reshape(ref.shape) if n is not None else ref.new_zeros(ref.shape))
            self.cv[call].add(y, ns)
            self._seen.add(call)

        return hook

    def _dropout_hook(self, name):
        import torch

        from . import network_cv

        def hook(module, args, out):
            call = self._call("dropout:" + name)[len("dropout:"):]
            if call in self._wanted and args and isinstance(args[0], torch.Tensor) and isinstance(out, torch.Tensor):
                self._injections[call] = network_cv.injection(args[0], out)

        return hook

    def forward(self, args, kwargs) -> None:
        """One train-mode forward (the caller sets the modes) added to the sums."""
        import torch

        self._counts, self._seen, self._injections = {}, set(), {}
        modules = dict(self._model.named_modules())
        handles = [modules[n].register_forward_hook(self._hook(n)) for n in self._modules]
        handles += [modules[n].register_forward_hook(self._dropout_hook(n)) for n in self._dropouts]
        try:
            with torch.no_grad():
                self._model(*args, **kwargs)
        finally:
            for h in handles:
                h.remove()
        self._injections = {}
        missing = [c for c in self.refs if c not in self._seen]
        if missing:
            raise ValueError(f"norm call {missing[0]!r} did not run in a train-mode forward (a layer skipped "
                             "by LayerDrop / drop-path): the network audit needs the same norm calls every draw")
        self.n += 1
        if self.n % BATCH == 0:
            for cv in self.cv.values():
                cv.refit()

    def truth(self, call: str):
        """``(T̂, SE)`` of ``call`` (controlled: :mod:`dropmc.audit.network_cv`),
        numpy float64, tokens × d."""
        mean, se = self.cv[call].truth(self.refs[call])
        return mean.cpu().numpy(), se.cpu().numpy()


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


def _rows(norms, tally, estimates, keep) -> List[dict]:
    rows = []
    for s in norms:
        call, kept = s["norm"], keep[s["norm"]]
        truth, se = tally.truth(call)
        padded = 0 if kept is None else int((~kept).sum())
        if kept is not None:
            truth, se = truth[kept], se[kept]
        cv = tally.cv[call]
        row = dict({k: v for k, v in s.items() if k != "injections"}, d=int(truth.shape[1]),
                   tokens=int(truth.shape[0]), padded=padded, forwards=tally.n,
                   control={"regressors": cv.k, "used": cv.active, "variance_ratio": cv.variance_ratio(),
                            "se_ratio": cv.se_ratio()})
        for column, outs in zip(_COLUMNS, estimates):
            est = None if outs is None else outs[call] if kept is None else outs[call][kept]
            row[column] = None if est is None else _gap(truth, se, est)
        rows.append(row)
    return rows


def _all_resolved(rows) -> bool:
    return all(r[c]["resolved"] for r in rows for c in _COLUMNS if r[c] is not None)


def _say(show: bool, text: str, end: str = "") -> None:
    if show:
        print(f"\rdropmc audit: network truth, {text}", end=end, file=sys.stderr, flush=True)


def run_network(model, args, kwargs, norms_reached, *, forwards: int, seed: int, seconds, show: bool,
                norms=None, adaptive: bool = True, control: bool = True):
    """``(rows, truths, reasons)``: the network audit of the norm calls
    ``norms_reached`` (:func:`reached_norms`) — ``truths[i]`` the
    ``(T̂, SE)`` of row ``i``, ``reasons`` why a column is None (module
    docs; ``adaptive=False``: no early stop, all ``forwards`` run unless
    the time is up; ``control=False``: plain Monte Carlo, no control
    variate). The model's modes and torch's global RNG are as they were on
    exit, also on KeyboardInterrupt (Ctrl-C stops between forwards)."""
    import torch

    from .network_scope import kept_rows

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
        keep = kept_rows(norms_reached, kwargs, refs)
        plan = jacobians = None
        if control:
            from .network_cv import eval_jacobians, injection_plan

            model.eval()
            jacobians = eval_jacobians(model, args, kwargs, norms_reached)
            plan = injection_plan(norms_reached, {c: tuple(r.shape) for c, r in refs.items()})
        tally = NetworkTally(model, refs, plan, jacobians)
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
                rows = _rows(norms_reached, tally, estimates, keep)
                done = sum(r[c]["resolved"] for r in rows for c in _COLUMNS if r[c] is not None)
                total = sum(r[c] is not None for r in rows for c in _COLUMNS)
                _say(show, f"{tally.n}/{forwards} train-mode forwards, {done}/{total} gaps resolved, "
                           f"{time.perf_counter() - start:.0f} s")
                if late or (adaptive and _all_resolved(rows)):
                    break
        _say(show, f"{tally.n} train-mode forwards in {time.perf_counter() - start:.1f} s", end="\n")
    truths = [tuple(a if keep[c] is None else a[keep[c]] for a in tally.truth(c)) for c in calls]
    return rows, truths, reasons


def _check(forwards, seed) -> None:
    if isinstance(forwards, bool) or not isinstance(forwards, int) or forwards < BATCH:
        raise ValueError(f"forwards must be an int of at least {BATCH} (train-mode forwards), got {forwards!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")


def add_network_sites(audit, model, args, kwargs, found, *, seed: int = 0, forwards: int = NETWORK_FORWARDS,
                      time_budget=None, progress=False, norms=None, adaptive: bool = True,
                      control: bool = True) -> None:
    """Runs the network audit and gives ``audit`` its rows
    (``audit.network_sites``), truths (``audit.network_truth(i)``), the
    forwards spent (``audit.network_forwards``), the norm calls it could
    not audit (``audit.network_uncovered``: ``{call: reason}``) and table."""
    from .network_report import network_table

    _check(forwards, seed)
    uncovered: Dict[str, str] = {}
    reached = reached_norms(model, args, kwargs, found, functional=uncovered)
    if reached:
        rows, truths, reasons = run_network(model, args, kwargs, reached, forwards=forwards, seed=seed,
                                            seconds=time_budget, show=progress, norms=norms, adaptive=adaptive,
                                            control=control)
    else:
        rows, truths, reasons = [], [], {}
    audit.network_sites, audit.network_truths, audit.network_uncovered = rows, truths, uncovered
    audit.network_forwards = rows[0]["forwards"] if rows else 0
    audit.network_table = network_table(rows, audit.network_forwards, reasons, len(found.norms), uncovered)


def audit_network(model, inputs=None, *, seed: int = 0, forwards: int = NETWORK_FORWARDS, time_budget=None,
                  progress=None, norms=None, adaptive: bool = True, control: bool = True, **kwargs):
    """The network audit alone (no per-site audit): an
    :class:`~dropmc.audit.report.Audit` whose only rows are
    ``network_sites`` (module docs; arguments as :func:`dropmc.audit.audit_torch`;
    ``forwards`` at most that many train-mode forwards, all of them when
    ``adaptive=False``; ``control=False``: plain Monte Carlo)."""
    import torch.nn as nn

    from .budget import seconds_of as _seconds
    from .budget import show_progress as _show_progress
    from .report import Audit
    from ..model.discovery import call_inputs, discover

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    _check(forwards, seed)
    for name, flag in (("adaptive", adaptive), ("control", control)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")
    seconds, show = _seconds(time_budget), _show_progress(progress)
    args, kw = call_inputs(inputs, kwargs)
    found = discover(model, *args, norms=norms, **kw)
    audit = Audit("", "[]", [], [])
    audit.discovery = found
    add_network_sites(audit, model, args, kw, found, seed=seed, forwards=forwards, time_budget=seconds,
                      progress=show, norms=norms, adaptive=adaptive, control=control)
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
