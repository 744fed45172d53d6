"""Training: the schedule, exact resume, checkpoints and their safety checks."""

from __future__ import annotations

import io
import json
import re
import signal
import subprocess
import sys
import time

import pytest
import torch
from rich.console import Console

from mhatrain.core.checkpoint import load_checkpoint, open_run, save_checkpoint
from mhatrain.core.config import load_config
from mhatrain.core.errors import CheckpointError
from mhatrain.training.loop import train
from mhatrain.training.step import noam_lr

from .conftest import ROOT, TINY, run_cli, train_argv


def quiet_config(spm_cache, *overrides):
    # dropout > 0 so that resuming must also restore the RNG state to reproduce the weights
    return load_config(
        TINY,
        [
            f"data.cache_dir={spm_cache}",
            "model.dropout=0.1",
            "train.log_every=1000",
            "train.valid_max_sentences=20",
            *overrides,
        ],
    )


def Silent():
    return Console(file=io.StringIO())


def weights(run_dir):
    return load_checkpoint(run_dir / "last.pt")["model"]


def assert_same_weights(a, b):
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_noam_schedule_warms_up_then_decays():
    d, w = 512, 4000
    assert noam_lr(1, d, w) == pytest.approx(d**-0.5 * w**-1.5)
    assert noam_lr(w, d, w) == pytest.approx(d**-0.5 * w**-0.5)  # the peak
    assert noam_lr(w // 2, d, w) < noam_lr(w, d, w) > noam_lr(4 * w, d, w)
    assert noam_lr(4 * w, d, w) == pytest.approx(noam_lr(w, d, w) / 2)
    assert noam_lr(100, d, w, factor=2.0) == pytest.approx(2 * noam_lr(100, d, w))


# bf16: a resume also runs the bf16 speed probe, which must not draw from the restored dropout RNG
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_resumed_run_ends_with_the_same_weights(tmp_path, spm_cache, precision):
    straight, split = tmp_path / "straight", tmp_path / "split"
    p = f"train.precision={precision}"
    train(quiet_config(spm_cache, p, "train.max_steps=20"), straight, console=Silent())
    # Interrupted at update 12 (mid-epoch: an epoch is ~90 updates), then resumed to 20.
    train(quiet_config(spm_cache, p, "train.max_steps=12", "train.checkpoint_every=6"), split, console=Silent())
    summary = train(quiet_config(spm_cache, p, "train.max_steps=20"), split, resume=True, console=Silent())
    assert summary["updates"] == 20
    assert_same_weights(weights(straight), weights(split))


def test_killed_run_resumes_to_identical_weights(tmp_path, spm_cache):
    common = ("model.dropout=0.1", "train.max_steps=120", "train.checkpoint_every=7", "train.valid_max_sentences=20")
    reference = tmp_path / "reference"
    assert run_cli(*train_argv(reference, *common, spm_cache=spm_cache)).returncode == 0
    killed = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mhatrain", *train_argv(killed, *common, spm_cache=spm_cache)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while not (killed / "last.pt").exists() and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (killed / "last.pt").exists()
    assert load_checkpoint(killed / "last.pt")["progress"]["step"] < 120
    resumed = run_cli(*train_argv(killed, *common, spm_cache=spm_cache, flags=("--resume",)))
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming at update" in resumed.stdout
    assert_same_weights(weights(reference), weights(killed))


def test_sigterm_saves_a_checkpoint_and_says_how_to_resume(tmp_path, spm_cache):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mhatrain", *train_argv(out, "train.max_epochs=50", spm_cache=spm_cache)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while not (out / "metrics.jsonl").exists() and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr
    assert "checkpoint saved at update" in stdout and "--resume" in stdout
    assert "Traceback" not in stderr
    assert load_checkpoint(out / "last.pt")["progress"]["finished"] is False


def test_the_last_n_snapshots_are_kept_and_averaged(tmp_path, spm_cache, monkeypatch):
    """Checkpoints every 5 updates keep the weights of the newest 3; `average --last 3` takes them;
    a resume from an earlier checkpoint drops the snapshots after it."""
    from mhatrain.core.rundir import list_snapshots
    from mhatrain.training.average import average_checkpoints, last_snapshots

    run = tmp_path / "run"
    train(
        quiet_config(
            spm_cache,
            "train.max_steps=22",
            "train.checkpoint_every=5",
            "train.keep_checkpoints=3",
            "train.valid_bleu=false",
        ),
        run,
        console=Silent(),
    )
    assert [step for step, _ in list_snapshots(run)] == [15, 20, 22]  # 22: the final checkpoint
    assert_same_weights(load_checkpoint(run / "snapshots" / "step00000022.pt")["model"], weights(run))
    paths = last_snapshots(run, 3)
    assert average_checkpoints(paths)["averaged_steps"] == [15, 20, 22]
    with pytest.raises(CheckpointError, match="given twice"):
        average_checkpoints([paths[0], paths[1], run / "snapshots" / ".." / "snapshots" / paths[0].name])
    with pytest.raises(CheckpointError, match="holds 3 snapshot\\(s\\) in snapshots/, fewer than --last 5"):
        last_snapshots(run, 5)
    result = run_cli("average", str(run), "--last", "2")
    assert result.returncode == 0, result.stderr
    assert "step00000020.pt, step00000022.pt" in result.stdout
    result = run_cli("eval", str(run), "--split", "valid", "--beam", "1", "--checkpoint", "averaged")
    assert result.returncode == 0, result.stderr
    report = json.loads((run / "eval" / "valid.beam1.averaged.json").read_text())
    assert report["averaged_steps"] == [20, 22] and report["averaged_from"][1].endswith("step00000022.pt")
    both = run_cli("average", str(run), str(paths[0]), "--last", "2")
    assert both.returncode != 0 and "either checkpoint files or --last N, not both" in both.stderr

    # last.pt back at update 20 (as after a crash): resuming drops the snapshot of update 22
    (run / "last.pt").unlink()
    (run / "last.prev.pt").rename(run / "last.pt")
    train(
        quiet_config(
            spm_cache,
            "train.max_steps=21",
            "train.checkpoint_every=5",
            "train.keep_checkpoints=3",
            "train.valid_bleu=false",
        ),
        run,
        resume=True,
        console=Silent(),
    )
    assert [step for step, _ in list_snapshots(run)] == [15, 20, 21]


def test_checkpoints_every_n_minutes(tmp_path, spm_cache, monkeypatch):
    """With a clock that moves a minute per reading, every update is due a timed checkpoint."""
    import mhatrain.training.loop as T
    from mhatrain.core.rundir import list_snapshots

    minutes = iter(range(10_000))
    monkeypatch.setattr(T.time, "monotonic", lambda: 60.0 * next(minutes))
    train(
        quiet_config(
            spm_cache,
            "train.max_steps=4",
            "train.checkpoint_every_minutes=1",
            "train.keep_checkpoints=9",
            "train.valid_bleu=false",
        ),
        tmp_path / "run",
        console=Silent(),
    )
    assert [step for step, _ in list_snapshots(tmp_path / "run")] == [1, 2, 3, 4]


@pytest.mark.parametrize("failing_call", [1, 3])
def test_a_compile_failure_at_any_update_falls_back_to_eager(tmp_path, spm_cache, monkeypatch, failing_call):
    """torch.compile succeeds but the compiled model fails when called for the first or a later update
    (as a backend failure does when a new graph compiles): one warning line, that update is redone
    eagerly from the same state, the rest runs eager, and the weights are those of a run whose
    compiled model never failed (here: the eager model itself behind a stand-in compile)."""
    calls = []

    def stand_in_compile(fail_at):
        def compile(model, **kwargs):
            def compiled(*args, **kw):
                calls.append(1)
                if len(calls) == fail_at:
                    raise RuntimeError("backend compiler failed\nlong traceback text")
                return model(*args, **kw)

            return compiled

        return compile

    config = ["train.max_steps=4", "train.valid_bleu=false", "train.compile=true"]
    monkeypatch.setattr(torch, "compile", stand_in_compile(fail_at=0))
    train(quiet_config(spm_cache, *config), tmp_path / "never-fails", console=Silent())
    assert len(calls) == 4
    calls.clear()
    monkeypatch.setattr(torch, "compile", stand_in_compile(fail_at=failing_call))
    output = io.StringIO()
    train(quiet_config(spm_cache, *config), tmp_path / "fails", console=Console(file=output, width=300))
    warnings = [line for line in output.getvalue().splitlines() if "torch.compile" in line]
    assert warnings == [
        "warning: torch.compile failed (RuntimeError: backend compiler failed); running eager from here"
    ]
    assert len(calls) == failing_call
    assert_same_weights(weights(tmp_path / "never-fails"), weights(tmp_path / "fails"))


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_the_training_forward_compiles_as_one_graph(norm):
    """No graph breaks: the byte dropout's random_() and per-call closures in the layers broke the
    graph (and recompiled) before."""
    from mhatrain.data.tokens import PAD
    from mhatrain.model.transformer import build_model

    config = load_config(TINY, ["model.dropout=0.1", "model.attention_dropout=0.1", f"model.norm={norm}"])
    model = build_model(config.model, 64, PAD).train()
    src, tgt = torch.randint(4, 64, (3, 7)), torch.randint(4, 64, (3, 6))
    explained = torch._dynamo.explain(model)(src, tgt)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


def test_run_dir_with_a_run_is_not_overwritten(tmp_path, spm_cache):
    out = tmp_path / "run"
    train(quiet_config(spm_cache, "train.max_steps=3"), out, console=Silent())
    before = (out / "last.pt").read_bytes()
    with pytest.raises(CheckpointError, match="already holds a training run: pass --resume"):
        train(quiet_config(spm_cache, "train.max_steps=3"), out, console=Silent())
    assert (out / "last.pt").read_bytes() == before


def test_resume_with_another_model_config_is_refused(tmp_path, spm_cache):
    out = tmp_path / "run"
    train(quiet_config(spm_cache, "train.max_steps=3"), out, console=Silent())
    with pytest.raises(CheckpointError, match=r"different config: model\.d_ff \(128 vs 256\)"):
        train(quiet_config(spm_cache, "train.max_steps=6", "model.d_ff=256"), out, resume=True, console=Silent())


def test_damaged_last_checkpoint_falls_back_to_the_previous(tmp_path, spm_cache):
    out = tmp_path / "run"
    train(quiet_config(spm_cache, "train.max_steps=20", "train.checkpoint_every=5"), out, console=Silent())
    assert (out / "last.prev.pt").exists()
    data = (out / "last.pt").read_bytes()
    (out / "last.pt").write_bytes(data[: len(data) // 2])
    summary = train(quiet_config(spm_cache, "train.max_steps=25"), out, resume=True, console=Silent())
    assert summary["updates"] == 25


def test_checkpoints_are_loaded_without_executing_code(tmp_path):
    class Payload:
        def __reduce__(self):
            return (print, ("pwned",))

    path = tmp_path / "evil.pt"
    torch.save({"format": 1, "model": {}, "x": Payload()}, path)
    with pytest.raises(CheckpointError, match="damaged or not a mhatrain checkpoint"):
        load_checkpoint(path)


def test_atomic_save_keeps_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "last.pt"
    save_checkpoint(path, {"model": {"w": torch.ones(2)}})

    class Unsaveable:
        def __reduce__(self):
            raise RuntimeError("cannot pickle")

    with pytest.raises(RuntimeError):
        save_checkpoint(path, {"model": {"w": torch.zeros(2)}, "bad": Unsaveable()})
    assert torch.equal(load_checkpoint(path)["model"]["w"], torch.ones(2))
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


def test_open_run_rejects_directories_that_are_not_runs(tmp_path):
    with pytest.raises(CheckpointError, match="run directory not found"):
        open_run(tmp_path / "absent")
    with pytest.raises(CheckpointError, match="is not a mhatrain run directory"):
        open_run(tmp_path)


def test_stop_reasons():
    from mhatrain.core.config import TrainConfig
    from mhatrain.training.state import TrainState, stop_reason

    t = TrainConfig(max_epochs=5, max_steps=100, patience=3)
    assert stop_reason(TrainState(step=99, epoch=4, bad_validations=2), t) == ""
    assert stop_reason(TrainState(step=100), t) == "reached max_steps=100"
    assert stop_reason(TrainState(step=5, bad_validations=3), t).startswith("early stopping after 3 validations")
    assert stop_reason(TrainState(step=5, epoch=5), t) == "reached max_epochs=5"
    assert (
        stop_reason(TrainState(step=10**6, bad_validations=99), TrainConfig(max_steps=0, patience=0, max_epochs=1))
        == ""
    )


def test_early_stopping_on_loss_keeps_the_best_checkpoint(tmp_path, spm_cache):
    # valid_every=1 with a huge learning rate: validation loss soon stops improving.
    out = tmp_path / "run"
    summary = train(
        quiet_config(
            spm_cache,
            "train.valid_every=2",
            "train.valid_bleu=false",
            "train.early_stop_metric=loss",
            "train.patience=2",
            "train.lr_factor=30",
            "train.warmup_steps=1",
            "train.max_steps=200",
        ),
        out,
        console=Silent(),
    )
    assert summary["stop_reason"].startswith("early stopping after 2 validations")
    assert summary["updates"] < 200
    best = load_checkpoint(out / "best.pt")
    assert best["progress"]["step"] == summary["best_step"] < summary["updates"]


@pytest.mark.parametrize(
    ("overrides", "words", "metric"),
    [
        (("train.early_stop_metric=bleu",), "best valid BLEU", "valid_bleu"),
        ((), "best valid loss", "valid_loss"),
        (("train.valid_bleu=false",), "best valid loss", "valid_loss"),  # no BLEU: the loss picks best.pt
    ],
)
def test_the_last_line_names_the_metric_that_picked_the_best_checkpoint(tmp_path, spm_cache, overrides, words, metric):
    console = Silent()
    out = tmp_path / "run"
    config = quiet_config(spm_cache, "train.valid_every=3", "train.max_steps=9", *overrides)
    summary = train(config, out, console=console)
    valid = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in valid if r.get("kind") == "valid"]
    best = max(valid, key=lambda r: r[metric] * (1 if metric == "valid_bleu" else -1))
    shown = f"{best[metric]:.2f}" if metric == "valid_bleu" else f"{best[metric]:.4f}"
    assert best["step"] == summary["best_step"]
    assert f"{words} {shown} at update {best['step']}" in console.file.getvalue()


def test_log_lines_off_a_terminal_say_how_far_along_the_run_is(tmp_path, spm_cache):
    """A log file or a SLURM job's output has no progress bar: each line says update N of M and an ETA."""
    console = Console(file=io.StringIO(), soft_wrap=True)  # a file, not a terminal; lines unwrapped, as the CLI's
    train(
        quiet_config(spm_cache, "train.log_every=4", "train.max_steps=12", "train.valid_every=6"),
        tmp_path / "r",
        console=console,
    )
    lines = console.file.getvalue().splitlines()
    updates = [line for line in lines if line.startswith("update ")]
    assert [line.split()[1:4] for line in updates] == [[str(n), "of", "12"] for n in (1, 4, 8, 12)]
    assert all(re.search(r"  ETA \d+:\d\d:\d\d$", line) for line in updates[:-1]), updates
    assert updates[-1].endswith("ETA 0:00:00")
    valid = [line for line in lines if line.startswith("valid update")]
    assert [line.split()[2:5] for line in valid] == [["6", "of", "12"], ["12", "of", "12"]]


def _poison_losses(monkeypatch, bad_calls):
    """Make batch_loss return NaN on the given call numbers (1-based)."""
    import mhatrain.training.step as T

    real, calls = T.batch_loss, {"n": 0}

    def poisoned(model, batch, smoothing):
        calls["n"] += 1
        loss, nll = real(model, batch, smoothing)
        return (loss * float("nan"), nll) if calls["n"] in bad_calls else (loss, nll)

    monkeypatch.setattr(T, "batch_loss", poisoned)


def test_a_non_finite_loss_skips_the_update_and_is_counted(tmp_path, spm_cache, monkeypatch):
    _poison_losses(monkeypatch, {3})
    summary = train(
        quiet_config(spm_cache, "train.max_steps=6", "train.valid_bleu=false"), tmp_path / "run", console=Silent()
    )
    assert summary["skipped_updates"] == 1 and summary["updates"] == 6
    assert all(torch.isfinite(w).all() for w in weights(tmp_path / "run").values())


def test_too_many_non_finite_updates_stop_with_the_last_good_checkpoint_intact(tmp_path, spm_cache, monkeypatch):
    from mhatrain.core.errors import MhatrainError

    _poison_losses(monkeypatch, set(range(5, 100)))
    out = tmp_path / "run"
    with pytest.raises(MhatrainError, match=r"stopped: 3 updates in a row skipped \(non-finite loss\) at update 5"):
        train(
            quiet_config(spm_cache, "train.max_steps=50", "train.checkpoint_every=2", "train.max_bad_updates=3"),
            out,
            console=Silent(),
        )
    state = load_checkpoint(out / "last.pt")
    assert state["progress"]["step"] == 4
    assert all(torch.isfinite(w).all() for w in state["model"].values())


def test_fp16_overflows_are_skipped_and_lower_the_loss_scale(tmp_path, spm_cache, monkeypatch):
    """fp16 trains through torch.amp.GradScaler: an update whose scaled gradients overflow (the loss itself
    finite) is skipped and halves the scale, and such skips do not count towards train.max_bad_updates."""
    import mhatrain.training.step as T

    real, calls = T.batch_loss, {"n": 0}

    def overflowing(model, batch, smoothing):
        calls["n"] += 1
        loss, nll = real(model, batch, smoothing)
        if calls["n"] in (3, 4, 5):  # the same value, a gradient beyond fp32 once scaled
            weight = next(model.parameters())
            loss = loss + (weight.sum() - weight.sum().detach()) * 3e38
        return loss, nll

    monkeypatch.setattr(T, "batch_loss", overflowing)
    output = io.StringIO()
    summary = train(
        quiet_config(
            spm_cache, "train.max_steps=6", "train.valid_bleu=false", "train.precision=fp16", "train.max_bad_updates=2"
        ),
        tmp_path / "run",
        console=Console(file=output, width=300),
    )
    assert summary["skipped_updates"] == 3 and summary["updates"] == 6
    assert "update 3 skipped: fp16 gradient overflow at loss scale 65536" in output.getvalue()
    assert "update 3 skipped: fp16 gradient overflow at loss scale 16384" in output.getvalue()
    state = load_checkpoint(tmp_path / "run" / "last.pt")
    assert state["scaler"]["scale"] == 65536 / 8
    assert all(torch.isfinite(w).all() for w in state["model"].values())


def test_out_of_memory_on_one_batch_is_skipped_and_counted(tmp_path, spm_cache, monkeypatch):
    import mhatrain.training.step as T

    real, calls = T.batch_loss, {"n": 0}

    def runs_out_once(model, batch, smoothing):
        calls["n"] += 1
        if calls["n"] == 4:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(model, batch, smoothing)

    monkeypatch.setattr(T, "batch_loss", runs_out_once)
    summary = train(
        quiet_config(spm_cache, "train.max_steps=6", "train.valid_bleu=false"), tmp_path / "run", console=Silent()
    )
    assert summary["skipped_updates"] == 1 and summary["updates"] == 6


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("block_bytes", [1 << 20, 100])  # all rows in one block; 2 rows per block
def test_batch_loss_equals_cross_entropy_with_label_smoothing(smoothing, dtype, block_bytes, monkeypatch):
    """The blockwise loss is F.cross_entropy's: smoothed loss and NLL, their gradients, PAD ignored."""
    import torch.nn.functional as F

    import mhatrain.training.loss
    from mhatrain.data.batches import Batch
    from mhatrain.data.tokens import PAD
    from mhatrain.training.step import batch_loss

    monkeypatch.setitem(mhatrain.training.loss.BLOCK_BYTES, "cpu", block_bytes)
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 11, dtype=dtype, requires_grad=True)
    gold = torch.tensor([[4, 5, 6], [7, PAD, PAD]])
    batch = Batch(src=torch.zeros(2, 1, dtype=torch.long), tgt_in=gold, tgt_out=gold, indices=[0, 1])
    loss, nll = batch_loss(lambda src, tgt_in: logits, batch, smoothing)
    flat = logits.float().view(-1, 11)
    expected = F.cross_entropy(flat, gold.view(-1), ignore_index=PAD, label_smoothing=smoothing, reduction="sum")
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(nll, F.cross_entropy(flat, gold.view(-1), ignore_index=PAD, reduction="sum"))
    (grad,) = torch.autograd.grad(loss, logits)
    (expected_grad,) = torch.autograd.grad(expected, logits)
    torch.testing.assert_close(grad, expected_grad)
    assert not nll.requires_grad


def test_slow_bf16_warning_follows_the_measured_speeds(monkeypatch):
    from mhatrain.core import runtime

    speeds = {torch.float32: 1.0, torch.bfloat16: 50.0}  # seconds per probe matmul
    monkeypatch.setattr(runtime, "_matmul_seconds", lambda dtype, repeats=3: speeds[dtype])
    warning = runtime.slow_bf16_warning(torch.device("cpu"), "bf16")
    assert warning is not None and "50× slower than fp32" in warning and "train.precision=fp32" in warning
    assert runtime.slow_bf16_warning(torch.device("cpu"), "fp32") is None
    speeds[torch.bfloat16] = 0.5  # a CPU with native bf16
    assert runtime.slow_bf16_warning(torch.device("cpu"), "bf16") is None


def test_bf16_probe_measures_real_matmuls():
    from mhatrain.core import runtime

    torch.manual_seed(7)
    before = torch.get_rng_state()
    assert 0 < runtime._matmul_seconds(torch.float32, repeats=1) < 60
    assert torch.equal(torch.get_rng_state(), before)  # the probe leaves training's RNG alone


def test_loss_blocks_are_sized_from_the_vocabulary_and_the_device_budget():
    """A CPU block is cache-sized; elsewhere (CUDA) the budget is memory, so a 37k vocabulary is not
    cut into hundreds of blocks; a block always has a row. The GPU sizing computes the CPU's loss."""
    import mhatrain.training.loss as L

    cpu, gpu = L.block_rows(37000, torch.device("cpu")), L.block_rows(37000, torch.device("cuda"))
    assert cpu * 37000 * 4 <= L.BLOCK_BYTES["cpu"] < (cpu + 1) * 37000 * 4
    assert gpu * 37000 * 4 <= L.DEFAULT_BLOCK_BYTES and gpu >= 25000 // 8  # a 25k-token batch in ≤ 8 blocks
    assert L.block_rows(10**12, torch.device("cpu")) == 1
    torch.manual_seed(0)
    logits, gold = torch.randn(300, 37, requires_grad=True), torch.randint(0, 37, (300,))
    results = []
    for budget in (L.BLOCK_BYTES["cpu"], 4 * 37 * 7):  # one block; blocks of 7 rows
        L.BLOCK_BYTES["cpu"], saved = budget, L.BLOCK_BYTES["cpu"]
        try:
            loss, nll = L.smoothed_cross_entropy(logits, gold, 0.1)
            results.append((loss, nll, torch.autograd.grad(loss.sum(), logits)[0]))
        finally:
            L.BLOCK_BYTES["cpu"] = saved
    for a, b in zip(*results):
        torch.testing.assert_close(a, b)


def test_validation_during_training_scores_the_weights_it_saved(tiny_run, tmp_path):
    """Each validation must see the weights of its update. The fused Adam step updates parameters
    without advancing their version counters, so anything that keeps derived weights between
    validations (once: the stacked W_Q, W_K, W_V) would score an old model from the second
    validation on. The last validation (end of the last epoch) must equal a fresh scoring of last.pt."""
    from mhatrain.inference.trained import load_run
    from mhatrain.training.prepare import prepare_data
    from mhatrain.training.validation import run_validation

    records = [json.loads(line) for line in (tiny_run / "metrics.jsonl").read_text().splitlines()]
    last_valid = [r for r in records if r["kind"] == "valid"][-1]
    run = load_run(tiny_run, "last", overrides=[f"data.local_dir={ROOT / 'tests/data/toy'}"], strict=True)
    assert run.step == last_valid["step"]
    fresh = run_validation(run.model, prepare_data(run.config, tmp_path, log=lambda *_: None), run.config, run.device)
    assert fresh["valid_loss"] == pytest.approx(last_valid["valid_loss"], rel=1e-5)
    assert fresh["valid_bleu"] == last_valid["valid_bleu"]


def test_commands_that_load_a_trained_model_run_on_its_train_threads(tiny_run):
    """eval, translate, heads and attention load through load_run: it applies train.threads (with --set),
    so `eval --set train.threads=1` beside a running grid does not start torch's default thread pool."""
    from mhatrain.inference.trained import load_run

    try:
        load_run(tiny_run, overrides=["train.threads=2"])
        assert torch.get_num_threads() == 2
        load_run(tiny_run)  # configs/tiny.yaml: train.threads 1
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(1)
