"""Checkpoint averaging: the element-wise mean of several checkpoints' weights.

Averaging the last few validation checkpoints of a run usually gains a little BLEU over any
single one (the paper averages the last 5 checkpoints of its base models; Table 3 does not).
"""

from __future__ import annotations

from pathlib import Path

from ..core.checkpoint import check_compatible, checkpoint_state, load_checkpoint, save_checkpoint
from ..core.config import config_from_dict
from ..core.errors import CheckpointError, MhatrainError
from ..core.rundir import AVERAGED, SNAPSHOTS_DIR, list_snapshots


def average_checkpoints(paths: list[Path]) -> dict:
    """A checkpoint whose weights are the mean of `paths`' weights (they must share config and vocabulary)."""
    if not paths:
        raise CheckpointError("no checkpoints to average")
    seen = {}
    for path in paths:
        same = seen.setdefault(Path(path).resolve(), path)
        if same is not path:
            raise CheckpointError(f"{path}: given twice (as {same}); each checkpoint may be averaged only once")
    first = load_checkpoint(paths[0])
    config = config_from_dict(first["config"], str(paths[0]), check_paths=False)
    total = {k: v.double() if v.is_floating_point() else v for k, v in first["model"].items()}
    steps = [int(first["progress"]["step"])]
    for path in paths[1:]:
        state = load_checkpoint(path)
        check_compatible(state, config, str(path), first.get("vocab_fingerprint"))
        step = int(state["progress"]["step"])
        if step in steps:
            raise CheckpointError(
                f"{path}: holds update {step}, as {paths[steps.index(step)]} does (one is a copy of the other, "
                f"e.g. best.pt and the snapshot of its update): averaging both would weight that update twice"
            )
        if state["model"].keys() != total.keys():
            raise CheckpointError(f"{path}: parameters differ from {paths[0]}")
        for key, value in state["model"].items():
            if value.is_floating_point():
                total[key] += value.double()
        steps.append(step)
    n = len(paths)
    model = {k: (v / n).to(first["model"][k].dtype) if v.is_floating_point() else v for k, v in total.items()}
    return checkpoint_state(
        model,
        first["config"],
        {**first["progress"], "step": max(steps)},
        first.get("vocab_fingerprint"),
        first.get("vocab_size"),
        averaged_from=[str(p) for p in paths],
        averaged_steps=steps,
    )


def average_run(run_dir: Path, paths: list[Path]) -> Path:
    """Average `paths` into RUN_DIR/averaged.pt (used by `eval --checkpoint averaged`)."""
    state = average_checkpoints(paths)
    target = Path(run_dir) / AVERAGED
    save_checkpoint(target, state)
    return target


def chosen_checkpoints(run_dir: Path, files: list[Path], last: int) -> list[Path]:
    """`mhatrain average`'s checkpoints: the files given, or with --last N the run's newest N snapshots."""
    if bool(files) == bool(last):
        raise MhatrainError(
            "average: give either checkpoint files or --last N, not both"
            if files
            else "average: give checkpoint files to average, or --last N for the run's newest snapshots"
        )
    return list(files) if files else last_snapshots(run_dir, last)


def last_snapshots(run_dir: Path, n: int) -> list[Path]:
    """The run's newest `n` weight snapshots (kept by train.keep_checkpoints), oldest first."""
    if n < 1:
        raise CheckpointError(f"--last must be at least 1, got {n}")
    found = list_snapshots(run_dir)
    if len(found) < n:
        raise CheckpointError(
            f"{run_dir} holds {len(found)} snapshot(s) in {SNAPSHOTS_DIR}/, fewer than --last {n}: train "
            f"with train.keep_checkpoints={n} (and train.checkpoint_every or "
            f"train.checkpoint_every_minutes) to keep them"
        )
    return [path for _, path in found[-n:]]
