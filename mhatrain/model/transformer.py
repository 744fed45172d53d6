"""The encoder-decoder Transformer of "Attention Is All You Need" (§3).

Shape legend: B batch · S source length · T target length · D d_model · V vocabulary · H heads.
Masks are boolean, True = may attend. Token ids are right-padded with the model's `pad_id`, which the
data layer chooses and passes in: the model imports nothing from it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ..core.config import ATTENTION_KINDS, ModelConfig
from .attention import KVCache, Mask, MultiHeadAttention, Packing
from .dropout import Dropout
from .gates import HardConcreteGate
from .sizes import heads_in, model_head_size

PACK_MIN_ROWS = 4  # fewer rows take another matmul kernel on the CPU (measured with MKL), which rounds differently


def sinusoidal_positions(n_positions: int, d_model: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(...): [n_positions, D]."""
    position = torch.arange(n_positions, dtype=torch.float32).unsqueeze(1)
    frequency = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(n_positions, d_model)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency[: d_model // 2])
    return table


def padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """[B, S] token ids → [B, 1, 1, S]: True where the key is a real token (not pad_id)."""
    return (tokens != pad_id)[:, None, None, :]


def causal_mask(length: int, device=None) -> torch.Tensor:
    """[1, 1, T, T]: position t may attend to positions ≤ t."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()[None, None]


def self_attention_mask(offset: int, length: int, device=None, padding: torch.Tensor | None = None) -> Mask | None:
    """The decoder's self-attention mask for `length` new positions after `offset` cached ones.

    Without a cache, causal alone: targets are right-padded, so the keys a real position sees
    (itself and those before it) are all real, and padded positions are left out of the loss;
    no padding mask is needed, and the fused kernel can use its causal mode. `padding`
    ([B, 1, 1, T], True = real) also hides padded keys from padded queries, whose attention maps
    are then clean (the maps returned for analysis). One new position may see everything cached;
    several see the cached ones and each other causally.
    """
    if offset == 0:
        return Mask(padding, causal=True)
    if length == 1:
        return None
    return Mask(causal_mask(offset + length, device)[:, :, offset:, :])


def build_attention(cfg: ModelConfig, kind: str, layer: int) -> MultiHeadAttention:
    """The attention module of `kind` (a name in KINDS) in layer `layer` (from 0), as `cfg` asks: the one
    place that reads the config's attention settings. Its heads: model.heads_per_layer's count for the
    layer, else n_heads, each of the model's head size; learned gates when model.head_gates names the kind."""
    n_heads, gates = heads_in(cfg, kind, layer), cfg.head_gates
    gate = HardConcreteGate(n_heads, gates.temperature, gates.stretch) if gates and kind in gates.kinds else None
    return MultiHeadAttention(cfg.d_model, n_heads, cfg.attention_dropout, d_head=model_head_size(cfg), gate=gate)


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2  (the paper has no dropout inside the FFN). The ReLU runs in place
    on the [.., d_ff] hidden layer: the matmul's backward does not need its output, and decoding saves a
    pass over the widest activation."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(F.relu(self.w_1(x), inplace=True))


class Residual(nn.Module):
    """x + Dropout(Sublayer(x)) with LayerNorm after (post, the paper) or before (pre) the sublayer.

    Used in two steps, `h = res.enter(x)`, then `res(x, sublayer(h))`: no per-call closures, which
    torch.compile would guard on and recompile for.
    """

    def __init__(self, d_model: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norm, self.dropout, self.pre_norm = nn.LayerNorm(d_model), Dropout(dropout), pre_norm

    def enter(self, x):
        """The sublayer's input: LayerNorm(x) (pre) or x (post)."""
        return self.norm(x) if self.pre_norm else x

    def forward(self, x, out):
        """x with the sublayer's output `out` added back."""
        if self.pre_norm:
            return x + self.dropout(out)
        return self.norm(x + self.dropout(out))


class EncoderLayer(nn.Module):
    """One of the encoder's N identical layers (§3.1): multi-head self-attention over the source, then
    the position-wise feed-forward network (§3.3), each in a residual connection with dropout and
    LayerNorm (post-norm as in the paper, or pre-norm: model.norm).

    forward: x [B, S, D], the source padding Mask → (x [B, S, D], probabilities [B, H, S, S] or None);
    with a Packing, x is the batch's real tokens [n, D] in and out.
    """

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        pre = cfg.norm == "pre"
        self.self_attn = build_attention(cfg, "enc_self", layer)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff)
        self.res_attn = Residual(cfg.d_model, cfg.dropout, pre)
        self.res_ffn = Residual(cfg.d_model, cfg.dropout, pre)

    def forward(self, x, src_mask, need_weights=False, packing: Packing | None = None):
        h = self.res_attn.enter(x)
        out, probs = self.self_attn(h, h, src_mask, need_weights=need_weights, packing=packing)
        x = self.res_attn(x, out)
        x = self.res_ffn(x, self.ffn(self.res_ffn.enter(x)))
        return x, probs


@dataclass
class LayerCache:
    self_attn: KVCache
    cross_attn: KVCache

    @classmethod
    def empty(cls, beam: int = 1) -> LayerCache:
        return cls(KVCache(), KVCache(static=True, group=beam))


class DecoderLayer(nn.Module):
    """One of the decoder's N identical layers (§3.1): masked (causal) self-attention over the target
    so far, encoder-decoder attention over the encoder output (`memory`), then the position-wise
    feed-forward network, each in a residual connection with dropout and LayerNorm.

    forward: y [B, T, D], memory [B, S, D] → (y [B, T, D], self-attention probabilities
    [B, H, T, T] or None, cross-attention probabilities [B, H, T, S] or None). With a LayerCache,
    y holds only the new positions and earlier keys/values come from the cache.
    """

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        pre = cfg.norm == "pre"
        self.self_attn = build_attention(cfg, "dec_self", layer)
        self.cross_attn = build_attention(cfg, "cross", layer)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff)
        self.res_self = Residual(cfg.d_model, cfg.dropout, pre)
        self.res_cross = Residual(cfg.d_model, cfg.dropout, pre)
        self.res_ffn = Residual(cfg.d_model, cfg.dropout, pre)

    def forward(self, y, memory, tgt_mask, src_mask, cache: LayerCache | None = None, need_weights=False):
        self_cache = cache.self_attn if cache is not None else None
        cross_cache = cache.cross_attn if cache is not None else None
        h = self.res_self.enter(y)
        out, self_probs = self.self_attn(h, h, tgt_mask, cache=self_cache, need_weights=need_weights)
        y = self.res_self(y, out)
        h = self.res_cross.enter(y)
        out, cross_probs = self.cross_attn(h, memory, src_mask, cache=cross_cache, need_weights=need_weights)
        y = self.res_cross(y, out)
        y = self.res_ffn(y, self.ffn(self.res_ffn.enter(y)))
        return y, self_probs, cross_probs


