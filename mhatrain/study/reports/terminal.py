"""A head-count study's report on the console: in a terminal, the compact table of the six columns that
tell the h apart; in a log file or a pipe, the full table; then the claims, the conclusion and notes.
"""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from ...core import provenance
from ...core.columns import asked_columns, unwrapped
from ...core.formatting import signed
from ..stats.comparison import BASELINE_HEADS
from .heads_table import COMPACT_HEADERS, SHORT_HEADERS, compact_cells, row_cells, status_line
from .layouts_section import terminal_lines

COMPACT_LEGEND = (
    f"Δ: h minus h={BASELINE_HEADS} as the test estimates it, over the runs the tests use (runs: tested of "
    f"all; out: finished but left out); CE: cross-entropy (nats/token, the primary measure; lower is better); "
    f"p Holm: two-sided, against h={BASELINE_HEADS} over seeds (and test sentences), adjusted over the h "
    f"compared; verdict: what that test allows; no diff.: no detectable difference; *: borderline (one run or "
    f"the resampling seed changes it). The full table (perplexity, chrF, every test, the paper's Table 3 A): "
    f"report.md."
)
FULL_LEGEND = (
    "Δ: h minus h=8 as the test estimates it, over the runs that meet the checkpoint measure; Δ 95% and p: "
    "two-sided h × seed-block test against h=8 "
    "(seed and test-sentence noise); Holm: adjusted over the h compared; paper: Table 3 (A), "
    "newstest2013 dev (another data set and model size: compare shapes)."
)
VERDICT_COLUMNS = ("verdict", "CE verdict", "CE", "BLEU")  # words, not numbers: left-aligned, never cut
LOG_WIDTH = 330  # a log file or a pipe has no width to respect: the full table, unwrapped


def show(report: dict, console: Console) -> None:
    """The report on the console: in a terminal, a table of the six columns that tell the h apart (any
    width keeps every h visible); in a log file or a pipe, the full table, unless $COLUMNS asks for a
    width it does not fit in (core.columns)."""
    columns = asked_columns()
    compact = console.is_terminal or (columns is not None and _width(_heads_table(report, False)) > columns)

    def say(text: str) -> None:  # in a terminal (or at $COLUMNS), prose wraps between words at its width
        console.print(text, highlight=False, soft_wrap=unwrapped(console))

    table = _heads_table(report, compact)
    if compact:
        console.print(table)
        say(COMPACT_LEGEND)
    else:
        wide = Console(file=io.StringIO(), width=LOG_WIDTH, color_system=None)
        wide.print(table)
        console.out("\n".join(line.rstrip() for line in wide.file.getvalue().splitlines()), highlight=False)
        say(FULL_LEGEND)
    say(_claims_line(report["claims"]))
    say(report["claims"]["conclusion"])
    say(provenance.summary_line(report["provenance"]))
    for line in terminal_lines(report.get("layouts")):
        say(line)
    for note in report["notes"]:
        say(f"note: {note}")


def _width(table: Table) -> int:
    """The table's natural width, unwrapped."""
    return Console(width=LOG_WIDTH, color_system=None).measure(table).maximum


def _heads_table(report: dict, compact: bool) -> Table:
    """One row per h, h=8's in bold: the compact columns or the full ones (heads_table.py)."""
    headers, cells = (COMPACT_HEADERS, compact_cells) if compact else (SHORT_HEADERS, row_cells)
    table = Table(title=f"Head-count study: {report['study_dir']} — {status_line(report)}", title_justify="left")
    for header in headers:
        verdict = header in VERDICT_COLUMNS
        table.add_column(
            header,
            justify="left" if header == "h" or verdict else "right",
            no_wrap=header != "verdict",
            min_width=None if header == "verdict" else max(len(header), 8 if verdict else 0),
        )
    for row in report["by_heads"]:
        table.add_row(*cells(row), style="bold" if row["heads"] == BASELINE_HEADS else None)
    return table


def _claims_line(claims: dict) -> str:
    """h=8 − h=1 by the article, the paper and this study, on one line."""
    ours = claims["ours"]
    ours_text = (
        f"ours {signed(ours['test_bleu'])} test BLEU, {signed(ours['valid_bleu'])} validation BLEU"
        if ours
        else "ours: needs finished h=1 and h=8 runs"
    )
    return (
        f"h=8 − h=1: article claims {signed(claims['article']['h8_minus_h1_bleu'], 1)} BLEU, "
        f"paper {signed(claims['paper']['h8_minus_h1_bleu'], 1)} (dev), {ours_text}"
    )
