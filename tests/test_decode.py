"""Greedy and beam search: cache = no cache, batching cannot change results, beam scores."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from mhatrain.core.config import DecodeConfig
from mhatrain.data.tokens import BOS, EOS, PAD
from mhatrain.inference import search
from mhatrain.inference.search import (
    beam_search,
    best_reachable,
    greedy_search,
    length_limits,
    length_penalty,
    scored_beam_search,
)
from mhatrain.model.transformer import DecoderCache

from .conftest import small_model

VOCAB = 30
ALPHA = 0.6
# max_len_a = 0: every sentence gets the same length limit, whatever its batch mates.
FIXED_LIMIT = DecodeConfig(beam=4, alpha=ALPHA, max_len_a=0.0, max_len_b=12)


def random_model(
    seed: int = 0, norm: str = "post", eos_after_some_tokens: bool = True, tie: bool = True, vocab: int = VOCAB
):
    """d_model 32, 2 heads, 2+2 layers, no dropout.

    A random model rarely predicts EOS, so every search would run to the length limit. With
    `eos_after_some_tokens`, EOS's output embedding points along every third token's input
    embedding: EOS becomes likely after those tokens, and hypotheses end at different lengths.
    """
    model = small_model(vocab, norm, tie, seed, n_heads=2)
    if eos_after_some_tokens:
        with torch.no_grad():
            final = model.embed.weight[4::3].clone()
            model.output.weight[EOS] = final.sum(0) / final.norm(dim=1).mean()
    return model


def shift_logit(model, token: int, amount: float) -> None:
    """Add `amount` to one token's logit at every position, leaving the other logits unchanged.

    The final hidden state passes through a LayerNorm with a bias b, so logits gain W_out b;
    b = pinv(W_out) (amount · e_token) shifts exactly one logit, as W_out's rows are independent
    (V ≤ D). In a freshly built tied model the PAD row is zero (padding_idx), so its PAD logit is 0
    and cannot be shifted; training would change that row only through the output projection.
    """
    norm = model.decoder[-1].res_ffn.norm if model.cfg.norm == "post" else model.dec_norm
    target = torch.zeros(model.vocab_size)
    target[token] = amount
    with torch.no_grad():
        norm.bias.add_(torch.linalg.pinv(model.output.weight) @ target)


SOURCE_LENGTHS = [3, 5, 7, 4, 6, 2]
# Seeds whose random models end hypotheses at several different steps (most random models
# either say EOS at once or never; the tests check that this is still so) and never prefer PAD
# or BOS (see test_padding_token_is_never_part_of_a_hypothesis).
SEEDS = [0, 4, 7, 9]


def random_sources(seed: int = 0, lengths=SOURCE_LENGTHS, vocab: int = VOCAB) -> torch.Tensor:
    """[B, S] ids ≥ 4 (0..3 are PAD, UNK, BOS, EOS), padded at the end."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.full((len(lengths), max(lengths)), PAD, dtype=torch.long)
    for row, n in enumerate(lengths):
        src[row, :n] = torch.randint(4, vocab, (n,), generator=gen)
    return src


def alone(src: torch.Tensor, row: int) -> torch.Tensor:
    """One sentence of a padded batch, without padding: [1, S_row]."""
    return src[row][src[row] != PAD][None]


@torch.no_grad()
def normalised_score(model, src_row: torch.Tensor, hyp: list[int], alpha: float = ALPHA) -> float:
    """log P(hyp + EOS | src) / lp(|hyp| + 1): the score beam search maximises."""
    memory, src_mask = model.encode(src_row)
    tgt = torch.tensor([[BOS, *hyp, EOS]])
    logp = torch.log_softmax(model.decode(tgt[:, :-1], memory, src_mask)[0].float(), dim=-1)
    return float(logp.gather(1, tgt[0, 1:, None]).sum()) / length_penalty(len(hyp) + 1, alpha)


def max_steps(src_row: torch.Tensor, cfg: DecodeConfig) -> int:
    return int(cfg.max_len_a * int((src_row != PAD).sum()) + cfg.max_len_b)


# ----------------------------------------------------------------------------- length penalty


def test_length_penalty_known_values():
    """Wu et al. 2016: lp(Y) = ((5 + |Y|) / 6)^alpha, checked at values worked out by hand."""
    assert length_penalty(1, 0.6) == pytest.approx(1.0)  # a lone EOS is not penalised
    assert length_penalty(7, 1.0) == pytest.approx(2.0)  # (5 + 7) / 6
    assert length_penalty(13, 0.5) == pytest.approx(math.sqrt(3))  # sqrt(18 / 6)
    assert length_penalty(30, 0.0) == 1.0  # alpha = 0: no normalisation
    torch.testing.assert_close(length_penalty(torch.tensor([1.0, 7.0, 25.0]), 1.0), torch.tensor([1.0, 2.0, 5.0]))


