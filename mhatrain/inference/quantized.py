"""int8 decoding on the CPU: torch's dynamic quantization of the model's Linear layers.

Weights are stored as int8 (one scale per output row) and each matmul quantizes its input on the
fly (fbgemm, AVX2 and up). Where a CPU has no native bf16, this is the fast low-precision mode; its
cost in BLEU is measured by `mhatrain bench decode` (docs/performance.md).

Left in fp32: the self-attention projections W_Q, W_K, W_V, which a search stacks into one matmul
([W_Q; W_K; W_V], `attention.keeping_stacked_qkv`) from their fp32 weights. Everything else that
multiplies by a weight matrix is quantized: W_O, cross-attention's W_Q, W_K, W_V, the feed-forward
layers and the output projection.

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

STACKED = ("w_q", "w_k", "w_v")  # a self-attention's projections, read as weights by the stacked matmul


def quantized_model(model: Transformer) -> Transformer:
    """An int8 copy of `model` for decoding on the CPU (the model itself is unchanged)."""
    kept = _stacked_linears(model)
    # a pruned model's attention module of no heads has empty projections: nothing to quantize, and
    # per-channel quantization of zero channels fails
    names = {
        name
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear) and name not in kept and m.weight.numel() > 0
    }
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(deprecated|quantize_per_channel).*")
        spec = dict.fromkeys(names, torch.ao.quantization.per_channel_dynamic_qconfig)
        return torch.ao.quantization.quantize_dynamic(copy.deepcopy(model).float().eval(), spec, dtype=torch.qint8)


def _stacked_linears(model: Transformer) -> set[str]:
    """Names of the Linear layers that self-attention reads as weights (the decoder's and the encoder's)."""
    layers = [*(layer.self_attn for layer in model.encoder), *(layer.self_attn for layer in model.decoder)]
    ids = {id(m): m for m in layers if isinstance(m, MultiHeadAttention)}
    return {f"{name}.{part}" for name, module in model.named_modules() if id(module) in ids for part in STACKED}
