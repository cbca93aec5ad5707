"""The result of :func:`dropmc.assess.assess`: ``print(result)`` (one
table), ``result.plot(path)`` (Δ per variant with its simultaneous
interval) and ``result.to_dict()`` (JSON-able)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from .stats import SCREEN_LEVEL, suite_power, t_quantile

__all__ = ["Assessment", "site_name"]


def site_name(site: tuple) -> str:
    """A site tuple as ``correct`` prints it: ``"dropout->norm"``."""
    return "->".join(site)


def _num(x: Optional[float]) -> str:
    return "" if x is None else f"{x:+.3g}"


def _z(test: dict) -> str:
    return "exact" if test["t"] is None else f"{test['t']:+.1f}"


class Assessment:
    """What correcting does to a metric (:func:`dropmc.assess.assess`).

    ``rows``: per variant ``{"label", "kind", "sites", "all", "a", "b",
    "verdict", "p_holm", "verdict_a"?}`` with each test ``{"n", "delta",
    "se", "t", "p", "mde"}`` (``t`` None when ``se`` is 0 and ``delta``
    not); ``recommended``: the sites to correct (``correct(model, inputs,
    sites=result.recommended)``), the ``chosen`` set when its test on half
    B (``confirmation``) says "better", else ``[]``; ``forwards``: metric
    forwards (variants × batches), ``model_forwards`` every forward of the
    model during the call."""

    def __init__(self, *, rows: List[dict], sites: List[tuple], chosen: List[tuple],
                 confirmation: Optional[dict], alpha: float, units: int, halves: Tuple[int, int],
                 batches: int, forwards: int, model_forwards: int, seconds: float, notes: List[str],
                 seed: int) -> None:
        self.rows, self.sites, self.chosen, self.confirmation = rows, sites, chosen, confirmation
        self.alpha, self.units, self.halves, self.batches = alpha, units, halves, batches
        self.forwards, self.model_forwards, self.seconds = forwards, model_forwards, seconds
        self.notes, self.seed = notes, seed

    @property
    def recommended(self) -> List[tuple]:
        confirmed = self.confirmation is not None and self.confirmation["verdict"] == "better"
        return list(self.chosen) if confirmed else []

    def row(self, label: str) -> dict:
        """The row of a variant by its label (``"corrected"``, ``"a->b alone"``, ``"all but a->b"``)."""
        for r in self.rows:
            if r["label"] == label:
                return r
        raise KeyError(f"no row {label!r}; rows: {[r['label'] for r in self.rows]}")

    def to_dict(self) -> Dict[str, Any]:
        return {"alpha": self.alpha, "units": self.units, "halves": list(self.halves), "seed": self.seed,
                "batches": self.batches, "forwards": self.forwards, "model_forwards": self.model_forwards,
                "seconds": self.seconds, "sites": [site_name(s) for s in self.sites], "rows": self.rows,
                "chosen": [site_name(s) for s in self.chosen], "confirmation": self.confirmation,
                "recommended": [site_name(s) for s in self.recommended], "notes": list(self.notes),
                "screen_level": SCREEN_LEVEL,
                "test": "paired, Student t with n-1 df, two-sided; Holm over the rows on all units at alpha; "
                        "each site alone screened on half A at screen_level (the choice); the chosen set "
                        "tested once on half B at alpha (the claim)"}

    def _short(self, row: dict) -> str:
        """A row's label with its sites as ``[k]``, the legend's numbers."""
        number = {site_name(s): k + 1 for k, s in enumerate(self.sites)}
        if row["kind"] == "alone":
            return f"[{number[row['sites'][0]]}] alone"
        if row["kind"] == "all but":
            left = [number[site_name(s)] for s in self.sites if site_name(s) not in row["sites"]]
            return f"all but [{left[0]}]"
        return row["label"]

    def __str__(self) -> str:
        labels = [self._short(r) for r in self.rows]
        width = max([len(x) for x in labels] + [8])
        head = (f"{'variant':<{width}} {'Δ':>10} {'SE':>9} {'z':>6} {'p (Holm)':>9} {'verdict':>9} {'MDE':>9}"
                f"  | {'A: Δ':>10} {'z':>6} {'choice':>9}  | {'B: Δ':>10} {'z':>6}")
        lines = [f"assess: {self.units} units in {self.batches} batches, halves A {self.halves[0]} / B "
                 f"{self.halves[1]} (seed {self.seed}); Δ = metric(variant) − metric(plain) per unit, "
                 "lower is better", head, "-" * len(head)]
        for label, r in zip(labels, self.rows):
            a, b, t = r["a"], r["b"], r["all"]
            lines.append(f"{label:<{width}} {_num(t['delta']):>10} {t['se']:>9.3g} {_z(t):>6} "
                         f"{r['p_holm']:>9.2g} {r['verdict']:>9} {t['mde']:>9.3g}  | {_num(a['delta']):>10} "
                         f"{_z(a):>6} {r.get('verdict_a', ''):>9}  | {_num(b['delta']):>10} {_z(b):>6}")
        lines.append("-" * len(head))
        lines += [f"[{k + 1}] {site_name(s)}" for k, s in enumerate(self.sites)]
        lines.append(f"verdicts at family level α = {self.alpha:.3g}, Holm over the {len(self.rows)} rows "
                     "(all units); paired Student t, n − 1 df; MDE at power "
                     f"{suite_power():.2f} and α / rows; choice: each site alone on half A at two-sided "
                     f"{SCREEN_LEVEL:g} (a screen, not a claim); the claim: the chosen set on half B at α")
        lines.append(self._recommendation())
        lines.append(f"cost: {self.forwards} metric forwards (distinct variants × {self.batches} batches), "
                     f"{self.model_forwards} model forwards in all (with correct's discovery and rehearsal), "
                     f"{self.seconds:.1f} s")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def _recommendation(self) -> str:
        if not self.chosen:
            return "recommended: [] (no site is better alone on half A: leave the model uncorrected)"
        c = self.confirmation
        names = ", ".join(f"[{self.sites.index(s) + 1}]" for s in self.chosen)
        return (f"chosen on half A: {names}; on half B: Δ {_num(c['delta'])} ± {c['se']:.3g}, z {_z(c)}, "
                f"p {c['p']:.2g}, {c['verdict']} at α → recommended: "
                f"{names if self.recommended else '[] (not confirmed)'}")

    def __repr__(self) -> str:
        return f"<Assessment: {len(self.rows)} variants, {self.units} units, recommended {self.recommended}>"

    def plot(self, path: str) -> None:
        """Δ per variant on all units with its simultaneous interval
        (``± t_{1 − α/(2m)} SE``, m the rows: Bonferroni, the width Holm's
        first step uses), saved to ``path`` (needs matplotlib)."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as e:  # pragma: no cover
            raise ImportError("Assessment.plot needs matplotlib") from e
        m = len(self.rows)
        fig, ax = plt.subplots(figsize=(7, 0.35 * m + 1.5))
        for i, r in enumerate(self.rows):
            t = r["all"]
            half = t_quantile(1 - self.alpha / (2 * m), t["n"] - 1) * t["se"]
            colour = {"better": "tab:green", "worse": "tab:red"}.get(r["verdict"], "tab:gray")
            ax.errorbar(t["delta"], -i, xerr=half, fmt="o", color=colour, capsize=3)
        ax.axvline(0.0, color="black", lw=0.8)
        ax.set_yticks([-i for i in range(m)])
        ax.set_yticklabels([self._short(r) for r in self.rows], fontsize=8)
        ax.set_title("; ".join(f"[{k + 1}] {site_name(s)}" for k, s in enumerate(self.sites)), fontsize=6, wrap=True)
        ax.set_xlabel(f"Δ metric vs plain (lower is better), ± simultaneous interval at α = {self.alpha:.2g}")
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
