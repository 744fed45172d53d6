"""Each h against h=8 on the test set: the tests the report's verdicts rest on (compare_heads), and the
one place the verdict of an h is read back from (verdict_of).

The statistics themselves live in significance.py; this module picks the runs that meet the study's
measure (run_records.MEASURE), scores their test hypotheses sentence by sentence, runs the tests and
writes their results as the report's "significance" entry:
  * seed_level: the h × seed-block test of each h against h=8 over seeds and test sentences, Holm-
    adjusted; its verdict is the report's (SIGNIFICANCE_METHOD);
  * trend: the slope of BLEU against log2 h;
  * per_seed: each h against h=8 of the same seed (paired bootstrap over test sentences).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...core.errors import MhatrainError
from ...core.formatting import num
from ...inference.likelihood import read_sentence_file
from ..grid.run_records import MEASURE, RunRecord, factor_of, measured_as_chosen, test_split
from . import significance as S
from .sensitivity import bleu_sensitivity, leave_one_out

BASELINE_HEADS = 8  # every h is compared with the base model's h = 8 (the paper's Table 3)
LEVEL = 0.05  # the verdict's significance level (Holm-adjusted p)

SIGNIFICANCE_METHOD = {
    "verdict_test": "h × seed-block test of each h against h=8 on the test set: corpus BLEU of every trained system = "
    "effect of h + effect of seed + residual, fitted by least squares; the variance of Δ is the residual variance "
    "pooled over every h (seed noise and the test-sentence noise particular to each trained model) plus the "
    "test-sentence noise shared by the seeds of each h (covariance between different seeds' Δ over resampled "
    "test sets); two-sided t-test with the residual degrees of freedom (analytic p, no resampling floor)",
    "correction": "Holm–Bonferroni over the comparisons against h=8 (raw and adjusted p reported)",
    "verdict": f"'better' or 'worse' only where the Holm-adjusted p of the h × seed-block test is < {LEVEL}; "
    "otherwise 'no detectable difference'; 'not tested' where the design leaves no residual degrees of freedom "
    "(one seed per h): nothing measures the seed noise",
    "trend": "slope of BLEU against log2 h (BLEU per doubling of h): the least-squares line through the h effects "
    "of the same model, with the same noise terms; two-sided, not part of the Holm family",
    "per_seed": "paired bootstrap over test sentences, two-sided and centred: each h against h=8 of the same seed; "
    "covers test-sentence noise only (whether those two trained models differ, not whether the h do); "
    "Holm–Bonferroni over the h of each seed; not used by the verdict",
    "calibration": "simulated null studies with seed and sentence noise of the observed size (mhatrain/study/stats/calibration.py, "
    "scripts/calibrate.py, docs/ablation.md): the verdict's false-positive rate stays below 0.05",
}

# ----------------------------------------------------------------------------- the tests


def compare_heads(
    study_dir: Path, runs: list[RunRecord], n_samples: int = S.BOOTSTRAP_SAMPLES
) -> tuple[dict, list[str]]:
    """Test each h against h=8 on the test set over seeds and test sentences (h × seed-block test,
    Holm-adjusted), the trend against log2 h, and each seed on its own (paired bootstrap).
    Returns the report's "significance" entry and notes on what was left out and why."""
    result = _untested(n_samples)
    done, notes = _measured_runs(runs, result)
    if not _compares_heads(done):
        return result, notes
    references, problem = _test_references(study_dir, runs)
    if references is None:
        return result, [*notes, problem]
    stats = _sentence_statistics(study_dir, done, references, notes)
    result["per_seed"] = _per_seed_tests(stats, done, S.resample_indices(len(references), n_samples))
    cells = sorted(stats)
    if not _compares_heads(cells):
        return result, notes
    stacked = np.stack([stats[c] for c in cells])
    bleu = S.bleu_from_sums(stacked.sum(axis=1))
    covariance = S.resampled_covariance(
        S.resampled_bleus(stacked, S.resample_counts(len(references), S.SENTENCE_SAMPLES))
    )
    tests = S.head_count_tests(cells, bleu, covariance, BASELINE_HEADS)
    factors = {h: _factor_counts([done[c] for c in cells if c[0] == h]) for h in {h for h, _ in cells}}
    result.update(_tests_entry(tests, cells, factors))
    result["sensitivity"] = bleu_sensitivity(cells, stacked, bleu, covariance, tests, [done[c].name for c in cells])
    for row in result["seed_level"]:
        row["borderline"] = result["sensitivity"]["borderline"].get(str(row["heads"]), False)
    result["cross_entropy"] = _cross_entropy_tests(study_dir, {c: done[c] for c in cells}, factors, notes)
    return result, notes