@dataclass
class DecoderCache:
    """Per-layer key/value caches for incremental decoding, plus the encoder side it belongs to.

    The decoder runs `beam` rows per sentence (a sentence's beams next to each other); the encoder
    side (memory, src_mask, cross-attention keys/values) keeps one row per sentence.
    """

    layers: list[LayerCache]
    memory: torch.Tensor  # [B, S, D]
    src_mask: torch.Tensor  # [B, 1, 1, S]
    beam: int = 1
    length: int = 0  # target positions decoded so far

    def reorder(self, rows: torch.Tensor, sentences: torch.Tensor | None = None) -> None:
        """Keep decoder rows `rows`, in that order. The encoder side follows `sentences` (the
        sentences still decoding) when given; with one row per sentence (beam 1) it follows `rows`."""
        if sentences is None and self.beam == 1:
            sentences = rows
        for layer in self.layers:
            layer.self_attn.reorder(rows)
            if sentences is not None:
                layer.cross_attn.reorder(sentences)
        if sentences is not None:
            self.memory = self.memory.index_select(0, sentences)
            self.src_mask = self.src_mask.index_select(0, sentences)


@dataclass
class Attention:
    """Per-layer attention probabilities, each [B, H, Tq, Tk] (filled when asked for)."""

    enc_self: list[torch.Tensor] = field(default_factory=list)
    dec_self: list[torch.Tensor] = field(default_factory=list)
    cross: list[torch.Tensor] = field(default_factory=list)


KINDS = ATTENTION_KINDS  # the three kinds of attention (§3.2.3), as the config, Attention and HeadGates name them


@dataclass
class HeadGates:
    """Multipliers on each head's output, [n_layers, H] per attention kind (1 = keep), or
    [n_layers, B, H] for one gate per example of a batch. None: that kind's heads are not gated.
    Set on a model for a forward pass with gated_heads."""

    enc_self: torch.Tensor | None = None
    dec_self: torch.Tensor | None = None
    cross: torch.Tensor | None = None


