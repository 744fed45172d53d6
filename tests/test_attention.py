"""Multi-head attention: fused path = explicit path = per-head reference = torch's own module."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from mhatrain.model.attention import MultiHeadAttention, explicit_attention, fused_kernel_pays, merge_heads, split_heads

TOL = dict(atol=1e-5, rtol=1e-4)  # float32, different summation orders


def reference_mha(mha: MultiHeadAttention, query, key_value, mask, head_order=None):
    """The explainer article's formulation, its defects fixed: one head at a time, masked,
    heads concatenated along the feature axis in head order, then W_O.

    nn.Linear stores weight as [out, in], so head i's W_i^Q is rows i*dh:(i+1)*dh of w_q.weight.
    mask: bool, broadcastable to [B, H, Tq, Tk], True = may attend.
    """
    B, Tq, _ = query.shape
    Tk = key_value.size(1)
    dh = mha.d_head
    if mask is not None:
        mask = mask.expand(B, mha.n_heads, Tq, Tk)
    heads = []
    for i in range(mha.n_heads):
        rows = slice(i * dh, (i + 1) * dh)
        q = query @ mha.w_q.weight[rows].T + mha.w_q.bias[rows]  # [B, Tq, dh]
        k = key_value @ mha.w_k.weight[rows].T + mha.w_k.bias[rows]  # [B, Tk, dh]
        v = key_value @ mha.w_v.weight[rows].T + mha.w_v.bias[rows]
        scores = q @ k.transpose(1, 2) / math.sqrt(dh)  # [B, Tq, Tk]
        if mask is not None:
            scores = scores.masked_fill(~mask[:, i], float("-inf"))
        heads.append(torch.softmax(scores, dim=-1) @ v)  # [B, Tq, dh]
    if head_order is not None:  # only for showing that the comparison notices a wrong order
        heads = [heads[i] for i in head_order]
    return mha.w_o(torch.cat(heads, dim=-1))  # Concat(head_1..head_h) W^O


def torch_mha_like(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    """torch.nn.MultiheadAttention carrying the same weights."""
    ref = nn.MultiheadAttention(mha.d_model, mha.n_heads, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([mha.w_q.weight, mha.w_k.weight, mha.w_v.weight]))
        ref.in_proj_bias.copy_(torch.cat([mha.w_q.bias, mha.w_k.bias, mha.w_v.bias]))
        ref.out_proj.weight.copy_(mha.w_o.weight)
        ref.out_proj.bias.copy_(mha.w_o.bias)
    return ref.eval()


def random_mha(d_model: int, n_heads: int, seed: int = 0, d_head: int | None = None) -> MultiHeadAttention:
    torch.manual_seed(seed)
    mha = MultiHeadAttention(d_model, n_heads, d_head=d_head).eval()
    with torch.no_grad():  # the module initialises biases to 0; make them count
        for linear in (mha.w_q, mha.w_k, mha.w_v, mha.w_o):
            linear.bias.normal_(0.0, 0.1)
    return mha


HEAD_SETTINGS = [(32, 1), (32, 2), (64, 4), (64, 8)]
LENGTHS = torch.tensor([6, 3, 5])  # real tokens per row; the rest is padding (at the end)


def key_padding(lengths: torch.Tensor, T: int) -> torch.Tensor:
    """[B] lengths → [B, T] True where the position is a real token."""
    return torch.arange(T)[None, :] < lengths[:, None]


@pytest.mark.parametrize("d_model,n_heads", HEAD_SETTINGS)
@pytest.mark.parametrize("kind", ["padding", "causal+padding", "cross+padding"])
def test_fused_explicit_reference_and_torch_agree(d_model, n_heads, kind):
    mha = random_mha(d_model, n_heads)
    B, T = LENGTHS.numel(), int(LENGTHS.max())
    torch.manual_seed(1)
    x = torch.randn(B, T, d_model)
    real = key_padding(LENGTHS, T)  # [B, T]
    if kind == "cross+padding":
        query, key_value = torch.randn(B, 4, d_model), x
        mask = real[:, None, None, :]  # [B, 1, 1, Tk]
        attn_mask = None
    else:
        query = key_value = x
        mask = real[:, None, None, :]
        attn_mask = None
        if kind == "causal+padding":
            causal = torch.ones(T, T, dtype=torch.bool).tril()
            mask = mask & causal[None, None]  # [B, 1, T, T]
            attn_mask = ~causal  # torch: True = NOT allowed

    assert query.dtype == torch.float32 and fused_kernel_pays(query)  # the fused kernel is used
    fused, no_probs = mha(query, key_value, mask)
    explicit, probs = mha(query, key_value, mask, need_weights=True)
    reference = reference_mha(mha, query, key_value, mask)
    theirs, _ = torch_mha_like(mha)(
        query, key_value, key_value, key_padding_mask=~real, attn_mask=attn_mask, need_weights=False
    )

    assert no_probs is None
    assert_close(fused, explicit, **TOL)
    assert_close(explicit, reference, **TOL)
    assert_close(fused, reference, **TOL)
    assert_close(fused, theirs, **TOL)

    # Probabilities: per head, [B, H, Tq, Tk], a distribution over the allowed keys only.
    Tq, Tk = query.size(1), key_value.size(1)
    assert probs.shape == (B, n_heads, Tq, Tk)
    allowed = mask.expand(B, n_heads, Tq, Tk)
    assert torch.all(probs[~allowed] == 0)
    assert_close(probs.sum(-1), torch.ones(B, n_heads, Tq))
    assert torch.all(probs[allowed] > 0)


# model.d_head set: heads of a fixed size whatever h, wider (8 × 32 = 256 > 32) or narrower than d_model.
FIXED_HEAD_SETTINGS = [(32, 1, 8), (32, 4, 16), (32, 8, 32), (48, 5, 12)]


@pytest.mark.parametrize("d_model,n_heads,d_head", FIXED_HEAD_SETTINGS)
@pytest.mark.parametrize("kind", ["padding", "causal+padding", "cross+padding"])
def test_fused_explicit_and_reference_agree_with_a_decoupled_head_size(d_model, n_heads, d_head, kind):
    mha = random_mha(d_model, n_heads, d_head=d_head)
    assert mha.d_head == d_head
    assert mha.w_q.weight.shape == (n_heads * d_head, d_model) and mha.w_o.weight.shape == (d_model, n_heads * d_head)
    B, T = LENGTHS.numel(), int(LENGTHS.max())
    torch.manual_seed(1)
    x = torch.randn(B, T, d_model)
    mask = key_padding(LENGTHS, T)[:, None, None, :]
    query = torch.randn(B, 4, d_model) if kind == "cross+padding" else x
    if kind == "causal+padding":
        mask = mask & torch.ones(T, T, dtype=torch.bool).tril()[None, None]

    fused, _ = mha(query, x, mask)
    explicit, probs = mha(query, x, mask, need_weights=True)
    reference = reference_mha(mha, query, x, mask)
    assert fused.shape == (B, query.size(1), d_model)
    assert probs.shape == (B, n_heads, query.size(1), T)
    assert_close(fused, explicit, **TOL)
    assert_close(explicit, reference, **TOL)


def test_a_decoupled_head_size_needs_no_divisibility_and_changes_the_parameters():
    paper = MultiHeadAttention(32, 4)
    assert paper.d_head == 8 and sum(p.numel() for p in paper.parameters()) == 4 * (32 * 32 + 32)
    wide = MultiHeadAttention(32, 3, d_head=32)  # 3 does not divide 32: allowed once d_head is given
    assert sum(p.numel() for p in wide.parameters()) == 3 * (32 * 96 + 96) + (96 * 32 + 32)
    with pytest.raises(ValueError, match="must divide"):
        MultiHeadAttention(32, 3)


def test_comparison_notices_heads_concatenated_out_of_order():
    mha = random_mha(32, 4)
    x = torch.randn(2, 5, 32)
    fused, _ = mha(x, x)
    assert_close(fused, reference_mha(mha, x, x, None), **TOL)
    assert not torch.allclose(fused, reference_mha(mha, x, x, None, head_order=[1, 0, 2, 3]), atol=1e-3)


def test_gradients_flow_through_both_paths_equally():
    mha = random_mha(32, 4)
    x = torch.randn(2, 5, 32, requires_grad=True)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()[None, None]
    grads = []
    for need_weights in (False, True):
        mha.zero_grad()
        x.grad = None
        out, _ = mha(x, x, causal, need_weights=need_weights)
        out.square().sum().backward()
        grads.append((x.grad.clone(), mha.w_q.weight.grad.clone()))
    assert_close(grads[0][0], grads[1][0], **TOL)
    assert_close(grads[0][1], grads[1][1], **TOL)


def test_rejects_head_count_that_does_not_divide_d_model():
    with pytest.raises(ValueError, match="n_heads=3"):
        MultiHeadAttention(32, 3)


# ----------------------------------------------------------------------------- the sqrt(d_k) claim


@pytest.mark.parametrize("d_k", [64, 256])
def test_attention_scores_of_unit_variance_inputs_have_variance_near_one(d_k):
    """The article's claim, on our kernel: for q, k with unit-variance entries, the logits the module
    feeds to softmax (recovered as log p up to a constant) have variance ≈ 1, not ≈ d_k."""
    gen = torch.Generator().manual_seed(d_k)
    n = 4000
    q = torch.randn(1, 1, 1, d_k, generator=gen, dtype=torch.float64)
    k = torch.randn(1, 1, n, d_k, generator=gen, dtype=torch.float64)
    _, probs = explicit_attention(q, k, torch.zeros_like(k), None)
    logits = probs[0, 0, 0].log()  # = q·k_j / sqrt(d_k) − logsumexp: its variance over j is the scores'
    # One query: the variance over keys is |q|² / d_k (≈ 1 with |q|² ≈ d_k), so compare with that exactly.
    expected = float(q.pow(2).sum()) / d_k
    assert abs(float(logits.var()) / expected - 1.0) < 0.1
    assert abs(expected - 1.0) < 0.35


def test_explicit_attention_scales_scores_by_sqrt_d_head():
    """The module's logits are q·k / sqrt(Dh): log(p0 / p1) = q·(k0 - k1) / sqrt(Dh)."""
    torch.manual_seed(0)
    d_head = 16
    q = torch.randn(1, 1, 1, d_head, dtype=torch.float64)
    k = torch.randn(1, 1, 2, d_head, dtype=torch.float64)
    _, probs = explicit_attention(q, k, torch.zeros_like(k), None)
    log_ratio = torch.log(probs[0, 0, 0, 0] / probs[0, 0, 0, 1])
    expected = (q[0, 0, 0] @ (k[0, 0, 0] - k[0, 0, 1])) / math.sqrt(d_head)
    assert_close(log_ratio, expected)


