"""Significance of BLEU differences between head counts, over seeds and test sentences.

Two sources of noise separate two trained systems' BLEU (Clark et al. 2011; Dror et al. 2018):
  * the seed that trained a model (initialisation, data order, dropout): each seed is one draw of a
    trained system;
  * the test sentences: the test set is one sample of sentences. Its noise has two parts. The part
    particular to each trained model (which sentences this model happens to translate well) differs
    from seed to seed, so it is already part of the spread of per-seed BLEU. The part shared by every
    seed of an h (sentences that h translates well whatever the seed) is not: no number of seeds
    reveals it, only resampling the sentences does.

The verdict's test, `head_count_tests`, covers both. It fits an h × seed-block model to the corpus
BLEU of every trained system (`fit_seed_blocks`: BLEU = effect of h + effect of seed + residual).
The residual variance, pooled over every h, holds the seed noise and the part of the sentence noise
particular to each model; its degrees of freedom (cells − h − seeds + 1) are far more than a per-h
t-test's. To it `shared_sentence_variance` adds the part of the sentence noise shared by the seeds of
an h: the covariance between different seeds' contrasts over resampled test sets. Each contrast
(each h against the baseline, and the trend of BLEU against log2 h) is then a two-sided t-test with
the residual degrees of freedom; p is analytic, so it has no resampling floor. The verdict uses the
Holm–Bonferroni adjustment (`holm`) over the contrasts with the baseline. Its false-positive rate is
checked by simulation (`mhatrain.study.stats.calibration`, tests/test_calibration.py).

Other tests kept for what they are:
  * `paired_bootstrap`: resample test sentences with replacement (the same resamples for every
    system), recompute corpus BLEU from per-sentence sufficient statistics, and count resampled
    differences whose distance from their own mean is at least the observed difference:
    p = (1 + #{|Δ* − mean Δ*| ≥ |Δ|}) / (1 + resamples), two-sided, floor 1 / (1 + resamples). For
    one seed of each system it asks whether these two trained models differ on the population of
    sentences, not whether the two h differ: it covers test-sentence noise only, none of the seed noise.
  * `holm`: Holm–Bonferroni adjustment of a family of p-values (several systems against one baseline).

sacreBLEU's own `--paired-bs` counts only one tail of a centred absolute difference (close to a
one-sided p); it is not used here, but the resamples are drawn as sacreBLEU draws them (numpy's
default_rng(12345).choice), so both see the same resampled test sets.
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass

import numpy as np

BOOTSTRAP_SAMPLES = 1000
BOOTSTRAP_SEED = 12345  # sacreBLEU's default SACREBLEU_SEED
# Resampled test sets behind the verdict's shared sentence variance: a covariance between seeds, small
# beside the variance it is estimated from, so it needs more resamples than a p-value (5,000: ± 0.001 BLEU²).
SENTENCE_SAMPLES = 5000


def _bleu():
    from sacrebleu.metrics import BLEU  # on use: the report's light paths (a partial study) need no scorer

    return BLEU()  # the settings of inference.scoring.bleu_score: cased, 13a, exp smoothing


def sentence_statistics(hypotheses: list[str], references: list[str]) -> np.ndarray:
    """[N, k] BLEU sufficient statistics (n-gram matches and totals, lengths) of each test sentence."""
    return np.asarray(_bleu()._extract_corpus_statistics(hypotheses, [references]), dtype=np.float64)


def bleu_of(statistics_sum: np.ndarray) -> float:
    """Corpus BLEU from summed sufficient statistics ([k])."""
    return float(_bleu()._compute_score_from_stats(list(statistics_sum)).score)


def resample_indices(n_sentences: int, samples: int = BOOTSTRAP_SAMPLES, seed: int = BOOTSTRAP_SEED) -> np.ndarray:
    """[samples, n_sentences] indices of test sentences drawn with replacement."""
    return np.random.default_rng(seed).choice(n_sentences, size=(samples, n_sentences), replace=True)


def resampled_bleu(stats: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """[samples] BLEU of one system on each resampled test set."""
    metric = _bleu()
    sums = stats[indices].sum(axis=1)  # [samples, k]
    return np.array([metric._compute_score_from_stats(list(row)).score for row in sums])


@dataclass
class BootstrapResult:
    difference: float  # mean-over-seeds BLEU of the system minus that of the baseline
    p_value: float  # two-sided, centred
    interval: tuple[float, float]  # 95% percentile interval of the resampled difference
    samples: int


def paired_bootstrap(system: list[np.ndarray], baseline: list[np.ndarray], indices: np.ndarray) -> BootstrapResult:
    """Two-sided paired bootstrap of the seed-averaged BLEU difference, system − baseline.

    system, baseline: per seed, [N, k] sentence statistics of one test set (one entry each: the
    classic single-run test). indices: `resample_indices(N, ...)`, shared by every comparison.
    """
    observed = statistics.fmean(bleu_of(s.sum(0)) for s in system) - statistics.fmean(
        bleu_of(s.sum(0)) for s in baseline
    )
    deltas = np.mean([resampled_bleu(s, indices) for s in system], axis=0) - np.mean(
        [resampled_bleu(s, indices) for s in baseline], axis=0
    )
    if all(np.array_equal(a, b) for a, b in zip(system, baseline)) and len(system) == len(baseline):
        p_value = 1.0  # the same output: no evidence of any difference
    else:
        extreme = np.abs(deltas - deltas.mean()) >= abs(observed) - 1e-9
        p_value = (1 + int(extreme.sum())) / (1 + len(deltas))
    low, high = np.percentile(deltas, [2.5, 97.5])
    return BootstrapResult(round(observed, 4), p_value, (round(float(low), 4), round(float(high), 4)), len(deltas))


def seed_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """Student-t interval of the mean over seeds: mean ± t(n−1) · sd / √n; None below two seeds."""
    n = len(values)
    if n < 2:
        return None
    from scipy import stats  # on use: scipy is slow to import, and most callers of this module never test

    mean, sd = statistics.fmean(values), statistics.stdev(values)
    half = float(stats.t.ppf(0.5 + confidence / 2, df=n - 1)) * sd / math.sqrt(n)
    return round(mean - half, 4), round(mean + half, 4)


def holm(p_values: list[float | None]) -> list[float | None]:
    """Holm–Bonferroni adjusted p-values (None entries are not part of the family and stay None):
    the i-th smallest of m is multiplied by (m − i), kept monotone, capped at 1."""
    present = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m = len(present)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(present):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


# ----------------------------------------------------------------------------- vectorised corpus BLEU


def bleu_from_sums(sums: np.ndarray) -> np.ndarray:
    """Corpus BLEU of summed sufficient statistics [..., 10] (hypothesis length, reference length,
    matches of 1..4-grams, hypothesis 1..4-grams) as sacreBLEU computes it (exp smoothing), over any
    leading axes at once: [..., 10] -> [...]."""
    sums = np.asarray(sums, dtype=np.float64)
    sys_len, ref_len = sums[..., 0], sums[..., 1]
    correct, total = sums[..., 2:6], sums[..., 6:10]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        bp = np.where(sys_len < ref_len, np.exp(1 - ref_len / np.where(sys_len > 0, sys_len, 1.0)), 1.0)
        bp = np.where(sys_len > 0, bp, 0.0)
        zeros = correct == 0
        smoothed = 100.0 / (2.0 ** np.cumsum(zeros, axis=-1) * total)  # sacreBLEU's exp smoothing of empty orders
        precision = np.where(total > 0, np.where(zeros, smoothed, 100.0 * correct / total), 0.0)
        score = bp * np.exp(np.log(precision).mean(axis=-1))
    return np.where(correct.any(axis=-1), score, 0.0)


def resample_counts(n_sentences: int, samples: int = BOOTSTRAP_SAMPLES, seed: int = BOOTSTRAP_SEED) -> np.ndarray:
    """[samples, n_sentences] how often each test sentence occurs in each resampled test set (the
    resamples of `resample_indices`, as counts, so that resampled sums are one matrix product)."""
    indices = resample_indices(n_sentences, samples, seed)
    flat = indices + n_sentences * np.arange(samples)[:, None]
    return np.bincount(flat.ravel(), minlength=samples * n_sentences).reshape(samples, n_sentences).astype(np.float32)


def resampled_bleus(stats: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """[samples, systems] corpus BLEU of every system on every resampled test set.

    stats: [systems, N, 10] per-sentence statistics on one test set; counts: `resample_counts(N, ...)`.
    Float32 sums are exact: every sum is an integer below 2^24."""
    systems, n, k = stats.shape
    flat = np.ascontiguousarray(stats.transpose(1, 0, 2).reshape(n, systems * k), dtype=np.float32)
    return bleu_from_sums((counts @ flat).reshape(len(counts), systems, k))


# ----------------------------------------------------------------------------- the h × seed-block test

Cell = tuple[int, int]  # (h, seed): one trained system


@dataclass
class BlockFit:
    """Least-squares fit of BLEU = effect of h + effect of seed + residual over the trained systems."""

    heads: list[int]
    effects: np.ndarray  # [..., len(heads)] the h effects; only their differences mean anything
    residual_variance: np.ndarray  # [...] σ² estimate: seed noise + sentence noise particular to each model
    df: int  # residual degrees of freedom: cells − rank of the design
    unscaled: np.ndarray  # [H, H] the h effects' covariance divided by σ²
    estimable: np.ndarray  # [H, H] whether effect i − effect j can be estimated from the design


@functools.lru_cache(maxsize=32)
def _design(cells: tuple[Cell, ...]) -> tuple[list[int], np.ndarray, np.ndarray, int, np.ndarray]:
    heads = sorted({h for h, _ in cells})
    seeds = sorted({s for _, s in cells})
    x = np.zeros((len(cells), len(heads) + len(seeds) - 1))
    for row, (h, s) in enumerate(cells):
        x[row, heads.index(h)] = 1.0
        if seeds.index(s):
            x[row, len(heads) + seeds.index(s) - 1] = 1.0
    pinv = np.linalg.pinv(x)
    rank = int(np.linalg.matrix_rank(x))
    projector = pinv @ x  # a contrast c is estimable when c · projector = c
    difference = np.zeros((len(heads), len(heads), x.shape[1]))
    for i in range(len(heads)):
        for j in range(len(heads)):
            difference[i, j, i] += 1.0
            difference[i, j, j] -= 1.0
    estimable = np.all(np.abs(difference @ projector - difference) < 1e-8, axis=-1)
    return heads, x, pinv, rank, estimable


def fit_seed_blocks(cells: list[Cell], bleu: np.ndarray) -> BlockFit:
    """Fit the h × seed-block model to BLEU [..., len(cells)] (leading axes: independent studies).

    The seed effect absorbs what every h of one seed shares (the same data order, say), so contrasts
    between h are within-seed comparisons. The residual variance is pooled over every h."""
    heads, x, pinv, rank, estimable = _design(tuple(cells))
    bleu = np.asarray(bleu, dtype=np.float64)
    theta = bleu @ pinv.T
    residual = bleu - theta @ x.T
    df = len(cells) - rank
    with np.errstate(divide="ignore", invalid="ignore"):
        variance = (residual**2).sum(axis=-1) / df if df > 0 else np.full(bleu.shape[:-1], np.nan)
    unscaled = (pinv @ pinv.T)[: len(heads), : len(heads)]
    return BlockFit(heads, theta[..., : len(heads)], variance, df, unscaled, estimable)


def resampled_covariance(resampled: np.ndarray) -> np.ndarray:
    """[..., cells, cells] covariance between trained systems of a measure over resampled test sets
    (resampled: [..., samples, cells], e.g. `resampled_bleus`): the test-sentence noise of each system and
    what two systems share of it, estimated by resampling (a measure without a closed form, such as BLEU)."""
    resampled = np.asarray(resampled, dtype=np.float64)
    centred = resampled - resampled.mean(axis=-2, keepdims=True)
    return np.einsum("...bi,...bj->...ij", centred, centred) / (resampled.shape[-2] - 1)


def cross_entropy_covariance(nll: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """[cells, cells] covariance between trained systems of their per-token cross-entropy over resampled
    test sets, in closed form: no resampling, so no Monte Carlo error.

    nll: [cells, N] summed negative log-likelihood of each test sentence's reference under each system;
    tokens: [cells, N] its reference tokens (a pair left out of the loss has 0 and 0). A system's
    cross-entropy is the ratio Σ nll / Σ tokens; resampling N sentences with replacement, its
    covariance with another's is, to first order in 1/N (the delta method, exact for the linearised
    ratio), Σ_i ψ_ai ψ_bi / N² with the influence ψ_ai = (nll_ai − CE_a · tokens_ai) / mean tokens_a."""
    nll, tokens = np.asarray(nll, dtype=np.float64), np.asarray(tokens, dtype=np.float64)
    n = nll.shape[-1]
    ce = nll.sum(axis=-1, keepdims=True) / tokens.sum(axis=-1, keepdims=True)
    influence = (nll - ce * tokens) / tokens.mean(axis=-1, keepdims=True)  # [cells, N], each summing to 0
    return influence @ influence.T / n**2


def shared_sentence_variance(covariance: np.ndarray, cells: list[Cell], weights: dict[int, float]) -> np.ndarray:
    """Variance of a contrast Σ_h weights[h] · value_h that comes from the test sentences and is shared
    by the seeds of each h (what the seed-block residual cannot hold). covariance: [..., cells, cells],
    the sentence-noise covariance between the trained systems (`resampled_covariance` for BLEU,
    `cross_entropy_covariance` for cross-entropy).

    Per seed that has every h of the contrast, the contrast L_s; the covariance of L_s and L_t between
    different seeds s ≠ t holds only what their test-sentence noise shares, averaged over the pairs and
    floored at 0. With fewer than two such seeds, the sentence variance of the contrast of seed-averaged
    values (which also holds the part particular to each model: conservative)."""
    covariance = np.asarray(covariance, dtype=np.float64)
    seeds = sorted({s for _, s in cells})
    complete = [s for s in seeds if all((h, s) in cells for h in weights)]
    if len(complete) >= 2:
        per_seed = np.zeros((len(complete), len(cells)))  # [seeds, cells]: the contrast L_s as cell weights
        for row, s in enumerate(complete):
            for h, w in weights.items():
                per_seed[row, cells.index((h, s))] = w
        cov = np.einsum("si,...ij,tj->...st", per_seed, covariance, per_seed)
        n = len(complete)
        off_diagonal = (cov.sum(axis=(-2, -1)) - np.trace(cov, axis1=-2, axis2=-1)) / (n * (n - 1))
        return np.maximum(off_diagonal, 0.0)
    averaged = np.zeros(len(cells))
    for h, w in weights.items():
        members = [i for i, c in enumerate(cells) if c[0] == h]
        averaged[members] = w / len(members)
    return np.einsum("i,...ij,j->...", averaged, covariance, averaged)


@dataclass
class ContrastTest:
    """A two-sided t-test of one contrast of h effects, covering seed and test-sentence noise."""

    estimate: float  # the contrast in BLEU (h minus the baseline, or BLEU per doubling of h)
    std_error: float
    df: int
    p_value: float  # two-sided
    interval: tuple[float, float]  # 95% t interval
    model_variance: float  # of the estimate, from the seed-block residual (seeds + model-specific sentence noise)
    shared_variance: float  # of the estimate, from sentence noise shared by the seeds of an h


def t_test(estimate, variance, df: int):
    """Two-sided p of estimate / √variance under Student's t with df degrees of freedom (arrays allowed)."""
    from scipy import stats  # on use, as above

    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.abs(estimate) / np.sqrt(variance)
    return np.where(variance > 0, 2 * stats.t.sf(t, df), np.where(np.abs(estimate) > 0, 0.0, 1.0))


