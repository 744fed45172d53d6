"""The peers our code is measured against, built to compute what ours computes.

* `ArticleMultiHeadAttention`: the PyTorch listing of the multi-head attention explainer article the
  project started from, with its three defects fixed (described in the class's docstring) and its
  design kept: separate per-head projections and a Python loop over heads.
* `torch_mha_from`: `torch.nn.MultiheadAttention` loaded with the weights of one of our modules.
* `TorchTransformerSeq2Seq`: `torch.nn.Transformer` with our embeddings, positions, dropout placement
  and tied output projection; `load_ours_into` copies a trained model of ours into it.
* `MarianSeq2Seq`: Hugging Face `MarianMTModel` configured to the same dimensions.

Every peer that stands in for our model has `forward(src [B, S], tgt_in [B, T]) -> logits [B, T, V]`,
the signature of `mhatrain.model.transformer.Transformer`, so one training step serves all of them.
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import nn

from ..core.config import ModelConfig
from ..core.errors import require_optional
from ..data.tokens import BOS, EOS, PAD
from ..model.attention import MultiHeadAttention
from ..model.transformer import Transformer, sinusoidal_positions

# ----------------------------------------------------------------------------- attention peers


class ArticleMultiHeadAttention(nn.Module):
    """The article's multi-head attention, repaired: `batch_size` is read from the input (it was
    undefined), heads are concatenated per position (the article's `.view` without a transpose mixed
    positions across heads), and a boolean mask is applied (it had none). Kept as written: one
    d_model × d_k projection per head for Q, K and V, and a Python loop over the heads.
    """

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.w_q = nn.ModuleList(nn.Linear(d_model, self.d_k) for _ in range(n_heads))
        self.w_k = nn.ModuleList(nn.Linear(d_model, self.d_k) for _ in range(n_heads))
        self.w_v = nn.ModuleList(nn.Linear(d_model, self.d_k) for _ in range(n_heads))
        self.w_o = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        """query: [B, Tq, D]; key, value: [B, Tk, D]; mask: [B, 1, Tk] or [B, Tq, Tk], True = may attend."""
        batch_size = query.size(0)  # fix 1: the listing used an undefined `batch_size`
        head_outputs = []
        for i in range(self.n_heads):
            q, k, v = self.w_q[i](query), self.w_k[i](key), self.w_v[i](value)  # [B, T, d_k]
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)  # [B, Tq, Tk]
            if mask is not None:  # fix 3: the listing had no mask
                scores = scores.masked_fill(~mask, float("-inf"))
            head_outputs.append(torch.softmax(scores, dim=-1) @ v)  # [B, Tq, d_k]
        # fix 2: [B, H, Tq, d_k] → [B, Tq, H, d_k] before the view, so each position's heads are concatenated
        stacked = torch.stack(head_outputs, dim=1).transpose(1, 2).contiguous()
        return self.w_o(stacked.view(batch_size, -1, self.d_model))

    @torch.no_grad()
    def load_from(self, ours: MultiHeadAttention) -> ArticleMultiHeadAttention:
        """Copy our weights: head i's W_i^Q is the i-th block of d_k rows of our W_Q (and so on)."""
        for mine, theirs in ((self.w_q, ours.w_q), (self.w_k, ours.w_k), (self.w_v, ours.w_v)):
            for i, linear in enumerate(mine):
                rows = slice(i * self.d_k, (i + 1) * self.d_k)
                linear.weight.copy_(theirs.weight[rows])
                linear.bias.copy_(theirs.bias[rows])
        self.w_o.load_state_dict(ours.w_o.state_dict())
        return self


