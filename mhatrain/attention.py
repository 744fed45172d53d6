"""Multi-head attention, as in "Attention Is All You Need" §3.2.

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O
    head_i = softmax(Q W_i^Q (K W_i^K)^T / sqrt(d_k)) V W_i^V,   d_k = d_v = d_model / h

All heads are computed together: the per-head projections W_i^Q are the column blocks of one
d_model × d_model matrix W_Q, so one matmul projects every head and a reshape separates them. In
self-attention Q, K and V come from the same input, so W_Q, W_K and W_V are stacked into one
matmul (the parameters stay three Linear layers).

Shape legend:  B batch · H heads · Tq query length · Tk key length · D d_model · Dh d_head = D / H
Masks are boolean and broadcast to [B, H, Tq, Tk]; True means "may attend".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """[B, T, D] → [B, H, T, Dh]"""
    B, T, D = x.shape
    return x.view(B, T, n_heads, D // n_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """[B, H, T, Dh] → [B, T, D]: the transpose puts each position's heads side by side (Concat)."""
    B, H, T, Dh = x.shape
    return x.transpose(1, 2).reshape(B, T, H * Dh)


def fold_group(q: torch.Tensor, group: int) -> torch.Tensor:
    """[n·g, H, Tq, Dh] → [n, H, g·Tq, Dh]: the g query rows of each cached row become one row."""
    return q.unflatten(0, (-1, group)).transpose(1, 2).flatten(2, 3)


def unfold_group(x: torch.Tensor, group: int) -> torch.Tensor:
    """[n, H, g·Tq, X] → [n·g, H, Tq, X]: undoes fold_group on the output (X = Dh) or probabilities (X = Tk)."""
    return x.unflatten(2, (group, -1)).transpose(1, 2).flatten(0, 1)


def explicit_attention(q, k, v, mask, dropout_p: float = 0.0, training: bool = False):
    """softmax(q kᵀ / sqrt(Dh)) v with the probabilities returned: [B,H,Tq,Dh], [B,H,Tq,Tk].

    The scores are the largest tensor (Tk / Dh times the size of q: with small heads many times), so
    each pass over them counts: the scale goes on q before the product, the mask is added in place
    as a bias of the mask's own broadcast shape, and the softmax runs in q's dtype (the kernel
    accumulates in fp32 for bf16), with no fp32 copy of the scores.
    """
    scores = (q * (1.0 / math.sqrt(q.size(-1)))) @ k.transpose(-2, -1)  # [B, H, Tq, Tk]
    if mask is not None:
        scores.add_(mask_bias(mask, scores.dtype))  # the product's backward does not need its output
    probs = torch.softmax(scores, dim=-1)
    dropped = F.dropout(probs, dropout_p, training) if dropout_p > 0 else probs
    return dropped @ v, probs


def mask_bias(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Boolean mask (True = may attend) → additive bias: 0 where allowed, -inf where not."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))


def fused_kernel_pays(q: torch.Tensor) -> bool:
    """SDPA's CPU kernel is ~8x slower than the explicit path in bf16 (fwd+bwd, Dh=32, measured
    with torch 2.13); it wins in fp32 and on GPUs."""
    return q.device.type != "cpu" or q.dtype == torch.float32


@dataclass
class KVCache:
    """Keys and values of one attention module during incremental decoding.

    Self-attention appends one position per step; cross-attention fills it once from the
    encoder output (`static`). Tensors are [B, H, T, Dh]. `group`: query rows per cached row. In
    beam search the beams of a sentence are `group` consecutive query rows that share its encoder
    keys/values, which are then computed, stored and read once per sentence, not once per beam.
    """

    k: torch.Tensor | None = None
    v: torch.Tensor | None = None
    static: bool = False
    group: int = 1

    def reorder(self, index: torch.Tensor) -> None:
        """Keep batch rows `index` (in that order): beam search reordering and pruning."""
        if self.k is not None:
            self.k = self.k.index_select(0, index)
            self.v = self.v.index_select(0, index)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"n_heads={n_heads} must divide d_model={d_model}")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.dropout = dropout
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        for linear in (self.w_q, self.w_k, self.w_v, self.w_o):
            nn.init.xavier_uniform_(linear.weight)
            if bias:
                nn.init.zeros_(linear.bias)

    def _project_qkv(self, x):
        """Self-attention: Q, K and V of x in one matmul (W_Q, W_K, W_V stacked)."""
        weight = torch.cat([self.w_q.weight, self.w_k.weight, self.w_v.weight])
        bias = torch.cat([self.w_q.bias, self.w_k.bias, self.w_v.bias]) if self.w_q.bias is not None else None
        return F.linear(x, weight, bias).chunk(3, dim=-1)

    def forward(
        self,
        query: torch.Tensor,
        key_value: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        cache: KVCache | None = None,
        need_weights: bool = False,
        head_gate: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """query: [B, Tq, D]; key_value: [B, Tk, D] (the query itself for self-attention).

        cache: incremental decoding state (see KVCache). need_weights: also return the per-head
        attention probabilities [B, H, Tq, Tk] (explicit path). head_gate: [H] multipliers on each
        head's output before W_O (1 = keep, 0 = prune), or [B, H] for one gate per example (per-sentence
        gradients of head importance).
        Returns ([B, Tq, D], probabilities or None).
        """
        # 1. Project and split heads: Q = query W_Q → [B, H, Tq, Dh]
        # 2. Keys and values, from the cache when it has them (cross-attention while decoding).
        cached = cache is not None and cache.static and cache.k is not None
        if key_value is query and not cached:  # self-attention: one matmul for Q, K and V
            q, k, v = (split_heads(x, self.n_heads) for x in self._project_qkv(query))
        else:
            q = split_heads(self.w_q(query), self.n_heads)
            if cached:
                k, v = cache.k, cache.v
            else:
                k = split_heads(self.w_k(key_value), self.n_heads)  # [B, H, Tk_new, Dh]
                v = split_heads(self.w_v(key_value), self.n_heads)
        if cache is not None and not cached:
            if not cache.static and cache.k is not None:
                k = torch.cat([cache.k, k], dim=2)  # [B, H, Tk_past + Tk_new, Dh]
                v = torch.cat([cache.v, v], dim=2)
            cache.k, cache.v = k, v
        group = cache.group if cache is not None else 1
        if group > 1:
            q = fold_group(q, group)
        # 3. Scaled dot-product attention, every head at once.
        dropout_p = self.dropout if self.training else 0.0
        if need_weights or not fused_kernel_pays(q):
            heads, probs = explicit_attention(q, k, v, mask, dropout_p, self.training)
        else:
            heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
            probs = None
        if group > 1:
            heads = unfold_group(heads, group)
            probs = unfold_group(probs, group) if probs is not None else None
        # 4. Optional head gates (head masking / importance), then Concat and W_O.
        if head_gate is not None:
            heads = heads * head_gate.to(heads.dtype).view(-1 if head_gate.dim() == 2 else 1, heads.size(1), 1, 1)
        return self.w_o(merge_heads(heads)), probs  # [B, Tq, D]
