"""Learned head gates (model/gates.py): the hard-concrete distribution and its L0 penalty, the limits of
log α against the ungated model and `heads`' masks, the penalty in the training step, per-layer head
counts, and pruned models and run directories (model/pruning.py, inference/pruned.py)."""

from __future__ import annotations

import json

import pytest
import torch
from torch.testing import assert_close

from mhatrain.analysis.importance import Head, gates_without
from mhatrain.bench.inputs import synthetic_pairs
from mhatrain.core.checkpoint import load_checkpoint, save_checkpoint
from mhatrain.core.config import DecodeConfig, HeadGatesConfig, HeadsPerLayer, load_config
from mhatrain.core.distributed import Group
from mhatrain.core.runtime import loss_scaler
from mhatrain.data.batches import collate
from mhatrain.data.tokens import BOS, PAD
from mhatrain.inference.pruned import write_pruned_run
from mhatrain.inference.search import beam_search, greedy_search
from mhatrain.inference.trained import load_run, translate_with
from mhatrain.model.gates import HardConcreteGate
from mhatrain.model.pruning import prune
from mhatrain.model.transformer import KINDS, count_parameters, gated_heads
from mhatrain.training import step as update_step

from . import conftest
from .conftest import TINY, assert_clean_error, run_cli

VOCAB = 30
TOL = dict(atol=1e-5, rtol=1e-4)
DECODE = DecodeConfig(beam=3, alpha=0.6, max_len_a=0.0, max_len_b=8)
OPEN, CLOSED = 1e4, -1e4  # log α at which every sample of a gate is exactly 1, or exactly 0


def gated_model(seed: int = 0, l0: float = 0.05, **overrides):
    return conftest.small_model(VOCAB, seed=seed, head_gates=HeadGatesConfig(l0=l0), **overrides)


def ungated_model(seed: int = 0, **overrides):
    return conftest.small_model(VOCAB, seed=seed, **overrides)


