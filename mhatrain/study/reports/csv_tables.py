"""report.csv (one row per h) and report-runs.csv (one row per run) of a head-count study: their columns,
each named once next to where its value comes from in the report (grid_report.build_report).
"""

from __future__ import annotations

import csv
import io

from ...core.formatting import blank
from .by_heads import DIFFERENCE_METRICS, METRICS

STATISTICS = [(metric, stat) for metric in METRICS for stat in ("mean", "std")]  # column <metric>_<stat>
DIFFERENCES = DIFFERENCE_METRICS  # of row["diff_to_h8"]: column <metric>_diff_to_h8
SEED_TEST_FIELDS = ("p_value", "p_adjusted", "std_error", "df", "verdict", "borderline")  # row["seed_test"]
CE_TEST_FIELDS = ("mean_difference", "p_value", "p_adjusted", "verdict", "borderline")  # column ce_<field>
PAPER_FIELDS = ("ppl", "bleu", "bleu_diff_to_h8")  # of row["paper"]: column paper_<field>

RUN_FIELDS = (  # of a run (run_records.RunRecord), same names
    "name",
    "heads",
    "seed",
    "status",
    "d_head",
    "parameters",
    "updates",
    "loss_selected_update",
    "trained_updates",
    "precision",
    "device",
    "tested",
    *METRICS,
)
PER_SEED_TEST_COLUMNS = {  # column: field of the run's per-seed test against h=8 (comparison._per_seed_tests)
    "sentence_bootstrap_p_vs_h8": "p_value",
    "sentence_bootstrap_p_holm_vs_h8": "p_holm",
}
PER_SEED_INTERVAL_COLUMNS = ("diff_ci95_low", "diff_ci95_high")  # its difference_ci95


def to_csv(report: dict) -> tuple[str, str]:
    """(report.csv: one row per h, report-runs.csv: one row per run)."""
    return _per_heads_csv(report["by_heads"]), _per_run_csv(report["runs"], report["significance"]["per_seed"])


def _per_heads_csv(by_heads: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(
        [
            "heads",
            "d_k",
            "parameters",
            "runs_done",
            "runs_tested",
            "runs",
            *[f"{metric}_{stat}" for metric, stat in STATISTICS],
            "test_bleu_seed_ci95_low",
            "test_bleu_seed_ci95_high",
            *[f"{metric}_diff_to_h8" for metric in DIFFERENCES],
            "test_bleu_diff_ci95_low",
            "test_bleu_diff_ci95_high",
            *SEED_TEST_FIELDS,
            "ce_split",
            "ce_diff_ci95_low",
            "ce_diff_ci95_high",
            *[f"ce_{name}" for name in CE_TEST_FIELDS],
            *[f"paper_{name}" for name in PAPER_FIELDS],
        ]
    )
    for row in by_heads:
        writer.writerow(_heads_values(row))
    return buffer.getvalue()


def _heads_values(row: dict) -> list:
    """One h's values, in the columns of _per_heads_csv."""
    diff, paper, test = row["diff_to_h8"] or {}, row["paper"] or {}, row["seed_test"] or {}
    ce = row.get("cross_entropy") or {}
    ce_test = ce.get("test") or {}
    return [
        row["heads"],
        row["d_head"],
        row["parameters"] if not isinstance(row["parameters"], list) else "",
        row["runs_done"],
        row["runs_tested"],
        row["runs"],
        *[blank(row[metric][stat]) for metric, stat in STATISTICS],
        *(row["test_bleu_seed_ci95"] or ["", ""]),
        *[blank(diff.get(metric)) for metric in DIFFERENCES],
        *(test.get("ci95") or ["", ""]),
        *[blank(test.get(name)) for name in SEED_TEST_FIELDS],
        blank(ce.get("source")),
        *(ce_test.get("ci95") or ["", ""]),
        *[blank(ce_test.get(name)) for name in CE_TEST_FIELDS],
        *[blank(paper.get(name)) for name in PAPER_FIELDS],
    ]


def _per_run_csv(runs: list[dict], per_seed_tests: list[dict]) -> str:
    tests = {t["run"]: t for t in per_seed_tests}
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*RUN_FIELDS, *PER_SEED_TEST_COLUMNS, *PER_SEED_INTERVAL_COLUMNS])
    for run in runs:
        test = tests.get(run["name"], {})
        writer.writerow(
            [
                *[blank(run.get(name)) for name in RUN_FIELDS],
                *[blank(test.get(name)) for name in PER_SEED_TEST_COLUMNS.values()],
                *(test.get("difference_ci95") or ["", ""]),
            ]
        )
    return buffer.getvalue()