class Transformer(nn.Module):
    """The encoder-decoder Transformer (§3, Figure 1): shared token embeddings scaled by sqrt(D) plus
    sinusoidal positions (§3.4, §3.5), a stack of EncoderLayers, a stack of DecoderLayers, and the
    output projection to the vocabulary (tied to the embeddings when model.tie_embeddings).

    encode: src [B, S] → memory [B, S, D]; decode: tgt_in [B, T] → logits [B, T, V] (incrementally,
    with a DecoderCache); forward = both, teacher-forced, for training. Every attention module comes
    from build_attention; learned head gates (model.head_gates) live in those modules, and
    gate_penalty() is the L0 term they add to the loss.
    """

    def __init__(self, cfg: ModelConfig, vocab_size: int, pad_id: int):
        super().__init__()
        self.cfg, self.vocab_size, self.pad_id = cfg, vocab_size, pad_id
        self.embed = nn.Embedding(vocab_size, cfg.d_model, padding_idx=pad_id)
        self.register_buffer("positions", sinusoidal_positions(cfg.max_positions, cfg.d_model), persistent=False)
        self.embed_dropout = Dropout(cfg.dropout)
        self.encoder = nn.ModuleList(EncoderLayer(cfg, i) for i in range(cfg.n_encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.n_decoder_layers))
        # Pre-norm stacks need a final LayerNorm; post-norm outputs are already normalised.
        pre = cfg.norm == "pre"
        self.enc_norm = nn.LayerNorm(cfg.d_model) if pre else nn.Identity()
        self.dec_norm = nn.LayerNorm(cfg.d_model) if pre else nn.Identity()
        self.output = nn.Linear(cfg.d_model, vocab_size, bias=False)
        self._init_weights()
        if cfg.tie_embeddings:
            self.output.weight = self.embed.weight

    def _init_weights(self):
        for name, p in self.named_parameters():
            if p.dim() > 1 and "norm" not in name and p.numel():
                nn.init.xavier_uniform_(p)
        # Embeddings are scaled by sqrt(D) on the way in, so start them at N(0, D^-1/2).
        nn.init.normal_(self.embed.weight, mean=0.0, std=self.cfg.d_model**-0.5)
        with torch.no_grad():
            self.embed.weight[self.pad_id].zero_()

    def _embed(self, tokens: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """[B, T] → [B, T, D]: embedding · sqrt(D) + position encoding, then dropout."""
        T = tokens.size(1)
        x = self.embed(tokens) * math.sqrt(self.cfg.d_model) + self.positions[offset : offset + T]
        return self.embed_dropout(x)

    def attention_modules(self, kind: str) -> list[MultiHeadAttention]:
        """The attention modules of one kind (a name in KINDS), one per layer from the bottom."""
        if kind == "enc_self":
            return [layer.self_attn for layer in self.encoder]
        if kind == "dec_self":
            return [layer.self_attn for layer in self.decoder]
        if kind == "cross":
            return [layer.cross_attn for layer in self.decoder]
        raise ValueError(f"unknown kind of attention {kind!r}; valid: {', '.join(KINDS)}")

    def gate_penalty(self) -> torch.Tensor | None:
        """λ · Σ P(gate ≠ 0) over the learned head gates (model.head_gates.l0 = λ): the L0 term that training
        adds to the cross-entropy per target token; None for a model without learned gates."""
        gates = [m.gate for kind in KINDS for m in self.attention_modules(kind) if m.gate is not None]
        if not gates:
            return None
        return self.cfg.head_gates.l0 * torch.cat([g.p_open() for g in gates]).sum()

    def gate_record(self) -> dict:
        """The learned gates as a metrics record holds them: per gated kind, each layer's heads' P(gate ≠ 0)
        in training (`p_open`, the L0 penalty's terms) and how many of its heads are open in evaluation
        (`open_heads`: evaluation gate > 0, the heads a pruned model keeps), and how many of those are only
        partly open (`partly_open`: 0 < gate < 1, a gate still on its way); {} without learned gates."""
        p_open, open_heads, partly = {}, {}, {}
        with torch.no_grad():
            for kind in KINDS:
                gates = [m.gate for m in self.attention_modules(kind) if m.gate is not None]
                if gates:
                    p_open[kind] = [[round(float(p), 5) for p in g.p_open()] for g in gates]
                    values = [g.deterministic() for g in gates]
                    open_heads[kind] = [int((v > 0).sum()) for v in values]
                    partly[kind] = [int(((v > 0) & (v < 1)).sum()) for v in values]
        return {"p_open": p_open, "open_heads": open_heads, "partly_open": partly} if p_open else {}

    def encode(self, src: torch.Tensor, attention: Attention | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """src: [B, S] → (memory [B, S, D], src_mask [B, 1, 1, S]).

        Outside training, without gradients and without maps, the layers' position-wise work skips the
        padding (see Packing), and memory is 0 at padded positions, which src_mask hides from every reader.
        """
        src_mask = padding_mask(src, self.pad_id)
        mask = Mask(src_mask)  # one mask (and one additive bias) for every layer
        x = self._embed(src)
        decoding = attention is None and not self.training and not torch.is_grad_enabled()
        packing = self._packing(src) if decoding else None
        if packing is not None:
            x = packing.pack(x)  # [n, D]
        for layer in self.encoder:
            x, probs = layer(x, mask, need_weights=attention is not None, packing=packing)
            if attention is not None:
                attention.enc_self.append(probs)
        x = self.enc_norm(x)
        return (packing.unpack(x) if packing is not None else x), src_mask

    def _packing(self, src: torch.Tensor) -> Packing | None:
        """The real tokens of src [B, S] when packing pays: some padding, and at least PACK_MIN_ROWS real
        tokens (BLAS rounds a product of fewer rows differently, so that a packed batch would not give
        the padded batch's numbers bit for bit)."""
        real = src != self.pad_id
        n = int(real.sum())
        return Packing.of(real) if PACK_MIN_ROWS <= n < real.numel() else None

    def decode(self, *args, **kwargs) -> torch.Tensor:
        """decode_states(...) projected to the vocabulary: logits [B, T, V]."""
        return self.output(self.decode_states(*args, **kwargs))

    def decode_states(
        self,
        tgt_in: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor,
        cache: DecoderCache | None = None,
        attention: Attention | None = None,
    ) -> torch.Tensor:
        """tgt_in: [B, T] (BOS + target so far, right-padded) → the decoder's final states [B, T, D], which
        `output` maps to the logits (decode does both; a search projects them a block of rows at a time).

        With a cache, tgt_in holds only the new positions; earlier keys/values come from the cache.
        """
        offset = cache.length if cache is not None else 0
        T = tgt_in.size(1)
        padding = padding_mask(tgt_in, self.pad_id) if attention is not None and cache is None else None
        tgt_mask, cross_mask = self_attention_mask(offset, T, tgt_in.device, padding), Mask(src_mask)
        y = self._embed(tgt_in, offset)
        for i, layer in enumerate(self.decoder):
            layer_cache = cache.layers[i] if cache is not None else None
            y, self_probs, cross_probs = layer(
                y, memory, tgt_mask, cross_mask, layer_cache, need_weights=attention is not None
            )
            if attention is not None:
                attention.dec_self.append(self_probs)
                attention.cross.append(cross_probs)
        if cache is not None:
            cache.length += T
        return self.dec_norm(y)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits [B, T, V] for training."""
        memory, src_mask = self.encode(src)
        return self.decode(tgt_in, memory, src_mask)

    def new_cache(self, memory: torch.Tensor, src_mask: torch.Tensor, beam: int = 1) -> DecoderCache:
        """An empty cache for decoding `beam` rows per sentence of `memory` (see DecoderCache)."""
        return DecoderCache([LayerCache.empty(beam) for _ in self.decoder], memory, src_mask, beam)


def build_model(cfg: ModelConfig, vocab_size: int, pad_id: int) -> Transformer:
    """The Transformer of `cfg` over a vocabulary of `vocab_size` ids, batches padded with `pad_id`."""
    return Transformer(cfg, vocab_size, pad_id)


def _gate_rows(model: Transformer, gates: HeadGates | None) -> list[tuple[MultiHeadAttention, torch.Tensor]]:
    """Each attention module that `gates` gates, with its layer's row of gates."""
    if gates is None:
        return []
    pairs = []
    for kind in KINDS:
        if (rows := getattr(gates, kind)) is not None:
            pairs += zip(model.attention_modules(kind), rows, strict=True)
    return pairs


@contextmanager
def gated_heads(model: Transformer, gates: HeadGates | None) -> Iterator[None]:
    """Within: each attention module of a kind that `gates` gives multiplies its heads' outputs by its
    layer's row of gates (before W_O), in every forward pass: encode, decode, a whole search. On leaving,
    the modules' gates are what they were (an outer gated_heads' gates, or none). None: no change.
    """
    pairs = _gate_rows(model, gates)
    outer = [module.head_gate for module, _ in pairs]
    for module, row in pairs:
        module.head_gate = row
    try:
        yield
    finally:
        for (module, _), gate in zip(pairs, outer):
            module.head_gate = gate


def count_parameters(model: nn.Module) -> int:
    """Distinct trainable parameters (tied weights counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters() if p.requires_grad}.values())
