"""The training update: `mhatrain train` and `mhatrain bench train` run the same function."""

from __future__ import annotations

import io

import pytest
import torch
from rich.console import Console

import mhatrain.training.step as update_step
from mhatrain.bench.inputs import synthetic_pairs
from mhatrain.bench.report import OURS
from mhatrain.bench.train_bench import LR, train_step
from mhatrain.core.config import load_config
from mhatrain.core.distributed import Group
from mhatrain.core.runtime import loss_scaler
from mhatrain.data.batches import collate
from mhatrain.data.tokens import PAD
from mhatrain.model.transformer import build_model
from mhatrain.training.loop import train

from .conftest import TINY


@pytest.fixture
def updates(monkeypatch) -> list[dict]:
    """Every call of step.optimizer_update from now on (by the bench, or by train.py, which imports it
    by name): its model (in the DDP model's place), share of batches, learning rate and statistics."""
    import mhatrain.training.loop

    calls, real = [], update_step.optimizer_update
    assert mhatrain.training.loop.optimizer_update is real  # training's update is step.py's, not a copy

    def spy(forward_model, ddp_model, optimizer, scaler, share, t, lr, procs, sizes=None):
        stats = real(forward_model, ddp_model, optimizer, scaler, share, t, lr, procs, sizes)
        calls.append({"model": ddp_model, "stats": stats, "share": share, "lr": lr})
        return stats

    monkeypatch.setattr(update_step, "optimizer_update", spy)
    monkeypatch.setattr(mhatrain.training.loop, "optimizer_update", spy)
    return calls


def test_training_runs_step_optimizer_update_for_every_update(tmp_path, spm_cache, updates):
    config = load_config(
        TINY, [f"data.cache_dir={spm_cache}", "train.max_steps=2", "train.valid_bleu=false", "train.log_every=1000"]
    )
    summary = train(config, tmp_path / "run", console=Console(file=io.StringIO()))
    assert summary["updates"] == 2 and len(updates) == 2
    assert [round(call["stats"].lr, 12) for call in updates] == [
        round(update_step.noam_lr(s, config.model.d_model, config.train.warmup_steps, config.train.lr_factor), 12)
        for s in (1, 2)
    ]


