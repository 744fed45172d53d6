"""`mhatrain report STUDY`: report a head-count study, finished or not.

A plain study is one heads × seeds grid (grid_report.py builds and writes its report); a study made
with `ablate --vary` has one grid per cell and a regime map across them (regimes.py). Both show a
summary on the console (terminal.py for a grid). The report's parts, in the order they are built:
    run_records.py  what each run directory says; the study's measure
    comparison.py   each h against h=8 (significance.py holds the statistics)
    by_heads.py     the rows per h: statistics over seeds, differences, the paper's numbers
    claims.py       the paper's and the article's claims, and the conclusion
    lengths.py      test BLEU by source length
    markdown.py, csv_tables.py, heads_table.py, terminal.py   how it is written and shown
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from ...core.columns import unwrapped
from ..stats.significance import BOOTSTRAP_SAMPLES
from .grid_report import build_report, write
from .regime_map import report_varied_study
from .regimes import is_varied
from .terminal import show


def report_study(study_dir: Path, console: Console, n_samples: int = BOOTSTRAP_SAMPLES) -> dict:
    """`mhatrain report`: gather, test, write Markdown/CSV/JSON/PNG and show the table (for a study made
    with --vary: each cell's report in its folder, and the regime map: regimes.py)."""
    if is_varied(Path(study_dir)):
        return report_varied_study(Path(study_dir), console, n_samples)
    report = build_report(Path(study_dir), n_samples)
    paths = write(report, Path(study_dir))
    show(report, console)
    console.print("report: " + "  ".join(str(p) for p in paths), highlight=False, soft_wrap=unwrapped(console))
    return report
