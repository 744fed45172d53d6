"""One training update, written once: the paper's learning-rate schedule, the loss of a batch, the
optimiser, and `optimizer_update` (forward under autocast, loss, backward, clipping, Adam step, with
fp16's loss scale). `mhatrain train` runs `optimizer_update` for every update and `mhatrain bench
train` times the same function: what the bench measures is what training runs.

Under torchrun every process runs the update on its share of the update's batches (see
distributed.py); the gradient is the one that one process would compute from all of them.
"""

from __future__ import annotations

import math

import torch

from .config import TrainConfig
from .data import Batch
from .distributed import Group
from .errors import MhatrainError
from .faults import fault_point
from .loss import smoothed_cross_entropy
from .model import Transformer
from .runtime import autocast
from .tokens import PAD


def noam_lr(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """lrate = factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)  (paper eq. 3)."""
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def batch_loss(model: Transformer, batch: Batch, smoothing: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed label-smoothed cross-entropy and summed NLL over the batch's target tokens (PAD
    positions excluded), both fp32, as F.cross_entropy with label_smoothing computes them (see
    mhatrain.loss: one pass serves both, without an [N, V] fp32 log-softmax)."""
    logits = model(batch.src, batch.tgt_in)  # [B, T, V]
    gold = batch.tgt_out.reshape(-1)
    real = gold != PAD
    per_token, nll = smoothed_cross_entropy(logits.view(-1, logits.size(-1)), gold, smoothing)
    return per_token[real].sum(), nll[real].sum()


def make_optimizer(parameters, t: TrainConfig, lr: float) -> torch.optim.Adam:
    """The paper's Adam; the fused kernel where this torch has one for the device (one pass over all
    parameters instead of a loop of small operations per tensor)."""
    parameters = list(parameters)
    device = parameters[0].device.type
    fused = device in ("cpu", "cuda") and all(p.dtype.is_floating_point for p in parameters)
    return torch.optim.Adam(
        parameters, lr=lr, betas=(t.adam_beta1, t.adam_beta2), eps=t.adam_eps, weight_decay=t.weight_decay, fused=fused
    )


def optimizer_update(
    forward_model,
    ddp_model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    share: list[tuple[Batch, int]],
    t: TrainConfig,
    lr: float,
    procs: Group,
) -> dict:
    """One optimiser update over this process's `share` of the update's batches: (batch, weight) pairs,
    weight 0 for a batch that only joins DDP's gradient exchange (see train.collate_share).

    forward_model: what the forward pass calls (the compiled model with train.compile, else ddp_model);
    ddp_model: the model in DistributedDataParallel when launched, else the model itself (its
    parameters are clipped). The loss is averaged over the target tokens of the batches of all
    processes: the gradient is the one that a single process computes from all of them with
    accum_steps = their number. Returns the update's statistics, or {"skipped": why} for an update
    that changed nothing (out of memory, a non-finite loss or gradient).
    """
    device = procs.device
    sizes = [(w * b.n_tgt_tokens, *(w * n for n in b.padding_cells)) for b, w in share]
    n_tokens, pad, cells = (int(n) for n in procs.sum(*map(sum, zip(*sizes))))  # of the whole update
    loss_sum = nll_sum = 0.0
    try:
        for k, (batch, weight) in enumerate(share):
            batch = batch.to(device, non_blocking=True)  # from pinned memory on CUDA: overlaps the step
            with procs.accumulating(ddp_model, final=k == len(share) - 1):
                with autocast(device, t.precision):
                    loss, nll = batch_loss(forward_model, batch, t.label_smoothing)
                # DDP averages the gradients of the processes: × world turns the average into the sum.
                scaler.scale(loss * (weight * procs.world) / n_tokens).backward()  # fp16: × the loss scale
            loss_sum += weight * float(loss.detach())
            nll_sum += weight * float(nll)
    except torch.OutOfMemoryError:
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        if procs.launched:  # the other processes already wait for this one's gradients: no way to skip
            raise MhatrainError(
                f"out of memory on rank {procs.rank} in an update of {n_tokens} target tokens; with "
                f"several processes an update cannot be skipped: lower train.max_tokens"
            ) from None
        return {"skipped": f"out of memory on a batch of {n_tokens} target tokens"}
    loss_sum, nll_sum = procs.sum(loss_sum, nll_sum)
    # After DDP's exchange every process holds the same gradients, so all of them decide alike.
    scaler.unscale_(optimizer)  # fp16: gradients back to their true size, before clipping
    grad_norm = torch.nn.utils.clip_grad_norm_(ddp_model.parameters(), t.clip_norm if t.clip_norm > 0 else float("inf"))
    if not (math.isfinite(loss_sum) and torch.isfinite(grad_norm)):
        optimizer.zero_grad(set_to_none=True)
        if scaler.is_enabled() and math.isfinite(loss_sum):
            # fp16 overflow of the scaled gradients: the scaler's normal way of finding its scale, not a
            # bad update, unless the scale has already fallen below 1 (then the gradients are not finite)
            scale = scaler.get_scale()
            scaler.update()  # halves the scale
            return {"skipped": f"fp16 gradient overflow at loss scale {scale:g}", "loss_scale_lowered": scale >= 1}
        return {"skipped": f"non-finite {'loss' if not math.isfinite(loss_sum) else 'gradient'}"}
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr
    fault_point("update")
    scaler.step(optimizer)  # = optimizer.step() (the gradients are finite, checked above)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return {
        "loss": round(loss_sum / n_tokens, 4),
        "nll": round(nll_sum / n_tokens, 4),
        "lr": lr,
        "grad_norm": round(float(grad_norm), 3),
        "tokens": n_tokens,
        "padding": round(pad / cells, 3),
    }