def test_training_descends_the_loss_smoothed_by_train_label_smoothing(tmp_path, spm_cache, monkeypatch):
    """The config's ε reaches the update: the loss that training logs and the gradient Adam receives are
    F.cross_entropy's with label_smoothing=ε (0.3, not the default), computed here on the update's share
    before the update runs. (A loss that ignored the setting trains, and every maths test still passes.)"""
    import torch.nn.functional as F

    import mhatrain.training.loop
    from mhatrain.data.tokens import PAD

    smoothing, seen, real = 0.3, [], update_step.optimizer_update

    def checked(forward_model, ddp_model, optimizer, scaler, share, t, lr, procs, sizes=None):
        n_tokens = sum(weight * batch.n_tgt_tokens for batch, weight in share)
        expected = sum(
            weight
            * F.cross_entropy(
                (logits := ddp_model(batch.src, batch.tgt_in)).view(-1, logits.size(-1)),
                batch.tgt_out.reshape(-1),
                ignore_index=PAD,
                label_smoothing=smoothing,
                reduction="sum",
            )
            for batch, weight in share
        )
        parameters = dict(ddp_model.named_parameters())
        expected_grads = torch.autograd.grad(expected / n_tokens, list(parameters.values()))
        received, step = {}, optimizer.step

        def recording_step(*args, **kwargs):
            received.update({name: p.grad.clone() for name, p in parameters.items()})
            return step(*args, **kwargs)

        optimizer.step = recording_step
        stats = real(forward_model, ddp_model, optimizer, scaler, share, t, lr, procs, sizes)
        seen.append((expected.item() / n_tokens, dict(zip(parameters, expected_grads)), stats.read(), received))
        return stats

    monkeypatch.setattr(mhatrain.training.loop, "optimizer_update", checked)
    overrides = [f"data.cache_dir={spm_cache}", "train.max_steps=1", "train.valid_bleu=false", "train.clip_norm=0"]
    config = load_config(TINY, [*overrides, f"train.label_smoothing={smoothing}", "train.log_every=1000"])
    train(config, tmp_path / "run", console=Console(file=io.StringIO()))
    ((loss, grads, stats, received),) = seen
    assert stats["loss"] == pytest.approx(loss, abs=1e-4)
    assert received.keys() == grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(received[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_bench_train_times_the_update_that_training_runs(updates):
    """The bench's sample is step.optimizer_update once per batch, and one update through the bench
    gives the loss and parameters of the same update called directly."""
    config = load_config(TINY, ["model.dropout=0.1"], check_paths=False)
    vocab = 64
    pairs = synthetic_pairs(8, vocab, seed=3)
    batches = [collate(pairs, [0, 1, 2, 3]), collate(pairs, [4, 5, 6, 7])]
    step = train_step(OURS, config.model, config.train, vocab, batches[:1], "fp32", "cpu", seed=11)
    step()
    (through_bench,) = updates
    assert through_bench["lr"] == LR and len(through_bench["share"]) == 1

    torch.manual_seed(11)  # as train_step seeds before it builds the model
    model = build_model(config.model, vocab, PAD).train()
    optimizer = update_step.make_optimizer(model.parameters(), config.train, LR)
    device = torch.device("cpu")
    direct = update_step.optimizer_update(
        model, model, optimizer, loss_scaler(device, "fp32"), [(batches[0], 1)], config.train, LR, Group(device)
    )
    assert direct.read() == through_bench["stats"].read()
    bench_model = through_bench["model"].state_dict()
    for name, value in model.state_dict().items():
        assert torch.equal(value, bench_model[name]), name


SYNCS = ("aten::_local_scalar_dense", "aten::item")  # what reading a tensor's value from the host runs


def _is_sync(event) -> bool:
    """A read of a tensor's value by the host; not those of the CPU's fused Adam kernel, which reads
    each parameter's step count (a CPU tensor there) from memory: on a GPU the kernel reads it on
    the device."""
    parent = event.cpu_parent
    while parent is not None and parent.name != "aten::_fused_adam_":
        parent = parent.cpu_parent
    return event.name in SYNCS and parent is None


def _syncs(events) -> int:
    return sum(map(_is_sync, events))


def test_the_sync_counter_sees_a_read():
    """The profiler-based counter of the tests below counts a host read of a tensor's value."""
    x = torch.ones(3)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        float(x.sum())
        x.sum().tolist()  # one value: the same read
    assert _syncs(prof.events()) == 2


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_an_update_reads_nothing_back_from_the_device(precision):
    """optimizer_update neither reads a value from the device (no .item() / float()), nor needs to for
    a skipped update: the loss, NLL, gradient norm and verdict stay tensors until read_updates, which
    gives what was computed (the loss of an applied update, the skip of a poisoned one)."""
    config = load_config(TINY, ["model.dropout=0.1", "train.clip_norm=1.0"], check_paths=False)
    t, vocab, device = config.train, 64, torch.device("cpu")
    pairs = synthetic_pairs(24, vocab, seed=3)
    shares = [[(collate(pairs, list(range(k, k + 6))), 1)] for k in range(0, 24, 6)]
    torch.manual_seed(0)
    model = build_model(config.model, vocab, PAD).train()
    optimizer = update_step.make_optimizer(model.parameters(), t, LR)
    t.precision = precision
    scaler = loss_scaler(device, precision)
    poisoned = {2}  # the third update's loss is NaN: skipped on the device, its weights unchanged

    def forward(src, tgt_in):
        logits = model(src, tgt_in)
        return logits * float("nan") if len(results) in poisoned else logits

    results, syncs = [], []
    for share in shares:
        before = [p.detach().clone() for p in model.parameters()]
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            results.append(update_step.optimizer_update(forward, model, optimizer, scaler, share, t, LR, Group(device)))
        syncs.append(_syncs(prof.events()))
        changed = any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
        assert changed == (len(results) - 1 not in poisoned)
    assert syncs == [0, 0, 0, 0]
    stats = update_step.read_updates(results)
    assert [s.get("skipped") for s in stats] == [None, None, "non-finite loss", None]
    assert all(s["loss"] > 0 and s["tokens"] == r.tokens for s, r in zip(stats, results) if "loss" in s)
    assert all(v["step"].item() == 3 for v in optimizer.state.values())  # the skipped update is not counted


def test_training_reads_the_device_only_when_it_logs_or_decides(tmp_path, spm_cache, monkeypatch):
    """Between two log lines (train.log_every) the loop waits for nothing: the profile of a training run
    shows no read of a tensor's value in any update that neither logs nor decides something, and the
    updates' statistics are read (read_updates) exactly at the logged updates and at the last one."""
    import mhatrain.training.loop

    steps, reads, real_update, real_read = [], [], update_step.optimizer_update, update_step.read_updates

    def update(*args):
        steps.append(len(steps) + 1)
        with torch.profiler.record_function(f"update {len(steps)}"):
            return real_update(*args)

    def read(updates):
        reads.append(len(steps))
        return real_read(updates)

    monkeypatch.setattr(mhatrain.training.loop, "optimizer_update", update)
    monkeypatch.setattr(mhatrain.training.loop, "read_updates", read)
    config = load_config(
        TINY,
        [f"data.cache_dir={spm_cache}", "model.dropout=0.1", "train.max_steps=12", "train.log_every=5"]
        + ["train.valid_bleu=false", "train.threads=1"],
    )
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        summary = train(config, tmp_path / "run", console=Console(file=io.StringIO()))
    assert summary["updates"] == 12
    assert reads == [1, 5, 10, 12]  # logged: 1, 5, 10; and the end (max_steps)
    events = prof.events()
    starts = sorted((e.time_range.start, int(e.name.split()[1])) for e in events if e.name.startswith("update "))
    assert [n for _, n in starts] == list(range(1, 13))
    per_update = dict.fromkeys(range(1, 13), 0)  # reads from one update's start to the next's
    for event in events:
        if _is_sync(event):
            owner = [n for start, n in starts if start <= event.time_range.start]
            if owner:
                per_update[owner[-1]] += 1
    assert all(per_update[n] == 0 for n in per_update if n not in (1, 5, 10, 12)), per_update


def test_compiled_training_compiles_one_graph_per_length_bucket(tmp_path, spm_cache, monkeypatch):
    """With train.compile, batches of many shapes (sentences × length) are padded to a few lengths
    (data.bucket_length) and compile one graph per length, not one per shape; padding changes no
    loss. (dynamo's own cheap backend, "eager", stands in for inductor: the graphs are dynamo's.)"""
    from torch._dynamo.utils import counters

    import mhatrain.training.loop
    from mhatrain.data.batches import bucket_length

    shapes, real = [], update_step.optimizer_update

    def update(forward_model, ddp_model, optimizer, scaler, share, t, lr, procs, sizes=None):
        shapes.extend(tuple(batch.src.shape) + (batch.tgt_in.size(1),) for batch, _ in share)
        return real(forward_model, ddp_model, optimizer, scaler, share, t, lr, procs, sizes)

    monkeypatch.setattr(mhatrain.training.loop, "optimizer_update", update)
    monkeypatch.setattr(mhatrain.training.loop, "COMPILE_BACKEND", "eager")
    config = load_config(
        TINY,
        [f"data.cache_dir={spm_cache}", "train.compile=true", "train.max_steps=16", "train.valid_bleu=false"],
    )
    torch._dynamo.reset()
    counters.clear()
    output = io.StringIO()
    try:
        train(config, tmp_path / "run", console=Console(file=output, width=300))
    finally:
        graphs = counters["stats"]["unique_graphs"]
        torch._dynamo.reset()
    assert "torch.compile" not in output.getvalue()  # no fallback to eager
    lengths = {length for _, length, tgt_length in shapes if length == tgt_length}
    assert len(lengths) == len({length for _, length, _ in shapes})  # source and target padded alike
    assert all(bucket_length(length, config.model.max_positions) == length for length in lengths)
    assert len(set(shapes)) > len(lengths) > 1  # batches of several lengths and more shapes
    assert graphs == len(lengths)


def test_padding_a_batch_to_its_bucket_changes_no_loss():
    config = load_config(TINY, check_paths=False)
    pairs = synthetic_pairs(8, 64, seed=3)
    torch.manual_seed(0)
    model = build_model(config.model, 64, PAD).eval()
    batch = collate(pairs, list(range(8)))
    padded = collate(pairs, list(range(8)), bucket_limit=config.model.max_positions)
    assert padded.src.size(1) > batch.src.size(1) and padded.src.size(1) == padded.tgt_in.size(1)
    assert padded.n_tgt_tokens == batch.n_tgt_tokens
    with torch.no_grad():
        for a, b in zip(update_step.batch_loss(model, batch, 0.1), update_step.batch_loss(model, padded, 0.1)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_on_a_gpu_update_count_checkpoints_wait_for_gpu_checkpoint_minutes():
    """checkpoint_every keeps its meaning on the CPU; on a GPU, where 50 updates take a second, it saves
    no sooner than train.gpu_checkpoint_minutes after the last save (0: every checkpoint_every updates)."""
    from mhatrain.training.loop import checkpoint_wanted

    t = load_config(TINY, ["train.checkpoint_every=50"], check_paths=False).train
    assert t.gpu_checkpoint_minutes == 5
    assert [checkpoint_wanted(t, step, "cpu", 0.1) for step in (49, 50, 100)] == [False, True, True]
    assert [checkpoint_wanted(t, step, "cuda", 0.1) for step in (49, 50, 100)] == [False, False, False]
    assert [checkpoint_wanted(t, step, "cuda", 5.0) for step in (49, 50, 100)] == [False, True, True]
    t.gpu_checkpoint_minutes = 0
    assert checkpoint_wanted(t, 50, "cuda", 0.1)
    t.checkpoint_every, t.checkpoint_every_minutes = 0, 2.0
    assert [checkpoint_wanted(t, 7, device, minutes) for device in ("cpu", "cuda") for minutes in (1.9, 2.0)] == [
        False,
        True,
        False,
        True,
    ]


def test_bf16_on_a_gpu_without_native_bf16_is_refused_naming_fp16(monkeypatch):
    from mhatrain.core.errors import MhatrainError
    from mhatrain.core.runtime import check_gpu_bf16

    native = {"value": False}
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: native["value"])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    with pytest.raises(MhatrainError, match=r"Tesla T4 has no native bf16 .*--set train.precision=fp16"):
        check_gpu_bf16("cuda", "bf16")
    check_gpu_bf16("cuda", "fp16")
    check_gpu_bf16("cpu", "bf16")  # the CPU has its own check (runtime.slow_bf16_warning)
    native["value"] = True
    check_gpu_bf16("cuda:0", "bf16")


@pytest.mark.parametrize("bucket_limit", [0, 128])
def test_the_update_sizes_from_lengths_are_what_the_collated_batches_count(bucket_limit):
    """With several processes each one knows the whole update's token and padding counts from the pairs'
    lengths (data.batch_sizes), without asking the others: the counts of the collated batches."""
    from mhatrain.data.batches import batch_sizes

    pairs = synthetic_pairs(40, 64, seed=5)
    batches = [list(range(0, 7)), list(range(7, 20)), [25, 3, 39]]
    collated = [collate(pairs, indices, bucket_limit) for indices in batches]
    expected = (
        sum(b.n_tgt_tokens for b in collated),
        sum(b.padding_cells[0] for b in collated),
        sum(b.padding_cells[1] for b in collated),
    )
    assert batch_sizes(pairs, batches, bucket_limit) == expected
