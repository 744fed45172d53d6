"""Multi-head attention, as in "Attention Is All You Need" §3.2.

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O
    head_i = softmax(Q W_i^Q (K W_i^K)^T / sqrt(d_k)) V W_i^V,   d_k = d_v = d_model / h

(or d_k = d_v = model.d_head when it is set, so that the head size can be held fixed as h varies).
All heads are computed together: the per-head projections W_i^Q are the column blocks of one
d_model × H·d_head matrix W_Q, so one matmul projects every head and a reshape separates them. In
self-attention Q, K and V come from the same input, so W_Q, W_K and W_V are stacked into one
matmul (the parameters stay three Linear layers).

Shape legend:  B batch · H heads · Tq query length · Tk key length · D d_model · Dh d_head (D / H unless set)
Masks are boolean and broadcast to [B, H, Tq, Tk]; True means "may attend". A `Mask` adds a causal
flag (the fused kernel's own causal mode on GPUs) and keeps the explicit path's additive bias, so a
model builds each mask once per forward pass and all its layers share it.
"""

from __future__ import annotations

import math
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ..core.config import heads_divide
from .gates import HardConcreteGate
from .sizes import head_size


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """[B, T, H·Dh] → [B, H, T, Dh]"""
    B, T, width = x.shape
    return x.view(B, T, n_heads, width // n_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """[B, H, T, Dh] → [B, T, H·Dh]: the transpose puts each position's heads side by side (Concat)."""
    B, H, T, Dh = x.shape
    return x.transpose(1, 2).reshape(B, T, H * Dh)


def fold_group(q: torch.Tensor, group: int) -> torch.Tensor:
    """[n·g, H, Tq, Dh] → [n, H, g·Tq, Dh]: the g query rows of each cached row become one row."""
    return q.unflatten(0, (-1, group)).transpose(1, 2).flatten(2, 3)


def unfold_group(x: torch.Tensor, group: int) -> torch.Tensor:
    """[n, H, g·Tq, X] → [n·g, H, Tq, X]: undoes fold_group on the output (X = Dh) or probabilities (X = Tk)."""
    return x.unflatten(2, (group, -1)).transpose(1, 2).flatten(0, 1)


@dataclass
class Mask:
    """Which keys each query may attend to: `allowed` (boolean, broadcast to [B, H, Tq, Tk], True = may
    attend; None = every key) and, with `causal`, only keys at positions ≤ the query's (Tq = Tk).

    Built once per forward pass and shared by the layers: the boolean mask and the explicit path's
    additive bias are made on first use and kept. `causal` without `allowed` lets the fused kernel
    use its causal mode (no mask tensor at all), which the GPU kernels need for their fastest path.
    """

    allowed: torch.Tensor | None = None
    causal: bool = False
    _made: dict = field(default_factory=dict, repr=False, compare=False)

    def dense(self, tq: int, tk: int, device) -> torch.Tensor | None:
        """The boolean mask that `allowed` and `causal` make together, [B|1, 1, Tq, Tk] or broadcastable; None: all."""
        if not self.causal:
            return self.allowed
        if "dense" not in self._made:
            causal = torch.ones(tq, tk, dtype=torch.bool, device=device).tril()[None, None]
            self._made["dense"] = causal if self.allowed is None else causal & self.allowed
        return self._made["dense"]

    def bias(self, tq: int, tk: int, dtype: torch.dtype, device) -> torch.Tensor | None:
        """dense() as an additive bias in `dtype`: 0 where allowed, -inf where not; None: nothing to add."""
        if ("bias", dtype) not in self._made:
            dense = self.dense(tq, tk, device)
            self._made["bias", dtype] = mask_bias(dense, dtype) if dense is not None else None
        return self._made["bias", dtype]


def as_mask(mask: Mask | torch.Tensor | None) -> Mask | None:
    """A boolean tensor (True = may attend) or a Mask → a Mask (None stays None)."""
    return Mask(mask) if isinstance(mask, torch.Tensor) else mask


def explicit_attention(q, k, v, mask: Mask | torch.Tensor | None, dropout_p: float = 0.0, training: bool = False):
    """softmax(q kᵀ / sqrt(Dh)) v with the probabilities returned: [B,H,Tq,Dh], [B,H,Tq,Tk].

    The scores are the largest tensor (Tk / Dh times the size of q: with small heads many times), so
    each pass over them counts: the scale goes on q before the product, the mask is added in place
    as a bias of the mask's own broadcast shape (made once per Mask), and the softmax runs in q's
    dtype (the kernel accumulates in fp32 for bf16), with no fp32 copy of the scores.
    """
    scores = (q * (1.0 / math.sqrt(q.size(-1)))) @ k.transpose(-2, -1)  # [B, H, Tq, Tk]
    mask = as_mask(mask)
    bias = mask.bias(q.size(-2), k.size(-2), scores.dtype, q.device) if mask is not None else None
    if bias is not None:
        scores.add_(bias)  # the product's backward does not need its output
    probs = torch.softmax(scores, dim=-1)
    dropped = F.dropout(probs, dropout_p, training) if dropout_p > 0 else probs
    return dropped @ v, probs


def mask_bias(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Boolean mask (True = may attend) → additive bias: 0 where allowed, -inf where not."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))


def compute_dtype(weight: torch.Tensor) -> torch.dtype:
    """The dtype a layer with this weight computes in: autocast's when it is on for the weight's device, else the weight's."""
    device = weight.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else weight.dtype


def fused_kernel_pays(q: torch.Tensor, decoding: bool = False) -> bool:
    """Whether F.scaled_dot_product_attention beats the explicit path here: on GPUs; on the CPU in fp32,
    except for a decoding step (a cache in use: one query per row, or a beam's few folded onto one
    sentence), which the CPU kernel serves slower than the explicit product; not in bf16 on the CPU,
    where its kernel is slower (docs/performance.md, "Design measurements")."""
    if q.device.type != "cpu":
        return True
    return q.dtype == torch.float32 and not decoding


def fused_attention(q, k, v, mask: Mask | None, dropout_p: float = 0.0) -> torch.Tensor:
    """F.scaled_dot_product_attention: [B, H, Tq, Dh]. A causal Mask without padding uses the kernel's
    causal mode (is_causal: no mask tensor is read, and GPU flash kernels apply)."""
    if mask is not None and mask.causal and mask.allowed is None and q.size(-2) == k.size(-2):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
    dense = mask.dense(q.size(-2), k.size(-2), q.device) if mask is not None else None
    return F.scaled_dot_product_attention(q, k, v, attn_mask=dense, dropout_p=dropout_p)


@dataclass
class Packing:
    """The real (non-PAD) positions of a right-padded [B, S] batch, so that position-wise work (LayerNorm,
    the projections, the FFN) runs on the n real tokens only, [n, X], and attention on the padded
    [B, S, X] layout it needs, as deployment engines do (CTranslate2's padding removal). A padded
    position's output is never read: its keys are masked, and its queries' outputs are dropped.
    """

    index: torch.Tensor  # [n] flat position b·S + s of each real token
    shape: tuple[int, int]  # (B, S)
    _zeros: dict = field(default_factory=dict, repr=False, compare=False)  # width X → [B·S, X] buffer

    @classmethod
    def of(cls, real: torch.Tensor) -> Packing:
        """real: [B, S] bool, True = a real token."""
        return cls(real.reshape(-1).nonzero().squeeze(1), (real.size(0), real.size(1)))

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """[B, S, X] → [n, X]"""
        return x.flatten(0, 1).index_select(0, self.index)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """[n, X] → [B, S, X], zeros at the padded positions.

        One buffer per width X, zeroed once: every call writes the same real positions, so the padded
        ones stay 0, and the encoder's layers do not each zero a fresh [B·S, 3·H·Dh] tensor (measured: the
        zeroing cost 2.6% of a greedy search). The result is valid until the next call of the same width,
        so a Packing serves computations without gradients only (autograd would keep each layer's Q, K, V).
        """
        B, S = self.shape
        key = (x.size(-1), x.dtype, x.device)
        if key not in self._zeros:
            self._zeros[key] = x.new_zeros(B * S, x.size(-1))
        return self._zeros[key].index_copy_(0, self.index, x).view(B, S, -1)


@dataclass
class KVCache:
    """Keys and values of one attention module during incremental decoding.

    Self-attention appends one position per step; cross-attention fills it once from the
    encoder output (`static`). Tensors are [B, H, T, Dh]. `group`: query rows per cached row. In
    beam search the beams of a sentence are `group` consecutive query rows that share its encoder
    keys/values, which are then computed, stored and read once per sentence, not once per beam.

    A self-attention cache is reordered lazily: `reorder` records the rows to keep, and the next
    `append` gathers them straight into the new, longer tensor. One copy of the cache per step
    instead of two (a gather, then a concatenation).
    """

    k: torch.Tensor | None = None
    v: torch.Tensor | None = None
    static: bool = False
    group: int = 1
    rows: torch.Tensor | None = None  # self-attention: the rows `append` keeps, in order (None: all)

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Self-attention: add the new positions' keys and values ([B, H, Tk_new, Dh]); returns all so far.

        A new contiguous tensor each step: the attention product over a slice of a preallocated
        buffer (strided rows) cost more than this copy saved (see docs/performance.md)."""
        if self.k is not None:
            k, v = self._grown(self.k, k), self._grown(self.v, v)  # [B, H, Tk_past + Tk_new, Dh]
        self.k, self.v, self.rows = k, v, None
        return k, v

    def _grown(self, past: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        """[rows of past, then new] along the positions, gathered and written in one pass."""
        t = past.size(2)
        out = past.new_empty(new.size(0), past.size(1), t + new.size(2), past.size(3))
        out[:, :, t:] = new
        if self.rows is None:
            out[:, :, :t] = past
        else:
            torch.index_select(past, 0, self.rows, out=out[:, :, :t])
        return out

    def reorder(self, index: torch.Tensor) -> None:
        """Keep batch rows `index` (in that order): beam search reordering and pruning."""
        if self.k is None:
            return
        if self.static:
            self.k = self.k.index_select(0, index)
            self.v = self.v.index_select(0, index)
        else:
            self.rows = index if self.rows is None else self.rows[index]


class MultiHeadAttention(nn.Module):
    """Multi-head attention (§3.2.2): h heads of scaled dot-product attention (§3.2.1) over
    d_head dimensions each (d_model / h unless given), concatenated ([B, Tq, H·Dh]) and projected back
    to d_model by W_O. With d_head given, W_Q, W_K, W_V are d_model × H·d_head and W_O is
    H·d_head × d_model: parameters and compute then change with h.

    One module serves the paper's three uses (§3.2.3): encoder self-attention, decoder self-attention
    (with a causal mask) and encoder-decoder attention (queries from the decoder, keys and values
    from the encoder output). forward: query [B, Tq, D], key_value [B, Tk, D] → [B, Tq, D], plus the
    per-head probabilities [B, H, Tq, Tk] when asked for (never averaged over heads).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        d_head: int | None = None,
        gate: HardConcreteGate | None = None,
    ):
        super().__init__()
        if d_head is None and not heads_divide(d_model, n_heads):
            raise ValueError(f"n_heads={n_heads} must divide d_model={d_model}")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, head_size(d_model, n_heads, d_head)
        self.dropout = dropout
        inner = n_heads * self.d_head  # H·Dh: d_model unless d_head is given
        with warnings.catch_warnings():  # a pruned module may have no heads: Linear warns of its empty init
            warnings.filterwarnings("ignore", "Initializing zero-element tensors", UserWarning)
            self.w_q = nn.Linear(d_model, inner, bias=bias)
            self.w_k = nn.Linear(d_model, inner, bias=bias)
            self.w_v = nn.Linear(d_model, inner, bias=bias)
            self.w_o = nn.Linear(inner, d_model, bias=bias)
        for linear in (self.w_q, self.w_k, self.w_v, self.w_o):
            if linear.weight.numel():  # a module whose heads were all pruned has nothing to initialise
                nn.init.xavier_uniform_(linear.weight)
            if bias:
                nn.init.zeros_(linear.bias)
        self.gate = gate  # learned head gates (model.head_gates), or None: not even a key in the checkpoint
        self._qkv_kept: tuple | None = None  # the stacked weights while a search keeps them: see keeping_stacked_qkv
        # [W_Q; W_K; W_V] as one module, used by self-attention instead of stacking the three: an int8 model's
        # quantized stack (inference.quantized); None in every model that trains or is saved
        self.qkv: nn.Module | None = None
        self._keep_qkv = False
        self.head_gate: torch.Tensor | None = None  # set for a forward pass by transformer.gated_heads

    def _project_qkv(self, x):
        """Self-attention: Q, K and V of x in one matmul (W_Q, W_K, W_V stacked)."""
        return self._stacked_linear(x).chunk(3, dim=-1)

    def _stacked_linear(self, x):
        """x [..., D] → [..., 3·H·Dh]: x [W_Q; W_K; W_V]ᵀ + the stacked biases (by `qkv` when it is set)."""
        if self.qkv is not None:
            return self.qkv(x)
        return F.linear(x, *self.stacked_qkv())

    def stacked_qkv(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """[W_Q; W_K; W_V] ([3·H·Dh, D]) and the stacked biases ([3·H·Dh] or None).

        Made on each call (so that gradients flow to the three Linear layers), except inside
        keeping_stacked_qkv without gradients: a search calls this once per layer and step, so there
        the stack is made once, in autocast's dtype when autocast is on, and dropped when the search ends.
        """
        keep = self._keep_qkv and not torch.is_grad_enabled()
        if keep and self._qkv_kept is not None:
            return self._qkv_kept
        linears = (self.w_q, self.w_k, self.w_v)
        weight = torch.cat([m.weight for m in linears])
        bias = torch.cat([m.bias for m in linears]) if self.w_q.bias is not None else None
        if keep:
            dtype = compute_dtype(self.w_q.weight)
            self._qkv_kept = (weight.to(dtype), bias.to(dtype) if bias is not None else None)
            return self._qkv_kept
        return weight, bias

    def forward(
        self,
        query: torch.Tensor,
        key_value: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        cache: KVCache | None = None,
        need_weights: bool = False,
        packing: Packing | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """query: [B, Tq, D]; key_value: [B, Tk, D] (the query itself for self-attention).

        cache: incremental decoding state (see KVCache). need_weights: also return the per-head
        attention probabilities [B, H, Tq, Tk] (explicit path). packing: self-attention over a padded
        batch given as its real tokens, query = key_value [n, D] (see Packing; the output is [n, D]):
        the projections skip the padding, the attention itself runs padded.
        Returns ([B, Tq, D], probabilities or None).
        """
        if self.n_heads == 0:  # every head pruned: Concat of no heads is empty, and W_O leaves its bias
            return self._without_heads(query, key_value, need_weights)
        # 1. Project and split heads: Q = query W_Q → [B, H, Tq, Dh]
        # 2. Keys and values, from the cache when it has them (cross-attention while decoding).
        cached = cache is not None and cache.static and cache.k is not None
        if packing is not None:  # [n, 3·H·Dh] → [B, S, 3·H·Dh], zeros at the padding
            q, k, v = (split_heads(x, self.n_heads) for x in packing.unpack(self._stacked_linear(query)).chunk(3, -1))
        elif key_value is query and not cached:  # self-attention: one matmul for Q, K and V
            q, k, v = (split_heads(x, self.n_heads) for x in self._project_qkv(query))
        else:
            q = split_heads(self.w_q(query), self.n_heads)
            if cached:
                k, v = cache.k, cache.v
            else:
                k = split_heads(self.w_k(key_value), self.n_heads)  # [B, H, Tk_new, Dh]
                v = split_heads(self.w_v(key_value), self.n_heads)
        if cache is not None and not cached:
            if cache.static:
                cache.k, cache.v = k.contiguous(), v.contiguous()  # read every step: a dense layout is faster
            else:
                k, v = cache.append(k, v)  # [B, H, Tk_past + Tk_new, Dh]
        group = cache.group if cache is not None else 1
        if group > 1:
            q = fold_group(q, group)
        # 3. Scaled dot-product attention, every head at once: head_outputs [B, H, Tq, Dh].
        dropout_p = self.dropout if self.training else 0.0
        mask = as_mask(mask)
        if need_weights or not fused_kernel_pays(q, decoding=cache is not None):
            head_outputs, probs = explicit_attention(q, k, v, mask, dropout_p, self.training)
        else:
            head_outputs, probs = fused_attention(q, k, v, mask, dropout_p), None
        if group > 1:
            head_outputs = unfold_group(head_outputs, group)
            probs = unfold_group(probs, group) if probs is not None else None
        # 4. Head gates, if any are set, then Concat and W_O.
        concat = merge_heads(self._gated(head_outputs))  # [B, Tq, H·Dh]
        if packing is not None:
            concat = packing.pack(concat)  # [n, H·Dh]
        return self.w_o(concat), probs  # [B, Tq, D] ([n, D] packed)

    def _gated(self, head_outputs: torch.Tensor) -> torch.Tensor:
        """[B, H, Tq, Dh] with each head's output multiplied by its gates: the learned gate (see
        gates.py), times `head_gate` when set ([H], or [B, H] for one gate per example: per-sentence
        gradients of head importance; 1 = keep, 0 = prune)."""
        gate = self.head_gate
        if self.gate is not None:
            learned = self.gate()  # [H]
            gate = learned if gate is None else gate.to(learned.dtype) * learned
        if gate is None:
            return head_outputs
        return head_outputs * gate.to(head_outputs.dtype).view(-1 if gate.dim() == 2 else 1, head_outputs.size(1), 1, 1)

    def _without_heads(self, query: torch.Tensor, key_value: torch.Tensor, need_weights: bool):
        """A module with no heads: ([B, Tq, D], the bias of W_O at every position; [B, 0, Tq, Tk] or None)."""
        out = self.w_o(query.new_zeros(*query.shape[:-1], 0))  # [B, Tq, D] ([n, D] packed)
        if not need_weights:
            return out, None
        B, Tq, _ = query.shape
        return out, query.new_zeros(B, 0, Tq, key_value.size(1))


@contextmanager
def keeping_stacked_qkv(model: nn.Module):
    """Within: every attention module of `model` stacks [W_Q; W_K; W_V] once, at its first call without
    gradients, and reuses the stack; on leaving, the stacks are dropped. For one search, during which
    the weights cannot change. A stack kept across calls would need to notice weight updates, and
    fused optimisers (Adam with fused=True) update parameters without advancing their version
    counters: validation in training then decoded with the stack of its first call.
    """
    modules = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    outer = [m._keep_qkv for m in modules]  # a search called inside another keeps the outer one's stacks
    for m in modules:
        m._keep_qkv = True
    try:
        yield
    finally:
        for m, kept in zip(modules, outer):
            m._keep_qkv = kept
            if not kept:
                m._qkv_kept = None
