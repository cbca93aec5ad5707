"""The :class:`Audit` result: the engine's tables, the sites listed
without numbers, the coverage line, JSON, truths, figure and ``.npz``."""

from __future__ import annotations

import json as _json
from typing import List, Optional, Sequence, Tuple

import numpy as _np

from .npz import save_captures
from .coverage import collapse_warnings, summary_line

__all__ = ["Audit"]


class Audit:
    """The audit of a model's sites: ``str(audit)`` is the table,
    ``audit.sites`` the per-site data (a list of dicts), ``audit.to_json()``
    the same as JSON, ``audit.truth(i)`` site ``i``'s per-token truth and its
    standard errors, ``audit.plot(path)`` one figure, ``audit.save(path)``
    the captured activations as an ``.npz`` for ``dropmc audit``.
    ``audit.attention_sites`` holds the attention sites' data (a second
    table in ``str(audit)``, the key ``attention_sites`` of ``to_json()``)
    and ``audit.attention_moments(i)`` site ``i``'s exact ``E[out]`` and
    ``Var(out)``."""

    def __init__(self, table: str, json_text: str, truths, captures, attention=None,
                 attention_captures: Sequence[dict] = ()):
        self._attention_captures = list(attention_captures)
        self._table = table
        self.sites: List[dict] = _json.loads(json_text)
        self._truths = truths
        self._captures = captures
        a_table, a_json, self._moments = attention if attention is not None else ("", "[]", [])
        self._attention_table = a_table
        self.attention_sites: List[dict] = _json.loads(a_json)
        #: Sites listed without numbers: entangled ones (the bypass depends
        #: on the same mask) and those whose dropout has p = 0, each
        #: ``{"name", "form", "p", "reason"}``.
        self.other_sites: List[dict] = []
        #: ``{"audited": n, "total": N}``: tokens per norm site (padded ones
        #: left out when the forward was given an ``attention_mask``).
        self.tokens: Optional[dict] = None
        #: The :class:`dropmc.model.discovery.Discovery` the sites came from.
        self.discovery = None
        #: ``{"calls", "audited", "listed", "reasons": {kind: count}}``:
        #: every dropout call of the forward, audited or listed
        #: (:mod:`dropmc.audit.coverage`); None for an audit of captures. With
        #: ``"paths_not_sampled"`` when audited attention calls' paths on to
        #: a norm (the linear-path family) were found but not sampled.
        self.coverage: Optional[dict] = None
        #: Random draws discovery held at their likely side (LayerDrop,
        #: drop-path, rand masks): ``(draw, p, what)``.
        self.draws: List[tuple] = []
        #: Linear-path sites (:mod:`dropmc.audit.linear`): their rows, their
        #: truths ``(tokens × d, SE)`` and their table under the engine's.
        self.linear_sites: List[dict] = []
        self.linear_truths: list = []
        self.linear_table = ""
        #: Network mode (``network=True``, :mod:`dropmc.audit.network`): one
        #: row per norm call a dropout reaches, gaps to the every-dropout truth.
        self.network_sites: List[dict] = []
        self.network_truths: list = []
        self.network_uncovered: dict = {}
        self.network_forwards = 0
        self.network_table = ""

    def _other_table(self) -> str:
        if not self.other_sites:
            return ""
        width = max([len("listed without numbers")] + [len(o["name"]) for o in self.other_sites])
        lines = [f"{'listed without numbers':<{width}}  form       p    reason"]
        lines += [f"{o['name']:<{width}}  {o['form']:<9}  {o['p']:<4g} {o['reason']}" for o in self.other_sites]
        return "\n".join(lines)

    def _head_lines(self) -> str:
        out = []
        if self.coverage is not None:
            out.append(summary_line(self.coverage))
        masked = [s for s in self.sites if s.get("mask")]
        if masked:
            out.append(f"{len(masked)} sites are mask products (mask shared along an axis: the tokens "
                       f"along it are correlated), e.g. {masked[0]['name']}: {masked[0]['mask_sharing']}")
        decisions = [d for d in self.draws if d[2] != "a mask"]
        if decisions:
            out.append(f"discovery held {len(decisions)} random draws at their likely side (stochastic depth: "
                       "LayerDrop / drop-path keep every layer); the sites do not depend on the RNG")
        return "\n".join(out)

    def _token_line(self) -> str:
        t = self.tokens
        if not t or t["audited"] == t["total"]:
            return ""
        return (f"tokens audited per site: {t['audited']} of {t['total']} "
                f"({t['total'] - t['audited']} padded tokens left out by the attention_mask)")

    def __str__(self) -> str:
        names = [s["name"] for s in self.sites] + [s["name"] for s in self.attention_sites]
        parts = (self._head_lines(), self._token_line(), collapse_warnings(self._table, names),
                 self.linear_table, collapse_warnings(self._attention_table, names), self._other_table(),
                 self.network_table)
        return "\n".join(t for t in parts if t)

    def engine_text(self) -> str:
        """The engine's tables as ``dropmc audit --activations`` prints them
        (no coverage line, warnings not collapsed, no listed rows)."""
        return "\n".join(t for t in (self._token_line(), self._table, self._attention_table) if t)

    def __repr__(self) -> str:
        return (f"<dropmc.Audit of {len(self.sites)} sites and {len(self.attention_sites)} "
                f"attention sites>\n{self}")

    def to_json(self) -> str:
        """``{"sites": [...], "attention_sites": [...]}``, plus
        ``other_sites`` when some site is listed without numbers and
        ``tokens`` when padded tokens were left out, ``coverage`` (the
        dropout calls audited and listed) for an audit of a model (before attention sites
        the JSON was the bare ``sites`` array; docs/audit.md)."""
        out = {"sites": self.sites, "attention_sites": self.attention_sites}
        if self.other_sites:  # entangled and p = 0 sites (no numbers)
            out["other_sites"] = self.other_sites
        if self._token_line():  # padded tokens were left out
            out["tokens"] = self.tokens
        if self.coverage is not None:
            out["coverage"] = self.coverage
        if self.network_table:
            out["network_sites"] = self.network_sites
        return _json.dumps(out, indent=2)

    def attention_moments(self, i: int) -> Tuple[_np.ndarray, _np.ndarray]:
        """Attention site ``i``'s ``E[out]`` (the eval output) and
        ``Var(out)`` under its dropout, each ``(batch · queries, embed)``."""
        e = self.attention_sites[i]["embed"]
        mean, var = self._moments[i]
        return _np.asarray(mean).reshape(-1, e), _np.asarray(var).reshape(-1, e)

    def truth(self, i: int) -> Tuple[_np.ndarray, _np.ndarray]:
        """Site ``i``'s ``E[norm]`` and its SE, each of shape ``(tokens, d)``:
        one row per token of the site when every token was audited, else one
        per sampled token, in the order of :meth:`token_indices`."""
        d = self.sites[i]["d"]
        e, se = self._truths[i]
        return _np.asarray(e).reshape(-1, d), _np.asarray(se).reshape(-1, d)

    def network_truth(self, i: int) -> Tuple[_np.ndarray, _np.ndarray]:
        """Network row ``i``'s truth ``E[norm output]`` over every mask of
        the forward and its SE, each tokens × d (:mod:`dropmc.audit.network`)."""
        return self.network_truths[i]

    def token_indices(self, i: int) -> _np.ndarray:
        """The indices, among site ``i``'s tokens (flattened over the batch,
        padded ones left out), of the rows of :meth:`truth`: every token when
        none was sampled."""
        s = self.sites[i]
        return _np.asarray(s.get("token_indices", range(s["tokens_total"])), dtype=_np.int64)

    def save(self, path: str) -> None:
        """The captures (norm and attention sites) as an ``.npz`` that
        ``dropmc audit --activations`` reads."""
        save_captures(path, self._captures, self._attention_captures)

    def plot(self, path: str) -> None:
        """One figure: per site, the RMS gap uncorrected, first and second
        order (log scale; an unresolved gap is drawn at its upper bound,
        hollow). Needs matplotlib."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as e:  # pragma: no cover
            raise ImportError("Audit.plot needs matplotlib (pip install matplotlib)") from e
        names = [_short_label(s["name"]) for s in self.sites]
        xs = _np.arange(len(names))
        longest = max((len(n) for n in names), default=0)
        fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(names) + 2), 3 + 0.065 * longest))
        labelled = set()
        for off, key, label in [(-0.2, "uncorrected", "eval (uncorrected)"),
                                (0.0, "first_order", "first order"),
                                (0.2, "second_order", "second order")]:
            for i, s in enumerate(self.sites):
                g = s[key]
                if g is None:  # no second-order closed form (a compound site)
                    continue
                y = g["rms"] if g["resolved"] else g["upper"]
                ax.bar(xs[i] + off, y, width=0.2, color=f"C{int(off * 5 + 1)}",
                       fill=g["resolved"], edgecolor=f"C{int(off * 5 + 1)}",
                       label=None if label in labelled else label)
                labelled.add(label)
        ax.set_yscale("log")
        ax.set_xticks(xs)
        ax.set_xticklabels(names, rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("RMS gap to E[norm(h + dropout(v))]")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)


def _short_label(name: str) -> str:
    """A site's name for a figure's axis: the norm's dotted path after the
    part it shares with the dropout's (``a.b.dropout->a.b.LayerNorm`` is
    ``a.b.dropout->…LayerNorm``)."""
    parts = name.split("->")
    if len(parts) < 2:
        return name
    first = parts[0].split(".")
    rest = []
    for p in parts[1:]:
        q = p.split(".")
        k = 0
        while k < min(len(first), len(q)) - 1 and first[k] == q[k]:
            k += 1
        rest.append(("…" if k else "") + ".".join(q[k:]))
    return "->".join([parts[0]] + rest)