# ----------------------------------------------------------------------------- greedy


@pytest.mark.parametrize("seed", SEEDS)
def test_greedy_with_cache_equals_without_cache(seed):
    model, src = random_model(seed), random_sources(seed)
    cfg = DecodeConfig(max_len_a=1.5, max_len_b=5)
    with_cache = greedy_search(model, src, cfg)
    assert with_cache == greedy_search(model, src, cfg, use_cache=False)
    assert len({len(h) for h in with_cache}) > 1  # hypotheses of several lengths: finished rows exist


@torch.no_grad()
def reference_greedy(model, src_row: torch.Tensor, steps: int) -> list[int]:
    """One sentence, no cache, no padding: append the argmax until EOS or `steps` tokens."""
    memory, src_mask = model.encode(src_row)
    out = [BOS]
    for _ in range(steps):
        token = int(model.decode(torch.tensor([out]), memory, src_mask)[0, -1].argmax())
        if token == EOS:
            break
        out.append(token)
    return out[1:]


@pytest.mark.parametrize("seed", SEEDS)
def test_batched_greedy_equals_reference_greedy_one_sentence_at_a_time(seed):
    model, src = random_model(seed), random_sources(seed)
    batched = greedy_search(model, src, FIXED_LIMIT)
    for row, hyp in enumerate(batched):
        assert hyp == reference_greedy(model, alone(src, row), FIXED_LIMIT.max_len_b), row


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_rows_leaving_the_batch_change_no_translation(seed, use_cache, monkeypatch):
    """Finished rows leave the batch (the cache keeps the others): the same translations as rows
    that stay to the end, and the batch does shrink."""
    model, src = random_model(seed), random_sources(seed)
    cfg = DecodeConfig(max_len_a=1.5, max_len_b=5)
    monkeypatch.setattr(search, "GREEDY_COMPACT", 2.0)  # never: every row stays to the end
    stayed = greedy_search(model, src, cfg, use_cache=use_cache)
    rows_kept = []
    reorder = DecoderCache.reorder

    def spy(self, rows, sentences=None):
        rows_kept.append(rows.numel())
        return reorder(self, rows, sentences)

    monkeypatch.setattr(DecoderCache, "reorder", spy)
    monkeypatch.setattr(search, "GREEDY_COMPACT", 1e-9)  # as soon as one row has finished
    assert greedy_search(model, src, cfg, use_cache=use_cache) == stayed
    assert rows_kept and min(rows_kept) < src.size(0)


# ----------------------------------------------------------------------------- beam search


@pytest.mark.parametrize("seed", SEEDS)
def test_beam_search_with_cache_equals_without_cache(seed):
    model, src = random_model(seed), random_sources(seed)
    cfg = DecodeConfig(beam=4, alpha=ALPHA, max_len_a=1.5, max_len_b=5)
    assert beam_search(model, src, cfg) == beam_search(model, src, cfg, use_cache=False)


def test_beam_of_one_is_greedy():
    model, src = random_model(), random_sources()
    assert beam_search(model, src, FIXED_LIMIT, beam=1) == greedy_search(model, src, FIXED_LIMIT)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("beam", [2, 4])
def test_batched_beam_search_equals_one_sentence_at_a_time(seed, beam):
    """Padding, batch mates, and sentences leaving the batch when done cannot change a result."""
    model, src = random_model(seed), random_sources(seed)
    batched = beam_search(model, src, FIXED_LIMIT, beam=beam)
    assert len({len(h) for h in batched}) > 1  # sentences finish at different steps
    for row, hyp in enumerate(batched):
        assert hyp == beam_search(model, alone(src, row), FIXED_LIMIT, beam=beam)[0], row


@pytest.mark.parametrize("seed", SEEDS)
def test_beam_hypothesis_scores_at_least_as_well_as_greedy(seed):
    """Empirical on these seeds, not a theorem: beam search can prune greedy's prefix (K other
    prefixes may all score higher at some step and end worse), and its stopping rule compares
    the best alive beam at its current length, which is not a bound when alpha > 0."""
    model, src = random_model(seed), random_sources(seed)
    greedy = greedy_search(model, src, FIXED_LIMIT)
    beam = beam_search(model, src, FIXED_LIMIT)
    compared = 0
    for row, (g, b) in enumerate(zip(greedy, beam)):
        if len(g) >= FIXED_LIMIT.max_len_b:  # greedy ran out of length without EOS: no score to compare
            continue
        compared += 1
        src_row = alone(src, row)
        assert normalised_score(model, src_row, b) >= normalised_score(model, src_row, g) - 1e-5, row
    assert compared >= 1