def inputs(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """src [3, 7] with a padded row, tgt_in [3, 5] starting with BOS."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, VOCAB, (3, 7), generator=g)
    src[2, 4:] = PAD
    tgt = torch.cat([torch.full((3, 1), BOS), torch.randint(4, VOCAB, (3, 4), generator=g)], dim=1)
    return src, tgt


def set_log_alpha(model, value: float, **heads: list[tuple[int, int, float]]) -> None:
    """Every gate's log α to `value`, then (layer, head, log α) of the heads given per kind."""
    with torch.no_grad():
        for kind in KINDS:
            for module in model.attention_modules(kind):
                module.gate.log_alpha.fill_(value)
            for layer, head, log_alpha in heads.get(kind, []):
                model.attention_modules(kind)[layer].gate.log_alpha[head] = log_alpha


# ----------------------------------------------------------------------------- the distribution


def test_the_closed_form_l0_penalty_matches_a_monte_carlo_estimate():
    """P(gate ≠ 0) = sigmoid(log α − β log(−γ/ζ)), against the share of non-zero samples of 4000 draws
    per log α (standard error ≤ 0.008). Leaving out the temperature's shift misses by ≥ 0.15 at 0."""
    levels = torch.tensor([-3.0, -1.0, 0.0, 1.0, 3.0])
    n = 4000
    gate = HardConcreteGate(len(levels) * n, temperature=0.33, stretch=(-0.1, 1.1)).train()
    with torch.no_grad():
        gate.log_alpha.copy_(levels.repeat_interleave(n))
    torch.manual_seed(0)
    samples = gate().view(len(levels), n)
    assert ((samples >= 0) & (samples <= 1)).all()
    assert (samples == 0).any() and (samples == 1).any()  # the stretch puts mass on exactly 0 and 1
    estimate = (samples != 0).float().mean(1)
    closed_form = gate.p_open().view(len(levels), n)[:, 0].detach()
    assert_close(estimate, closed_form, atol=0.03, rtol=0)
    assert closed_form[2] > 0.65  # log α = 0 is open more often than not, as the stretch makes it


def test_evaluation_gates_are_deterministic_and_exactly_0_or_1_far_from_log_alpha_0():
    gate = HardConcreteGate(4, 0.33, (-0.1, 1.1)).eval()
    with torch.no_grad():
        gate.log_alpha.copy_(torch.tensor([-3.0, 0.0, 0.5, 3.0]))
    first = gate()
    assert torch.equal(first, gate())
    assert first[0] == 0 and first[3] == 1 and 0 < first[1] < first[2] < 1
    assert_close(first[1], torch.tensor(0.5))  # sigmoid(0) · 1.2 − 0.1: the clipped mean's formula


# ----------------------------------------------------------------------------- limits of log α


def test_a_gated_model_starts_from_the_weights_of_the_ungated_one():
    gated, plain = gated_model(seed=3), ungated_model(seed=3)
    extra = sorted(set(gated.state_dict()) - set(plain.state_dict()))
    assert extra == sorted(
        f"{stack}.{layer}.{name}.gate.log_alpha"
        for stack, name in (("encoder", "self_attn"), ("decoder", "self_attn"), ("decoder", "cross_attn"))
        for layer in range(2)
    )
    for key, value in plain.state_dict().items():
        assert torch.equal(gated.state_dict()[key], value), key


def test_gates_at_plus_infinity_reproduce_the_ungated_model_exactly():
    gated, plain = gated_model(), ungated_model()
    set_log_alpha(gated, OPEN)
    src, tgt = inputs()
    for mode in ("eval", "train"):  # training samples its gates: at +∞ every sample is exactly 1
        getattr(gated, mode)(), getattr(plain, mode)()
        with torch.no_grad():
            assert torch.equal(gated(src, tgt), plain(src, tgt)), mode
    gated.eval(), plain.eval()
    assert beam_search(gated, src, DECODE) == beam_search(plain, src, DECODE)


def test_a_gate_at_minus_infinity_equals_the_heads_mask_of_zero():
    """One head per kind closed by its learned gate computes what `heads` computes with its mask of 0."""
    gated, plain = gated_model(), ungated_model()
    set_log_alpha(gated, OPEN, enc_self=[(1, 2, CLOSED)], dec_self=[(0, 0, CLOSED)], cross=[(1, 3, CLOSED)])
    masked = [Head("enc-self", 1, 2), Head("dec-self", 0, 0), Head("cross", 1, 3)]
    src, tgt = inputs()
    for mode in ("eval", "train"):
        getattr(gated, mode)(), getattr(plain, mode)()
        with torch.no_grad(), gated_heads(plain, gates_without(plain, masked, "cpu")):
            reference = plain(src, tgt)
        with torch.no_grad():
            assert torch.equal(gated(src, tgt), reference), mode
            assert not torch.allclose(plain(src, tgt), reference, atol=1e-4)  # the closed heads mattered


# ----------------------------------------------------------------------------- the L0 penalty


def test_the_penalty_is_lambda_times_the_summed_p_open_and_its_gradient_reaches_only_log_alpha():
    model = gated_model(l0=0.2).train()
    with torch.no_grad():
        model.attention_modules("cross")[0].gate.log_alpha.copy_(torch.tensor([-2.0, 0.0, 1.0, 4.0]))
    penalty = model.gate_penalty()
    p_open = torch.cat([m.gate.p_open() for kind in KINDS for m in model.attention_modules(kind)])
    assert_close(penalty, 0.2 * p_open.sum())
    penalty.backward()
    for name, p in model.named_parameters():
        if name.endswith("gate.log_alpha"):
            assert p.grad is not None and (p.grad > 0).all(), name  # more open, more penalty
        else:
            assert p.grad is None, name
    assert ungated_model().gate_penalty() is None


def test_the_training_step_adds_the_penalty_once_per_update():
    """The gradient an update takes for log α is that of the loss per target token plus the penalty,
    with two batches in the update (the penalty is not added per batch)."""
    config = load_config(TINY, ["model.head_gates.l0=0.5"], check_paths=False)
    model = conftest.small_model(VOCAB, head_gates=config.model.head_gates).train()
    pairs = synthetic_pairs(4, VOCAB, seed=3)
    batches = [collate(pairs, [0, 1]), collate(pairs, [2, 3])]
    n_tokens = sum(b.n_tgt_tokens for b in batches)
    device = torch.device("cpu")

    def log_alpha_grads():
        grads = [m.gate.log_alpha.grad.clone() for kind in KINDS for m in model.attention_modules(kind)]
        model.zero_grad(set_to_none=True)
        return torch.cat(grads)

    torch.manual_seed(9)  # the gates' samples come from torch's random state: the same draws each time
    share = [(b, 1) for b in batches]
    update_step._accumulate_gradients(
        model, model, loss_scaler(device, "fp32"), share, config.train, Group(device), n_tokens
    )
    through_step = log_alpha_grads()
    torch.manual_seed(9)
    losses = [update_step.batch_loss(model, b, config.train.label_smoothing)[0] for b in batches]
    (sum(losses) / n_tokens).backward()
    cross_entropy_only = log_alpha_grads()
    torch.manual_seed(9)
    losses = [update_step.batch_loss(model, b, config.train.label_smoothing)[0] for b in batches]
    (sum(losses) / n_tokens + model.gate_penalty()).backward()
    expected = log_alpha_grads()
    assert_close(through_step, expected)
    assert not torch.allclose(through_step, cross_entropy_only)


@pytest.mark.parametrize("lr_scale", [30.0, 0.5])
def test_log_alpha_learns_at_lr_scale_times_the_schedules_rate_and_the_weights_at_the_schedules(lr_scale):
    """Adam's first step moves every parameter with a gradient by exactly its learning rate: log α by
    model.head_gates.lr_scale × lr, each weight by lr, in the same update."""
    config = load_config(TINY, ["model.head_gates.l0=0.1", f"model.head_gates.lr_scale={lr_scale}"], check_paths=False)
    model = conftest.small_model(VOCAB, head_gates=config.model.head_gates).train()
    lr, device = 1e-3, torch.device("cpu")
    optimizer = update_step.make_optimizer(
        update_step.parameter_groups(model, config.model.head_gates), config.train, lr
    )
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    pairs = synthetic_pairs(4, VOCAB, seed=3)
    torch.manual_seed(9)
    update_step.optimizer_update(
        model,
        model,
        optimizer,
        loss_scaler(device, "fp32"),
        [(collate(pairs, [0, 1, 2, 3]), 1)],
        config.train,
        lr,
        Group(device),
    )
    moves = {name: (p.detach() - before[name]).abs() for name, p in model.named_parameters()}
    gates = torch.cat([m for name, m in moves.items() if name.endswith("gate.log_alpha")])
    weights = torch.cat([m.flatten() for name, m in moves.items() if not name.endswith("gate.log_alpha")])
    assert gates.numel() == sum(m.gate.log_alpha.numel() for kind in KINDS for m in model.attention_modules(kind))
    assert_close(gates, torch.full_like(gates, lr * lr_scale), rtol=1e-3, atol=0.0)
    assert weights.max() <= lr * 1.001 and weights.max() >= lr * 0.999


def test_an_ungated_model_keeps_one_parameter_group_and_the_same_optimiser_state():
    """Without gates the optimiser is the paper's: one group, the checkpoint's optimiser state as before."""
    config = load_config(TINY, [], check_paths=False)
    model = ungated_model()
    grouped = update_step.make_optimizer(update_step.parameter_groups(model, None), config.train, 1e-3)
    plain = update_step.make_optimizer(model.parameters(), config.train, 1e-3)
    assert grouped.state_dict() == plain.state_dict() and len(grouped.param_groups) == 1


# ----------------------------------------------------------------------------- per-layer head counts


def test_per_layer_head_counts_build_modules_of_one_head_size_and_a_module_of_none_adds_its_bias():
    layout = HeadsPerLayer(enc_self=[4, 2], cross=[1, 0])
    model = ungated_model(heads_per_layer=layout)
    counts = {kind: [m.n_heads for m in model.attention_modules(kind)] for kind in KINDS}
    assert counts == {"enc_self": [4, 2], "dec_self": [4, 4], "cross": [1, 0]}
    assert {m.d_head for kind in KINDS for m in model.attention_modules(kind)} == {8}  # 32 / 4 heads
    assert model.attention_modules("enc_self")[1].w_q.weight.shape == (2 * 8, 32)
    assert model.attention_modules("cross")[1].w_o.weight.shape == (32, 0)
    empty = model.attention_modules("cross")[1]
    with torch.no_grad():
        empty.w_o.bias.normal_()
        query = torch.randn(2, 3, 32)
        out, probs = empty(query, torch.randn(2, 5, 32), need_weights=True)
    assert torch.equal(out, empty.w_o.bias.expand(2, 3, 32)) and probs.shape == (2, 0, 3, 5)
    src, _ = inputs()
    assert greedy_search(model, src, DECODE) == greedy_search(model, src, DECODE, use_cache=False)
    assert beam_search(model, src, DECODE) == beam_search(model, src, DECODE, use_cache=False)


# ----------------------------------------------------------------------------- pruning


def partly_closed_model():
    """A gated model whose gates are in evaluation: some heads closed (0), some open (1), some between;
    the cross-attention of layer 2 loses all its heads."""
    model = gated_model(seed=4).eval()
    set_log_alpha(
        model,
        OPEN,
        enc_self=[(0, 1, CLOSED), (1, 0, 0.3), (1, 3, CLOSED)],
        dec_self=[(1, 2, -0.5)],
        cross=[(1, h, CLOSED) for h in range(4)] + [(0, 0, CLOSED)],
    )
    return model


def test_a_pruned_model_computes_what_the_gated_model_computes_in_evaluation():
    gated = partly_closed_model()
    src, tgt = inputs(seed=2)
    with torch.no_grad():
        expected = gated(src, tgt)
    rng = torch.get_rng_state()
    pruned = prune(gated)
    assert torch.equal(torch.get_rng_state(), rng)  # building the pruned model draws nothing
    assert pruned.cfg.head_gates is None
    assert pruned.cfg.heads_per_layer == HeadsPerLayer(enc_self=[3, 3], dec_self=[4, 4], cross=[3, 0])
    assert count_parameters(pruned) == count_parameters(gated) - 7 * (4 * 32 * 8 + 3 * 8) - 6 * 4
    assert not any("gate" in key for key in pruned.state_dict())
    with torch.no_grad():
        assert_close(pruned(src, tgt), expected, **TOL)
        assert not torch.allclose(ungated_model(seed=4)(src, tgt), expected, atol=1e-4)  # the gates mattered
    assert beam_search(pruned, src, DECODE) == beam_search(gated, src, DECODE)
    assert greedy_search(pruned, src, DECODE) == greedy_search(gated, src, DECODE)


# ----------------------------------------------------------------------------- a pruned run directory

SENTENCES = ["A man rides a bike.", "Two dogs play in the snow."]


def test_a_pruned_run_round_trips_and_computes_what_the_gated_run_computes(gated_run, pruned_run):
    gated, pruned = load_run(gated_run), load_run(pruned_run)
    layout = pruned.config.model.heads_per_layer
    assert (layout.enc_self, layout.dec_self, layout.cross) == ([3, 4], [4, 2], [0, 4])
    assert pruned.config.model.head_gates is None
    assert load_checkpoint(pruned_run / "best.pt")["pruned_from"].endswith(f"{gated_run.name}:best")
    assert count_parameters(pruned.model) < count_parameters(gated.model)
    assert (pruned_run / "best.pt").stat().st_size < (gated_run / "best.pt").stat().st_size
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, PAD, PAD]])
    tgt = torch.tensor([[BOS, 11, 12, 13], [BOS, 14, 15, PAD]])
    with torch.no_grad():
        assert_close(pruned.model(src, tgt), gated.model(src, tgt), **TOL)
    assert translate_with(pruned, SENTENCES, 4, None) == translate_with(gated, SENTENCES, 4, None)