def contrast_estimate(fit: BlockFit, weights: dict[int, float]) -> float | None:
    """Σ_h weights[h] · effect_h: Δ as the study defines it (for h against the baseline, the fit's
    within-seed difference; with every seed of both h and no other, the mean of per-seed differences).
    None where the design cannot estimate it. The one place Δ is computed, tested or not."""
    c = np.array([weights.get(h, 0.0) for h in fit.heads])
    nonzero = np.flatnonzero(c)
    if not all(fit.estimable[i, j] for i in nonzero for j in nonzero):
        return None
    return float(fit.effects @ c)


def contrast_test(fit: BlockFit, weights: dict[int, float], shared: float, confidence: float = 0.95):
    """Test Σ_h weights[h] · effect_h = 0 (weights summing to 0); None where the design cannot estimate
    it or leaves no residual degrees of freedom (one seed per h)."""
    from scipy import stats  # on use, as above

    estimate = contrast_estimate(fit, weights)
    if fit.df <= 0 or estimate is None:
        return None
    c = np.array([weights.get(h, 0.0) for h in fit.heads])
    model = float(fit.residual_variance * (c @ fit.unscaled @ c))
    variance = model + float(shared)
    half = float(stats.t.ppf(0.5 + confidence / 2, fit.df)) * math.sqrt(variance)
    return ContrastTest(
        estimate,
        math.sqrt(variance),
        fit.df,
        float(t_test(estimate, variance, fit.df)),
        (estimate - half, estimate + half),
        model,
        float(shared),
    )


