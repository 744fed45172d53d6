"""The training update: `mhatrain train` and `mhatrain bench train` run the same function."""

from __future__ import annotations

import io

import pytest
import torch
from rich.console import Console

import mhatrain.step as update_step
from mhatrain.bench.inputs import synthetic_pairs
from mhatrain.bench.report import OURS
from mhatrain.bench.train import LR, train_step
from mhatrain.config import load_config
from mhatrain.data import collate
from mhatrain.distributed import Group
from mhatrain.model import build_model
from mhatrain.runtime import loss_scaler
from mhatrain.train import train

from .conftest import TINY


@pytest.fixture
def updates(monkeypatch) -> list[dict]:
    """Every call of step.optimizer_update from now on (by the bench, or by train.py, which imports it
    by name): its model (in the DDP model's place), share of batches, learning rate and statistics."""
    import mhatrain.train

    calls, real = [], update_step.optimizer_update
    assert mhatrain.train.optimizer_update is real  # training's update is step.py's, not a copy

    def spy(forward_model, ddp_model, optimizer, scaler, share, t, lr, procs):
        stats = real(forward_model, ddp_model, optimizer, scaler, share, t, lr, procs)
        calls.append({"model": ddp_model, "stats": stats, "share": share, "lr": lr})
        return stats

    monkeypatch.setattr(update_step, "optimizer_update", spy)
    monkeypatch.setattr(mhatrain.train, "optimizer_update", spy)
    return calls


def test_training_runs_step_optimizer_update_for_every_update(tmp_path, spm_cache, updates):
    config = load_config(
        TINY, [f"data.cache_dir={spm_cache}", "train.max_steps=2", "train.valid_bleu=false", "train.log_every=1000"]
    )
    summary = train(config, tmp_path / "run", console=Console(file=io.StringIO()))
    assert summary["updates"] == 2 and len(updates) == 2
    assert [round(call["stats"]["lr"], 12) for call in updates] == [
        round(update_step.noam_lr(s, config.model.d_model, config.train.warmup_steps, config.train.lr_factor), 12)
        for s in (1, 2)
    ]


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
    model = build_model(config.model, vocab).train()
    optimizer = update_step.make_optimizer(model.parameters(), config.train, LR)
    device = torch.device("cpu")
    direct = update_step.optimizer_update(
        model, model, optimizer, loss_scaler(device, "fp32"), [(batches[0], 1)], config.train, LR, Group(device)
    )
    assert direct == through_bench["stats"]
    bench_model = through_bench["model"].state_dict()
    for name, value in model.state_dict().items():
        assert torch.equal(value, bench_model[name]), name
