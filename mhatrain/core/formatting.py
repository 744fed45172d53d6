"""How numbers and tables are written for people: a missing value as "—", numbers with thousands
separators, signed differences, p-values, 95% intervals, shares, and markdown tables.

The one place these formats live: a study's statistics write their notes with them, and its reports
(report.md, the terminal, BLEU by length, the regime map) write every cell with them.
"""

from __future__ import annotations

import math

MISSING = "—"  # a value that is not there (not measured yet, not defined for this row)


def num(value, digits: int = 2) -> str:
    """A number with thousands separators: floats with `digits` decimals, integers as they are."""
    if value is None:
        return MISSING
    if isinstance(value, float) and math.isnan(value):
        return MISSING
    return f"{value:,.{digits}f}" if isinstance(value, float) else f"{value:,}"


def mean_sd(stat: dict, digits: int = 2) -> str:
    """'mean ± sd' of a describe() result (by_heads.py); the mean alone for one seed."""
    if stat["mean"] is None:
        return MISSING
    if stat["std"] is None:
        return num(stat["mean"], digits)
    return f"{num(stat['mean'], digits)} ± {num(stat['std'], digits)}"


def signed(value, digits: int = 2) -> str:
    """A difference with its sign: +0.91, -1.82."""
    return MISSING if value is None else f"{value:+.{digits}f}"


def p_value(value) -> str:
    """A p-value to three decimals ('<0.001' below)."""
    if value is None:
        return MISSING
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def fraction(value: float | None) -> str:
    """A value between 0 and 1 to two decimals (no thousands separator, no sign)."""
    return MISSING if value is None else f"{value:.2f}"


def percent(value: float | None) -> str:
    """A share as a whole percentage: 0.25 → 25%."""
    return MISSING if value is None else f"{value:.0%}"


def interval(ci: list[float] | None, digits: int = 2) -> str:
    """A 95% interval [low, high] to two decimals (or `digits`)."""
    return MISSING if not ci else f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def blank(value):
    """A CSV cell: empty for a missing value, the value itself otherwise."""
    return "" if value is None else value


def md_table(headers: list[str], rows: list[list[str]]) -> str:
    """A markdown table; a '|' inside a cell is escaped."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)