def trend_weights(heads: list[int]) -> dict[int, float]:
    """Weights that turn h effects into the least-squares slope of BLEU against log2 h (per doubling)."""
    x = np.log2(np.asarray(heads, dtype=np.float64))
    centred = x - x.mean()
    return {h: float(w) for h, w in zip(heads, centred / (centred**2).sum())}


@dataclass
class HeadCountTests:
    """Every h against the baseline (raw and Holm-adjusted p) and the trend against log2 h."""

    against_baseline: dict[int, ContrastTest | None]
    adjusted: dict[int, float | None]
    trend: ContrastTest | None
    residual_sd: float | None
    df: int
    higher_is_better: bool = True  # BLEU; False for cross-entropy
    differences: dict[int, float | None] | None = None  # Δ of every h against the baseline, tested or not
    baseline: int | None = None  # the h every other h is compared with


def head_count_tests(
    cells: list[Cell],
    values: np.ndarray,
    covariance: np.ndarray | None,
    baseline: int,
    higher_is_better: bool = True,
) -> HeadCountTests:
    """The verdict's test: values [cells] is the measure (corpus BLEU, or per-token cross-entropy) of each
    trained system (h, seed) on the test set, covariance [cells, cells] their test-sentence noise
    (`resampled_covariance`, `cross_entropy_covariance`), or None where it is not known (the shared
    sentence term is then left out, and the test covers seed noise on these sentences only). See the
    module docstring."""
    fit = fit_seed_blocks(cells, values)
    others = [h for h in fit.heads if h != baseline]
    tests: dict[int, ContrastTest | None] = dict.fromkeys(others)
    if baseline not in fit.heads:  # nothing to compare with
        return HeadCountTests(tests, dict.fromkeys(others), None, None, fit.df, higher_is_better, dict(tests), baseline)
    for h in others:
        tests[h] = contrast_test(fit, {h: 1.0, baseline: -1.0}, _shared(covariance, cells, {h: 1.0, baseline: -1.0}))
    adjusted = dict(zip(others, holm([None if tests[h] is None else tests[h].p_value for h in others])))
    trend = None
    if len(fit.heads) >= 3:
        weights = trend_weights(fit.heads)
        trend = contrast_test(fit, weights, _shared(covariance, cells, weights))
    sd = math.sqrt(float(fit.residual_variance)) if fit.df > 0 else None
    differences = {h: contrast_estimate(fit, {h: 1.0, baseline: -1.0}) for h in others}
    return HeadCountTests(tests, adjusted, trend, sd, fit.df, higher_is_better, differences, baseline)


def _shared(covariance: np.ndarray | None, cells: list[Cell], weights: dict[int, float]) -> float:
    return 0.0 if covariance is None else float(shared_sentence_variance(covariance, cells, weights))


def verdict(
    test: ContrastTest | None, adjusted_p: float | None, level: float = 0.05, higher_is_better: bool = True
) -> str:
    """'better' or 'worse' only where the Holm-adjusted p is below level; else 'no detectable difference'.
    higher_is_better: False for a measure such as cross-entropy, where a lower value is better."""
    if test is None or adjusted_p is None or adjusted_p >= level:
        return "no detectable difference"
    return "better" if (test.estimate > 0) == higher_is_better else "worse"
