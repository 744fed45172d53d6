"""Checkpoints: atomic save, verified load, snapshots, resume state, and opening a trained run.

Checkpoints are written atomically and loaded with `weights_only=True` (no code runs on load).
Every checkpoint is one dict (checkpoint_state): weights, config, progress and vocabulary, plus what
resuming needs (last.pt) or what averaging records (averaged.pt). The files' names are core.rundir's.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from pathlib import Path

import torch

from .config import Config, TrainConfig, accum_steps_for, config_from_dict, load_config
from .errors import CheckpointError
from .faults import fault_point, interruptible
from .files import atomic_write
from .rundir import (
    CHECKPOINT_FILES,
    CONFIG_FILE,
    LAST,
    LAST_PREV,
    TOKENIZER_FILE,
    is_run_dir,
    list_snapshots,
    snapshot_path,
)

FORMAT = 1

# Keys that may change when a run is resumed; anything else must match the checkpoint.
RESUMABLE_CHANGES = {
    "train.max_epochs",
    "train.max_steps",
    "train.patience",
    "train.log_every",
    "train.threads",
    "train.device",
    "train.checkpoint_every",
    "train.valid_every",
    "train.valid_max_sentences",
    "train.valid_beam",
    "train.compile",
    "train.max_bad_updates",
    "decode.beam",
    "decode.alpha",
    "decode.max_len_a",
    "decode.max_len_b",
    "decode.batch_tokens",
    "data.cache_dir",
    "data.local_dir",
    "data.dataset",
    "train.dist_backend",
    "train.tensorboard",
    "train.accum_steps",
    "train.tokens_per_update",  # judged by `resume_accum_steps`: the tokens per update may
    # change only when asked
    "train.checkpoint_every_minutes",
    "train.gpu_checkpoint_minutes",
    "train.keep_checkpoints",
}


def checkpoint_state(
    model: dict, config: dict, progress: dict, vocab_fingerprint: str | None, vocab_size: int | None, **more
) -> dict:
    """The one checkpoint dict: the weights (model.state_dict()), the config (Config.to_dict()) and the
    progress (train.Progress as a dict) they come from, the vocabulary they expect; `more` adds what
    resuming needs (optimizer, rng, rng_other_ranks, scaler) or what averaging records (averaged_from,
    averaged_steps). What `eval`, `average` and `train --resume` read."""
    return {
        "model": model,
        "config": config,
        "progress": progress,
        "vocab_fingerprint": vocab_fingerprint,
        "vocab_size": vocab_size,
        **more,
    }


def save_checkpoint(path: Path, state: dict) -> None:
    """Write atomically; for last.pt the previous file is kept as last.prev.pt until then."""
    path = Path(path)
    state = {"format": FORMAT, **state}
    tmp = path.with_name(f".{path.name}.partial")
    atomic_write(tmp, lambda f: torch.save(state, interruptible(f, "checkpoint-write")), binary=True)
    fault_point("checkpoint-rename")
    if path.name == LAST and path.exists():
        os.replace(path, path.with_name(LAST_PREV))
        fault_point("checkpoint-swap")
    os.replace(tmp, path)


def save_snapshot(run_dir: Path, state: dict, keep: int) -> Path:
    """Write the weights `state` (of update state["progress"]["step"]) as a snapshot and delete all
    but the newest `keep` snapshots."""
    path = snapshot_path(run_dir, int(state["progress"]["step"]))
    save_checkpoint(path, state)
    for _, old in list_snapshots(run_dir)[:-keep]:
        old.unlink(missing_ok=True)
    return path


def drop_snapshots_after(run_dir: Path, step: int) -> None:
    """Delete snapshots newer than the checkpoint a run resumes from (it will write them again)."""
    for snapshot_step, path in list_snapshots(run_dir):
        if snapshot_step > step:
            path.unlink(missing_ok=True)


def load_checkpoint(path: Path, map_location="cpu") -> dict:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    # A damaged file can make torch warn before it fails (garbage starting with a pickle PROTO opcode:
    # "Detected pickle protocol 112"); the error line says it all, so such warnings are shown only when
    # the file loads.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            state = torch.load(path, map_location=map_location, weights_only=True)
        except Exception as exc:  # truncated zip, bad pickle opcode, forbidden global, ...
            failure = _load_failure(exc)
        else:
            failure = None
    if failure is not None:
        raise CheckpointError(f"{path}: damaged or not a mhatrain checkpoint ({failure})")
    for warning in caught:
        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    if not isinstance(state, dict) or state.get("format") != FORMAT or "model" not in state:
        raise CheckpointError(f"{path}: not a mhatrain checkpoint (format {FORMAT})")
    return state


def _load_failure(exc: Exception) -> str:
    """The informative part of torch.load's error (its weights_only text advises unsafe loading)."""
    text = str(exc).strip()
    if "WeightsUnpickler error:" in text:
        detail = text.split("WeightsUnpickler error:", 1)[1].strip().splitlines()[0].split(" was not ")[0]
        return f"refused by the weights-only loader: {detail}"
    return text.splitlines()[0].split(". ")[0][:160] if text else type(exc).__name__