# ----------------------------------------------------------------------------- split / merge heads


@pytest.mark.parametrize("n_heads", [1, 2, 4, 8])
def test_split_merge_round_trip(n_heads):
    x = torch.randn(3, 5, 32)
    heads = split_heads(x, n_heads)
    assert heads.shape == (3, n_heads, 5, 32 // n_heads)
    assert torch.equal(merge_heads(heads), x)
    dh = 32 // n_heads
    for i in range(n_heads):  # head i reads feature block i
        assert torch.equal(heads[:, i], x[..., i * dh : (i + 1) * dh])


def labelled_heads(B=2, H=4, T=5, Dh=3) -> torch.Tensor:
    """[B, H, T, Dh] whose every entry encodes its (b, h, t, d) coordinates."""
    b, h, t, d = torch.meshgrid(*(torch.arange(n) for n in (B, H, T, Dh)), indexing="ij")
    return (1000 * b + 100 * h + 10 * t + d).float()


def concat_property_holds(merge, heads: torch.Tensor) -> bool:
    """merge(heads)[b, t, i*Dh:(i+1)*Dh] == heads[b, i, t] for every b, t, i."""
    merged = merge(heads)
    B, H, T, Dh = heads.shape
    return merged.shape == (B, T, H * Dh) and all(
        torch.equal(merged[:, t, i * Dh : (i + 1) * Dh], heads[:, i, t]) for i in range(H) for t in range(T)
    )


def test_merge_heads_concatenates_heads_per_position():
    assert concat_property_holds(merge_heads, labelled_heads())


@pytest.mark.parametrize("need_weights", [False, True])
def test_bf16_autocast_on_cpu_matches_fp32_within_bf16_rounding(need_weights):
    """The CPU bf16 path (fused and explicit) computes what fp32 computes, to bf16's ~3 significant digits."""
    mha = random_mha(64, 8)
    B, T = LENGTHS.numel(), int(LENGTHS.max())
    torch.manual_seed(2)
    x = torch.randn(B, T, 64)
    mask = key_padding(LENGTHS, T)[:, None, None, :] & torch.ones(T, T, dtype=torch.bool).tril()[None, None]
    expected, expected_probs = mha(x, x, mask, need_weights=need_weights)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, probs = mha(x, x, mask, need_weights=need_weights)
    assert out.dtype == torch.bfloat16
    assert_close(out.float(), expected, atol=3e-2, rtol=3e-2)
    if need_weights:
        assert_close(probs.float(), expected_probs, atol=1e-2, rtol=3e-2)
        assert torch.all(probs[~mask.expand_as(probs)] == 0)


# ----------------------------------------------------------------------------- masks built once, causal mode


@pytest.mark.parametrize("padding", [False, True])
def test_causal_mask_fused_explicit_and_reference_agree(padding):
    """Mask(causal=True) without padding takes SDPA's causal mode (no mask tensor); with padding the
    dense mask. Both equal the explicit path and the per-head reference with a boolean causal mask."""
    from mhatrain.model.attention import Mask

    mha = random_mha(32, 4)
    x = torch.randn(3, 6, 32, generator=torch.Generator().manual_seed(3))
    causal = torch.ones(6, 6, dtype=torch.bool).tril()[None, None]
    allowed = key_padding(LENGTHS, 6)[:, None, None, :] if padding else None
    expected_mask = causal & allowed if padding else causal
    with torch.no_grad():
        fused, _ = mha(x, x, Mask(allowed, causal=True))
        explicit, probs = mha(x, x, Mask(allowed, causal=True), need_weights=True)
        reference = reference_mha(mha, x, x, expected_mask)
    real = key_padding(LENGTHS, 6) if padding else torch.ones(3, 6, dtype=torch.bool)
    assert_close(fused[real], reference[real], **TOL)
    assert_close(explicit[real], reference[real], **TOL)
    assert (probs[~expected_mask.expand_as(probs)] == 0).all()


def test_a_mask_makes_its_bias_once_per_dtype():
    from mhatrain.model.attention import Mask

    mask = Mask(key_padding(LENGTHS, 6)[:, None, None, :], causal=True)
    bias = mask.bias(6, 6, torch.bfloat16, "cpu")
    assert mask.bias(6, 6, torch.bfloat16, "cpu") is bias  # shared by every layer of a forward pass
    assert bias.dtype == torch.bfloat16 and mask.bias(6, 6, torch.float32, "cpu").dtype == torch.float32
    assert torch.equal(bias == 0, mask.dense(6, 6, "cpu").expand(3, 1, 6, 6))


def test_the_qkv_stack_is_kept_for_one_search_only():
    """A search stacks [W_Q; W_K; W_V] once (keeping_stacked_qkv) and drops the stack when it ends,
    so that a weight update between searches is seen even when nothing advances the weights'
    version counters (fused Adam does not), in and out of autocast."""
    from mhatrain.model.attention import keeping_stacked_qkv

    mha = random_mha(32, 4)
    x = torch.randn(2, 5, 32)
    with torch.no_grad(), keeping_stacked_qkv(mha):
        first, _ = mha(x, x)
        stack = mha.stacked_qkv()[0]
        mha(x, x)
        assert mha.stacked_qkv()[0] is stack  # made once per search
    assert mha._qkv_kept is None
    assert_close(first, reference_mha(mha, x, x, None), **TOL)
    optimiser = torch.optim.Adam(mha.parameters(), lr=0.1, fused=True)
    mha(x, x)[0].square().sum().backward()
    version = mha.w_q.weight._version
    optimiser.step()
    assert mha.w_q.weight._version == version  # the case a kept stack cannot detect
    with torch.no_grad(), keeping_stacked_qkv(mha):
        after, _ = mha(x, x)
        with torch.autocast("cpu", dtype=torch.bfloat16), keeping_stacked_qkv(mha):
            low, _ = mha(x, x)
    assert not torch.allclose(first, after)
    assert_close(after, reference_mha(mha, x, x, None), **TOL)
    assert_close(low.float(), after, atol=0.05, rtol=0.05)
