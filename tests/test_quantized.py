"""int8 decoding (inference.quantized): what is quantized, the stacked self-attention projection, the copy."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from mhatrain.core.config import HeadsPerLayer
from mhatrain.data.tokens import BOS, PAD
from mhatrain.inference.quantized import quantized_model
from mhatrain.model.attention import MultiHeadAttention

from . import conftest

VOCAB = 40
DYNAMIC = torch.ao.nn.quantized.dynamic.Linear


def _source(seed: int = 1) -> torch.Tensor:
    ids = torch.randint(4, VOCAB, (3, 7), generator=torch.Generator().manual_seed(seed))
    ids[1, 5:] = PAD  # padding, so that the encoder's packed path runs
    return ids


def _self_attention(model) -> list[MultiHeadAttention]:
    return [*(layer.self_attn for layer in model.encoder), *(layer.self_attn for layer in model.decoder)]


def test_the_int8_copy_leaves_the_model_as_it_was():
    model = conftest.small_model(VOCAB)
    before = copy.deepcopy(model.state_dict())
    quantized_model(model)
    assert all(m.qkv is None for m in _self_attention(model))
    assert model.state_dict().keys() == before.keys()
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())


def test_every_matmul_by_a_weight_is_int8_with_self_attention_as_one_stack():
    int8 = quantized_model(conftest.small_model(VOCAB))
    for m in _self_attention(int8):
        assert isinstance(m.qkv, DYNAMIC) and m.qkv.weight().shape == (3 * 32, 32)
        assert all(type(getattr(m, part)) is nn.Linear for part in ("w_q", "w_k", "w_v"))  # unread, left as they were
        assert isinstance(m.w_o, DYNAMIC)
    for layer in int8.decoder:
        assert all(isinstance(getattr(layer.cross_attn, p), DYNAMIC) for p in ("w_q", "w_k", "w_v", "w_o"))
        assert isinstance(layer.ffn.w_1, DYNAMIC) and isinstance(layer.ffn.w_2, DYNAMIC)
    assert isinstance(int8.output, DYNAMIC)


def test_the_stack_computes_what_the_three_projections_quantized_alone_compute():
    """One scale per output row: the stack's rows are W_Q's, W_K's and W_V's quantized alone, in that order,
    and its input is quantized once, as each of theirs would be."""
    model = conftest.small_model(VOCAB)
    int8 = quantized_model(model)
    x = torch.randn(5, 9, 32, generator=torch.Generator().manual_seed(2))
    for fp32, quantized in zip(_self_attention(model), _self_attention(int8), strict=True):
        alone = [DYNAMIC.from_float(_with_qconfig(getattr(fp32, part))) for part in ("w_q", "w_k", "w_v")]
        expected = torch.cat([linear(x) for linear in alone], dim=-1)
        torch.testing.assert_close(quantized.qkv(x), expected, atol=1e-6, rtol=0)
        # and the int8 rows stand for the fp32 ones: within the quantization's error of the fp32 projection
        exact = torch.nn.functional.linear(x, *fp32.stacked_qkv())
        assert (quantized.qkv(x) - exact).abs().max() < 0.05 * exact.abs().max()


def _with_qconfig(linear: nn.Linear) -> nn.Linear:
    linear = copy.deepcopy(linear)
    linear.qconfig = torch.ao.quantization.per_channel_dynamic_qconfig
    return linear


@pytest.mark.parametrize("layout", [None, HeadsPerLayer(enc_self=[0, 2], dec_self=[3, 0])])
def test_int8_decoding_follows_the_fp32_model(layout):
    """Also a pruned model with self-attention layers of no heads (nothing to stack or quantize there)."""
    model = conftest.small_model(VOCAB, **({"heads_per_layer": layout} if layout else {}))
    int8 = quantized_model(model)
    src = _source()
    tgt = torch.tensor([[BOS, 5, 6, 7], [BOS, 8, 9, PAD], [BOS, 10, 11, 12]])
    with torch.no_grad():
        expected = model.decode(tgt, *model.encode(src)).log_softmax(-1)
        got = int8.decode(tgt, *int8.encode(src)).log_softmax(-1)
    torch.testing.assert_close(got, expected, atol=0.05, rtol=0.05)
    assert not torch.equal(got, expected)  # it is the int8 model that ran
