"""int8 decoding on the CPU: torch's dynamic quantization of the model's Linear layers.

Weights are stored as int8 (one scale per output row) and each matmul quantizes its input on the
fly (fbgemm, AVX2 and up). Where a CPU has no native bf16, this is the fast low-precision mode; its
cost in BLEU is measured by `mhatrain bench decode` (docs/performance.md).

Every matmul by a weight matrix is quantized: W_O, cross-attention's W_Q, W_K, W_V, the feed-forward
layers, the output projection, and self-attention's projections as the one stacked matmul that
attention makes of them ([W_Q; W_K; W_V], `MultiHeadAttention.qkv`). One scale per output row makes
the stack's int8 rows those of each of the three quantized alone, and its input is quantized once
instead of three times. Self-attention's own w_q, w_k, w_v stay in fp32, unread.

torch 2.13 marks `torch.ao.quantization` deprecated (to move to torchao) and warns on each use; the
warnings are silenced here, and the mode goes when torch removes the API unless it is ported.
"""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

from ..model.attention import MultiHeadAttention
from ..model.transformer import Transformer

STACKED = ("w_q", "w_k", "w_v")  # a self-attention's projections, replaced by its stacked `qkv`


def quantized_model(model: Transformer) -> Transformer:
    """An int8 copy of `model` for decoding on the CPU (the model itself is unchanged)."""
    quantized = copy.deepcopy(model).float().eval()
    self_attention = [*quantized.attention_modules("enc_self"), *quantized.attention_modules("dec_self")]
    unread = {id(getattr(m, part)) for m in self_attention for part in STACKED}
    for attention in self_attention:
        if attention.n_heads:
            attention.qkv = _stacked(attention)
    # a pruned model's attention module of no heads has empty projections: nothing to quantize, and
    # per-channel quantization of zero channels fails
    names = {
        name
        for name, m in quantized.named_modules()
        if isinstance(m, nn.Linear) and id(m) not in unread and m.weight.numel() > 0
    }
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(deprecated|quantize_per_channel).*")
        spec = dict.fromkeys(names, torch.ao.quantization.per_channel_dynamic_qconfig)
        return torch.ao.quantization.quantize_dynamic(quantized, spec, dtype=torch.qint8, inplace=True)


def _stacked(attention: MultiHeadAttention) -> nn.Linear:
    """[W_Q; W_K; W_V] and their biases as one fp32 Linear, D → 3·H·Dh (to be quantized)."""
    weight, bias = attention.stacked_qkv()
    linear = nn.Linear(weight.size(1), weight.size(0), bias=bias is not None)
    with torch.no_grad():
        linear.weight.copy_(weight)
        if bias is not None:
            linear.bias.copy_(bias)
    return linear