def test_eval_translate_attention_and_bench_load_a_pruned_run(gated_run, pruned_run, tmp_path):
    translations = {}
    for run in (gated_run, pruned_run):
        result = run_cli("translate", str(run), "--beam", "2", stdin="\n".join(SENTENCES) + "\n")
        assert result.returncode == 0, result.stderr
        translations[run] = result.stdout
    assert translations[pruned_run] == translations[gated_run]
    evaluated = run_cli("eval", str(pruned_run), "--split", "test", "--beam", "1")
    assert evaluated.returncode == 0, evaluated.stderr
    maps = run_cli("attention", str(pruned_run), SENTENCES[0], "--out", str(tmp_path / "maps"))
    assert maps.returncode == 0, maps.stderr
    (report,) = (tmp_path / "maps").glob("attention-*.json")
    report = json.loads(report.read_text(), parse_constant=lambda name: pytest.fail(f"{name} in the JSON report"))
    heads = [(r["kind"], r["layer"]) for r in report["statistics"]]  # one record per head the pruned run has
    assert [heads.count(("cross", layer)) for layer in (1, 2)] == [0, 4]
    assert len(heads) == 3 + 4 + 4 + 2 + 0 + 4
    assert report["maps"]["cross"][0][0][0][0] is None  # layer 1 of cross-attention has no heads
    bench = run_cli(
        "bench", "decode", "--quick", "--checkpoint", str(pruned_run), "--max-sentences", "4", "--repeats", "1",
        "--warmup", "0", "--precision", "fp32",
    )  # fmt: skip
    assert bench.returncode == 0, bench.stderr + bench.stdout


