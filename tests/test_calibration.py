"""Calibration of the head-count verdict by simulation (mhatrain/study/stats/calibration.py), on the committed
study's design (seeds 6/3/6/3/3 of h = 1/4/8/16/32, two runs left out), for BLEU and cross-entropy.

Under the null every contrast's raw two-sided p must fall below α = 0.05 in 5% of studies: not more (a
liberal test: the shared sentence term missing, the residual variance too small, a normal reference
where the residual has few degrees of freedom) and not much less (a conservative one). The rate is
pooled over the five contrasts of a study (four h against h=8 and the trend), and its bounds are ±3.5
standard errors over the studies simulated (each SE is the measured spread of the per-study rate over
√studies; a study's contrasts share h=8, so they are not five independent draws). Holm keeps the family
false-positive rate at or below α. The cross-entropy simulation is cheap (its sentence term is in closed
form), so it carries the tight bounds; BLEU pays for 200 resampled test sets per study.

Known limits, shown by the xfail tests below: the t reference takes the residual degrees of freedom
alone, so where a large part of a contrast's variance is the (well-estimated) shared sentence term the
test is conservative; and the residual variance is pooled over h, so an h noisier than the rest is
called different too often.
"""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from mhatrain.study.stats import calibration as C
from mhatrain.study.stats.significance import bleu_from_sums, sentence_statistics

from .conftest import ROOT

POOL = ROOT / "tests" / "data" / "multi30k-test-stats.npz"
STUDY = ROOT / "results" / "ablate-multi30k"
REFERENCES = ROOT.parent / "shared" / "data" / "multi30k" / "test_2016_flickr.de.gz"
ALPHA = 0.05
BLEU_STUDIES = 1000
CE_STUDIES = 4000
# The pooled rate's bounds: 3.5 SE (SE measured over studies: 0.0036 for BLEU at 1,000 studies, 0.0018
# for cross-entropy at 4,000; the binomial SE of one contrast alone would be 0.0069 and 0.0034) around α,
# and below it what the t reference legitimately gives where part of the variance is the shared term
# (see the xfails): 0.043 for BLEU with the measured shared term (6,100 studies over five seeds, this
# one's 1,000 at 0.036), 0.038 for cross-entropy with the default one.
BLEU_BOUNDS = (0.043 - 3.5 * 0.0036, ALPHA + 3.5 * 0.0036)
CE_BOUNDS = (ALPHA - 3.5 * 0.0018, ALPHA + 3.5 * 0.0018)


@pytest.fixture(scope="module")
def pool() -> np.ndarray:
    return np.load(POOL)["stats"]


@pytest.fixture(scope="module")
def lengths(pool) -> np.ndarray:
    """Target tokens per test sentence: the references' lengths (13a tokens) and the end of sentence."""
    return pool[0, :, 1] + 1.0


@pytest.fixture(scope="module")
def bleu_null(pool) -> list[C.Study]:
    """1,000 null BLEU studies at the study's design, with the shared sentence term of the size measured."""
    rng = np.random.default_rng(20261207)
    return list(C.simulate(pool, C.STUDY_CELLS, BLEU_STUDIES, rng, shared=C.REALISTIC_SHARED))


@pytest.fixture(scope="module")
def ce_null(lengths) -> C.Calibration:
    """4,000 null cross-entropy studies at the study's design, default sizes (shared sd 0.0049 in h − h')."""
    return C.calibrate(C.simulate_cross_entropy(lengths, C.STUDY_CELLS, CE_STUDIES, np.random.default_rng(49)))


@pytest.fixture(scope="module")
def ce_large_shared(lengths) -> C.Calibration:
    """1,000 null cross-entropy studies whose shared term (sd 0.0185 nats/token in h − h') outweighs the
    seed noise of a contrast (0.006–0.008)."""
    rng = np.random.default_rng(11)
    return C.calibrate(C.simulate_cross_entropy(lengths, C.STUDY_CELLS, 1000, rng, shared=C.CE_LARGE_SHARED))


@pytest.fixture(scope="module")
def ce_unequal(lengths) -> C.Calibration:
    """2,000 null cross-entropy studies with h=16 and h=32 twice as noisy over seeds as the rest (sd 0.017
    against 0.0085 nats/token, as the committed study's 0.0165 for h=16 against 0.0058–0.0105)."""
    rng = np.random.default_rng(19)
    return C.calibrate(C.simulate_cross_entropy(lengths, C.STUDY_CELLS, 2000, rng, seed_sd={16: 0.017, 32: 0.017}))


@pytest.mark.skipif(not REFERENCES.is_file(), reason="needs the Multi30k references beside the repository")
def test_the_pool_is_the_committed_systems():
    with gzip.open(REFERENCES, "rt", encoding="utf-8") as f:
        references = f.read().splitlines()
    shipped = np.load(POOL)
    for name, stats in zip(shipped["systems"], shipped["stats"]):
        # a point retrained since keeps its first version in bleu-selected/ (see the study's README)
        first = STUDY / "bleu-selected" / name if (STUDY / "bleu-selected" / name).is_dir() else STUDY / name
        hyps = (first / "eval" / "test.beam4.hyp.txt").read_text(encoding="utf-8").splitlines()
        assert np.array_equal(sentence_statistics(hyps, references), stats), name


