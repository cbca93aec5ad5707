"""The network audit's table in ``str(audit)`` (:mod:`dropmc.audit.network`):
a header with the cost in forwards, one row per norm call a dropout
reaches, and the reasons a column is empty."""

from __future__ import annotations

from typing import Dict, List

__all__ = ["network_table"]

_HEADER = ["network norm", "norm", "d", "tokens", "dropouts", "gap eval", "gap site", "gap network"]


def _cell(g) -> str:
    from .linear import _cell as engine_cell  # the engine table's "G ± SE" / "< G⁺"

    return "—" if g is None else engine_cell(g)


def network_table(rows: List[dict], forwards: int, reasons: Dict[str, str], norm_calls: int) -> str:
    """``network: N norms, F train-mode forwards`` and the rows' gaps to
    the network truth (``—``: a column not computed, its reason below)."""
    quiet = norm_calls - len(rows)
    head = (f"network: {len(rows)} norms, {forwards} train-mode forwards (truth: E[norm output] with every dropout "
            f"on" + (f"; {quiet} of {norm_calls} norm calls reached by no dropout, not listed)" if quiet else ")"))
    if not rows:
        return head
    cells = [[r["norm"], "LayerNorm" if r["kind"] == "layer" else "RMSNorm", str(r["d"]), str(r["tokens"]),
              str(len(r["dropouts"])), _cell(r["gap_plain"]), _cell(r["gap_site"]), _cell(r["gap_network"])]
             for r in rows]
    widths = [max(len(c[i]) for c in cells + [_HEADER]) for i in range(len(_HEADER))]
    lines = [head] + ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in [_HEADER] + cells]
    lines += [f"{column}: {why}" for column, why in reasons.items()]
    return "\n".join(lines)
