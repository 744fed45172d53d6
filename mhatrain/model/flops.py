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
from .sizes import head_size


def forward_macs(cfg: ModelConfig, vocab_size: int, src_lengths: torch.Tensor, tgt_lengths: torch.Tensor) -> int:
    """Multiply-accumulates of one forward pass over sentences with these real lengths."""
    D, F, Le, Ld = cfg.d_model, cfg.d_ff, cfg.n_encoder_layers, cfg.n_decoder_layers
    A = cfg.n_heads * head_size(cfg.d_model, cfg.n_heads, cfg.d_head)
    S, T = src_lengths.long(), tgt_lengths.long()
    n_src, n_tgt = int(S.sum()), int(T.sum())
    encoder = n_src * Le * (4 * D * A + 2 * D * F) + int((S * S).sum()) * Le * 2 * A
    decoder = n_tgt * Ld * (6 * D * A + 2 * D * F) + n_src * Ld * 2 * D * A + int((T * T + T * S).sum()) * Ld * 2 * A
    return encoder + decoder + n_tgt * D * vocab_size


def training_flops(cfg: ModelConfig, vocab_size: int, src: torch.Tensor, tgt_out: torch.Tensor, pad_id: int) -> int:
    """Model FLOPs of one training step (forward + backward) on a batch: src [B, S] and tgt_out [B, T]
    token ids, right-padded with pad_id."""
    return 6 * forward_macs(cfg, vocab_size, (src != pad_id).sum(1), (tgt_out != pad_id).sum(1))