def test_pruning_a_run_without_gates_or_into_an_existing_directory_is_one_line(tiny_run, gated_run, tmp_path):
    from mhatrain.core.errors import MhatrainError

    with pytest.raises(MhatrainError, match="no learned head gates"):
        write_pruned_run(tiny_run, tmp_path / "a")
    with pytest.raises(MhatrainError, match="exists"):
        write_pruned_run(gated_run, tmp_path)


def test_heads_refuses_a_pruned_run_in_one_line(pruned_run):
    for extra in (("--metric", "loss"), ("--roles",)):
        result = run_cli("heads", str(pruned_run), *extra)
        assert_clean_error(result, "model.heads_per_layer", "a pruned run")


def test_a_run_from_before_gates_still_loads(tiny_run, tmp_path):
    """A run directory written before model.head_gates and model.heads_per_layer existed (its config.yaml
    and its checkpoint's config lack both keys) loads, translates as before, and has the same weights."""
    import shutil

    import yaml

    old = tmp_path / "old"
    shutil.copytree(tiny_run, old)
    config = yaml.safe_load((old / "config.yaml").read_text())
    for key in ("head_gates", "heads_per_layer"):
        del config["model"][key]
    (old / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    for name in ("best.pt", "last.pt"):
        state = load_checkpoint(old / name)
        for key in ("head_gates", "heads_per_layer"):
            del state["config"]["model"][key]
        save_checkpoint(old / name, state)
    before, after = load_run(tiny_run), load_run(old)
    assert after.config.model.head_gates is None and after.config.model.heads_per_layer is None
    assert before.model.state_dict().keys() == after.model.state_dict().keys()
    assert translate_with(after, SENTENCES, 2, None) == translate_with(before, SENTENCES, 2, None)
