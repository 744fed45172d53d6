"""The report of one heads × seeds grid: build_report puts the steps together into one dict (the run
records, the tests against h=8, the rows per h, the claims, BLEU by length, notes), and write writes it
next to the runs:
    report.md          markdown.py
    report.csv         one row per h (csv_tables.py)
    report-runs.csv    one row per run (csv_tables.py)
    report.json        everything
    report.png         the measures against h, beside the paper's (head_count_figure.py)
The layout points of `ablate --layout` are left out of everything per h: the report's "layouts" entry
(stats/layouts.py, layouts_section.py) sets each layout against h=8 and h=1.
    report-lengths.csv test BLEU by source length (lengths.py)
    curves.png         learning curves, mean over seeds per h (curves.py)
A study varied over other settings has one such grid per cell (regimes.py).
"""

from __future__ import annotations

import math
from pathlib import Path

from ...core import provenance
from ...core.files import atomic_write_json, atomic_write_text
from ..grid.directory import code_name, differing_settings
from ..grid.run_records import MEASURE, RunRecord, gather, h_runs, point_sessions, run_entry
from ..stats.comparison import BASELINE_HEADS, compare_heads
from ..stats.layouts import compare_layouts
from ..stats.significance import BOOTSTRAP_SAMPLES
from .by_heads import rows_by_heads
from .claims import PAPER_SOURCE, PAPER_TABLE_3A, claims
from .csv_tables import to_csv
from .curves import group_by_heads, learning_curves_plot, read_curve, study_runs
from .head_count_figure import head_count_plot
from .lengths import length_analysis
from .lengths import write_csv as write_lengths_csv
from .markdown import to_markdown


def build_report(study_dir: Path, n_samples: int = BOOTSTRAP_SAMPLES) -> dict:
    """Everything the report says about the study in `study_dir` (finished or not): report.json."""
    study_dir = Path(study_dir)
    grid, every_run = gather(study_dir, layouts=True)
    runs = h_runs(every_run)  # the layout points are an arm of their own: the layouts entry
    tests, notes = compare_heads(study_dir, runs, n_samples)
    by_heads = rows_by_heads(study_dir, grid, runs, tests)
    compared = provenance.compare(
        {r.name: point_sessions(study_dir / r.run_dir, r.beam) for r in every_run if r.status != "pending"}
    )
    notes += _grid_notes(grid, runs)
    notes += provenance.difference_notes(compared)
    notes += _settings_notes(study_dir, runs)
    layouts = compare_layouts(study_dir, every_run)
    return {
        "study_dir": study_dir.name,
        "grid": grid,
        "baseline_heads": BASELINE_HEADS,
        "runs_done": sum(r.status == "done" for r in runs),
        "runs_total": len(runs),
        "runs": [run_entry(r) for r in runs],
        "by_heads": by_heads,
        "significance": tests,
        "measure": MEASURE,
        "claims": claims(by_heads, tests),
        "paper": {"source": PAPER_SOURCE, "table": {str(h): v for h, v in PAPER_TABLE_3A.items()}},
        "bleu_signatures": sorted({r.bleu_signature for r in runs if r.bleu_signature}),
        "notes": notes,
        "provenance": compared,
        "lengths": length_analysis(study_dir, runs, BASELINE_HEADS),  # test BLEU by source length: lengths.py
        **({"layouts": layouts} if layouts else {}),  # each --layout against h=8 and h=1: stats/layouts.py
    }


def _grid_notes(grid: dict, runs: list[RunRecord]) -> list[str]:
    """Warnings about the grid: no finished h=8 run, parameter counts that differ, several code versions."""
    notes = []
    if not any(r.heads == BASELINE_HEADS and r.status == "done" for r in runs):
        notes.append(
            f"no finished h={BASELINE_HEADS} run: differences to h={BASELINE_HEADS} and significance tests "
            f"need one" + ("" if BASELINE_HEADS in grid["heads"] else f" (add {BASELINE_HEADS} to --heads)")
        )
    parameters = {r.parameters for r in runs if r.parameters is not None}
    if len(parameters) > 1:
        notes.append(f"parameter counts differ between runs ({sorted(parameters)}): the grid is not at constant size")
    code = grid.get("code") or []
    if len(code) > 1:
        notes.append(
            f"{len(code)} code versions ran this study ({grid['code_source']}): "
            + ", ".join(code_name(c) for c in code)
        )
    return notes


def _settings_notes(study_dir: Path, runs: list[RunRecord]) -> list[str]:
    """A note per config key whose value differs between the points of the study."""
    notes = []
    for key, seen in differing_settings(study_dir, [r.run_dir for r in runs]).items():
        shown = "; ".join(f"{value} ({_point_names(points)})" for value, points in seen.items())
        notes.append(f"points of this study differ in their config's {key}: {shown}")
    return notes


