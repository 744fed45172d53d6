"""Each fixed layout (`ablate --layout`) against h=8 and against h=1 on test cross-entropy: the report's
"layouts" entry.

A layout point trains from scratch the heads per layer that `mhatrain prune` kept. If the layout is good
in itself, it should reach h=8's cross-entropy with far fewer heads, and beat h=1; if its quality came from
the full model it was cut from, it will not. The test is the one comparison.py runs on cross-entropy
against h=8: the arms (h=8, h=1 and every layout) are fitted together with a block per seed
(significance.fit_seed_blocks), so each Δ is a within-seed difference; its variance is the pooled
residual plus the test-sentence noise shared by the seeds of an arm (cross_entropy_covariance,
shared_sentence_variance); Holm–Bonferroni runs over every layout comparison. Cross-entropy, not BLEU:
it is the smoother measure, and what the pruning itself saw. The significance functions group trained
systems by an integer key (an h): an h arm keeps its h, the i-th layout takes the key −i.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np

from ...core.config import ModelConfig
from ..grid.directory import read_base_config, read_record
from ..grid.fixed_layouts import total_heads
from ..grid.run_records import RunRecord, run_entry
from . import significance as S
from .comparison import BASELINE_HEADS, LEVEL, read_nll, same_tokenisation

BASELINES = (BASELINE_HEADS, 1)  # every layout is set against these h, where the study has them

METHOD = {
    "measure": "test cross-entropy of eval (nats per reference token, teacher-forced, no label smoothing; lower "
    "is better), at each run's loss-selected checkpoint",
    "test": "the h × seed-block test of the report's cross-entropy tests, over the arms h=8, h=1 and every layout: "
    "Δ = layout − baseline within seeds, its variance the pooled residual (seed noise) plus the test-sentence "
    "noise shared by the seeds of an arm; two-sided t-test with the residual degrees of freedom",
    "correction": "Holm–Bonferroni over every layout comparison",
    "verdict": f"'better' or 'worse' (lower or higher cross-entropy than the baseline) only where the Holm-adjusted "
    f"p is < {LEVEL}; 'not tested' where an arm has fewer than 2 tested seeds or the design leaves no residual "
    "degrees of freedom",
}


def compare_layouts(study_dir: Path, runs: list[RunRecord]) -> dict | None:
    """The "layouts" entry of a study's report: each arm's runs and means, and each layout against h=8 and
    h=1 (those the study has); None for a study without layouts."""
    names = list(dict.fromkeys([*(read_record(study_dir).get("layouts") or {}), *(r.layout for r in runs if r.layout)]))
    if not names:
        return None
    keys = {f"h={h}": h for h in BASELINES if any(r.layout is None and r.heads == h for r in runs)}
    keys |= {name: -i for i, name in enumerate(names, 1)}
    members = {arm: [r for r in runs if _arm(r) == arm] for arm in keys}
    tested = {arm: [r for r in found if r.tested and r.test_nll is not None] for arm, found in members.items()}
    cells = [(keys[arm], r.seed) for arm in keys for r in tested[arm]]
    systems = [r for arm in keys for r in tested[arm]]
    values, covariance, source = _cross_entropy(study_dir, systems)
    comparisons = _comparisons(names, keys, tested, cells, values, covariance)
    by_cell = dict(zip(cells, values))
    model = read_base_config(study_dir).get("model") or {}
    return {
        "method": METHOD,
        "sentence_noise": source,
        "layouts": read_record(study_dir).get("layouts") or {},
        "arms": [
            _arm_entry(
                arm,
                members[arm],
                tested[arm],
                [by_cell[keys[arm], r.seed] for r in tested[arm]],
                _heads_total(model, keys[arm], members[arm]),
            )
            for arm in keys
        ],
        "comparisons": comparisons,
        "runs": [run_entry(r) for arm in keys if keys[arm] < 0 for r in members[arm]],
    }


def _heads_total(model: dict, key: int, members: list[RunRecord]) -> int | None:
    """An arm's heads over every attention module: a layout's from its runs, an h arm's from the base
    config's layer counts (the base config's `model` section; None where neither is known)."""
    if key < 0:
        return next((r.layout_heads for r in members if r.layout_heads is not None), None)
    if not model:
        return None
    layers = {key: model[key] for key in ("n_encoder_layers", "n_decoder_layers") if key in model}
    return total_heads(ModelConfig(n_heads=key, **layers))


def _arm(run: RunRecord) -> str:
    return run.layout if run.layout is not None else f"h={run.heads}"


def _cross_entropy(study_dir: Path, systems: list[RunRecord]) -> tuple[np.ndarray, np.ndarray | None, str]:
    """Each system's test cross-entropy and their test-sentence covariance (exact, from eval's per-sentence
    values; None where a run has none, or the runs tokenise the references differently)."""
    if not systems:
        return np.zeros(0), None, "no tested runs yet"
    per_sentence = [read_nll(study_dir, run) for run in systems]
    if all(p is not None for p in per_sentence) and same_tokenisation(per_sentence):
        nll, tokens = np.stack([p.nll for p in per_sentence]), np.stack([p.tokens for p in per_sentence])
        return nll.sum(axis=1) / tokens.sum(axis=1), S.cross_entropy_covariance(nll, tokens), "included"
    values = np.array([run.test_nll for run in systems], dtype=np.float64)
    return values, None, "left out: not every tested run has per-sentence test values of one tokenisation"


def _comparisons(names, keys, tested, cells, values, covariance) -> list[dict]:
    """Each layout against each baseline arm, Holm-adjusted over all of them."""
    fit = S.fit_seed_blocks(cells, values) if cells else None
    baselines = [arm for arm in keys if arm.startswith("h=")]
    pairs = [
        _comparison(name, baseline, tested, fit, {keys[name]: 1.0, keys[baseline]: -1.0}, cells, covariance)
        for name in names
        for baseline in baselines
    ]
    for (entry, test), adjusted in zip(pairs, S.holm([entry["p_value"] for entry, _ in pairs])):
        entry["p_holm"] = None if adjusted is None else round(adjusted, 4)
        if test is not None:
            entry["verdict"] = S.verdict(test, adjusted, LEVEL, higher_is_better=False)
    return [entry for entry, _ in pairs]


def _comparison(name, baseline, tested, fit, weights, cells, covariance) -> tuple[dict, S.ContrastTest | None]:
    """One layout against one baseline: Δ (layout − baseline) and, with 2 or more seeds of each, its test."""
    few = [arm for arm in (name, baseline) if len(tested[arm]) < 2]
    estimate = None if fit is None or any(k not in fit.heads for k in weights) else S.contrast_estimate(fit, weights)
    test = None
    if not few and estimate is not None:
        shared = 0.0 if covariance is None else float(S.shared_sentence_variance(covariance, cells, weights))
        test = S.contrast_test(fit, weights, shared)
    reason = None
    if few:
        reason = "; ".join(f"{arm} has {len(tested[arm])} tested seed(s), 2 needed" for arm in few)
    elif test is None:
        reason = "no residual degrees of freedom (or no seed shared by both arms)"
    entry = {
        "layout": name,
        "baseline": baseline,
        "seeds": sorted(r.seed for r in tested[name]),
        "baseline_seeds": sorted(r.seed for r in tested[baseline]),
        "mean_difference": None if estimate is None else round(estimate, 4),
        "ci95": None if test is None else [round(v, 4) for v in test.interval],
        "df": None if test is None else test.df,
        "p_value": None if test is None else round(test.p_value, 4),
        "verdict": "not tested",
        "reason": reason,
    }
    return entry, test


def _arm_entry(
    arm: str, members: list[RunRecord], tested: list[RunRecord], values: list[float], heads_total: int | None
) -> dict:
    """An arm's runs, its tested seeds, its mean test BLEU and cross-entropy over them (values: its tested
    runs' cross-entropy, as the test takes it); heads_total: its heads over every attention module."""
    return {
        "arm": arm,
        "heads_total": heads_total,
        "runs": len(members),
        "runs_done": sum(r.status == "done" for r in members),
        "seeds": [r.seed for r in tested],
        "test_bleu": _mean([r.test_bleu for r in tested]),
        "test_nll": _mean(values),
    }


def _mean(values: list) -> float | None:
    values = [float(v) for v in values if v is not None]
    return round(statistics.fmean(values), 4) if values else None
