"""The Transformer: causality, padding invariance, embeddings, cached decoding, head gates."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch.testing import assert_close

from mhatrain.core.config import HeadGatesConfig, HeadsPerLayer
from mhatrain.data.tokens import BOS, PAD
from mhatrain.model import transformer
from mhatrain.model.transformer import Attention, HeadGates, count_parameters, gated_heads, sinusoidal_positions

from . import conftest

VOCAB = 30
TOL = dict(atol=1e-5, rtol=1e-4)


def small_model(norm: str = "post", tie: bool = True, seed: int = 0, **overrides):
    return conftest.small_model(VOCAB, norm, tie, seed, **overrides)


def tokens(*shape, seed=1) -> torch.Tensor:
    """Random ids ≥ 4 (0..3 are PAD, UNK, BOS, EOS)."""
    return torch.randint(4, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


def pad_to(rows: list[torch.Tensor], length: int) -> torch.Tensor:
    out = torch.full((len(rows), length), PAD, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : row.numel()] = row
    return out


# ----------------------------------------------------------------------------- causality and padding


@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("explicit", [False, True], ids=["fused", "explicit"])
def test_future_target_tokens_cannot_change_earlier_outputs(norm, explicit):
    model = small_model(norm)
    src = tokens(2, 6)
    tgt = torch.cat([torch.full((2, 1), BOS), tokens(2, 6, seed=2)], dim=1)  # [2, 7]
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        before = model.decode(tgt, memory, src_mask, attention=Attention() if explicit else None)
        for t in (1, 3, 6):
            changed = tgt.clone()
            changed[:, t:] = tokens(2, 7 - t, seed=10 + t)
            assert not torch.equal(changed[:, t:], tgt[:, t:])
            after = model.decode(changed, memory, src_mask, attention=Attention() if explicit else None)
            assert_close(after[:, :t], before[:, :t], **TOL)
            assert not torch.allclose(after[:, t:], before[:, t:], atol=1e-4)  # the change is visible


@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("explicit", [False, True], ids=["fused", "explicit"])
def test_padding_does_not_change_results(norm, explicit):
    model = small_model(norm)
    short_src, long_src = tokens(4, seed=3), tokens(9, seed=4)
    short_tgt = torch.cat([torch.tensor([BOS]), tokens(3, seed=5)])
    long_tgt = torch.cat([torch.tensor([BOS]), tokens(7, seed=6)])
    attention = (lambda: Attention()) if explicit else (lambda: None)
    with torch.no_grad():
        alone_memory, alone_mask = model.encode(short_src[None], attention=attention())
        alone_logits = model.decode(short_tgt[None], alone_memory, alone_mask, attention=attention())

        src = pad_to([short_src, long_src], 9)
        tgt = pad_to([short_tgt, long_tgt], 8)
        memory, src_mask = model.encode(src, attention=attention())
        logits = model.decode(tgt, memory, src_mask, attention=attention())

    assert_close(memory[0, :4], alone_memory[0], **TOL)
    assert_close(logits[0, :4], alone_logits[0], **TOL)
    assert torch.isfinite(logits).all() and torch.isfinite(memory).all()


def ragged_batch(seed: int = 7) -> torch.Tensor:
    """[5, 9] sources of lengths 9, 1, 4, 7 and 2, right-padded."""
    return pad_to([tokens(n, seed=seed + n) for n in (9, 1, 4, 7, 2)], 9)


@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize(
    "overrides",
    [{}, {"heads_per_layer": HeadsPerLayer(enc_self=[0, 2])}, {"head_gates": HeadGatesConfig(kinds=["enc_self"])}],
    ids=["plain", "pruned", "gated"],
)
def test_encoder_without_padding_equals_the_padded_encoder_bit_for_bit(norm, overrides, monkeypatch):
    """Outside training the encoder's position-wise work skips the padding (Packing): every real
    position's output is the padded computation's exactly, and padded positions hold 0."""
    model = small_model(norm, **overrides)
    src = ragged_batch()
    packed = []
    unpack = transformer.Packing.unpack

    def spy(self, x):
        packed.append(x.size(0))
        return unpack(self, x)

    monkeypatch.setattr(transformer.Packing, "unpack", spy)
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        monkeypatch.setattr(transformer, "PACK_MIN_ROWS", 10**9)  # never pack
        padded, _ = model.encode(src)
    real = src_mask[:, 0, 0]  # [B, S]
    assert packed and set(packed) == {int(real.sum())}  # the layers saw the 23 real tokens only
    assert torch.equal(memory[real], padded[real])
    assert not memory[~real].any()


def test_encoder_pads_in_training_with_gradients_and_for_attention_maps():
    """Training (dropout draws per position), gradients (autograd keeps each layer's Q, K, V, which
    Packing's reused buffer would overwrite) and attention maps keep the padded layout."""
    model, src = small_model(), ragged_batch()
    with torch.no_grad():
        packed, src_mask = model.encode(src)
        real = src_mask[:, 0, 0]
        assert not packed[~real].any()
        maps = Attention()
        memory, _ = model.encode(src, attention=maps)
        assert memory[~real].any() and maps.enc_self[0].shape == (5, 4, 9, 9)
    memory, _ = model.encode(src)  # gradients on
    assert memory[~real].any()
    memory.sum().backward()
    model.train()
    with torch.no_grad():
        memory, _ = model.encode(src)
    assert memory[~real].any()


def test_packing_reuses_one_zeroed_buffer_per_width():
    """Each layer writes the same real positions of one buffer: the padded ones stay 0."""
    packing = transformer.Packing.of(torch.tensor([[True, False], [True, True]]))
    first = packing.unpack(torch.ones(3, 2))
    second = packing.unpack(torch.full((3, 2), 2.0))
    assert first.data_ptr() == second.data_ptr()
    assert second.view(4, 2)[:, 0].tolist() == [2.0, 0.0, 2.0, 2.0]
    assert packing.unpack(torch.ones(3, 5)).data_ptr() != first.data_ptr()


def test_packing_round_trip():
    real = torch.tensor([[True, True, False], [True, False, False]])
    packing = transformer.Packing.of(real)
    x = torch.arange(6.0).view(2, 3, 1) + 1
    assert packing.pack(x).view(-1).tolist() == [1.0, 2.0, 4.0]
    assert packing.unpack(packing.pack(x)).view(2, 3).tolist() == [[1.0, 2.0, 0.0], [4.0, 0.0, 0.0]]


# ----------------------------------------------------------------------------- embeddings


def test_tied_embeddings_share_storage_with_the_output_projection():
    tied, untied = small_model(tie=True), small_model(tie=False)
    assert tied.output.weight is tied.embed.weight
    assert tied.output.weight.data_ptr() == tied.embed.weight.data_ptr()
    assert untied.output.weight.data_ptr() != untied.embed.weight.data_ptr()
    with torch.no_grad():  # an update to one is an update to the other
        tied.embed.weight[5].add_(1.0)
    assert torch.equal(tied.output.weight[5], tied.embed.weight[5])


def test_count_parameters_counts_tied_weights_once():
    tied, untied = small_model(tie=True), small_model(tie=False)
    assert count_parameters(untied) - count_parameters(tied) == VOCAB * 32
    assert count_parameters(untied) == sum(p.numel() for p in untied.parameters())
    distinct = {p.data_ptr(): p.numel() for p in tied.parameters()}
    assert count_parameters(tied) == sum(distinct.values())


def test_embeddings_are_scaled_by_sqrt_d_model():
    model = small_model()
    ids = tokens(2, 5)
    with torch.no_grad():
        x = model._embed(ids)
        shifted = model._embed(ids, offset=3)
    expected = model.embed.weight[ids] * math.sqrt(32)
    assert_close(x - model.positions[:5], expected)
    assert_close(shifted - model.positions[3:8], expected)  # cached decoding's positions continue
    assert_close(x - expected, sinusoidal_positions(5, 32).expand(2, 5, 32))


def test_sinusoidal_positions_match_the_paper():
    d_model = 16
    table = sinusoidal_positions(50, d_model)
    assert table.shape == (50, d_model)
    for pos in (0, 1, 7, 49):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-5)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-5)
    assert torch.equal(small_model().positions, sinusoidal_positions(64, 32))


