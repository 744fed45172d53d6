"""Calibration of the head-count verdict by simulation: how often it calls a difference that is not
there (false-positive rate) and how often it finds one that is (power), for BLEU and for per-token
cross-entropy, on the study's own design.

**BLEU** (`simulate`). A synthetic study is built from per-sentence BLEU statistics of real trained
systems (the pool):
  * sentence noise: each study draws its own test set, N sentences resampled with replacement;
  * seed noise: each trained system (h, seed) is a new mixture of the pool, one pool system chosen per
    sentence with weights drawn from a Dirichlet distribution. Mixtures differ from each other in
    quality (seed noise) and in which sentences they translate well (sentence noise particular to each
    model), as real seeds do; `concentration` sets how much (a dict gives each h its own: unequal seed
    variance across h; 0.08 gives a seed sd of 0.66 BLEU against 0.50 at the default with ρ = 0.2). With the 15 committed Multi30k systems as the pool, `DEFAULT_CONCENTRATION`
    gives a median residual standard deviation of about 0.57 BLEU in the h × seed-block fit, against
    the 0.55 the three-seed study measured;
  * sentence noise shared by the seeds of an h (`shared` = ρ): each h draws a template, one pool system
    per sentence (uniformly, the same way for every h), and each of its seeds takes the template's
    choice for a sentence with probability ρ, else its own mixture's. On its test set an h then
    translates some sentences well whatever the seed: a difference between h that no number of seeds
    averages away and only the test's shared sentence term covers. Templates are drawn per sentence
    from one distribution, so on the population of sentences every h is still the same under the
    null. `REALISTIC_SHARED` gives that term the size the committed study measured (the shared
    standard deviation of h=1 − h=8 is 0.08 BLEU there); `LARGE_SHARED` makes it dominate.
Under the null every h is drawn the same way. An effect of h is added by scaling every n-gram match of
that h's systems, which multiplies its corpus BLEU, so `effects={1: 1.0}` makes h=1 about 1.0 BLEU
better than the rest.

**Cross-entropy** (`simulate_cross_entropy`), parametric: the summed reference NLL of sentence i under
trained system c of head count h, with t_i target tokens, is
    nll_ci = t_i · (CE_BASE + effect_h + offset_c + difficulty_i) + √t_i · (shared · z_hi + particular · z_ci)
where t_i is drawn with the sentences (the Multi30k test references' lengths: mean 13.1 tokens with the
end of sentence), difficulty_i (sd `CE_DIFFICULTY` nats/token) is shared by every system, z_hi by every
seed of h (the h-specific sentence effect, `CE_SHARED` nats per √token), z_ci is particular to each
system (`CE_PARTICULAR`), and offset_c (sd `CE_SEED` nats/token, a dict for unequal variance across h)
is the rest of the seed noise. With the defaults a system's cross-entropy varies over seeds by 0.0100
nats/token (offset 0.0085, particular part 0.0052), as the committed study's validation cross-entropy
does (sd 0.006–0.017 per h, 0.0094 pooled), and the shared part of h − h' has sd 0.0049. Its test uses
`cross_entropy_covariance` (closed form, no resampling), so it is cheap enough for many studies.

`STUDY_CELLS` is the committed study's design: seeds 6/3/6/3/3 of h = 1/4/8/16/32, h=4 seed 3 and h=32
seed 3 left out. `calibrate` runs the verdict (`significance.head_count_tests`) on each study and
counts the family false-positive rate (Holm over h), the rate of each contrast's raw two-sided p below
α (pooled over the null contrasts, which should be α itself: a bound on both sides catches an
instrument that is too liberal and one that is too conservative), and the power.

`interaction_rates` does the same for the interaction tests of a varied study (interaction.py): cells
of h ∈ {1, 8} drawn on one shared test set, every cell the same under the null, and an effect added to
h=1 in one cell for the power.

`previous_verdicts` is the rule the report used before (Holm-adjusted bootstrap of the seed-averaged
BLEU below 0.05 and a difference beyond the larger seed standard deviation), kept to show that it
fails this calibration.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from . import significance as S
from .interaction import interaction

DEFAULT_CONCENTRATION = 0.25  # Dirichlet concentration per pool system (15 systems: residual sd ≈ 0.57 BLEU)
INNER_SAMPLES = 200  # resampled test sets per synthetic study (the shared sentence variance, the old bootstrap)
REALISTIC_SHARED = 0.2  # ρ: shared sd of h − h=8 ≈ 0.09 BLEU; the committed study measured 0–0.11 (h=1: 0.08)
LARGE_SHARED = 0.7  # ρ: the shared term larger than the seed noise of a contrast

# The committed study: seeds 6/3/6/3/3 of h = 1/4/8/16/32, two runs left out (h04-seed3, h32-seed3).
LEFT_OUT = {(4, 3), (32, 3)}
STUDY_CELLS: list[S.Cell] = [
    (h, s) for h, n in ((1, 6), (4, 3), (8, 6), (16, 3), (32, 3)) for s in range(1, n + 1) if (h, s) not in LEFT_OUT
]
THREE_SEEDS_CELLS: list[S.Cell] = [(h, s) for h in (1, 4, 8, 16, 32) for s in (1, 2, 3)]

CE_BASE = 1.72  # nats/token: h=8's validation cross-entropy in the committed study
CE_DIFFICULTY = 0.5  # nats/token: sd over sentences of a sentence's cross-entropy, shared by every system
CE_SHARED = 0.4  # nats per √token: the sentence effect shared by the seeds of an h (0.0035 per h in a corpus)
CE_PARTICULAR = 0.6  # nats per √token: the sentence noise particular to each system (0.0052 in a corpus)
CE_SEED = 0.0085  # nats/token: sd of each system's offset (with the particular part: 0.0100 over seeds)
CE_LARGE_SHARED = 1.5  # nats per √token: the shared term (0.019 in h − h') larger than a contrast's seed noise


def design_cells(design: dict[int, int] | list[S.Cell]) -> list[S.Cell]:
    """The trained systems (h, seed) of a design: seeds[h] seeds 1..n of each h, or the cells themselves."""
    if isinstance(design, dict):
        return [(h, s) for h in sorted(design) for s in range(1, design[h] + 1)]
    return list(design)


def _per_cell(value: float | dict[int, float], cells: list[S.Cell], default: float) -> np.ndarray:
    if isinstance(value, dict):
        return np.array([value.get(h, default) for h, _ in cells], dtype=np.float64)
    return np.full(len(cells), float(value))


@dataclass
class Study:
    """One synthetic study: its trained systems, their BLEU on its test set and on resamples of it."""

    cells: list[S.Cell]
    bleu: np.ndarray  # [cells]
    resampled: np.ndarray  # [samples, cells]

    def tests(self, baseline: int = 8) -> S.HeadCountTests:
        return S.head_count_tests(self.cells, self.bleu, S.resampled_covariance(self.resampled), baseline)


def simulate(
    pool: np.ndarray,
    seeds: dict[int, int] | list[S.Cell],
    studies: int,
    rng: np.random.Generator,
    effects: dict[int, float] | None = None,
    concentration: float | dict[int, float] = DEFAULT_CONCENTRATION,
    inner_samples: int = INNER_SAMPLES,
    shared: float = 0.0,
) -> Iterator[Study]:
    """Synthetic studies from pool [systems, N, 10] (per-sentence BLEU statistics of real systems on one
    test set): the trained systems of the design `seeds` (seeds[h] of each h, or a list of cells), each a
    fresh mixture of the pool; effects[h] BLEU added to h (approximately: its matches are scaled by
    1 + effect / BLEU of the pool); concentration per h (a dict: unequal seed noise across h);
    shared: ρ, the share of sentences on which the seeds of an h agree (see the module docstring)."""
    pool = np.asarray(pool, dtype=np.float64)
    systems, n, _ = pool.shape
    cells = design_cells(seeds)
    heads = sorted({h for h, _ in cells})
    of_head = np.array([heads.index(h) for h, _ in cells])
    base = float(S.bleu_from_sums(pool.sum(axis=1)).mean())
    scale = np.ones(len(cells))
    for i, (h, _) in enumerate(cells):
        scale[i] += (effects or {}).get(h, 0.0) / base
    alphas = _per_cell(concentration, cells, DEFAULT_CONCENTRATION)
    counts = S.resample_counts(n, inner_samples, seed=int(rng.integers(2**31)))
    for _ in range(studies):
        sentences = rng.integers(0, n, size=n)  # this study's test set
        if isinstance(concentration, dict):
            weights = np.stack([rng.dirichlet(np.full(systems, a)) for a in alphas])
        else:
            weights = rng.dirichlet(np.full(systems, alphas[0]), size=len(cells))  # [cells, systems]
        cumulative = np.cumsum(weights, axis=1)
        cumulative[:, -1] = 1.0
        draws = rng.random((len(cells), n))
        chosen = np.stack([np.searchsorted(c, d) for c, d in zip(cumulative, draws)])  # [cells, N] pool system
        if shared > 0:
            template = rng.integers(0, systems, size=(len(heads), n))  # [h, N] each h's own choice per sentence
            chosen = np.where(rng.random((len(cells), n)) < shared, template[of_head], chosen)
        stats = pool[chosen, sentences[None, :]]  # [cells, N, 10]
        stats[:, :, 2:6] *= scale[:, None, None]
        yield Study(cells, S.bleu_from_sums(stats.sum(axis=1)), _resampled_bleus(stats, counts))


def _resampled_bleus(stats: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """`significance.resampled_bleus`, its matrix product done by torch: numpy's BLAS spreads this small
    product over every core, at several times the CPU time (torch keeps the threads it is given)."""
    import torch  # on use: only the simulation needs it

    systems, n, k = stats.shape
    flat = torch.from_numpy(np.ascontiguousarray(stats.transpose(1, 0, 2).reshape(n, systems * k), dtype=np.float32))
    sums = (torch.from_numpy(np.ascontiguousarray(counts, dtype=np.float32)) @ flat).numpy()  # exact: integers < 2^24
    return S.bleu_from_sums(sums.reshape(len(counts), systems, k))


@dataclass
class CrossEntropyStudy:
    """One synthetic study of per-token cross-entropy: per-sentence NLL sums and token counts per system."""

    cells: list[S.Cell]
    nll: np.ndarray  # [cells, N] summed NLL of each sentence's reference (nats)
    tokens: np.ndarray  # [cells, N] its target tokens

    @property
    def values(self) -> np.ndarray:
        return self.nll.sum(axis=1) / self.tokens.sum(axis=1)

    def tests(self, baseline: int = 8) -> S.HeadCountTests:
        covariance = S.cross_entropy_covariance(self.nll, self.tokens)
        return S.head_count_tests(self.cells, self.values, covariance, baseline, higher_is_better=False)


def simulate_cross_entropy(
    lengths: np.ndarray,
    seeds: dict[int, int] | list[S.Cell],
    studies: int,
    rng: np.random.Generator,
    effects: dict[int, float] | None = None,
    seed_sd: float | dict[int, float] = CE_SEED,
    shared: float = CE_SHARED,
    particular: float = CE_PARTICULAR,
    difficulty: float = CE_DIFFICULTY,
) -> Iterator[CrossEntropyStudy]:
    """Synthetic cross-entropy studies (see the module docstring): lengths [N] target tokens of the test
    set's sentences, resampled with replacement for each study; effects[h] nats/token added to h (negative:
    better); seed_sd per h (a dict: unequal seed noise across h)."""
    lengths = np.asarray(lengths, dtype=np.float64)
    n = len(lengths)
    cells = design_cells(seeds)
    heads = sorted({h for h, _ in cells})
    of_head = np.array([heads.index(h) for h, _ in cells])
    effect = np.array([(effects or {}).get(h, 0.0) for h, _ in cells])
    sds = _per_cell(seed_sd, cells, CE_SEED)
    for _ in range(studies):
        tokens = lengths[rng.integers(0, n, size=n)]  # [N] this study's test set
        rate = CE_BASE + difficulty * rng.standard_normal(n)  # [N] each sentence's difficulty, per token
        offset = effect + sds * rng.standard_normal(len(cells))  # [cells]
        common = shared * rng.standard_normal((len(heads), n))  # [h, N] shared by the seeds of each h
        noise = common[of_head] + particular * rng.standard_normal((len(cells), n))
        nll = tokens * (rate[None, :] + offset[:, None]) + np.sqrt(tokens) * noise
        yield CrossEntropyStudy(cells, nll, np.broadcast_to(tokens, nll.shape))


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


@dataclass
class Calibration:
    """What the verdict did over many synthetic studies (`calibrate`)."""

    studies: int
    level: float
    family_false_positive: float  # share of studies with any h of null_heads called better or worse (Holm)
    contrast_rejected: dict[int | str, float]  # per contrast (h against the baseline, "trend"): share of raw p < level
    pooled: float  # raw p < level pooled over the null contrasts: α where the test is calibrated
    pooled_se: float  # its standard error over these studies (a study's contrasts share the baseline)
    called_better: dict[int, float]  # per h, share of studies where it was called better (Holm)
    residual_sd: float  # median residual standard deviation of the seed-block fit (the seed noise simulated)
    shared_sd: dict[int, float]  # per h, median √(shared sentence variance) of its contrast with the baseline


def calibrate(
    studies: Iterable[Study | CrossEntropyStudy],
    baseline: int = 8,
    null_heads: set[int] | None = None,
    level: float = 0.05,
) -> Calibration:
    """Run the report's test (`significance.head_count_tests`, its raw p, Holm and verdict) on each study.
    null_heads: the h without a true difference from the baseline (default: every h); the trend counts
    as a null contrast only when every h is null."""
    family, better, rejected, per_study, residual, shared = 0, {}, {}, [], [], {}
    for study in studies:
        tests = study.tests(baseline)
        others = set(tests.against_baseline)
        null: set[int | str] = set(others if null_heads is None else null_heads & others)
        if null == others:
            null.add("trend")
        contrasts: dict[int | str, S.ContrastTest | None] = {**tests.against_baseline, "trend": tests.trend}
        hits = {key: test is not None and test.p_value < level for key, test in contrasts.items()}
        for key, hit in hits.items():
            rejected[key] = rejected.get(key, 0) + hit
        per_study.append(sum(hits[key] for key in null) / max(len(null), 1))
        called = False
        for h, test in tests.against_baseline.items():
            said = S.verdict(test, tests.adjusted[h], level, tests.higher_is_better)
            better[h] = better.get(h, 0) + (said == "better")
            called |= h in null and said != "no detectable difference"
            if test is not None:
                shared.setdefault(h, []).append(np.sqrt(test.shared_variance))
        family += called
        residual.append(np.nan if tests.residual_sd is None else tests.residual_sd)
    total = len(per_study)
    pooled = np.asarray(per_study)
    return Calibration(
        total,
        level,
        family / total,
        {k: v / total for k, v in rejected.items()},
        float(pooled.mean()),
        float(pooled.std(ddof=1) / np.sqrt(total)),
        {h: b / total for h, b in better.items()},
        float(np.nanmedian(residual)),
        {h: float(np.median(v)) for h, v in shared.items()},
    )


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
