"""Significance of BLEU differences between systems, at the level of test sentences and of seeds.

Two sources of noise separate two trained systems' BLEU (Clark et al. 2011; Dror et al. 2018):
  * which sentences the test set happens to hold: covered by a paired bootstrap over test sentences;
  * which seed trained the model (initialisation, data order, dropout): covered only by training
    several seeds and testing over them.

Every p-value here is two-sided. The tests:
  * `paired_bootstrap`: resample test sentences with replacement (the same resamples for every
    system), recompute corpus BLEU from per-sentence sufficient statistics, and count resampled
    differences whose distance from their own mean is at least the observed difference:
    p = (1 + #{|Δ* − mean Δ*| ≥ |Δ|}) / (1 + resamples). With several seeds per system, Δ is the
    difference of the seed-averaged BLEU and each resample averages every seed's BLEU on the same
    sentences: the test covers sentence noise of the average, not the variance between seeds.
  * `paired_t_test`: a t-test over per-seed differences (seed s of one system against seed s of the
    other): covers the variance between seeds, not the test set's sentence noise.
  * `holm`: Holm–Bonferroni adjustment of a family of p-values (several systems against one baseline).

sacreBLEU's own `--paired-bs` counts only one tail of a centred absolute difference (close to a
one-sided p); it is not used here, but the resamples are drawn as sacreBLEU draws them (numpy's
default_rng(12345).choice), so both see the same resampled test sets.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np

BOOTSTRAP_SAMPLES = 1000
BOOTSTRAP_SEED = 12345  # sacreBLEU's default SACREBLEU_SEED


def _bleu():
    from sacrebleu.metrics import BLEU

    return BLEU()  # the settings of evaluate.bleu_score: cased, 13a, exp smoothing


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


@dataclass
class SeedTest:
    mean_difference: float
    std_difference: float | None
    p_value: float | None  # two-sided paired t-test; None below two seeds
    seeds: int


def paired_t_test(differences: list[float]) -> SeedTest:
    """Two-sided one-sample t-test that the mean per-seed difference is 0 (df = seeds − 1)."""
    n = len(differences)
    mean = statistics.fmean(differences)
    if n < 2:
        return SeedTest(round(mean, 4), None, None, n)
    sd = statistics.stdev(differences)
    if sd == 0:
        p = 1.0 if mean == 0 else 0.0
    else:
        from scipy import stats

        p = float(2 * stats.t.sf(abs(mean) / (sd / math.sqrt(n)), df=n - 1))
    return SeedTest(round(mean, 4), round(sd, 4), p, n)


def seed_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """Student-t interval of the mean over seeds: mean ± t(n−1) · sd / √n; None below two seeds."""
    n = len(values)
    if n < 2:
        return None
    from scipy import stats

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
