"""Greedy and beam search over the decoder cache.

Beam search keeps B sentences × K beams as B·K rows of one batch. Each step scores every
(beam, token) extension, keeps the K best unfinished ones per sentence and moves finished
hypotheses (EOS) aside, scored with the paper's length penalty: log P(Y) / lp(Y),
lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016); log P(Y) charges every token, EOS included, the
model's log-probability, also when the length limit forces EOS. A sentence keeps its K best
finished hypotheses and is done when no unfinished beam can still beat the best of them: a beam's
log-probability only falls as it grows, so its best reachable score is its current one over the
largest penalty it can still reach (alpha > 0: at its length limit). Done sentences leave the
batch, so the cache shrinks as the batch finishes.

Every step runs on the device without reading anything back (the host reads one count of done
sentences per step on the CPU, every few steps elsewhere): finished hypotheses are kept in tensors.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..core.config import DecodeConfig
from ..core.runtime import autocast
from ..data.batches import batch_indices
from ..data.tokenizer import Tokenizer
from ..data.tokens import BOS, EOS, PAD, right_padded
from ..model.attention import keeping_stacked_qkv
from ..model.transformer import DecoderCache, Transformer

VOCAB_BLOCK = 256  # rows per block of the vocabulary step (row_blocks)
MIN_BLOCK = 16  # the fewest rows of a block, unless the batch has fewer
GREEDY_COMPACT = 0.25  # greedy search drops finished rows once they are this share of the batch
BEAM_BATCH_SHRINK = 4  # decode.batch_tokens is sized for beams up to 4 rows per sentence


def batch_source_tokens(cfg: DecodeConfig, beam: int) -> int:
    """Source tokens per decoding batch: decode.batch_tokens × max(1, 4 // beam).

    batch_tokens is the budget of a batch of the paper's beam, 4. Beam search runs `beam` rows per
    sentence, so a batch's memory and work grow with the beam: a smaller beam takes 4 // beam times the
    sources (greedy 4×, beam 2 2×), so that its batches hold about as many rows as a beam-4 batch
    instead of a quarter or a half of them. Beams above 4 keep batch_tokens (their batches grow).
    """
    return cfg.batch_tokens * max(1, BEAM_BATCH_SHRINK // beam)


def source_ids(ids: list[int], max_positions: int) -> list[int]:
    """The encoder's input for a sentence's ids: cut so that, with EOS, it fits model.max_positions - 1."""
    return ids[: max_positions - 2] + [EOS]


def cut_warning(sources: list[list[int]], max_positions: int) -> str | None:
    """The warning for sentences whose ids `source_ids` cuts (none: None): one line with their count."""
    keep = max_positions - 2
    cut = sum(len(ids) > keep for ids in sources)
    if not cut:
        return None
    total = len(sources)
    return (
        f"warning: {cut} of {total} sentence{'s' if total != 1 else ''} {'is' if cut == 1 else 'are'} longer than "
        f"the model's {keep} source pieces (model.max_positions={max_positions}): {'it' if cut == 1 else 'each'} "
        f"was cut to its first {keep} pieces, and its translation covers only that part"
    )


def length_penalty(length: int | torch.Tensor, alpha: float):
    return ((5.0 + length) / 6.0) ** alpha


def length_limits(src: torch.Tensor, cfg: DecodeConfig, model: Transformer) -> torch.Tensor:
    """[B] most tokens before EOS for each sentence: a · source length + b, within the position table.

    Per sentence, so that a translation does not depend on the other sentences of its batch.
    """
    lengths = (src != PAD).sum(1).float()
    limits = (cfg.max_len_a * lengths + cfg.max_len_b).floor().long()
    return limits.clamp(max=model.cfg.max_positions - 2)


def row_blocks(n: int) -> list[slice]:
    """[0, n) as the row blocks of the vocabulary step: VOCAB_BLOCK rows each, a last block of fewer than
    MIN_BLOCK rows joined to the one before.

    The step maps each block's states to [rows, V] logits and reads them (normaliser, masks, top-k or
    argmax) while they are still in the CPU's cache; for the whole batch at once, [N, V] is larger than the
    cache, written by the projection and read back from memory by each pass (measured: int8 halves the
    step's time; docs/performance.md). A row's numbers do not depend on its block: BLAS rounds a product
    of fewer than 12 rows differently (tested, MKL on AVX2), hence no block of under MIN_BLOCK rows
    unless the batch itself is that small.
    """
    starts = list(range(0, n, VOCAB_BLOCK))
    if len(starts) > 1 and n - starts[-1] < MIN_BLOCK:
        starts.pop()
    return [slice(a, b) for a, b in zip(starts, [*starts[1:], n])]


def _next_states(model: Transformer, tokens: torch.Tensor, cache: DecoderCache, use_cache: bool) -> torch.Tensor:
    """[N, t] tokens so far → [N, D] the decoder's final states at the last position.

    With the cache only the last token is fed; without it the whole prefix is recomputed against
    the encoder side expanded to one row per beam.
    """
    if use_cache:
        states = model.decode_states(tokens[:, -1:], cache.memory, cache.src_mask, cache=cache)
    else:
        memory, src_mask = cache.memory, cache.src_mask
        if cache.beam > 1:
            memory, src_mask = memory.repeat_interleave(cache.beam, 0), src_mask.repeat_interleave(cache.beam, 0)
        states = model.decode_states(tokens, memory, src_mask)
    return states[:, -1]


def _next_choices(
    model: Transformer,
    tokens: torch.Tensor,
    cache: DecoderCache,
    use_cache: bool,
    eos_only: torch.Tensor | None,
    choose,
    normalise: bool = True,
) -> list[torch.Tensor]:
    """What `choose(logits, log_normaliser)` makes of the next token's scores ([N, ...] tensors),
    computed a row block at a time (row_blocks) and joined. No step reads anything back from the device.

    choose gets a block's [n, V] float32 logits, with what may not come next at -inf, and the [n, 1]
    log-normaliser of the model's distribution (None without `normalise`: greedy search takes the
    argmax, which the normaliser does not move). PAD and BOS are never generated; rows in `eos_only`
    (at their length limit) may only end (None: no row is, as at every step before the batch's smallest
    limit; those steps skip the mask's pass over [n, V]). The normaliser is the logsumexp of the logits
    before any of this, so logit - normaliser is the model's log-probability of a token: a forced EOS is
    charged what the model gives it, not a free 0.
    """
    states = _next_states(model, tokens, cache, use_cache)
    blocks = []
    for rows in row_blocks(states.size(0)):
        logits = model.output(states[rows]).float()
        # logsumexp through log_softmax: one fused pass over [n, V] instead of logsumexp's several
        log_normaliser = logits[:, :1] - logits.log_softmax(dim=1)[:, :1] if normalise else None
        logits[:, PAD] = float("-inf")
        logits[:, BOS] = float("-inf")
        if eos_only is not None:
            eos = logits[:, EOS].clone()
            logits.masked_fill_(eos_only[rows, None], float("-inf"))
            logits[:, EOS] = eos
        blocks.append(choose(logits, log_normaliser))
    return [torch.cat(parts) for parts in zip(*blocks)]


def _reads_every(device: torch.device) -> int:
    """Steps between the searches' reads of their stopping state: every step on the CPU, where reading
    a tensor costs nothing; every few on an accelerator, where each read waits for its queue to drain
    (the steps in between run on, and change no result: see the searches)."""
    return 1 if device.type == "cpu" else 4


def _one_stack_per_search(search):
    """The search decodes with each attention module's [W_Q; W_K; W_V] stacked once (keeping_stacked_qkv)."""

    @functools.wraps(search)
    def run(model: Transformer, *args, **kwargs):
        with keeping_stacked_qkv(model):
            return search(model, *args, **kwargs)

    return run


@torch.no_grad()
@_one_stack_per_search
def greedy_search(model: Transformer, src: torch.Tensor, cfg: DecodeConfig, use_cache: bool = True) -> list[list[int]]:
    """src: [B, S] → B token-id lists (without BOS/EOS).

    Finished rows emit PAD, which the output drops, until enough of them have finished to be worth
    leaving the batch (GREEDY_COMPACT of the rows still decoding): then the cache keeps the others
    only. A row's tokens do not depend on the other rows, so neither changes any translation.
    """
    B, device = src.size(0), src.device
    limits = length_limits(src, cfg, model)
    steps, first_limit = int(limits.max()) + 1, int(limits.min())
    cache = model.new_cache(*model.encode(src))
    out = torch.full((B, steps + 1), PAD, dtype=torch.long, device=device)  # BOS, then the tokens
    out[:, 0] = BOS
    row = torch.arange(B, device=device)  # original index of each row still decoding
    tokens = out
    finished = torch.zeros(B, dtype=torch.bool, device=device)
    every = _reads_every(device)
    for step in range(1, steps + 1):
        eos_only = limits < step if step > first_limit else None
        (best,) = _next_choices(model, tokens[:, :step], cache, use_cache, eos_only, _argmax, normalise=False)
        next_token = best.masked_fill(finished, PAD)  # the argmax of the log-probabilities
        tokens[:, step] = next_token
        finished |= next_token == EOS
        if step % every == 0:
            n_done = int(finished.sum())
            if n_done == finished.numel():
                break
            if n_done >= GREEDY_COMPACT * finished.numel():
                if tokens is not out:
                    out[row] = tokens
                active = (~finished).nonzero(as_tuple=True)[0]
                row, tokens, limits, finished = row[active], tokens[active], limits[active], finished[active]
                cache.reorder(active)
    if tokens is not out:
        out[row] = tokens
    return [_strip(r) for r in out[:, 1:].tolist()]


def _strip(ids: list[int]) -> list[int]:
    if EOS in ids:
        ids = ids[: ids.index(EOS)]
    return [i for i in ids if i != PAD]


@torch.no_grad()
def beam_search(
    model: Transformer,
    src: torch.Tensor,
    cfg: DecodeConfig,
    beam: int | None = None,
    alpha: float | None = None,
    use_cache: bool = True,
) -> list[list[int]]:
    """src: [B, S] → for each sentence the best hypothesis's token ids (without BOS/EOS)."""
    K = beam or cfg.beam
    if K == 1:
        return greedy_search(model, src, cfg, use_cache)
    return [ids for _, ids in scored_beam_search(model, src, cfg, K, alpha, use_cache)]


@torch.no_grad()
@_one_stack_per_search
def scored_beam_search(
    model: Transformer,
    src: torch.Tensor,
    cfg: DecodeConfig,
    beam: int | None = None,
    alpha: float | None = None,
    use_cache: bool = True,
    stop_early: bool = True,
) -> list[tuple[float, list[int]]]:
    """src: [B, S] → for each sentence (log P(hypothesis + EOS) / lp, token ids without BOS/EOS) of
    its best hypothesis; (-inf, []) if none finished.

    stop_early=False runs every sentence to its length limit; the stopping rule is a bound, so the
    result is the same (the tests check it). Every decision is made on the device: the host reads
    only how many sentences are done (see _reads_every), to end the search and to drop them from
    the batch. A done sentence that stays in the batch for a few steps is frozen: its finished
    hypotheses take no newcomers.
    """
    K = beam or cfg.beam
    alpha = cfg.alpha if alpha is None else alpha
    limits = length_limits(src, cfg, model)
    steps, first_limit = int(limits.max()) + 1, int(limits.min())
    cache = model.new_cache(*model.encode(src), beam=K)  # rows: K beams per sentence
    beams, finished = _start_beams(src, K, steps)
    every = _reads_every(src.device)
    best_of_beam = functools.partial(_best_of_beam, min(2 * K, model.vocab_size))
    for step in range(1, steps + 1):
        eos_only = (limits[beams.sentence] < step).repeat_interleave(K) if step > first_limit else None
        beam_logits, beam_tokens, log_normaliser = _next_choices(
            model, beams.tokens[:, :step], cache, use_cache, eos_only, best_of_beam
        )
        top = _top_candidates(beam_logits, beam_tokens, log_normaliser, beams.scores)
        _finish_hypotheses(beams, top, finished, step, alpha)
        source_rows = _extend_beams(beams, top, step)
        if stop_early:
            _mark_done(beams, finished, step, limits, alpha)
        active = None
        if step % every == 0:
            n_done = int(beams.done.sum())
            if n_done == beams.done.numel():
                break
            if n_done:
                active, source_rows = _drop_done(beams, source_rows)
        cache.reorder(source_rows, sentences=active)
    return _best_hypotheses(finished)


@dataclass
class _Beams:
    """The live beams of a search: n active sentences × K beams, as n·K rows of one batch."""

    sentence: torch.Tensor  # [n] original index of each active sentence
    tokens: torch.Tensor  # [n·K, steps + 1] BOS, then each beam's tokens (PAD after its last)
    scores: torch.Tensor  # [n, K] log P of each beam's tokens
    done: torch.Tensor  # [n] bool: no live beam of the sentence can still beat its best finished hypothesis


@dataclass
class _Finished:
    """Each sentence's K best finished hypotheses (by original index), best first."""

    scores: torch.Tensor  # [B, K] log P / lp, -inf for none; float64, as Python's floats were
    tokens: torch.Tensor  # [B, K, steps] token ids without BOS/EOS (PAD after the last)


class _Candidates(NamedTuple):
    """The 2K best extensions of each sentence's beams, best first: at least K of them do not end (EOS)."""

    scores: torch.Tensor  # [n, 2K] log P of the beam and its next token
    beam: torch.Tensor  # [n, 2K] the beam extended (0 … K-1)
    token: torch.Tensor  # [n, 2K] the token it is extended by


def _start_beams(src: torch.Tensor, K: int, steps: int) -> tuple[_Beams, _Finished]:
    """K beams of BOS per sentence, only the first alive (all start identical); nothing finished."""
    B, device = src.size(0), src.device
    tokens = torch.full((B * K, steps + 1), PAD, dtype=torch.long, device=device)
    tokens[:, 0] = BOS
    scores = torch.zeros(B, K, device=device)
    scores[:, 1:] = float("-inf")
    beams = _Beams(torch.arange(B, device=device), tokens, scores, torch.zeros(B, dtype=torch.bool, device=device))
    finished = _Finished(
        torch.full((B, K), float("-inf"), dtype=torch.float64, device=device),
        torch.full((B, K, steps), PAD, dtype=torch.long, device=device),
    )
    return beams, finished


def _best_of_beam(per_beam: int, logits: torch.Tensor, log_normaliser: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """A block of beams' `per_beam` best next tokens: ([n, per_beam] logits, their tokens, [n, 1] normaliser).

    The 2K best extensions of each beam hold the 2K best of the sentence, and within a beam
    log P = logit - normaliser ranks like the logits: no full log-softmax is needed."""
    return (*logits.topk(per_beam, dim=1), log_normaliser)


def _argmax(logits: torch.Tensor, _) -> tuple[torch.Tensor]:
    return (logits.argmax(-1),)


def _top_candidates(
    beam_logits: torch.Tensor, beam_tokens: torch.Tensor, log_normaliser: torch.Tensor, scores: torch.Tensor
) -> _Candidates:
    """The 2K best (beam, token) extensions of each sentence, from each beam's best: beam_logits and
    beam_tokens [n·K, per_beam] (_best_of_beam), log_normaliser [n·K, 1], scores [n, K] of the beams.
    2K, so that at least K remain when all K beams would end."""
    n, K = scores.shape
    per_beam = beam_logits.size(1)
    candidates = scores.view(-1, 1) + beam_logits - log_normaliser
    top_scores, top_index = candidates.view(n, K * per_beam).topk(2 * K, dim=1)  # [n, 2K]
    return _Candidates(top_scores, top_index // per_beam, beam_tokens.view(n, K * per_beam).gather(1, top_index))


def _finish_hypotheses(beams: _Beams, top: _Candidates, finished: _Finished, step: int, alpha: float) -> None:
    """EOS among the K best candidates of a sentence that is not done ends a hypothesis: scored
    log P / lp(step), it joins the sentence's finished ones if it is among their K best."""
    n, K = beams.scores.shape
    ended = (top.token[:, :K] == EOS) & ~beams.done[:, None]
    new_scores = torch.where(ended, top.scores[:, :K].double() / length_penalty(step, alpha), float("-inf"))
    prefixes = beams.tokens.view(n, K, -1)[:, :, 1:step]  # [n, K, step - 1] tokens before the EOS
    new_tokens = torch.full((n, K, finished.tokens.size(2)), PAD, dtype=torch.long, device=prefixes.device)
    new_tokens[:, :, : step - 1] = prefixes.gather(1, top.beam[:, :K, None].expand(-1, -1, step - 1))
    _keep_best(finished.scores, finished.tokens, beams.sentence, new_scores, new_tokens)


def _extend_beams(beams: _Beams, top: _Candidates, step: int) -> torch.Tensor:
    """Continue with the K best candidates of each sentence that do not end; returns [n·K] the row
    each new beam grew from, by which the decoder cache is reordered."""
    n, K = beams.scores.shape
    device = beams.scores.device
    # EOS candidates ranked after all others, the others keeping their order
    rank = torch.arange(2 * K, device=device).expand(n, -1) + (top.token == EOS).long() * 2 * K
    keep = rank.argsort(dim=1)[:, :K]  # [n, K]
    beams.scores = top.scores.gather(1, keep)
    source_rows = (torch.arange(n, device=device)[:, None] * K + top.beam.gather(1, keep)).view(-1)  # [n·K]
    beams.tokens = beams.tokens[source_rows]
    beams.tokens[:, step] = top.token.gather(1, keep).view(-1)
    return source_rows


def _mark_done(beams: _Beams, finished: _Finished, step: int, limits: torch.Tensor, alpha: float) -> None:
    """A sentence is done when no live beam can still beat its best finished hypothesis (best_reachable
    of its best beam: beams are kept best first)."""
    best = finished.scores[beams.sentence, 0]
    bound = best_reachable(beams.scores[:, 0], step, limits[beams.sentence], alpha)
    beams.done |= (best > float("-inf")) & (bound.double() <= best)


def _drop_done(beams: _Beams, source_rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Done sentences leave the batch: returns the [n'] positions of the others among the n, and
    the [n'·K] source rows of their beams (the cache keeps only those)."""
    n, K = beams.scores.shape
    active = (~beams.done).nonzero(as_tuple=True)[0]
    beams.sentence, beams.scores, beams.done = beams.sentence[active], beams.scores[active], beams.done[active]
    beams.tokens = beams.tokens.view(n, K, -1)[active].view(len(active) * K, -1)
    return active, source_rows.view(n, K)[active].view(-1)


def _best_hypotheses(finished: _Finished) -> list[tuple[float, list[int]]]:
    """Each sentence's best (score, token ids) in original order; (-inf, []) where none finished."""
    best_tokens = finished.tokens[:, 0].tolist()
    return [
        (score, [t for t in ids if t != PAD]) if score > float("-inf") else (float("-inf"), [])
        for score, ids in zip(finished.scores[:, 0].tolist(), best_tokens)
    ]


def best_reachable(score: torch.Tensor, step: int, limits: torch.Tensor, alpha: float) -> torch.Tensor:
    """[n] upper bound on the normalised score of any finished descendant of beams with raw log-prob
    `score` ([n], ≤ 0) after `step` tokens, for sentences allowed `limits` ([n]) tokens before EOS.

    Extending a beam only lowers its log-probability, and it ends at a length L with
    step + 1 ≤ L ≤ limit + 1. For alpha > 0 the penalty grows with L, so a negative score divided by
    it is largest at the longest L; for alpha < 0 at the shortest; for alpha = 0 it is the score itself.
    """
    longest = length_penalty((limits + 1).float(), alpha)
    shortest = length_penalty(torch.full_like(longest, step + 1.0), alpha)
    return torch.maximum(score / longest, score / shortest)


def _keep_best(
    finished: torch.Tensor,
    finished_tokens: torch.Tensor,
    sentence: torch.Tensor,
    new_scores: torch.Tensor,
    new_tokens: torch.Tensor,
) -> None:
    """Merge new finished hypotheses ([n, K] scores, -inf for none; [n, K, L] tokens) of sentences
    `sentence` into their K best ([B, K], [B, K, L], best first), in place.

    A stable sort with the kept ones first: a newcomer displaces a kept hypothesis only when it
    scores strictly higher, and newcomers enter in candidate order.
    """
    K = finished.size(1)
    pool = torch.cat([finished[sentence], new_scores], dim=1)  # [n, 2K]
    order = pool.sort(dim=1, descending=True, stable=True).indices[:, :K]
    pool_tokens = torch.cat([finished_tokens[sentence], new_tokens], dim=1)  # [n, 2K, L]
    finished[sentence] = pool.gather(1, order)
    finished_tokens[sentence] = pool_tokens.gather(1, order[:, :, None].expand(-1, -1, pool_tokens.size(2)))


def translate_ids(
    model: Transformer,
    sources: list[list[int]],
    cfg: DecodeConfig,
    device,
    beam: int | None = None,
    alpha: float | None = None,
    precision: str = "fp32",
    use_cache: bool = True,
    progress=None,
) -> list[list[int]]:
    """Translate token-id sequences (without EOS) in length-sorted batches; returns ids in input order."""
    model.eval()
    src_ids = [source_ids(s, model.cfg.max_positions) for s in sources]
    batches = batch_indices([len(s) for s in src_ids], batch_source_tokens(cfg, beam or cfg.beam))
    out: list[list[int] | None] = [None] * len(src_ids)
    with autocast(device, precision):
        for indices in batches:
            src = torch.from_numpy(right_padded([src_ids[i] for i in indices]))  # [B, S]
            hyps = beam_search(model, src.to(device), cfg, beam, alpha, use_cache)
            for i, hyp in zip(indices, hyps):
                out[i] = hyp
            if progress is not None:
                progress(len(indices))
    return out


def translate(
    model: Transformer,
    tokenizer: Tokenizer,
    sentences: list[str],
    cfg: DecodeConfig,
    device,
    beam: int | None = None,
    alpha: float | None = None,
    precision: str = "fp32",
    progress=None,
    warn=None,
) -> list[str]:
    """Raw sentences in, detokenised translations out. warn: told of sentences cut to the model's length."""
    sources = tokenizer.encode(sentences)
    if warn is not None and (message := cut_warning(sources, model.cfg.max_positions)) is not None:
        warn(message)
    ids = translate_ids(model, sources, cfg, device, beam, alpha, precision, progress=progress)
    return tokenizer.decode(ids)
