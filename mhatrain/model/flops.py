"""Model FLOPs of a training step (the machine's measured matmul peak: bench.timing.matmul_peak).

Model FLOPs count the useful work of the encoder-decoder Transformer on a batch's real tokens
(padding excluded), with multiply-accumulate = 2 FLOPs and a training step = 3 × forward
(the backward pass computes gradients for activations and for weights: 2 × forward):

    training FLOPs = 6 × forward MACs, forward MACs =
        N_src · L_enc · (4 D A + 2 D D_ff)                      encoder projections and FFN
      + Σ_b S_b² · L_enc · 2 A                                   encoder Q Kᵀ and P V
      + N_tgt · L_dec · (4 D A + 2 D A + 2 D D_ff)               decoder self-attn, cross Q/O, FFN
      + N_src · L_dec · 2 D A                                    cross-attention K, V of the memory
      + Σ_b (T_b² + T_b S_b) · L_dec · 2 A                       decoder self and cross Q Kᵀ, P V
      + N_tgt · D · V                                            output projection

with N_src, N_tgt the batch's real source (+EOS) and target (+BOS) tokens, S_b, T_b sentence b's
lengths, L the layer counts, D = d_model, A = H · d_head the width of all heads together (= D unless
model.d_head is set), V the vocabulary. The causal T_b² term is counted in
full (the kernels compute the full square). Not counted: embeddings, LayerNorm, softmax,
dropout, the loss, Adam (all O(N·D) or O(parameters)); so FLOP/s shares are slight underestimates
of the work the hardware does, as the usual "6 × parameters × tokens" rule.
"""

from __future__ import annotations

import torch

from ..core.config import ModelConfig
from .sizes import heads_in, model_head_size


def forward_macs(cfg: ModelConfig, vocab_size: int, src_lengths: torch.Tensor, tgt_lengths: torch.Tensor) -> int:
    """Multiply-accumulates of one forward pass over sentences with these real lengths. With
    model.heads_per_layer each attention module has its own A = H_l · d_head: L · A above is their sum."""
    D, F, Le, Ld = cfg.d_model, cfg.d_ff, cfg.n_encoder_layers, cfg.n_decoder_layers
    enc, dec, cross = (heads_width(cfg, kind) for kind in ("enc_self", "dec_self", "cross"))
    S, T = src_lengths.long(), tgt_lengths.long()
    n_src, n_tgt = int(S.sum()), int(T.sum())
    encoder = n_src * (4 * D * enc + Le * 2 * D * F) + int((S * S).sum()) * 2 * enc
    decoder = (
        n_tgt * (4 * D * dec + 2 * D * cross + Ld * 2 * D * F)
        + n_src * 2 * D * cross
        + int((T * T).sum()) * 2 * dec
        + int((T * S).sum()) * 2 * cross
    )
    return encoder + decoder + n_tgt * D * vocab_size


def heads_width(cfg: ModelConfig, kind: str) -> int:
    """Σ over the layers of `kind` of H_l · d_head: the width of all its heads together."""
    layers = cfg.n_encoder_layers if kind == "enc_self" else cfg.n_decoder_layers
    return sum(heads_in(cfg, kind, layer) for layer in range(layers)) * model_head_size(cfg)


def training_flops(cfg: ModelConfig, vocab_size: int, src: torch.Tensor, tgt_out: torch.Tensor, pad_id: int) -> int:
    """Model FLOPs of one training step (forward + backward) on a batch: src [B, S] and tgt_out [B, T]
    token ids, right-padded with pad_id."""
    return 6 * forward_macs(cfg, vocab_size, (src != pad_id).sum(1), (tgt_out != pad_id).sum(1))