# ----------------------------------------------------------------------------- cached decoding


def encoded_batch(model):
    """Three padded sources of different lengths, encoded."""
    src = pad_to([tokens(5, seed=7), tokens(3, seed=8), tokens(7, seed=9)], 7)
    with torch.no_grad():
        memory, src_mask = model.encode(src)
    return memory, src_mask


@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("n_heads, d_head", [(4, None), (3, 16)])  # model.d_head: 3 heads of 16 in d_model 32
def test_cached_incremental_decoding_equals_full_recomputation(norm, n_heads, d_head):
    model = small_model(norm, n_heads=n_heads, d_head=d_head)
    memory, src_mask = encoded_batch(model)
    tgt = torch.cat([torch.full((3, 1), BOS), tokens(3, 6, seed=11)], dim=1)  # [3, 7]
    with torch.no_grad():
        full = model.decode(tgt, memory, src_mask)
        cache = model.new_cache(memory, src_mask)
        for t in range(tgt.size(1)):
            step = model.decode(tgt[:, t : t + 1], memory, src_mask, cache=cache)
            assert step.shape == (3, 1, VOCAB)
            assert cache.length == t + 1
            assert_close(step[:, 0], full[:, t], **TOL)
            assert_close(step[:, 0], model.decode(tgt[:, : t + 1], memory, src_mask)[:, -1], **TOL)
        # Self-attention keys grew one position per step; cross-attention keys were built once.
        layer = cache.layers[0]
        assert layer.self_attn.k.shape == (3, n_heads, 7, d_head or 8)
        assert layer.cross_attn.k.shape == (3, n_heads, 7, d_head or 8)