def _tests_entry(tests: S.HeadCountTests, cells: list[S.Cell], factors: dict) -> dict:
    """seed_level (each h against h=8), trend, residual_sd and df of one measure's tests."""
    return {
        "seed_level": [_seed_level_test(h, t, tests, cells, factors) for h, t in tests.against_baseline.items()],
        "trend": None if tests.trend is None else _trend(tests.trend, cells),
        "residual_sd": None if tests.residual_sd is None else round(tests.residual_sd, 4),
        "df": tests.df,
    }


CROSS_ENTROPY_SOURCES = {
    "test": "test cross-entropy (nats per reference token, teacher-forced, no label smoothing) of eval; its "
    "sentence noise, shared by the seeds of an h, computed exactly from each run's per-sentence values",
    "validation": "validation cross-entropy (nats per reference token, no label smoothing) at the evaluated "
    "checkpoint, from metrics.jsonl (these runs' eval wrote no per-sentence values): the test covers seed noise "
    "on the validation sentences; the sentence noise shared by the seeds of an h is not included",
}


def _cross_entropy_tests(study_dir: Path, done: dict[S.Cell, RunRecord], factors: dict, notes: list[str]) -> dict:
    """Each h against h=8 on per-token cross-entropy (lower is better), by the same h × seed-block test:
    on the test set where every tested run's eval wrote per-sentence values, else on the validation set."""
    cells = sorted(done)
    per_sentence = [read_nll(study_dir, done[c]) for c in cells]
    if all(p is not None for p in per_sentence) and _one_tokenisation(per_sentence, notes):
        source = "test"
        nll, tokens = np.stack([p.nll for p in per_sentence]), np.stack([p.tokens for p in per_sentence])
        values, covariance = nll.sum(axis=1) / tokens.sum(axis=1), S.cross_entropy_covariance(nll, tokens)
    elif all(done[c].valid_nll is not None for c in cells):
        source, covariance = "validation", None
        values = np.array([done[c].valid_nll for c in cells])
    else:
        return {"source": None, "text": "no cross-entropy recorded for every tested run", "seed_level": []}
    tests = S.head_count_tests(cells, values, covariance, BASELINE_HEADS, higher_is_better=False)
    entry = _tests_entry(tests, cells, factors)
    entry["leave_one_out"] = {
        str(h): v
        for h, v in leave_one_out(cells, values, covariance, tests, [done[c].name for c in cells])["by_heads"].items()
    }
    for row in entry["seed_level"]:
        row["borderline"] = bool(entry["leave_one_out"][str(row["heads"])]["verdict_changes_without"])
    return {"source": source, "text": CROSS_ENTROPY_SOURCES[source], "unit": "nats per token", **entry}


