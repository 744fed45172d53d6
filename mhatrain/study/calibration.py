"""Calibration of the head-count verdict by simulation: how often it calls a difference that is not
there (false-positive rate) and how often it finds one that is (power).

A synthetic study is built from per-sentence BLEU statistics of real trained systems (the pool):
  * sentence noise: each study draws its own test set, N sentences resampled with replacement;
  * seed noise: each trained system (h, seed) is a new mixture of the pool, one pool system chosen per
    sentence with weights drawn from a Dirichlet distribution. Mixtures differ from each other in
    quality (seed noise) and in which sentences they translate well (sentence noise particular to each
    model), as real seeds do; `concentration` sets how much. With the 15 committed Multi30k systems as
    the pool, `DEFAULT_CONCENTRATION` gives a median residual standard deviation of 0.57 BLEU in the
    h × seed-block fit, against the 0.55 the three-seed study measured.
Under the null every h is drawn the same way: each h is a noisy copy of one system. An effect of h is
added by scaling every n-gram match of that h's systems, which multiplies its corpus BLEU, so
`effects={1: 1.0}` makes h=1 about 1.0 BLEU better than the rest.

`interaction_rates` does the same for the interaction tests of a varied study (interaction.py): cells
of h ∈ {1, 8} drawn on one shared test set, every cell the same under the null, and an effect added to
h=1 in one cell for the power.

`previous_verdicts` is the rule the report used before (Holm-adjusted bootstrap of the seed-averaged
BLEU below 0.05 and a difference beyond the larger seed standard deviation), kept to show that it
fails this calibration.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from . import significance as S
from .interaction import interaction

DEFAULT_CONCENTRATION = 0.25  # Dirichlet concentration per pool system (15 systems: residual sd ≈ 0.57 BLEU)
INNER_SAMPLES = 200  # resampled test sets per synthetic study (the shared sentence variance, the old bootstrap)


@dataclass
class Study:
    """One synthetic study: its trained systems, their BLEU on its test set and on resamples of it."""

    cells: list[S.Cell]
    bleu: np.ndarray  # [cells]
    resampled: np.ndarray  # [samples, cells]


def simulate(
    pool: np.ndarray,
    seeds: dict[int, int],
    studies: int,
    rng: np.random.Generator,
    effects: dict[int, float] | None = None,
    concentration: float = DEFAULT_CONCENTRATION,
    inner_samples: int = INNER_SAMPLES,
) -> Iterator[Study]:
    """Synthetic studies from pool [systems, N, 10] (per-sentence BLEU statistics of real systems on one
    test set): seeds[h] trained systems of each h, each a fresh mixture of the pool; effects[h] BLEU added
    to h (approximately: its matches are scaled by 1 + effect / BLEU of the pool)."""
    pool = np.asarray(pool, dtype=np.float64)
    systems, n, _ = pool.shape
    cells = [(h, s) for h in sorted(seeds) for s in range(1, seeds[h] + 1)]
    base = float(S.bleu_from_sums(pool.sum(axis=1)).mean())
    scale = np.ones(len(cells))
    for i, (h, _) in enumerate(cells):
        scale[i] += (effects or {}).get(h, 0.0) / base
    counts = S.resample_counts(n, inner_samples, seed=int(rng.integers(2**31)))
    for _ in range(studies):
        sentences = rng.integers(0, n, size=n)  # this study's test set
        weights = rng.dirichlet(np.full(systems, concentration), size=len(cells))  # [cells, systems]
        cumulative = np.cumsum(weights, axis=1)
        cumulative[:, -1] = 1.0
        draws = rng.random((len(cells), n))
        chosen = (draws[:, :, None] > cumulative[:, None, :]).sum(axis=2)  # [cells, N] pool system per sentence
        stats = pool[chosen, sentences[None, :]]  # [cells, N, 10]
        stats[:, :, 2:6] *= scale[:, None, None]
        yield Study(cells, S.bleu_from_sums(stats.sum(axis=1)), S.resampled_bleus(stats, counts))


def verdicts(study: Study, baseline: int = 8, level: float = 0.05) -> dict[int, str]:
    """The report's verdict of every h against the baseline (`significance.head_count_tests`)."""
    tests = S.head_count_tests(study.cells, study.bleu, S.resampled_covariance(study.resampled), baseline)
    return {h: S.verdict(test, tests.adjusted[h], level) for h, test in tests.against_baseline.items()}


def previous_verdicts(study: Study, baseline: int = 8, level: float = 0.05) -> dict[int, str]:
    """The rule used until this calibration: 'better'/'worse' where the Holm-adjusted two-sided bootstrap
    p of the seed-averaged BLEU difference (sentence noise only) is below level and the difference exceeds
    the larger standard deviation over seeds of the two h."""
    heads = sorted({h for h, _ in study.cells})
    columns = {h: [i for i, (g, _) in enumerate(study.cells) if g == h] for h in heads}
    others = [h for h in heads if h != baseline]
    p_values, differences, spreads = [], [], []
    for h in others:
        observed = study.bleu[columns[h]].mean() - study.bleu[columns[baseline]].mean()
        resampled = study.resampled[:, columns[h]].mean(axis=1) - study.resampled[:, columns[baseline]].mean(axis=1)
        extreme = np.abs(resampled - resampled.mean()) >= abs(observed) - 1e-9
        p_values.append((1 + int(extreme.sum())) / (1 + len(resampled)))
        differences.append(observed)
        spreads.append(max(np.std(study.bleu[columns[h]], ddof=1), np.std(study.bleu[columns[baseline]], ddof=1)))
    out = {}
    for h, p, difference, spread in zip(others, S.holm(p_values), differences, spreads):
        called = p < level and abs(difference) > spread
        out[h] = ("better" if difference > 0 else "worse") if called else "no detectable difference"
    return out