def test_cache_accepts_several_new_positions_at_once():
    model = small_model()
    memory, src_mask = encoded_batch(model)
    tgt = torch.cat([torch.full((3, 1), BOS), tokens(3, 5, seed=12)], dim=1)  # [3, 6]
    with torch.no_grad():
        full = model.decode(tgt, memory, src_mask)
        cache = model.new_cache(memory, src_mask)
        first = model.decode(tgt[:, :4], memory, src_mask, cache=cache)
        rest = [model.decode(tgt[:, t : t + 1], memory, src_mask, cache=cache) for t in (4, 5)]
    assert_close(torch.cat([first, *rest], dim=1), full, **TOL)


def test_cache_reorder_then_continue_equals_full_recomputation_on_permuted_batch():
    model = small_model()
    memory, src_mask = encoded_batch(model)
    tgt = torch.cat([torch.full((3, 1), BOS), tokens(3, 5, seed=13)], dim=1)  # [3, 6]
    index = torch.tensor([2, 0, 0, 1])  # reorder, duplicate and grow the batch like beam search
    with torch.no_grad():
        cache = model.new_cache(memory, src_mask)
        for t in range(3):
            model.decode(tgt[:, t : t + 1], cache.memory, cache.src_mask, cache=cache)
        cache.reorder(index)
        permuted = tgt.index_select(0, index)
        steps = [model.decode(permuted[:, t : t + 1], cache.memory, cache.src_mask, cache=cache) for t in range(3, 6)]
        full = model.decode(permuted, memory.index_select(0, index), src_mask.index_select(0, index))
    assert_close(cache.memory, memory.index_select(0, index))
    assert_close(torch.cat(steps, dim=1), full[:, 3:], **TOL)


def test_reorders_between_two_steps_compose():
    """The self-attention cache gathers its kept rows when the next position is appended: two reorders in a
    row (a beam reorder, then dropping rows) act as their composition."""
    model = small_model()
    memory, src_mask = encoded_batch(model)
    tgt = torch.cat([torch.full((3, 1), BOS), tokens(3, 4, seed=21)], dim=1)  # [3, 5]
    first, second = torch.tensor([1, 1, 0, 2]), torch.tensor([3, 0, 1])
    rows = first[second]  # [2, 1, 1]
    with torch.no_grad():
        cache = model.new_cache(memory, src_mask)
        for t in range(2):
            model.decode(tgt[:, t : t + 1], cache.memory, cache.src_mask, cache=cache)
        cache.reorder(first)
        cache.reorder(second)
        kept = tgt.index_select(0, rows)
        steps = [model.decode(kept[:, t : t + 1], cache.memory, cache.src_mask, cache=cache) for t in range(2, 5)]
        full = model.decode(kept, memory.index_select(0, rows), src_mask.index_select(0, rows))
    assert_close(torch.cat(steps, dim=1), full[:, 2:], **TOL)