def read_nll(study_dir: Path, run: RunRecord):
    """The run's per-sentence test NLL (inference.likelihood), or None without a readable file."""
    if run.test_nll_file is None:
        return None
    try:
        return read_sentence_file((study_dir / run.test_nll_file).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def same_tokenisation(per_sentence: list) -> bool:
    """Per-token values compare only under one tokenisation: every run's reference token counts agree."""
    first = per_sentence[0].tokens
    return all(len(p.tokens) == len(first) and np.array_equal(p.tokens, first) for p in per_sentence)


def _one_tokenisation(per_sentence: list, notes: list[str]) -> bool:
    """same_tokenisation, with a note where it fails: the validation cross-entropy is then tested."""
    if same_tokenisation(per_sentence):
        return True
    notes.append(
        "the runs' test references have different token counts (different tokenizers): per-token test "
        "cross-entropy is not compared across them; the validation cross-entropy is used"
    )
    return False


def _untested(n_samples: int) -> dict:
    """The "significance" entry before any test: the methods, and empty results."""
    return {
        "method": SIGNIFICANCE_METHOD,
        "measure": MEASURE["name"],
        "samples": n_samples,  # of the per-seed bootstrap
        "sentence_samples": S.SENTENCE_SAMPLES,  # behind the verdict's shared sentence variance
        "bootstrap_seed": S.BOOTSTRAP_SEED,
        "per_seed": [],
        "seed_level": [],
        "trend": None,
        "left_out": [],
    }


def _measured_runs(runs: list[RunRecord], result: dict) -> tuple[dict[S.Cell, RunRecord], list[str]]:
    """The finished runs that meet the study's measure, by (h, seed); those left out go into
    result["left_out"] and a note."""
    finished = [r for r in runs if r.status == "done" and r.test_hypotheses]
    left_out = [r for r in finished if not measured_as_chosen(r)]
    notes = []
    if left_out:
        result["left_out"] = [r.name for r in left_out]
        notes.append(
            "left out of the tests, their evaluated checkpoint not the loss-selected one (the study's measure): "
            + ", ".join(
                f"{r.name} (evaluated update {num(r.updates)}, lowest validation loss at {num(r.loss_selected_update)})"
                for r in left_out
            )
        )
    return {(r.heads, r.seed): r for r in finished if measured_as_chosen(r)}, notes


def _compares_heads(cells) -> bool:
    """Whether (h, seed) cells hold h=8 and another h: something to compare."""
    heads = {h for h, _ in cells}
    return BASELINE_HEADS in heads and heads != {BASELINE_HEADS}


def _test_references(study_dir: Path, runs: list[RunRecord]) -> tuple[list[str] | None, str]:
    """The test references, as the config of a finished h=8 run names them; None and why if unavailable."""
    source = next((r for r in runs if r.status == "done" and r.heads == BASELINE_HEADS), None)
    try:
        corpus = test_split(study_dir, source.run_dir)
    except MhatrainError as exc:
        return None, f"test references unavailable ({exc}): significance tests skipped"
    return corpus.tgt, ""


def _sentence_statistics(
    study_dir: Path, done: dict[S.Cell, RunRecord], references: list[str], notes: list[str]
) -> dict[S.Cell, np.ndarray]:
    """Per-sentence BLEU statistics of each run's test hypotheses; a run with another number of lines
    than references is left out (with a note)."""
    stats = {}
    for key, run in done.items():
        hyps = (study_dir / run.test_hypotheses).read_text(encoding="utf-8").splitlines()
        if len(hyps) != len(references):
            notes.append(
                f"{run.name}: {len(hyps)} test hypotheses for {len(references)} references: left out of "
                f"the significance tests"
            )
            continue
        stats[key] = S.sentence_statistics(hyps, references)
    return stats


def _seed_level_test(
    h: int, test: S.ContrastTest | None, tests: S.HeadCountTests, cells: list[S.Cell], factors: dict
) -> dict:
    """One h against h=8 by the h × seed-block test (test: its ContrastTest, None with one seed per h)."""
    seeds = sorted(s for g, s in cells if g == h)
    level = {
        "heads": h,
        "seeds": seeds,
        "baseline_seeds": sorted(s for g, s in cells if g == BASELINE_HEADS),
        "mean_difference": None if test is None else round(test.estimate, 4),
        "ci95": None if test is None else [round(v, 4) for v in test.interval],
        "std_error": None if test is None else round(test.std_error, 4),
        "df": tests.df,
        "p_value": None if test is None else round(test.p_value, 4),
        "p_adjusted": None if tests.adjusted[h] is None else round(tests.adjusted[h], 4),
        "model_variance": None if test is None else round(test.model_variance, 4),
        "shared_sentence_variance": None if test is None else round(test.shared_variance, 4),
        "verdict": "not tested" if test is None else S.verdict(test, tests.adjusted[h], LEVEL, tests.higher_is_better),
        "factors": factors[h],
        "baseline_factors": factors[BASELINE_HEADS],
    }
    if test is None:  # one seed per h: no residual to test against; Δ is still the fit's (paired) difference
        delta = tests.differences.get(h)
        level["mean_difference"] = None if delta is None else round(delta, 4)
    note = _factor_note(factors[h], factors[BASELINE_HEADS], h)
    if note:
        level["factor_note"] = note
    return level


def _trend(trend: S.ContrastTest, cells: list[S.Cell]) -> dict:
    """The slope of BLEU against log2 h (trend: the ContrastTest of significance.head_count_tests)."""
    return {
        "heads": sorted({h for h, _ in cells}),
        "slope_per_doubling": round(trend.estimate, 4),
        "ci95": [round(v, 4) for v in trend.interval],
        "std_error": round(trend.std_error, 4),
        "df": trend.df,
        "p_value": round(trend.p_value, 6),
    }


def _per_seed_tests(stats: dict[S.Cell, np.ndarray], done: dict[S.Cell, RunRecord], indices) -> list[dict]:
    """Each h against h=8 of the same seed (paired bootstrap, sentence noise only), Holm within the seed."""
    out = []
    for seed in sorted(s for h, s in stats if h == BASELINE_HEADS):
        tests = []
        for h in sorted({h for h, _ in stats if h != BASELINE_HEADS}):
            if (h, seed) in stats:
                test = S.paired_bootstrap([stats[h, seed]], [stats[BASELINE_HEADS, seed]], indices)
                tests.append(
                    {
                        "heads": h,
                        "seed": seed,
                        "run": done[h, seed].name,
                        "baseline": done[BASELINE_HEADS, seed].name,
                        "bleu": done[h, seed].test_bleu,
                        "baseline_bleu": done[BASELINE_HEADS, seed].test_bleu,
                        "difference": round(test.difference, 2),
                        "difference_ci95": list(test.interval),
                        "p_value": round(test.p_value, 4),
                    }
                )
        for test, adjusted in zip(tests, S.holm([t["p_value"] for t in tests])):
            test["p_holm"] = round(adjusted, 4)
        out += tests
    return out


# ----------------------------------------------------------------------------- precision and device


def _factor_counts(runs: list[RunRecord]) -> dict[str, int]:
    """How many runs trained with each precision · device."""
    counts: dict[str, int] = {}
    for run in runs:
        counts[factor_of(run)] = counts.get(factor_of(run), 0) + 1
    return dict(sorted(counts.items()))


def factor_text(counts: dict[str, int]) -> str:
    """Counts of precision · device as text: 'bf16 · GPU ×3, fp32 · GPU ×1'."""
    return ", ".join(f"{label} ×{n}" for label, n in counts.items()) or "none"


def _factor_note(ours: dict[str, int], baseline: dict[str, int], h: int) -> str | None:
    """A warning where precision · device differ between h and h=8, or vary within both."""
    counts = f"h={h}: {factor_text(ours)}; h={BASELINE_HEADS}: {factor_text(baseline)}"
    if set(ours) != set(baseline):
        return f"precision · device differ between the two h ({counts}): Δ may mix h with them"
    if len(ours) > 1:
        return f"precision · device vary within both h ({counts}): compare their shares"
    return None


# ----------------------------------------------------------------------------- reading a verdict back


# The seed-level test's fields that may hold the adjusted p its verdict rests on, in order of preference.
ADJUSTED_P_FIELDS = ("p_adjusted",)


def verdict_of(row: dict) -> tuple[float | None, str | None]:
    """(adjusted p, verdict) of an h against h=8, as a row of report["by_heads"] holds them: the one place
    the terminal table and the regime map read them from. None for what the row does not have (h=8
    itself, no finished runs)."""
    test = row.get("seed_test") or {}
    adjusted = next((test[name] for name in ADJUSTED_P_FIELDS if test.get(name) is not None), None)
    return adjusted, test.get("verdict")