def test_the_study_design_is_the_committed_one():
    assert len(C.STUDY_CELLS) == 19 and (4, 3) not in C.STUDY_CELLS and (32, 3) not in C.STUDY_CELLS
    assert {h: sum(g == h for g, _ in C.STUDY_CELLS) for h in (1, 4, 8, 16, 32)} == {1: 6, 4: 2, 8: 6, 16: 3, 32: 2}


def test_the_simulated_noise_has_the_observed_size(bleu_null, ce_null):
    """The committed study: h × seed-block residual sd 0.55 BLEU (three seeds), shared sentence sd of
    h=1 − h=8 0.08 BLEU; seed sd of validation cross-entropy 0.006–0.017 nats/token per h."""
    bleu = C.calibrate(bleu_null[:200])
    assert 0.42 <= bleu.residual_sd <= 0.65
    assert 0.05 <= bleu.shared_sd[1] <= 0.12
    assert 0.009 <= ce_null.residual_sd <= 0.011
    assert ce_null.shared_sd[1] == pytest.approx(0.0049, abs=0.0005)


def test_bleu_verdict_is_calibrated_at_the_study_design(bleu_null):
    rates = C.calibrate(bleu_null)
    assert rates.studies == BLEU_STUDIES
    assert BLEU_BOUNDS[0] <= rates.pooled <= BLEU_BOUNDS[1], rates
    assert rates.family_false_positive <= ALPHA + 3.5 * np.sqrt(ALPHA * (1 - ALPHA) / BLEU_STUDIES), rates


def test_the_previous_rule_fails_the_same_calibration(bleu_null):
    """Sentence bootstrap of the seed average (no seed noise) and |Δ| beyond the seed sd: anti-conservative."""
    assert C.rates(bleu_null, {"previous rule": C.previous_verdicts})["previous rule"].family_false_positive > 0.06


def test_bleu_verdict_holds_when_the_shared_sentence_noise_is_large(pool):
    """ρ = 0.7: the seeds of an h agree on most sentences, so the shared term (sd 0.34 BLEU in h − h')
    outweighs the seed noise of a contrast; a test without it calls a difference in most studies."""
    studies = C.simulate(pool, C.STUDY_CELLS, 300, np.random.default_rng(3), shared=C.LARGE_SHARED)
    rates = C.calibrate(studies)
    assert rates.pooled <= ALPHA + 3.5 * 0.006, rates  # SE over 300 studies ≈ 0.006
    assert rates.family_false_positive <= ALPHA + 3.5 * np.sqrt(ALPHA * (1 - ALPHA) / 300), rates
    assert rates.shared_sd[1] > 0.25


def test_bleu_power_at_the_study_design(pool):
    """+1.0 BLEU on h=1 (the size the study saw): found in about half the studies, never the wrong way."""
    studies = C.simulate(
        pool, C.STUDY_CELLS, 200, np.random.default_rng(5), effects={1: 1.0}, shared=C.REALISTIC_SHARED
    )
    rates = C.calibrate(studies, null_heads={4, 16, 32})
    assert 0.3 <= rates.called_better[1] <= 0.8, rates
    assert rates.contrast_rejected[1] >= rates.called_better[1]


def test_cross_entropy_contrasts_reject_at_alpha_without_shared_noise(lengths):
    """No h-specific sentence effect: the statistic is exactly Student's t on the residual degrees of
    freedom, so every contrast rejects in 5% of studies, no fewer and no more."""
    rates = C.calibrate(
        C.simulate_cross_entropy(lengths, C.STUDY_CELLS, CE_STUDIES, np.random.default_rng(7), shared=0)
    )
    assert CE_BOUNDS[0] <= rates.pooled <= CE_BOUNDS[1], rates
    assert rates.family_false_positive <= ALPHA + 3.5 * np.sqrt(ALPHA * (1 - ALPHA) / CE_STUDIES), rates


def test_cross_entropy_verdict_is_calibrated_at_the_study_design(ce_null):
    """With the shared term the test is a little conservative (0.038: the t reference takes the residual
    degrees of freedom alone, see the xfail below): bounded above by α's bound, below by that rate's."""
    assert ce_null.studies == CE_STUDIES
    assert 0.038 - 3.5 * 0.0018 <= ce_null.pooled <= CE_BOUNDS[1], ce_null
    assert ce_null.family_false_positive <= ALPHA + 3.5 * np.sqrt(ALPHA * (1 - ALPHA) / CE_STUDIES), ce_null


@pytest.mark.xfail(
    strict=True,
    reason="conservative with the shared term (0.038): the t reference takes the residual df alone; a "
    "Satterthwaite df for residual + shared variance gives 0.0500 ± 0.0019 on these studies",
)
def test_cross_entropy_contrasts_reject_at_alpha_at_the_study_design(ce_null):
    assert CE_BOUNDS[0] <= ce_null.pooled, ce_null