def _point_names(points: list[str]) -> str:
    return ", ".join(points) if len(points) <= 4 else f"{len(points)} points"


# ----------------------------------------------------------------------------- writing


def write(report: dict, study_dir: Path) -> list[Path]:
    """Write the report's files into `study_dir` (see the module docstring); returns their paths."""
    study_dir = Path(study_dir)
    per_h, per_run = to_csv(report)
    paths = [study_dir / name for name in ("report.md", "report.csv", "report-runs.csv", "report.json", "report.png")]
    atomic_write_text(paths[0], to_markdown(report))
    atomic_write_text(paths[1], per_h)
    atomic_write_text(paths[2], per_run)
    atomic_write_json(paths[3], report)
    plot(report, paths[4])
    paths += write_lengths_csv(report.get("lengths"), study_dir)
    curves = _study_curves(study_dir)
    return paths + ([curves] if curves else [])


def plot(report: dict, path: Path) -> None:
    """report.png: Δ of cross-entropy and of test BLEU against h, as the report's tables give them, beside
    the paper's (plot_panels)."""
    head_count_plot(
        plot_panels(report),
        path,
        f"Head count (d_k = d_model / h): {report['study_dir']} — "
        f"{sum(row['runs_tested'] for row in report['by_heads'])} runs tested of {report['runs_total']}",
        BASELINE_HEADS,
    )


PLOTTED = (  # (measure in by_heads rows, its test, label, the paper's counterpart as a function of its row)
    ("cross_entropy", "cross-entropy (nats/token)", lambda paper: math.log(paper["ppl"])),
    ("test_bleu", "test BLEU", lambda paper: paper["bleu"]),
)


def plot_panels(report: dict) -> list[dict]:
    """The figure's numbers, taken from the report's rows (by_heads): Δ and its interval as the tables
    show them, each tested seed's and each left-out run's difference to h=8 of the same seed."""
    rows = {row["heads"]: row for row in report["by_heads"]}
    runs = report["runs"]
    source = (report["significance"].get("cross_entropy") or {}).get("source")
    panels = []
    for measure, label, paper_value in PLOTTED:
        metric = {"test": "test_nll", "validation": "valid_nll"}.get(source) if measure == "cross_entropy" else measure
        test_of = (
            (lambda row: (row["cross_entropy"] or {}).get("test"))
            if measure == "cross_entropy"
            else (lambda row: row["seed_test"])
        )
        if metric is None:
            continue
        base = rows.get(BASELINE_HEADS)
        delta = {
            h: row["diff_to_h8"][metric]
            for h, row in rows.items()
            if row["diff_to_h8"] and row["diff_to_h8"][metric] is not None
        }
        panels.append(
            {
                "label": label if measure == "test_bleu" else f"{'test' if source == 'test' else 'validation'} {label}",
                "delta": delta,
                "interval": {h: (test_of(row) or {}).get("ci95") for h, row in rows.items() if h != BASELINE_HEADS},
                "seeds": _paired(runs, metric, tested=True),
                "left_out": _paired(runs, metric, tested=False),
                "level": "—" if base is None or base[metric]["mean"] is None else f"{base[metric]['mean']:.4g}",
                "paper": {h: paper_value(v) for h, v in PAPER_TABLE_3A.items()},
                "paper_label": "paper, Table 3 (A), newstest2013: "
                + ("BLEU" if measure == "test_bleu" else "ln(perplexity per word-piece)"),
            }
        )
    return panels


def _paired(runs: list[dict], metric: str, tested: bool) -> dict[int, list[float]]:
    """Per h other than h=8, each finished run's value minus that of the tested h=8 run of its seed
    (tested: the runs the tests use; else the finished runs they leave out)."""
    base = {
        r["seed"]: r[metric] for r in runs if r["heads"] == BASELINE_HEADS and r["tested"] and r[metric] is not None
    }
    out: dict[int, list[float]] = {}
    for run in runs:
        paired = run["heads"] != BASELINE_HEADS and run["seed"] in base and run[metric] is not None
        if paired and run["status"] == "done" and run["tested"] == tested:
            out.setdefault(run["heads"], []).append(run[metric] - base[run["seed"]])
    return out


def _study_curves(study_dir: Path) -> Path | None:
    """curves.png of the study (mean over seeds per h), once any run has validated."""
    curves = [c for c in (read_curve(d) for d in study_runs(study_dir)) if c.valid_steps]
    if not curves:
        return None
    path = study_dir / "curves.png"
    learning_curves_plot(
        group_by_heads(curves), curves, path, f"Learning curves: {study_dir.name}, mean over seeds per h"
    )
    return path