def test_beam_cache_keeps_the_encoder_side_once_per_sentence():
    """Two beams per sentence: the decoder runs 6 rows, cross-attention keys stay at 3 sentences,
    and reordering beams, then dropping a sentence, equals recomputing on the expanded batch."""
    model = small_model()
    memory, src_mask = encoded_batch(model)
    rows = torch.arange(3).repeat_interleave(2)  # [0, 0, 1, 1, 2, 2]
    tgt = torch.cat([torch.full((6, 1), BOS), tokens(6, 5, seed=17)], dim=1)  # [6, 6]
    beams = torch.tensor([1, 1, 2, 3, 4, 5])  # within each sentence: beam 1 twice, then both kept
    keep = torch.tensor([0, 2])  # sentence 1 finishes
    keep_rows = torch.tensor([0, 1, 4, 5])
    with torch.no_grad():
        cache = model.new_cache(memory, src_mask, beam=2)
        for t in range(3):
            model.decode(tgt[:, t : t + 1], cache.memory, cache.src_mask, cache=cache)
        assert cache.layers[0].cross_attn.k.shape[0] == 3 and cache.layers[0].self_attn.k.shape[0] == 6
        cache.reorder(beams)
        reordered = torch.cat([tgt[beams, :3], tgt[:, 3:]], dim=1)
        step = model.decode(reordered[:, 3:4], cache.memory, cache.src_mask, cache=cache)
        full = model.decode(reordered[:, :4], memory[rows], src_mask[rows])
        assert_close(step[:, 0], full[:, -1], **TOL)
        cache.reorder(keep_rows, sentences=keep)
        assert cache.layers[0].cross_attn.k.shape[0] == 2 and cache.memory.shape[0] == 2
        steps = [
            model.decode(reordered[keep_rows, t : t + 1], cache.memory, cache.src_mask, cache=cache) for t in (4, 5)
        ]
        full = model.decode(reordered[keep_rows], memory[rows[keep_rows]], src_mask[rows[keep_rows]])
    assert_close(torch.cat(steps, dim=1), full[:, 4:], **TOL)


# ----------------------------------------------------------------------------- head gates


def gate_outputs(model, gates: HeadGates | None):
    src = pad_to([tokens(5, seed=14), tokens(3, seed=15)], 5)
    tgt = torch.cat([torch.full((2, 1), BOS), tokens(2, 4, seed=16)], dim=1)
    with torch.no_grad(), gated_heads(model, gates):
        memory, src_mask = model.encode(src)
        return memory, model.decode(tgt, memory, src_mask)


def test_all_ones_head_gates_change_nothing():
    model = small_model()
    ones = torch.ones(2, 4)
    memory, logits = gate_outputs(model, None)
    gated_memory, gated_logits = gate_outputs(model, HeadGates(ones, ones.clone(), ones.clone()))
    assert_close(gated_memory, memory, **TOL)
    assert_close(gated_logits, logits, **TOL)


@pytest.mark.parametrize(
    "kind,module",
    [("enc_self", "encoder.1.self_attn"), ("dec_self", "decoder.0.self_attn"), ("cross", "decoder.1.cross_attn")],
)
@pytest.mark.parametrize("explicit", [False, True], ids=["fused", "explicit"])
def test_gating_a_head_to_zero_equals_zeroing_its_columns_of_w_o(kind, module, explicit):
    model = small_model()
    layer, head = int(module.split(".")[1]), 2
    gate = torch.ones(2, 4)
    gate[layer, head] = 0.0
    gates = HeadGates(**{kind: gate})

    pruned = copy.deepcopy(model)
    with torch.no_grad():
        pruned.get_submodule(module).w_o.weight[:, head * 8 : (head + 1) * 8] = 0.0

    src = pad_to([tokens(5, seed=17), tokens(3, seed=18)], 5)
    tgt = torch.cat([torch.full((2, 1), BOS), tokens(2, 4, seed=19)], dim=1)
    attention = (lambda: Attention()) if explicit else (lambda: None)
    with torch.no_grad():
        with gated_heads(model, gates):
            memory, src_mask = model.encode(src, attention=attention())
            gated = model.decode(tgt, memory, src_mask, attention=attention())
        memory_ref, src_mask_ref = pruned.encode(src, attention=attention())
        reference = pruned.decode(tgt, memory_ref, src_mask_ref, attention=attention())
        ungated = model.decode(tgt, *model.encode(src))
    assert_close(gated, reference, **TOL)
    assert not torch.allclose(gated, ungated, atol=1e-4)  # the gate did something


def test_gated_heads_sets_the_gates_for_its_block_only_and_restores_an_outer_one():
    model = small_model()
    closed, half = torch.zeros(2, 4), torch.full((2, 4), 0.5)
    modules = model.attention_modules("cross")
    with gated_heads(model, HeadGates(cross=half)):
        with gated_heads(model, HeadGates(cross=closed)):
            assert all(m.head_gate is not None and float(m.head_gate.sum()) == 0 for m in modules)
            assert all(m.head_gate is None for m in model.attention_modules("enc_self"))
        assert all(float(m.head_gate.sum()) == 2.0 for m in modules)
    assert all(m.head_gate is None for kind in ("enc_self", "dec_self", "cross") for m in model.attention_modules(kind))


def test_gates_of_the_wrong_number_of_layers_are_refused():
    model = small_model()
    with pytest.raises(ValueError), gated_heads(model, HeadGates(enc_self=torch.ones(3, 4))):
        pass
    assert all(m.head_gate is None for m in model.attention_modules("enc_self"))


