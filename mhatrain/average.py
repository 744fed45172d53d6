"""Checkpoint averaging: the element-wise mean of several checkpoints' weights.

Averaging the last few validation checkpoints of a run usually gains a little BLEU over any
single one (the paper averages the last 5 checkpoints of its base models; Table 3 does not).
"""

from __future__ import annotations

from pathlib import Path


from .checkpoint import check_compatible, load_checkpoint, save_checkpoint
from .config import config_from_dict
from .errors import CheckpointError


def average_checkpoints(paths: list[Path]) -> dict:
    """A checkpoint whose weights are the mean of `paths`' weights (they must share config and vocabulary)."""
    if not paths:
        raise CheckpointError("no checkpoints to average")
    first = load_checkpoint(paths[0])
    config = config_from_dict(first["config"], str(paths[0]), check_paths=False)
    total = {k: v.double() if v.is_floating_point() else v for k, v in first["model"].items()}
    steps = [int(first["progress"]["step"])]
    for path in paths[1:]:
        state = load_checkpoint(path)
        check_compatible(state, config, str(path), first.get("vocab_fingerprint"))
        if state["model"].keys() != total.keys():
            raise CheckpointError(f"{path}: parameters differ from {paths[0]}")
        for key, value in state["model"].items():
            if value.is_floating_point():
                total[key] += value.double()
        steps.append(int(state["progress"]["step"]))
    n = len(paths)
    model = {k: (v / n).to(first["model"][k].dtype) if v.is_floating_point() else v for k, v in total.items()}
    return {"model": model, "config": first["config"], "progress": {**first["progress"], "step": max(steps)},
            "vocab_fingerprint": first.get("vocab_fingerprint"), "vocab_size": first.get("vocab_size"),
            "averaged_from": [str(p) for p in paths], "averaged_steps": steps}


def average_run(run_dir: Path, paths: list[Path]) -> Path:
    """Average `paths` into RUN_DIR/averaged.pt (used by `eval --checkpoint averaged`)."""
    state = average_checkpoints(paths)
    target = Path(run_dir) / "averaged.pt"
    save_checkpoint(target, state)
    return target