@dataclass
class Rates:
    studies: int
    family_false_positive: float  # share of studies with any h of null_heads called better or worse
    called_better: dict[int, float]  # per h, share of studies where it was called better
    residual_sd: float  # median residual standard deviation of the seed-block fit (the seed noise simulated)


RULES = {"seed-block test": verdicts, "previous rule": previous_verdicts}


def rates(
    studies: Iterator[Study], rules: dict | None = None, baseline: int = 8, null_heads: set[int] | None = None
) -> dict[str, Rates]:
    """Run each verdict rule (default `RULES`) on the same studies. A false positive is a verdict other
    than 'no detectable difference' for an h in null_heads (default: every h, studies under the null)."""
    rules = RULES if rules is None else rules
    false = dict.fromkeys(rules, 0)
    better: dict[str, dict[int, int]] = {name: {} for name in rules}
    sds, total = [], 0
    for study in studies:
        total += 1
        sds.append(float(np.sqrt(S.fit_seed_blocks(study.cells, study.bleu).residual_variance)))
        for name, rule in rules.items():
            said = rule(study, baseline)
            null = set(said) if null_heads is None else null_heads
            false[name] += any(v != "no detectable difference" for h, v in said.items() if h in null)
            for h, v in said.items():
                better[name][h] = better[name].get(h, 0) + (v == "better")
    sd = float(np.median(sds))
    return {
        name: Rates(total, false[name] / total, {h: b / total for h, b in better[name].items()}, sd) for name in rules
    }


CELL_STRIDE = 1000  # a simulated varied study encodes (cell c, h) as the "head count" c · CELL_STRIDE + h


@dataclass
class InteractionRates:
    studies: int
    omnibus: float  # share of studies whose omnibus test (Holm over h) called Δ different between cells
    any_pair: float  # share of studies where any cell was called different from the reference cell (Holm)
    pair_called: dict[int, float]  # per cell (1, 2, ...), share of studies where it was called different


def interaction_rates(
    pool: np.ndarray,
    cells: int,
    seeds: int,
    studies: int,
    rng: np.random.Generator,
    effect_in_cell: dict[int, float] | None = None,
    level: float = 0.05,
) -> InteractionRates:
    """Simulated varied studies of `cells` cells, each h ∈ {1, 8} × `seeds` seeds, all on one test set
    per study; effect_in_cell[c]: BLEU added to h=1 of cell c (0 is the reference cell). Each cell's
    shared sentence variance comes from its own test against h=8, as the report takes it."""
    heads = {c * CELL_STRIDE + h: seeds for c in range(cells) for h in (1, 8)}
    effects = {c * CELL_STRIDE + 1: e for c, e in (effect_in_cell or {}).items()}
    omnibus = any_pair = 0
    called = dict.fromkeys(range(1, cells), 0)
    total = 0
    for study in simulate(pool, heads, studies, rng, effects=effects):
        total += 1
        tests = interaction(_cell_rows(study, cells), baseline=8)
        omnibus += any(t["p_holm"] is not None and t["p_holm"] < level for t in tests)
        pairs = [pair for t in tests for pair in t["against_reference"]]
        hits = [int(p["cell"]) for p in pairs if p["p_holm"] is not None and p["p_holm"] < level]
        any_pair += bool(hits)
        for cell in hits:
            called[cell] += 1
    return InteractionRates(total, omnibus / total, any_pair / total, {c: n / total for c, n in called.items()})


def _cell_rows(study: Study, cells: int) -> list[dict]:
    """The regime map's rows (interaction.py's input) of a simulated varied study."""
    rows = []
    for c in range(cells):
        columns = [i for i, (h, _) in enumerate(study.cells) if h // CELL_STRIDE == c]
        sub = [(h % CELL_STRIDE, s) for h, s in (study.cells[i] for i in columns)]
        bleu = dict(zip(sub, study.bleu[columns]))
        tests = S.head_count_tests(
            sub, study.bleu[columns], S.resampled_covariance(study.resampled[:, columns]), baseline=8
        )
        test = tests.against_baseline.get(1)
        seeds = sorted({s for _, s in sub})
        rows.append(
            {
                "cell": str(c),
                "heads": 1,
                "differences": [float(bleu[1, s] - bleu[8, s]) for s in seeds],
                "shared_variance": None if test is None else test.shared_variance,
            }
        )
        rows.append({"cell": str(c), "heads": 8, "differences": []})
    return rows
