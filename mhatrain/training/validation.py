"""Validation during training: loss, perplexity and BLEU on the validation split (`run_validation`), and
what training does with them (`validate_and_track`): keep best.pt, count validations without
improvement for early stopping, write the record. Under torchrun rank 0 validates and the others take
its verdict (`validate_on_main`).

`prepared` below is the run's data (prepare.py): its validation pairs (`valid`), their source ids
(`valid_src`), raw references (`valid_refs`) and the tokenizer.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch

from ..core.checkpoint import save_checkpoint
from ..core.config import Config
from ..core.distributed import Group
from ..core.faults import fault_point
from ..core.rundir import BEST
from ..core.runtime import autocast
from ..data.batches import batch_indices, collate, pair_lengths
from ..inference.scoring import bleu_score
from ..inference.search import translate_ids
from ..model.transformer import Transformer
from .metrics import MetricsLog
from .prepare import Prepared
from .progress import TrainDisplay
from .state import TrainState, weights_state
from .step import batch_loss


@torch.no_grad()
def run_validation(model: Transformer, prepared: Prepared, config: Config, device: torch.device) -> dict:
    """Validation loss, per-token perplexity and (if enabled) BLEU of greedy/beam output."""
    model.eval()
    nll_sum, n_tokens = torch.zeros((), dtype=torch.float64, device=device), 0  # read once, at the end
    with autocast(device, config.train.precision):
        for indices in batch_indices(pair_lengths(prepared.valid), config.train.max_tokens):
            batch = collate(prepared.valid, indices)
            n_tokens += batch.n_tgt_tokens  # counted on the host
            _, nll = batch_loss(model, batch.to(device), 0.0)
            nll_sum += nll.double()
    nll_sum = float(nll_sum)
    result = {"valid_loss": nll_sum / n_tokens, "valid_ppl": math.exp(min(nll_sum / n_tokens, 50.0))}
    fault_point("validation")
    if config.train.valid_bleu:
        limit = config.train.valid_max_sentences or len(prepared.valid_src)
        ids = translate_ids(
            model,
            prepared.valid_src[:limit],
            config.decode,
            device,
            beam=config.train.valid_beam,
            precision=config.train.precision,
        )
        bleu, signature = bleu_score(prepared.tokenizer.decode(ids), prepared.valid_refs[:limit])
        result.update(valid_bleu=round(bleu, 2), bleu_signature=signature)
    model.train()
    return result


def selection_metric(config: Config) -> str:
    """What picks best.pt and drives patience: "bleu" (validation BLEU, higher is better) when
    train.early_stop_metric is bleu and BLEU is computed (train.valid_bleu), else "loss" (validation loss)."""
    t = config.train
    return "bleu" if t.early_stop_metric == "bleu" and t.valid_bleu else "loss"


def selection_score(config: Config, result: dict) -> float:
    """A validation's score under selection_metric, higher is better: BLEU, or the negated loss."""
    return result["valid_bleu"] if selection_metric(config) == "bleu" else -result["valid_loss"]


def best_line(config: Config, state: TrainState) -> str:
    """The best validation so far, in words: "best valid BLEU 27.31 at update 2600" (or loss)."""
    if state.best_score is None:
        return "no validation yet"
    if selection_metric(config) == "bleu":
        return f"best valid BLEU {state.best_score:.2f} at update {state.best_step}"
    return f"best valid loss {-state.best_score:.4f} at update {state.best_step}"  # selection_score: -loss


def validate_and_track(
    model: Transformer,
    prepared: Prepared,
    config: Config,
    device: torch.device,
    state: TrainState,
    run_dir: Path,
    display: TrainDisplay,
    metrics: MetricsLog,
) -> None:
    """Validate the model at `state.step`; save best.pt when its score (selection_score)
    improved, else count a validation without improvement; write and show the record."""
    started = time.perf_counter()
    result = run_validation(model, prepared, config, device)
    state.valid_seconds += time.perf_counter() - started
    score = selection_score(config, result)
    improved = state.best_score is None or score > state.best_score
    if improved:
        state.best_score, state.best_step, state.bad_validations = score, state.step, 0
        save_checkpoint(run_dir / BEST, weights_state(model, config, state, prepared.tokenizer))
    else:
        state.bad_validations += 1
    record = {
        "kind": "valid",
        "step": state.step,
        "epoch": state.epoch,
        **result,
        "best": improved,
        "valid_seconds": round(time.perf_counter() - started, 1),
    }
    metrics.write(record)
    display.log(record)


def validate_on_main(
    procs: Group,
    model: Transformer,
    prepared: Prepared,
    config: Config,
    state: TrainState,
    run_dir: Path,
    display: TrainDisplay,
    metrics: MetricsLog,
) -> None:
    """Rank 0 validates (and keeps best.pt); the others wait, then take its verdict (best score, patience)."""
    if procs.is_main:
        validate_and_track(model, prepared, config, procs.device, state, run_dir, display, metrics)
    vars(state).update(procs.broadcast(vars(state)))
