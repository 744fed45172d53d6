"""The report's rows per h (report["by_heads"]): mean and standard deviation over seeds of every metric,
the 95% interval of test BLEU over seeds, the difference to h=8, the tests of that h (comparison.py),
the paper's numbers for the same h, and what `mhatrain heads` found about its heads.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from ..analysis.roles import study_role_measures, study_role_shares
from ..core.files import read_json
from ..model.sizes import head_size
from .claims import PAPER_TABLE_3A
from .comparison import BASELINE_HEADS
from .run_records import RunRecord
from .significance import seed_interval

METRICS = ("valid_ppl", "valid_bleu", "test_bleu", "test_chrf", "train_seconds", "tokens_per_s")
DIFFERENCE_METRICS = ("test_bleu", "valid_bleu", "valid_ppl", "test_chrf")  # in row["diff_to_h8"]


def rows_by_heads(study_dir: Path, grid: dict, runs: list[RunRecord], tests: dict) -> list[dict]:
    """One row per h of the grid, in order of h; tests: the report's "significance" (comparison.py)."""
    by_heads = [heads_row(h, [r for r in runs if r.heads == h], tests, grid["d_model"]) for h in grid["heads"]]
    for row in by_heads:
        row["head_analysis"] = head_analysis(study_dir, [r for r in runs if r.heads == row["heads"]])
    base_row = next((row for row in by_heads if row["heads"] == BASELINE_HEADS), None)
    for row in by_heads:
        row["diff_to_h8"] = differences(row, base_row)
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
    parameters = sorted({r.parameters for r in runs if r.parameters is not None})
    test_bleu = [r.test_bleu for r in done if r.test_bleu is not None]
    return {
        "heads": h,
        "d_head": next((r.d_head for r in runs if r.d_head), head_size(d_model, h) if d_model else None),
        "parameters": parameters[0] if len(parameters) == 1 else (parameters or None),
        "runs_done": len(done),
        "runs": len(runs),
        "pending": [
            f"{r.name} ({r.status}{f', update {r.updates}' if r.status == 'training' and r.updates else ''})"
            for r in runs
            if r.status != "done"
        ],
        **{metric: describe({r.seed: getattr(r, metric) for r in done}) for metric in METRICS},
        "test_bleu_seed_ci95": seed_interval(test_bleu),
        "per_seed_tests": [t for t in tests["per_seed"] if t["heads"] == h],
        "seed_test": next((t for t in tests["seed_level"] if t["heads"] == h), None),
        "paper": _paper_row(h),
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


def differences(row: dict, base_row: dict | None) -> dict | None:
    """Per metric, the mean over the seeds both h have finished of (this h − h=8): in a partial grid the
    paired difference the significance tests are about, not the mean of some seeds minus that of others."""
    if base_row is None or not base_row["runs_done"] or not row["runs_done"]:
        return None
    out = {}
    for metric in DIFFERENCE_METRICS:
        ours, base = row[metric]["per_seed"], base_row[metric]["per_seed"]
        pairs = [ours[s] - base[s] for s in ours if s in base and ours[s] is not None and base[s] is not None]
        out[metric] = round(statistics.fmean(pairs), 2) if pairs else None
    if row["seed_test"]:  # the same difference from unrounded BLEU, as the tests and the conclusion give it
        out["test_bleu"] = row["seed_test"]["mean_difference"]
    return out