def load_latest(run_dir: Path, log=print) -> dict | None:
    """The newest readable training state (last.pt, else last.prev.pt), or None if there is none."""
    errors = []
    for name in CHECKPOINT_FILES["last"]:
        path = Path(run_dir) / name
        if not path.exists():
            continue
        try:
            return load_checkpoint(path)
        except CheckpointError as exc:
            errors.append(str(exc))
            log(f"warning: {exc}; trying the previous checkpoint")
    if errors:
        raise CheckpointError(f"no readable checkpoint in {run_dir}: {errors[-1]}")
    return None


def remove_partial_writes(run_dir: Path) -> list[Path]:
    """Delete the temporary files that a killed writer leaves behind (`.NAME.partial`, `.NAME.*.tmp`)."""
    removed = []
    for path in [*Path(run_dir).glob(".*.partial"), *Path(run_dir).glob(".*.tmp")]:
        try:
            path.unlink()
            removed.append(path)
        except OSError:
            pass
    return removed


# ----------------------------------------------------------------------------- a run's status


def open_run(run_dir: Path, which: str = "best", log=None, strict: bool = False) -> tuple[Config, dict, Path]:
    """Config, checkpoint state and tokenizer path of a finished or running run directory.

    A damaged checkpoint is reported through `log` and the next one is used (best.pt → last.pt →
    last.prev.pt), unless `strict`: then the asked-for checkpoint is used or the call fails, so that
    a result is never filed under a checkpoint it did not come from. A checkpoint made with another
    config than config.yaml is refused.
    """
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise CheckpointError(f"{run_dir} is a file, not a run directory")
    if not run_dir.is_dir():
        raise CheckpointError(f"run directory not found: {run_dir}")
    if not is_run_dir(run_dir):
        raise CheckpointError(f"{run_dir} is not a mhatrain run directory (no config.yaml)")
    config = load_config(run_dir / CONFIG_FILE, check_paths=False)
    tokenizer = run_dir / TOKENIZER_FILE
    if not tokenizer.is_file():
        raise CheckpointError(f"{run_dir}: tokenizer {TOKENIZER_FILE} is missing")
    names = CHECKPOINT_FILES[which]
    errors = []
    for name in names[:1] if strict else names:
        if not (run_dir / name).exists():
            continue
        try:
            state = load_checkpoint(run_dir / name)
        except CheckpointError as exc:
            if strict:
                raise CheckpointError(
                    f"{exc}; the {which} checkpoint cannot be evaluated (--checkpoint last "
                    f"evaluates the latest training state)"
                ) from None
            errors.append(str(exc))
            continue
        check_compatible(state, config, str(run_dir / name))  # config.yaml differs: so would every checkpoint
        for error in errors if log is not None else ():
            log(f"warning: {error}; using {name} instead")
        if not errors and name != names[0] and log is not None:  # the asked-for file is not there yet
            log(f"note: {run_dir} has no {names[0]} yet; using {name} (update {checkpoint_step(state)})")
        return config, state, tokenizer
    if errors:
        each = "; ".join(e.replace(f"{run_dir}{os.sep}", "", 1) for e in errors)  # the file names, not their paths
        raise CheckpointError(f"{run_dir}: no readable checkpoint: {each}")
    raise missing_checkpoint(run_dir, which)


def checkpoint_step(state: dict) -> int:
    """The update a checkpoint's weights are from."""
    return int(state.get("progress", {}).get("step", 0))