@torch.no_grad()
def torch_mha_from(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    """`nn.MultiheadAttention` (batch first, packed in-projection) holding our W_Q, W_K, W_V, W_O."""
    mha = nn.MultiheadAttention(ours.d_model, ours.n_heads, dropout=ours.dropout, batch_first=True)
    mha.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
    mha.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
    mha.out_proj.load_state_dict(ours.w_o.state_dict())
    return mha


# ----------------------------------------------------------------------------- whole-model peers


class TorchTransformerSeq2Seq(nn.Module):
    """`torch.nn.Transformer` around the same embedding (· sqrt(D) + sinusoidal positions, dropout),
    tied output projection and dropout placement as ours: dropout on sublayer outputs, attention
    dropout = cfg.attention_dropout, none inside the FFN (nn.Transformer's default has one there).
    Pre-LN uses norm_first=True with final LayerNorms, as ours; post-LN drops the final LayerNorms,
    as ours.
    """

    def __init__(self, cfg: ModelConfig, vocab_size: int):
        super().__init__()
        self.cfg = cfg
        pre = cfg.norm == "pre"
        self.embed = nn.Embedding(vocab_size, cfg.d_model, padding_idx=PAD)
        self.register_buffer("positions", sinusoidal_positions(cfg.max_positions, cfg.d_model), persistent=False)
        self.embed_dropout = nn.Dropout(cfg.dropout)
        with warnings.catch_warnings():  # "enable_nested_tensor is True, but ...": an inference-only fast path
            warnings.simplefilter("ignore", UserWarning)
            self.transformer = nn.Transformer(
                cfg.d_model,
                cfg.n_heads,
                cfg.n_encoder_layers,
                cfg.n_decoder_layers,
                cfg.d_ff,
                cfg.dropout,
                batch_first=True,
                norm_first=pre,
            )
        for layer in (*self.transformer.encoder.layers, *self.transformer.decoder.layers):
            layer.dropout = nn.Identity()  # the FFN's inner dropout: the paper (and ours) has none
            for attn in (getattr(layer, "self_attn", None), getattr(layer, "multihead_attn", None)):
                if attn is not None:
                    attn.dropout = cfg.attention_dropout
        # nn.TransformerEncoder's inference fast path packs padded batches into nested tensors (zero
        # output at padding, a prototype-API warning); ours has no such path, so neither does the peer.
        self.transformer.encoder.enable_nested_tensor = self.transformer.encoder.use_nested_tensor = False
        if not pre:
            self.transformer.encoder.norm = None
            self.transformer.decoder.norm = None
        self.output = nn.Linear(cfg.d_model, vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.output.weight = self.embed.weight

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) * math.sqrt(self.cfg.d_model) + self.positions[: tokens.size(1)]
        return self.embed_dropout(x)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        T = tgt_in.size(1)
        future = torch.ones(T, T, dtype=torch.bool, device=tgt_in.device).triu(1)  # True = may NOT attend
        src_pad = src == PAD
        out = self.transformer(
            self._embed(src),
            self._embed(tgt_in),
            tgt_mask=future,
            tgt_is_causal=True,
            src_key_padding_mask=src_pad,
            tgt_key_padding_mask=tgt_in == PAD,
            memory_key_padding_mask=src_pad,
        )
        return self.output(out)

    @torch.no_grad()
    def load_ours(self, ours: Transformer) -> TorchTransformerSeq2Seq:
        """Copy the weights of our model (same config) so both compute the same function."""
        self.embed.weight.copy_(ours.embed.weight)
        if not self.cfg.tie_embeddings:
            self.output.weight.copy_(ours.output.weight)
        enc, dec = self.transformer.encoder, self.transformer.decoder
        for theirs, mine in zip(enc.layers, ours.encoder):
            _copy_attention(theirs.self_attn, mine.self_attn)
            _copy_ffn(theirs, mine.ffn)
            theirs.norm1.load_state_dict(mine.res_attn.norm.state_dict())
            theirs.norm2.load_state_dict(mine.res_ffn.norm.state_dict())
        for theirs, mine in zip(dec.layers, ours.decoder):
            _copy_attention(theirs.self_attn, mine.self_attn)
            _copy_attention(theirs.multihead_attn, mine.cross_attn)
            _copy_ffn(theirs, mine.ffn)
            theirs.norm1.load_state_dict(mine.res_self.norm.state_dict())
            theirs.norm2.load_state_dict(mine.res_cross.norm.state_dict())
            theirs.norm3.load_state_dict(mine.res_ffn.norm.state_dict())
        if enc.norm is not None:
            enc.norm.load_state_dict(ours.enc_norm.state_dict())
            dec.norm.load_state_dict(ours.dec_norm.state_dict())
        return self


def _copy_attention(theirs: nn.MultiheadAttention, mine: MultiHeadAttention) -> None:
    theirs.load_state_dict(torch_mha_from(mine).state_dict())


def _copy_ffn(theirs: nn.Module, mine: nn.Module) -> None:
    theirs.linear1.load_state_dict(mine.w_1.state_dict())
    theirs.linear2.load_state_dict(mine.w_2.state_dict())


def require_transformers(why: str):
    """Import Hugging Face transformers, or fail with one line saying how to install it."""
    return require_optional("transformers", "Hugging Face transformers", "bench", "transformers>=4.40", why)


def marian_config(cfg: ModelConfig, vocab_size: int):
    """A MarianConfig of our dimensions: ReLU FFN, scaled and shared embeddings tied to the output,
    sinusoidal positions, our special-token ids. Marian is post-LN only (no pre-LN option)."""
    transformers = require_transformers("the MarianMT peer")
    return transformers.MarianConfig(
        vocab_size=vocab_size,
        d_model=cfg.d_model,
        encoder_layers=cfg.n_encoder_layers,
        decoder_layers=cfg.n_decoder_layers,
        encoder_attention_heads=cfg.n_heads,
        decoder_attention_heads=cfg.n_heads,
        encoder_ffn_dim=cfg.d_ff,
        decoder_ffn_dim=cfg.d_ff,
        activation_function="relu",
        dropout=cfg.dropout,
        attention_dropout=cfg.attention_dropout,
        activation_dropout=0.0,
        max_position_embeddings=cfg.max_positions,
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=cfg.tie_embeddings,
        pad_token_id=PAD,
        eos_token_id=EOS,
        bos_token_id=BOS,
        decoder_start_token_id=BOS,
        forced_eos_token_id=EOS,
    )


def marian_model(cfg: ModelConfig, vocab_size: int) -> nn.Module:
    """A randomly initialised MarianMTModel of our dimensions."""
    transformers = require_transformers("the MarianMT peer")
    return transformers.MarianMTModel(marian_config(cfg, vocab_size))


class MarianSeq2Seq(nn.Module):
    """MarianMTModel behind our forward(src, tgt_in) -> logits signature (padding masks from PAD)."""

    def __init__(self, cfg: ModelConfig, vocab_size: int):
        super().__init__()
        self.marian = marian_model(cfg, vocab_size)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        return self.marian(
            input_ids=src,
            attention_mask=src != PAD,
            decoder_input_ids=tgt_in,
            decoder_attention_mask=tgt_in != PAD,
            use_cache=False,
        ).logits
