"""The network audit's table in ``str(audit)`` (:mod:`dropmc.audit.network`):
a header with the cost in forwards, one row per norm call a dropout
reaches, and the reasons a column is empty."""

from __future__ import annotations

from typing import Dict, List, Optional

__all__ = ["network_table"]

_GAPS = ("gap_plain", "gap_site", "gap_network")
_HEADER = ["network norm", "norm", "d", "tokens", "dropouts", "var ÷", "gap eval", "gap site", "gap network"]


def _cell(g) -> str:
    from .linear import _cell as engine_cell  # the engine table's "G ± SE" / "< G⁺"

    return "—" if g is None else engine_cell(g)


def _ratio(control: dict) -> str:
    r = control["variance_ratio"]
    return "—" if not control["used"] or r is None else f"{r:.1f}×"


def _tokens(row: dict) -> str:
    return str(row["tokens"]) + (f" (+{row['padded']} pad)" if row.get("padded") else "")


def network_table(rows: List[dict], forwards: int, reasons: Dict[str, str], norm_calls: int,
                  uncovered: Optional[Dict[str, str]] = None) -> str:
    """``network: N norms, F train-mode forwards`` and the rows' gaps to
    the network truth (``—``: a column not computed, its reason below;
    ``var ÷``: the control variate's variance reduction per draw, ``—``
    when it was not used (plain Monte Carlo) or not yet measured (the
    first batch only); a bounded gap's ``< G⁺`` explained under the table; padded tokens, left out of a
    row, counted after its tokens), then each norm call not audited
    (``uncovered``) with its reason."""
    tail = [f"not audited: {call}: {why}" for call, why in (uncovered or {}).items()]
    quiet = norm_calls - len(rows)
    head = (f"network: {len(rows)} norms, {forwards} train-mode forwards (truth: E[norm output] with every dropout "
            f"on" + (f"; {quiet} of {norm_calls} norm calls reached by no dropout, not listed)" if quiet else ")"))
    if not rows:
        return "\n".join([head] + tail)
    cells = [[r["norm"], "LayerNorm" if r["kind"] == "layer" else "RMSNorm", str(r["d"]), _tokens(r),
              str(len(r["dropouts"])), _ratio(r["control"])] + [_cell(r[c]) for c in _GAPS] for r in rows]
    widths = [max(len(c[i]) for c in cells + [_HEADER]) for i in range(len(_HEADER))]
    lines = [head] + ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in [_HEADER] + cells]
    bounded = sum(r[c] is not None and not r[c]["resolved"] for r in rows for c in _GAPS)
    if bounded:
        lines.append(f"{bounded} gap(s) bounded, not resolved: '< G⁺' means the gap is below G⁺ (a gap this small "
                     f"is within the truth's noise after {forwards} forwards; it may be near zero)")
    lines += [f"{column}: {why}" for column, why in reasons.items()] + tail
    return "\n".join(lines)
