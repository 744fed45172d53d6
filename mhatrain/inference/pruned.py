"""A pruned run: a trained run with learned head gates, its closed heads cut out of the weights
(model/pruning.py), written as a run directory of its own that `eval`, `translate`, `attention`
and `bench decode --run` load like any other.

The new directory holds config.yaml (model.heads_per_layer set, model.head_gates dropped), the
tokenizer, and best.pt: the pruned weights, with the progress of the checkpoint they come from and
`pruned_from` naming it. It has no training state: a pruned model is evaluated, not resumed.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

from ..core.checkpoint import checkpoint_state, save_checkpoint
from ..core.config import dump_config
from ..core.errors import MhatrainError
from ..core.rundir import BEST, CONFIG_FILE, TOKENIZER_FILE
from ..model.pruning import prune
from .trained import load_run


def write_pruned_run(run_dir: Path, out_dir: Path, which: str = "best") -> Path:
    """Prune the `which` checkpoint of `run_dir` into the new run directory `out_dir`; returns its best.pt."""
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    if out_dir.exists():
        raise MhatrainError(f"{out_dir} exists: a pruned run is written to a new directory")
    run = load_run(run_dir, which, strict=True)
    if run.config.model.head_gates is None:
        raise MhatrainError(f"{run_dir}: the model has no learned head gates (model.head_gates) to prune by")
    pruned = prune(run.model)
    config = copy.deepcopy(run.config)
    config.model = pruned.cfg
    out_dir.mkdir(parents=True)
    shutil.copyfile(run_dir / TOKENIZER_FILE, out_dir / TOKENIZER_FILE)
    dump_config(config, out_dir / CONFIG_FILE)
    state = checkpoint_state(
        {k: v.cpu() for k, v in pruned.state_dict().items()},
        config.to_dict(),
        {"step": run.step},
        run.tokenizer.fingerprint(),
        run.tokenizer.vocab_size,
        pruned_from=f"{run_dir.resolve()}:{which}",
    )
    save_checkpoint(out_dir / BEST, state)
    return out_dir / BEST
