"""The report's rows per h (report["by_heads"]): mean and standard deviation over seeds of every metric,
the 95% interval of test BLEU over seeds, the difference to h=8, the tests of that h (comparison.py),
the paper's numbers for the same h, and what `mhatrain heads` found about its heads.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np

from ...analysis.roles import study_role_measures, study_role_shares
from ...core.files import read_json
from ...model.sizes import head_size
from ..grid.run_records import RunRecord
from ..stats.comparison import BASELINE_HEADS
from ..stats.significance import contrast_estimate, fit_seed_blocks, seed_interval
from .claims import PAPER_TABLE_3A

METRICS = (
    "valid_ppl",
    "valid_nll",
    "test_nll",
    "valid_bleu",
    "test_bleu",
    "test_chrf",
    "train_seconds",
    "tokens_per_s",
)
DIFFERENCE_METRICS = ("test_bleu", "valid_bleu", "valid_ppl", "valid_nll", "test_nll", "test_chrf")  # row["diff_to_h8"]


def rows_by_heads(study_dir: Path, grid: dict, runs: list[RunRecord], tests: dict) -> list[dict]:
    """One row per h of the grid, in order of h; tests: the report's "significance" (comparison.py)."""
    by_heads = [heads_row(h, [r for r in runs if r.heads == h], tests, grid["d_model"]) for h in grid["heads"]]
    for row in by_heads:
        row["head_analysis"] = head_analysis(study_dir, [r for r in runs if r.heads == row["heads"]])
    for row, diff in zip(by_heads, differences(by_heads, BASELINE_HEADS).values()):
        row["diff_to_h8"] = diff
        if diff and row["seed_test"] and row["seed_test"]["mean_difference"] is not None:
            diff["test_bleu"] = row["seed_test"]["mean_difference"]  # the same fit, from unrounded BLEU
    return by_heads


def describe(values: dict[int, float]) -> dict:
    """Mean, sample standard deviation (None for one seed) and the values per seed."""
    numbers = [v for v in values.values() if v is not None]
    return {
        "mean": round(statistics.fmean(numbers), 4) if numbers else None,
        "std": round(statistics.stdev(numbers), 4) if len(numbers) >= 2 else None,
        "n": len(numbers),
        "per_seed": {str(seed): v for seed, v in values.items()},
    }


def heads_row(h: int, runs: list[RunRecord], tests: dict, d_model: int | None) -> dict:
    """The row of one h, from its runs (finished or not) and the tests (without diff_to_h8, head_analysis)."""
    done = [r for r in runs if r.status == "done"]
    tested = [r for r in done if r.tested]  # every statistic below: the runs the tests use
    parameters = sorted({r.parameters for r in runs if r.parameters is not None})
    test_bleu = [r.test_bleu for r in tested if r.test_bleu is not None]
    return {
        "heads": h,
        "d_head": next((r.d_head for r in runs if r.d_head), head_size(d_model, h) if d_model else None),
        "parameters": parameters[0] if len(parameters) == 1 else (parameters or None),
        "runs_done": len(done),
        "runs_tested": len(tested),
        "left_out": [r.name for r in done if not r.tested],  # finished, but not measured as the study measures
        "runs": len(runs),
        "pending": [
            f"{r.name} ({r.status}{f', update {r.updates}' if r.status == 'training' and r.updates else ''})"
            for r in runs
            if r.status != "done"
        ],
        **{metric: describe({r.seed: getattr(r, metric) for r in tested}) for metric in METRICS},
        "test_bleu_seed_ci95": bleu_interval(seed_interval(test_bleu)),
        "per_seed_tests": [t for t in tests["per_seed"] if t["heads"] == h],
        "seed_test": next((t for t in tests["seed_level"] if t["heads"] == h), None),
        "cross_entropy": _cross_entropy(h, tested, tests.get("cross_entropy") or {}),
        "paper": _paper_row(h),
    }


def _cross_entropy(h: int, tested: list[RunRecord], tests: dict) -> dict:
    """The h's per-token cross-entropy on the split its tests use (comparison.CROSS_ENTROPY_SOURCES), over
    seeds, and its test against h=8."""
    source = tests.get("source")
    metric = {"test": "test_nll", "validation": "valid_nll"}.get(source)
    values = describe({r.seed: getattr(r, metric) for r in tested}) if metric else describe({})
    return {
        "source": source,
        **values,
        "test": next((t for t in tests.get("seed_level") or [] if t["heads"] == h), None),
    }


def _paper_row(h: int) -> dict | None:
    """The paper's Table 3 (A) numbers for h and their differences to its h=8; None for an h it lacks."""
    paper = PAPER_TABLE_3A.get(h)
    if paper is None:
        return None
    base = PAPER_TABLE_3A[BASELINE_HEADS]
    return {
        **paper,
        "bleu_diff_to_h8": round(paper["bleu"] - base["bleu"], 2),
        "ppl_diff_to_h8": round(paper["ppl"] - base["ppl"], 2),
    }


def head_analysis(study_dir: Path, runs: list[RunRecord]) -> dict | None:
    """Per h, from `mhatrain heads` files in the runs: the share of heads in each role
    (heads/roles-valid.json) and the share removable within 1 BLEU (heads/heads-valid.json)."""
    roles, prunable, total = {}, 0, 0
    for run in runs:
        directory = study_dir / run.run_dir / "heads"
        report = read_json(directory / "roles-valid.json")
        if report is not None and "counts" in report:
            roles[run.name] = report
        heads = read_json(directory / "heads-valid.json")
        pruning = ((heads or {}).get("pruning") or {}).get("all") or {}
        if pruning.get("prunable") is not None:
            prunable, total = prunable + pruning["prunable"], total + pruning["heads"]
    if not roles and not total:
        return None
    return {
        "role_shares": study_role_shares(roles),
        "role_measures": study_role_measures(roles),
        "runs_with_roles": sorted(roles),
        "prunable_share": round(prunable / total, 4) if total else None,
    }


def differences(rows: list[dict], baseline: int) -> dict[int, dict | None]:
    """Per h and metric, Δ = h − h=8 over the tested runs, as the h × seed-block fit of every h's runs
    estimates it (significance.contrast_estimate): the one definition of Δ, the difference the tests are
    about (with every h on the same seeds, the mean of per-seed differences). None for an h without
    tested runs, or for every h without a tested baseline run."""
    out: dict[int, dict | None] = {row["heads"]: None for row in rows}
    base = next((row for row in rows if row["heads"] == baseline), None)
    if base is None or not base["runs_tested"]:
        return out
    for row in rows:
        if row["runs_tested"] and row["heads"] != baseline:
            out[row["heads"]] = {}
    out[baseline] = dict.fromkeys(DIFFERENCE_METRICS, 0.0)
    for metric in DIFFERENCE_METRICS:
        values = {
            (row["heads"], int(seed)): v for row in rows for seed, v in row[metric]["per_seed"].items() if v is not None
        }
        fit = (
            fit_seed_blocks(list(values), np.array(list(values.values())))
            if baseline in {h for h, _ in values}
            else None
        )
        for h, diff in out.items():
            if diff is not None and h != baseline:
                delta = None if fit is None or h not in fit.heads else contrast_estimate(fit, {h: 1.0, baseline: -1.0})
                diff[metric] = None if delta is None else round(delta, 4)
    return out


def bleu_interval(interval: tuple[float, float] | None) -> tuple[float, float] | None:
    """An interval of BLEU levels, kept within BLEU's range [0, 100]."""
    return None if interval is None else (max(0.0, interval[0]), min(100.0, interval[1]))