def test_cross_entropy_verdict_holds_when_the_shared_sentence_noise_is_large(ce_large_shared):
    """Without the shared term nearly every one of these studies would call a difference."""
    rates = ce_large_shared
    assert rates.pooled <= ALPHA + 3.5 * 0.0025, rates  # SE over 1,000 studies ≈ 0.0025
    assert rates.family_false_positive <= ALPHA + 3.5 * np.sqrt(ALPHA * (1 - ALPHA) / 1000), rates


@pytest.mark.xfail(
    strict=True,
    reason="conservative where the shared term dominates (pooled rate 0.023): the t reference uses the "
    "residual df alone; a Satterthwaite df for residual + shared variance would restore α",
)
def test_cross_entropy_contrasts_reject_at_alpha_when_the_shared_noise_is_large(ce_large_shared):
    assert ALPHA - 3.5 * 0.0025 <= ce_large_shared.pooled, ce_large_shared


def test_cross_entropy_power(lengths):
    """−0.03 nats/token on h=1 (the study saw −0.034): at the study's design and at three seeds per h."""
    study = C.calibrate(
        C.simulate_cross_entropy(lengths, C.STUDY_CELLS, 500, np.random.default_rng(13), effects={1: -0.03}),
        null_heads={4, 16, 32},
    )
    three = C.calibrate(
        C.simulate_cross_entropy(lengths, C.THREE_SEEDS_CELLS, 500, np.random.default_rng(17), effects={1: -0.03}),
        null_heads={4, 16, 32},
    )
    assert study.called_better[1] >= 0.7, study
    assert three.called_better[1] >= 0.4, three
    assert study.called_better[1] > three.called_better[1]


def test_unequal_seed_noise_keeps_the_family_rate(ce_unequal):
    """h=16 and h=32 twice as noisy over seeds as the rest: Holm still holds the family rate."""
    bound = ALPHA + 3.5 * np.sqrt(ALPHA * (1 - ALPHA) / ce_unequal.studies)
    assert ce_unequal.family_false_positive <= bound, ce_unequal


@pytest.mark.xfail(
    strict=True,
    reason="the residual variance is pooled over h: an h twice as noisy as the rest is called different "
    "in about 9% of null studies (h=32 at the study's design); a per-contrast variance would not be",
)
def test_unequal_seed_noise_keeps_each_contrasts_rate(ce_unequal):
    bound = ALPHA + 3.5 * np.sqrt(ALPHA * (1 - ALPHA) / ce_unequal.studies)
    assert ce_unequal.contrast_rejected[32] <= bound, ce_unequal


def test_an_effect_moves_bleu_by_its_size(pool):
    """The same studies (same random draws) with and without +1.0 BLEU on h=1."""
    base = bleu_from_sums(pool.sum(axis=1).astype(np.float64)).mean()
    shifted = C.simulate(pool, {1: 3, 8: 3}, 30, np.random.default_rng(1), effects={1: 1.0}, shared=0.3)
    same = C.simulate(pool, {1: 3, 8: 3}, 30, np.random.default_rng(1), shared=0.3)
    for a, b in zip(shifted, same):
        assert b.bleu[3:] == pytest.approx(a.bleu[3:])  # h=8 untouched
        assert a.bleu[:3] == pytest.approx(b.bleu[:3] * (1 + 1.0 / base))  # every match scaled: BLEU scaled
        assert a.bleu[:3] - b.bleu[:3] == pytest.approx(np.ones(3), abs=0.15)
        assert a.resampled[:, :3] == pytest.approx(b.resampled[:, :3] * (1 + 1.0 / base))


def test_the_seeds_of_an_h_share_sentences_only_when_asked(pool):
    """ρ > 0 makes two seeds of one h agree on more sentences than seeds of different h; ρ = 0 does not."""
    for rho, more in ((0.0, False), (0.9, True)):
        study = next(C.simulate(pool, {1: 2, 8: 2}, 1, np.random.default_rng(23), inner_samples=1000, shared=rho))
        resampled = study.resampled  # cells (1,1) (1,2) (8,1) (8,2)
        seed1, seed2 = resampled[:, 0] - resampled[:, 2], resampled[:, 1] - resampled[:, 3]
        assert (np.corrcoef(seed1, seed2)[0, 1] > 0.3) == more


def test_the_interaction_tests_keep_their_false_positive_rate(pool):
    """Varied studies of two cells that are the same (h ∈ {1, 8} × 3 seeds each, one shared test set):
    neither the omnibus test nor the cell against the reference calls a difference in over 6%."""
    rates = C.interaction_rates(pool, 2, 3, 1000, np.random.default_rng(20261205))
    assert rates.studies == 1000
    assert rates.omnibus <= 0.06 and rates.any_pair <= 0.06


def test_the_interaction_tests_find_an_effect_in_one_cell(pool):
    """+3 BLEU on h=1 in cell 1 only: Δ there differs from the reference cell's, and is called so."""
    rates = C.interaction_rates(pool, 2, 3, 100, np.random.default_rng(7), effect_in_cell={1: 3.0})
    assert rates.pair_called[1] >= 0.8 and rates.omnibus >= 0.8