def all_hypotheses(vocab: int, longest: int) -> list[list[int]]:
    """Every token sequence of at most `longest` tokens from the words a search may emit."""
    words = [t for t in range(vocab) if t not in (PAD, BOS, EOS)]
    return [list(h) for n in range(longest + 1) for h in itertools.product(words, repeat=n)]


@torch.no_grad()
def brute_force_scores(model, src: torch.Tensor, hyps: list[list[int]], alpha: float) -> list[float]:
    """log P(h + EOS | src) / lp(|h| + 1) of every hypothesis, each token charged the model's full
    log-softmax, in one batch: [BOS, h..., EOS, EOS...]."""
    longest = max(map(len, hyps))
    memory, src_mask = model.encode(src)
    tgt = torch.tensor([[BOS, *h, EOS] + [EOS] * (longest - len(h)) for h in hyps])
    logits = model.decode(tgt[:, :-1], memory.expand(len(hyps), -1, -1), src_mask.expand(len(hyps), -1, -1, -1))
    logp = torch.log_softmax(logits.float(), dim=-1).gather(2, tgt[:, 1:, None])[..., 0]
    return [float(logp[i, : len(h) + 1].sum()) / length_penalty(len(h) + 1, alpha) for i, h in enumerate(hyps)]


VOCAB_SMALL = 8  # 4 special ids and 4 words (UNK counts as a word): short hypotheses can be enumerated


@pytest.mark.parametrize(("alpha", "eos_shift"), [(0.0, 0.0), (ALPHA, 0.0), (ALPHA, -6.0)])
def test_exhaustive_beam_search_finds_the_best_hypothesis_and_its_score(alpha, eos_shift):
    """A tiny vocabulary, a short length limit and more beams than there are candidates: nothing is
    ever pruned, so beam search must return the hypothesis with the best length-normalised score
    among every possible one, and that score, both found here by brute force. With EOS made
    unlikely (-6) the best hypothesis runs to the length limit, where the search forces EOS: it must
    still be charged the model's log-probability of EOS. Were the forced EOS free, a hypothesis at
    the limit would also beat the empty one, the true best, in the other two cases."""
    model = random_model(3, vocab=VOCAB_SMALL)
    shift_logit(model, EOS, eos_shift)
    src = random_sources(3, lengths=[4], vocab=VOCAB_SMALL)
    cfg = DecodeConfig(beam=2, alpha=alpha, max_len_a=0.0, max_len_b=3)
    limit = int(length_limits(src, cfg, model)[0])
    hyps = all_hypotheses(VOCAB_SMALL, limit)
    scores = brute_force_scores(model, src, hyps, alpha)
    top = max(range(len(hyps)), key=scores.__getitem__)

    # EOS joins the finished hypotheses only from a sentence's K best candidates: K must exceed the
    # number of candidates at any step, words + EOS after every prefix, for nothing to be pruned.
    words = VOCAB_SMALL - 3
    score, best = scored_beam_search(model, src, cfg, beam=(words + 1) ** limit)[0]
    assert best == hyps[top]
    assert score == pytest.approx(scores[top], abs=1e-4)
    if eos_shift:  # the case the forced EOS decides
        assert len(best) == limit


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("alpha", [0.0, ALPHA, 1.0])
@pytest.mark.parametrize("beam", [2, 4])
def test_stopping_rule_is_a_bound(seed, alpha, beam):
    """A sentence leaves the search only when no live beam can beat its best finished hypothesis,
    so stopping early returns what running every sentence to its length limit returns."""
    model, src = random_model(seed), random_sources(seed)
    cfg = DecodeConfig(beam=beam, alpha=alpha, max_len_a=1.5, max_len_b=5)
    early = scored_beam_search(model, src, cfg)
    full = scored_beam_search(model, src, cfg, stop_early=False)
    assert [ids for _, ids in early] == [ids for _, ids in full]
    for (a, _), (b, _) in zip(early, full):
        assert a == pytest.approx(b, abs=1e-5)