def missing_checkpoint(run_dir: Path, which: str) -> CheckpointError:
    """The error for a `which` checkpoint that is not in the run directory, naming the ones that are
    (with their updates) and the --checkpoint that picks them."""
    wanted = CHECKPOINT_FILES[which][0]
    there, options = [], []
    for other, names in CHECKPOINT_FILES.items():
        path = run_dir / names[0]
        if other == which or not path.is_file():
            continue
        try:
            there.append(f"{names[0]} of update {checkpoint_step(load_checkpoint(path)):,}")
            options.append(other)
        except CheckpointError:
            there.append(f"{names[0]} (damaged)")
    if not there and which != "averaged":
        return CheckpointError(f"{run_dir}: no checkpoint yet (train it first)")
    how = "written at the first validation" if which == "best" else "`mhatrain average` makes it"
    message = f"{run_dir}: no {wanted} yet ({how})"
    if there:
        message += f"; {_listed(there)} {'is' if len(there) == 1 else 'are'} there"
        message += f": --checkpoint {_listed(options, 'or')}" if options else ""
    return CheckpointError(message)


def _listed(items: list[str], last: str = "and") -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {last} {items[-1]}"


def config_differences(a: dict, b: dict) -> list[str]:
    """Dotted keys whose values differ between two config dicts."""
    out = []
    for section in sorted(set(a) | set(b)):
        sa, sb = a.get(section, {}), b.get(section, {})
        for key in sorted(set(sa) | set(sb)):
            if sa.get(key) != sb.get(key):
                out.append(f"{section}.{key}")
    return out


def check_compatible(state: dict, config: Config, where: str, vocab_fingerprint: str | None = None) -> None:
    """Refuse a checkpoint made with another model/data config or another vocabulary."""
    saved = state.get("config")
    if not isinstance(saved, dict):
        raise CheckpointError(f"{where}: checkpoint has no config")
    try:
        # completed with this version's defaults, so a key added since the checkpoint was written is no difference
        saved = config_from_dict(saved, where, check_paths=False).to_dict()
    except Exception:
        raise CheckpointError(f"{where}: checkpoint config is not valid for this version") from None
    differs = [k for k in config_differences(saved, config.to_dict()) if k not in RESUMABLE_CHANGES]
    if differs:
        shown = ", ".join(
            f"{k} ({config_value(saved, k)!r} vs {config_value(config.to_dict(), k)!r})" for k in differs[:4]
        )
        raise CheckpointError(f"{where}: made with a different config: {shown}")
    if vocab_fingerprint is not None and state.get("vocab_fingerprint") != vocab_fingerprint:
        raise CheckpointError(f"{where}: made with a different vocabulary (tokenizer differs)")


def resume_accum_steps(state: dict, config: Config, world: int, change: str, where: str) -> int:
    """train.accum_steps for resuming `state` with `world` processes.

    The tokens per update (processes × accum_steps × max_tokens) stay as the checkpoint had them, or
    the resume is refused, unless `change` says otherwise: "keep" sets accum_steps so that they stay
    the same, "new" accepts the config's accum_steps (and so another number of tokens per update).
    """
    saved_world = state.get("progress", {}).get("world_size", 1)
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    saved_train = TrainConfig(**{k: v for k, v in state["config"]["train"].items() if k in known})
    saved_accum = accum_steps_for(saved_train, saved_world)
    accum, max_tokens = accum_steps_for(config.train, world), config.train.max_tokens
    before, now = saved_world * saved_accum, world * accum  # batches per update
    keep = before // world if before % world == 0 else None
    if change == "keep" and keep is None:
        raise CheckpointError(
            f"--keep-batch: the {before} batches of an update in {where} "
            f"({_batch(saved_world, saved_accum, max_tokens)} tokens) cannot be shared out evenly "
            f"among {world} processes; use a number of processes that divides {before}, or --new-batch"
        )
    if change == "keep":
        return keep
    if before == now or change == "new":
        return accum
    hint = (
        f"pass --keep-batch to keep {before * max_tokens} (train.accum_steps={keep})"
        if keep is not None
        else f"--keep-batch cannot keep {before * max_tokens} with {world} processes"
    )
    raise CheckpointError(
        f"{where} was trained with {_batch(saved_world, saved_accum, max_tokens)} tokens per update; "
        f"resuming with {_batch(world, accum, max_tokens)} would change that: {hint}, "
        f"or --new-batch to continue with {now * max_tokens}"
    )


def _batch(world: int, accum: int, max_tokens: int) -> str:
    return f"{world} process{'es' if world > 1 else ''} × {accum} accumulation × {max_tokens} = {world * accum * max_tokens}"


def config_value(d: dict, dotted: str):
    """The value of a dotted key ("train.seed") in a config dict; None where it is absent."""
    section, key = dotted.split(".")
    return (d.get(section) or {}).get(key)
