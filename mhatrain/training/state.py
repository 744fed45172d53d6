"""Where training stands, and what a checkpoint keeps of it for an exact resume: `TrainState` (saved in
every checkpoint under "progress"), why training stops (`stop_reason`), every process's random state,
and the state of a weights-only checkpoint (best.pt, a snapshot).
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

import torch

from ..core.checkpoint import checkpoint_state
from ..core.config import Config, TrainConfig
from ..core.distributed import Group
from ..data.tokenizer import Tokenizer


@dataclass
class TrainState:
    """Where training stands; saved in every checkpoint (under "progress")."""

    step: int = 0  # optimiser updates done
    epoch: int = 0  # current epoch (0-based)
    batch_in_epoch: int = 0  # next batch of the current epoch
    best_score: float | None = None
    best_step: int = 0
    bad_validations: int = 0
    train_seconds: float = 0.0  # time in training steps
    valid_seconds: float = 0.0  # time in validation
    target_tokens: int = 0
    skipped_updates: int = 0  # updates skipped for a non-finite loss/gradient or out-of-memory
    bad_in_a_row: int = 0
    finished: bool = False
    stop_reason: str = ""
    world_size: int = 1  # processes training together (torchrun's WORLD_SIZE), in the latest session
    tokens_per_update: int = 0  # world_size × accum_steps × max_tokens: the token budget of one update


def stop_reason(state: TrainState, t: TrainConfig) -> str:
    """Why training should stop now, or "" to go on."""
    if t.max_steps and state.step >= t.max_steps:
        return f"reached max_steps={t.max_steps}"
    if t.patience and state.bad_validations >= t.patience:
        return f"early stopping after {t.patience} validations without improvement"
    if state.epoch >= t.max_epochs:
        return f"reached max_epochs={t.max_epochs}"
    return ""


def weights_state(model, config: Config, state: TrainState, tokenizer: Tokenizer) -> dict:
    """The state of a weights-only checkpoint (best.pt, a snapshot): what eval and average read."""
    return checkpoint_state(
        model.state_dict(), config.to_dict(), asdict(state), tokenizer.fingerprint(), tokenizer.vocab_size
    )


def rng_state() -> dict:
    """This process's random state: torch's (and every visible GPU's) and Python's."""
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore a state from `rng_state` (Python's may come back from a checkpoint as lists)."""
    torch.set_rng_state(state["torch"])
    random.setstate(_as_tuple(state["python"]))
    if "cuda" in state and torch.cuda.is_available():  # for the GPUs visible now (fewer after a move, maybe)
        torch.cuda.set_rng_state_all(state["cuda"][: torch.cuda.device_count()])


def _as_tuple(x):
    return tuple(_as_tuple(i) for i in x) if isinstance(x, (list, tuple)) else x


def restore_rng(last: dict | None, procs: Group, seed: int, step: int) -> None:
    """Each rank continues from its own saved random state, so a resume with as many processes draws
    the same dropout masks as an uninterrupted run. A rank without one (a fresh start, or more
    processes than the checkpoint had) gets a seed of its own: dropout masks differ between ranks."""
    states = [last["rng"], *last.get("rng_other_ranks", [])] if last is not None else []
    if procs.rank < len(states):
        set_rng_state(states[procs.rank])
    elif procs.rank:
        torch.manual_seed(seed + 1_000_003 * procs.rank + step)
