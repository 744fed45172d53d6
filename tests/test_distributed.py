"""Data-parallel training: two processes (torchrun, gloo on the CPU) = one process on the same batches.

One 2-process run through the real launcher (`python -m torch.distributed.run --standalone
--nproc_per_node=2 -m mhatrain train`) is compared with one in-process run that accumulates the same
two batches per update (accum_steps 2): weights after 14 updates, data position, metrics written once.
Then one process resumes the 2-process checkpoint with --keep-batch and is compared with the
uninterrupted run at update 20. With max_tokens 2048 an epoch has 23 batches, so its last update has
one batch and the second process none (it joins the gradient exchange with weight 0), and rank 0
validates alone at the end of the epoch (update 12) while the other waits.

Also here: the rules for resuming with another number of processes, and the checks of the
launcher's variables (one `error:` line through the CLI).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from rich.console import Console

from mhatrain.core.checkpoint import load_checkpoint, resume_accum_steps
from mhatrain.core.config import load_config
from mhatrain.core.distributed import Launch, pick_backend, read_launch, resolve_device
from mhatrain.core.errors import CheckpointError, MhatrainError
from mhatrain.training.loop import train

from .conftest import ROOT, TINY, run_cli, train_argv

SETTINGS = [
    "model.dropout=0.0",
    "train.max_tokens=2048",
    "train.checkpoint_every=7",
    "train.valid_max_sentences=10",
    "train.log_every=5",
]


def tiny_config(spm_cache, *overrides):
    return load_config(TINY, [f"data.cache_dir={spm_cache}", *SETTINGS, *overrides])


@pytest.fixture(scope="module")
def one_process(tmp_path_factory, spm_cache):
    """One process, two batches per update, 20 updates: last.prev.pt holds update 14, last.pt update 20."""
    out = tmp_path_factory.mktemp("dist") / "one"
    train(tiny_config(spm_cache, "train.accum_steps=2", "train.max_steps=20"), out, console=Console(file=io.StringIO()))
    return out


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory, spm_cache):
    """Two processes started by torchrun, one batch each per update, 14 updates."""
    out = tmp_path_factory.mktemp("dist") / "two"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            "-m",
            "mhatrain",
            *train_argv(out, *SETTINGS, "train.max_steps=14", spm_cache=spm_cache),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(OMP_NUM_THREADS="1"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return out, result.stdout


def _env(**extra):
    return {**{k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}, **extra}


def assert_same_weights(a: dict, b: dict):
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-5, atol=1e-6, msg=key)


def test_two_processes_train_like_one_process_on_the_same_batches(two_processes, one_process):
    out, stdout = two_processes
    state, reference = load_checkpoint(out / "last.pt"), load_checkpoint(one_process / "last.prev.pt")
    assert not [key for key in state["model"] if key.startswith("module.")]
    assert_same_weights(state["model"], reference["model"])
    position = ("step", "epoch", "batch_in_epoch", "target_tokens")
    assert [state["progress"][k] for k in position] == [reference["progress"][k] for k in position]
    assert (state["progress"]["step"], state["progress"]["epoch"], state["progress"]["batch_in_epoch"]) == (14, 1, 4)
    assert (state["progress"]["world_size"], state["progress"]["tokens_per_update"]) == (2, 4096)
    assert (reference["progress"]["world_size"], reference["progress"]["tokens_per_update"]) == (1, 4096)
    assert len(state["rng_other_ranks"]) == 1  # rank 1's random state, for an exact resume with 2 processes
    # Rank 0 alone prints and writes: each line and record once.
    assert stdout.count("batches: ≤2048 tokens × 1 accumulation × 2 processes = ≤4096 tokens per update") == 1
    assert stdout.count("run directory:") == 1 and stdout.count("done: reached max_steps=14") == 1
    # Rank 0 prepares the data (encodes, or maps what an earlier run cached); rank 1 only maps it.
    assert stdout.count("rank 1: data: mapped the encoded training data from") == 1
    assert "rank 1: data: encoded" not in stdout and "rank 1: tokenizer: training" not in stdout
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["step"]) for r in records] == [
        ("train", 1),
        ("train", 5),
        ("train", 10),
        ("valid", 12),
        ("valid", 14),
    ]
    summary = json.loads((out / "train_summary.json").read_text())
    assert (summary["world_size"], summary["tokens_per_update"], summary["updates"]) == (2, 4096, 14)


def test_one_process_resumes_a_two_process_run_with_the_same_tokens_per_update(
    two_processes, one_process, tmp_path, spm_cache
):
    run = tmp_path / "run"
    shutil.copytree(two_processes[0], run)
    before = (run / "last.pt").read_bytes()
    config = tiny_config(spm_cache, "train.max_steps=20")  # accum_steps 1, as the 2-process run had
    with pytest.raises(
        CheckpointError,
        match=r"trained with 2 processes × 1 accumulation × 2048 = 4096 tokens per "
        r"update; resuming with 1 process × 1 accumulation × 2048 = 2048 would "
        r"change that: pass --keep-batch to keep 4096 \(train.accum_steps=2\)",
    ):
        train(config, run, resume=True, console=Console(file=io.StringIO()))
    assert (run / "last.pt").read_bytes() == before

    output = io.StringIO()
    summary = train(config, run, resume=True, batch_change="keep", console=Console(file=output, width=200))
    assert "train.accum_steps: 1 → 2 for 1 × 2 × 2048 = 4096 tokens per update" in output.getvalue()
    assert (summary["updates"], summary["world_size"], summary["tokens_per_update"]) == (20, 1, 4096)
    assert load_config(run / "config.yaml", check_paths=False).train.accum_steps == 2
    assert_same_weights(load_checkpoint(run / "last.pt")["model"], load_checkpoint(one_process / "last.pt")["model"])


def _saved(world, accum):
    return {"progress": {"world_size": world}, "config": {"train": {"accum_steps": accum}}}


@pytest.mark.parametrize(
    "saved, world, accum, change, expected",
    [
        (_saved(2, 1), 1, 1, "keep", 2),  # 2 processes × 1 → 1 process × 2
        (_saved(1, 4), 2, 4, "keep", 2),
        (_saved(2, 1), 1, 2, "", 2),  # the same tokens per update, set by hand
        (_saved(2, 1), 1, 1, "new", 1),  # half the tokens per update, accepted
        ({"progress": {}, "config": {"train": {"accum_steps": 3}}}, 1, 3, "", 3),  # a checkpoint from before torchrun
        (_saved(2, 1), 4, 1, "keep", "cannot be shared out evenly among 4 processes"),
        (
            _saved(1, 1),
            2,
            1,
            "",
            "--keep-batch cannot keep 2048 with 2 processes, or --new-batch to continue with 4096",
        ),
        (_saved(1, 1), 1, 2, "", "pass --keep-batch to keep 2048 \\(train.accum_steps=1\\)"),
    ],
)
def test_resume_keeps_the_tokens_per_update_unless_told(saved, world, accum, change, expected):
    config = load_config(TINY, [f"train.accum_steps={accum}", "train.max_tokens=2048"], check_paths=False)
    if isinstance(expected, int):
        assert resume_accum_steps(saved, config, world, change, "last.pt") == expected
    else:
        with pytest.raises(CheckpointError, match=expected):
            resume_accum_steps(saved, config, world, change, "last.pt")


def test_tokens_per_update_resumes_on_another_number_of_processes():
    """A run with train.tokens_per_update=4096 and max_tokens 2048 accumulates 2 batches in one process
    and 1 in each of 2: the same update, so the resume needs no --keep-batch."""
    config = load_config(TINY, ["train.tokens_per_update=4096", "train.max_tokens=2048"], check_paths=False)
    saved = {"progress": {"world_size": 1}, "config": config.to_dict()}
    assert resume_accum_steps(saved, config, 2, "", "last.pt") == 1
    assert resume_accum_steps(saved, config, 1, "", "last.pt") == 2
    with pytest.raises(CheckpointError, match="resuming with 4 processes × 1 accumulation × 2048 = 8192"):
        resume_accum_steps(saved, config, 4, "", "last.pt")


MEET = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, None),
        ({"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1", **MEET}, Launch(2, 1, 1)),
        ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"}, "set but not MASTER_ADDR, MASTER_PORT: start several"),
        ({"RANK": "0", **MEET}, "RANK set but not WORLD_SIZE, LOCAL_RANK"),
        ({"WORLD_SIZE": "2", "RANK": "2", "LOCAL_RANK": "0", **MEET}, "RANK=2 with WORLD_SIZE=2: ranks go from 0 to 1"),
        ({"WORLD_SIZE": "two", "RANK": "0", "LOCAL_RANK": "0", **MEET}, "WORLD_SIZE='two' is not an integer"),
        (
            {"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2", **MEET},
            "LOCAL_RANK=2 with LOCAL_WORLD",
        ),
    ],
)
def test_the_launchers_variables_are_checked(env, expected):
    if expected is None or isinstance(expected, Launch):
        assert read_launch(env) == expected
    else:
        with pytest.raises(MhatrainError, match=expected):
            read_launch(env)


def test_each_process_takes_the_gpu_of_its_local_rank(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto", 1) == torch.device("cuda", 1)
    assert resolve_device("cuda", 0) == torch.device("cuda", 0)
    assert resolve_device("cpu", 3) == torch.device("cpu")
    with pytest.raises(MhatrainError, match="LOCAL_RANK=2 but this machine shows 2 CUDA device"):
        resolve_device("cuda", 2)
    with pytest.raises(MhatrainError, match="train.device=cuda:1 would put every process on the same GPU"):
        resolve_device("cuda:1", 0)
    assert pick_backend("auto", torch.device("cuda", 1)) == "nccl"
    assert pick_backend("auto", torch.device("cpu")) == "gloo"
    with pytest.raises(MhatrainError, match="train.dist_backend=nccl needs CUDA devices"):
        pick_backend("nccl", torch.device("cpu"))


@pytest.mark.parametrize(
    "env, sets, message",
    [
        (
            {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"},
            [],
            "WORLD_SIZE, RANK, LOCAL_RANK set but not MASTER_ADDR",
        ),
        (
            {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", **MEET},
            ["train.dist_backend=nccl"],
            "train.dist_backend=nccl needs CUDA devices",
        ),
    ],
    ids=["no-rendezvous", "nccl-on-cpu"],
)
def test_an_inconsistent_launch_is_one_error_line(tmp_path, spm_cache, env, sets, message):
    out = tmp_path / "run"
    result = run_cli(*train_argv(out, *sets, spm_cache=spm_cache), env=env)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not out.exists()


def test_ablate_refuses_to_run_under_torchrun(monkeypatch, tmp_path):
    from mhatrain.study.running.ablate import run_study

    for name, value in {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", **MEET}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(MhatrainError, match="not under torchrun"):
        run_study(TINY, [1, 4], [1], tmp_path / "study", [], 1, None, False, False, Console(file=io.StringIO()))
