"""How firmly a BLEU verdict stands: the same h × seed-block test (significance.head_count_tests) rerun
  * on other resampled test sets: the shared sentence term of BLEU is estimated from SENTENCE_SAMPLES
    resamples, so an adjusted p carries Monte Carlo error; RESAMPLING_SEEDS other seeds show its range;
  * without each tested run in turn (leave one run out): a verdict that one run decides.
A verdict that either changes is labelled borderline: the report says so beside it, and the README
quotes it as such. Cross-entropy's sentence term is exact (no Monte Carlo error); its leave-one-run-out
range is reported the same way (`leave_one_out`).
"""

from __future__ import annotations

import numpy as np

from . import significance as S

RESAMPLING_SEEDS = 10  # other seeds of the sentence resampling behind the shared term
LEVEL = 0.05


def bleu_sensitivity(
    cells: list[S.Cell],
    stacked: np.ndarray,
    bleu: np.ndarray,
    covariance: np.ndarray,
    tests: S.HeadCountTests,
    names: list[str],
) -> dict:
    """The Holm-adjusted p of each h against h=8 over other resampling seeds and without each run, and
    which verdicts are borderline. stacked: [cells, N, 10] sentence statistics; bleu [cells]; covariance:
    the main test's sentence covariance; names: the run of each cell."""
    n = stacked.shape[1]
    by_seed = []
    for seed in range(1, RESAMPLING_SEEDS + 1):
        counts = S.resample_counts(n, S.SENTENCE_SAMPLES, seed=S.BOOTSTRAP_SEED + seed)
        other = S.head_count_tests(
            cells, bleu, S.resampled_covariance(S.resampled_bleus(stacked, counts)), tests.baseline
        )
        by_seed.append(other.adjusted)
    dropped = leave_one_out(cells, bleu, covariance, tests, names)
    out = {"resampling_seeds": RESAMPLING_SEEDS, "by_heads": {}, "borderline": {}}
    for h, adjusted in tests.adjusted.items():
        seeds = [a[h] for a in by_seed if a.get(h) is not None]
        entry = {
            "p_holm_resampled": [round(min(seeds), 4), round(max(seeds), 4)] if seeds else None,
            **dropped["by_heads"][h],
        }
        out["by_heads"][str(h)] = entry
        straddles = bool(seeds) and min(seeds) < LEVEL <= max(seeds)
        out["borderline"][str(h)] = adjusted is not None and (straddles or bool(entry["verdict_changes_without"]))
    return out


def leave_one_out(
    cells: list[S.Cell], values: np.ndarray, covariance: np.ndarray | None, tests: S.HeadCountTests, names: list[str]
) -> dict:
    """Per h, the range of its Holm-adjusted p with each tested run left out in turn, and the runs whose
    removal changes its verdict."""
    baseline = tests.baseline
    said = {h: _said(tests, h) for h in tests.adjusted}
    ranges: dict[int, list[float]] = {h: [] for h in tests.adjusted}
    changes: dict[int, list[str]] = {h: [] for h in tests.adjusted}
    for i in range(len(cells)):
        keep = [j for j in range(len(cells)) if j != i]
        sub_cells = [cells[j] for j in keep]
        sub_cov = None if covariance is None else covariance[np.ix_(keep, keep)]
        other = S.head_count_tests(sub_cells, values[keep], sub_cov, baseline, tests.higher_is_better)
        for h in tests.adjusted:
            p = other.adjusted.get(h)
            if p is not None:
                ranges[h].append(p)
            now = _said(other, h)
            if now != said[h] and now != "not tested":  # a run whose loss leaves h untestable changes no verdict
                changes[h].append(names[i])
    return {
        "by_heads": {
            h: {
                "p_holm_leave_one_out": [round(min(ranges[h]), 4), round(max(ranges[h]), 4)] if ranges[h] else None,
                "verdict_changes_without": changes[h],
            }
            for h in tests.adjusted
        }
    }


def _said(tests: S.HeadCountTests, h: int) -> str:
    """The verdict on h, 'not tested' where the design (or a run left out) leaves no test of it."""
    test = tests.against_baseline.get(h)
    if test is None:
        return "not tested"
    return S.verdict(test, tests.adjusted.get(h), LEVEL, tests.higher_is_better)