def test_best_reachable_score_bounds_every_finishing_length():
    score = torch.tensor([-3.0, -0.5, -10.0])
    limits = torch.tensor([6, 9, 4])
    for alpha in (-0.5, 0.0, 0.6, 1.0):
        bound = best_reachable(score, 2, limits, alpha)
        for row in range(3):
            reachable = [float(score[row]) / length_penalty(L, alpha) for L in range(3, int(limits[row]) + 2)]
            assert float(bound[row]) == pytest.approx(max(reachable))


# ----------------------------------------------------------------------------- length limits and special tokens


@pytest.mark.parametrize("search", [greedy_search, beam_search])
def test_output_length_limit_does_not_depend_on_batch_mates(search):
    """a · source_length + b is a per-sentence limit: a short sentence decoded next to a long one
    may not grow longer than when alone (an earlier version took the longest source of the batch)."""
    model = random_model(0, eos_after_some_tokens=False)  # never says EOS: runs to the limit
    src = random_sources(0, lengths=[2, 7])
    cfg = DecodeConfig(beam=2, alpha=ALPHA, max_len_a=1.0, max_len_b=3)
    batched = search(model, src, cfg)
    for row in range(2):
        assert batched[row] == search(model, alone(src, row), cfg)[0], row


def test_greedy_and_beam_search_share_one_length_limit():
    """Both searches may emit max_steps tokens before EOS (an earlier beam search forced EOS one
    step sooner, so beam sizes 1 and 2 obeyed different limits)."""
    model = random_model(0, eos_after_some_tokens=False)
    shift_logit(model, EOS, -30.0)  # EOS is never the best choice
    src = random_sources(0, lengths=[4])
    cfg = DecodeConfig(beam=2, alpha=ALPHA, max_len_a=1.0, max_len_b=3)
    greedy, beam = greedy_search(model, src, cfg)[0], beam_search(model, src, cfg)[0]
    assert len(greedy) == max_steps(src[0], cfg)  # ran to the limit
    assert len(beam) == len(greedy)


@pytest.mark.parametrize("search", [greedy_search, beam_search])
def test_padding_token_is_never_part_of_a_hypothesis(search):
    """PAD is not a word. If a search emitted it, the uncached decoder would mask it out as padding
    while the cached one attends to it (so the two searches would diverge), and _strip would drop it
    from the output, so the returned ids would not be the hypothesis that was scored.
    (Untied output embeddings: in a freshly built tied model the PAD row of the shared embedding is
    zero, so its logit cannot be shifted by a bias.)"""
    model = random_model(1, tie=False)
    shift_logit(model, PAD, 1.5)  # PAD now wins some steps
    src = random_sources(1)
    assert search(model, src, FIXED_LIMIT) == search(model, src, FIXED_LIMIT, use_cache=False)


# ----------------------------------------------------------------------------- the vocabulary step in row blocks


@pytest.mark.parametrize("n", [1, 15, 16, 17, 255, 256, 257, 271, 272, 273, 512, 1712])
def test_row_blocks_cover_every_row_once_in_order_with_no_small_block(n):
    blocks = search.row_blocks(n)
    assert [i for b in blocks for i in range(n)[b]] == list(range(n))
    sizes = [b.stop - b.start for b in blocks]
    assert all(size <= search.VOCAB_BLOCK for size in sizes[:-1])
    assert all(size >= min(n, search.MIN_BLOCK) for size in sizes)
    assert len(blocks) == max(1, -(-n // search.VOCAB_BLOCK) - (0 < n % search.VOCAB_BLOCK < search.MIN_BLOCK))


@pytest.mark.parametrize("seed", SEEDS[:2])
@pytest.mark.parametrize("beam", [1, 4])
def test_the_vocabulary_step_in_row_blocks_changes_no_translation_or_score(seed, beam, monkeypatch):
    """The output projection and what reads its logits run a block of rows at a time: the same
    translations and scores as the whole batch at once (40 sentences: 40 or 160 rows, blocks of 16)."""
    model, src = random_model(seed), random_sources(seed, lengths=SOURCE_LENGTHS * 7)[:40]
    cfg = DecodeConfig(beam=beam, alpha=ALPHA, max_len_a=1.5, max_len_b=5)
    run = greedy_search if beam == 1 else scored_beam_search
    monkeypatch.setattr(search, "VOCAB_BLOCK", 10**6)
    whole = run(model, src, cfg)
    blocks = []
    monkeypatch.setattr(search, "VOCAB_BLOCK", 16)
    monkeypatch.setattr(search, "row_blocks", lambda n, blocks_of=search.row_blocks: blocks.append(n) or blocks_of(n))
    assert run(model, src, cfg) == whole
    assert max(blocks) > 16  # some step did run in several blocks