def test_checkpoint_keys_keep_the_layout_of_older_checkpoints():
    """Attention is built by one constructor and gates are held by the modules, but a checkpoint's keys
    are those that older checkpoints have: each layer's w_q, w_k, w_v, w_o, and no key for a gate."""
    model = small_model(n_encoder_layers=1, n_decoder_layers=1)
    linears = [f"{n}.{p}" for n in ("w_q", "w_k", "w_v", "w_o") for p in ("weight", "bias")]
    norms = [f"{n}.norm.{p}" for n in ("res_attn", "res_ffn") for p in ("weight", "bias")]
    dec_norms = [f"{n}.norm.{p}" for n in ("res_self", "res_cross", "res_ffn") for p in ("weight", "bias")]
    ffn = [f"ffn.{n}.{p}" for n in ("w_1", "w_2") for p in ("weight", "bias")]
    expected = (
        ["embed.weight"]
        + [f"encoder.0.self_attn.{k}" for k in linears]
        + [f"encoder.0.{k}" for k in ffn + norms]
        + [f"decoder.0.{a}.{k}" for a in ("self_attn", "cross_attn") for k in linears]
        + [f"decoder.0.{k}" for k in ffn + dec_norms]
        + ["output.weight"]
    )
    assert sorted(model.state_dict()) == sorted(expected)


def test_attention_maps_are_returned_per_layer_and_head():
    model = small_model()
    src = pad_to([tokens(5, seed=20), tokens(3, seed=21)], 5)
    tgt = torch.cat([torch.full((2, 1), BOS), tokens(2, 3, seed=22)], dim=1)
    attention = Attention()
    with torch.no_grad():
        memory, src_mask = model.encode(src, attention=attention)
        model.decode(tgt, memory, src_mask, attention=attention)
    assert [a.shape for a in attention.enc_self] == [(2, 4, 5, 5)] * 2
    assert [a.shape for a in attention.dec_self] == [(2, 4, 4, 4)] * 2
    assert [a.shape for a in attention.cross] == [(2, 4, 4, 5)] * 2
    assert torch.all(attention.cross[0][1, :, :, 3:] == 0)  # row 1's padded source keys
    assert torch.all(attention.dec_self[0][:, :, 0, 1:] == 0)  # no attention to the future


# ----------------------------------------------------------------------------- the 062a073-era computation


def reference_decode(model, tgt_in, memory, src_mask):
    """The decoder as commit 062a073 ran it in training: a boolean [B, 1, T, T] padding-and-causal
    mask and the source mask handed to every layer, each layer building its own bias."""
    T = tgt_in.size(1)
    tgt_mask = torch.ones(T, T, dtype=torch.bool).tril()[None, None] & (tgt_in != PAD)[:, None, None, :]
    y = model._embed(tgt_in)
    for layer in model.decoder:
        y, _, _ = layer(y, memory, tgt_mask, src_mask)
    return model.output(model.dec_norm(y))


@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_training_loss_and_gradients_equal_the_062a073_computation(norm, precision):
    """Causal-only decoder self-attention (right-padded targets), masks built once per forward pass:
    the loss and every gradient are those of the padding-and-causal masks, and of F.cross_entropy."""
    import torch.nn.functional as F

    from mhatrain.core.runtime import autocast
    from mhatrain.data.batches import Batch
    from mhatrain.training.step import batch_loss

    model = small_model(norm)
    src = pad_to([tokens(5, seed=21), tokens(3, seed=22), tokens(7, seed=23)], 7)
    tgt = pad_to([tokens(6, seed=24), tokens(2, seed=25), tokens(4, seed=26)], 6)
    tgt_in = torch.cat([torch.full((3, 1), BOS), tgt[:, :-1]], dim=1).masked_fill(tgt == PAD, PAD)
    batch = Batch(src=src, tgt_in=tgt_in, tgt_out=tgt, indices=[0, 1, 2])
    results = []
    for new in (True, False):
        model.zero_grad()
        with autocast(torch.device("cpu"), precision):
            if new:
                loss, _ = batch_loss(model, batch, 0.1)
            else:
                memory, src_mask = model.encode(src)
                logits = reference_decode(model, tgt_in, memory, src_mask)
                loss = F.cross_entropy(
                    logits.float().view(-1, VOCAB), tgt.view(-1), ignore_index=PAD, label_smoothing=0.1, reduction="sum"
                )
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (new_loss, new_grads), (ref_loss, ref_grads) = results
    tol = TOL if precision == "fp32" else {"atol": 1e-2, "rtol": 1e-2}
    assert_close(new_loss, ref_loss, **tol)
    for name in ref_grads:
        assert_close(new_grads[name], ref_grads[name], **tol), name
