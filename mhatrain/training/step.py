"""One training update, written once: the paper's learning-rate schedule, the loss of a batch, the
optimiser, and `optimizer_update` (forward under autocast, loss, backward, clipping, Adam step, with
fp16's loss scale), which waits for nothing on the device (see `Update`). `mhatrain train` runs
`optimizer_update` for every update and `mhatrain bench train` times the same function: what the
bench measures is what training runs.

Under torchrun every process runs the update on its share of the update's batches (see
core/distributed.py); the gradient is the one that one process would compute from all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.config import HeadGatesConfig, TrainConfig
from ..core.distributed import Group
from ..core.errors import MhatrainError
from ..core.faults import fault_point
from ..core.runtime import autocast
from ..data.batches import Batch
from ..data.tokens import PAD
from ..model.gates import LOG_ALPHA
from ..model.transformer import Transformer
from .loss import smoothed_cross_entropy


def noam_lr(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """lrate = factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)  (paper eq. 3)."""
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def batch_loss(model: Transformer, batch: Batch, smoothing: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed label-smoothed cross-entropy and summed NLL over the batch's target tokens (PAD
    positions excluded), both fp32, as F.cross_entropy with label_smoothing computes them (see
    mhatrain.training.loss: one pass serves both, without an [N, V] fp32 log-probability tensor). PAD positions
    are zeroed rather than dropped: boolean indexing would wait for the device to count them."""
    logits = model(batch.src, batch.tgt_in)  # [B, T, V]
    gold = batch.tgt_out.reshape(-1)
    pad = gold == PAD
    per_token, nll = smoothed_cross_entropy(logits.view(-1, logits.size(-1)), gold, smoothing)
    return per_token.masked_fill(pad, 0.0).sum(), nll.masked_fill(pad, 0.0).sum()


def gate_penalty(model: torch.nn.Module) -> torch.Tensor | None:
    """The L0 penalty of the model's learned head gates (Transformer.gate_penalty); None for a model
    without them, a bench peer included. A model in DistributedDataParallel is asked through its module."""
    model = getattr(model, "module", model)
    penalty = getattr(model, "gate_penalty", None)
    return penalty() if penalty is not None else None


def compile_model(model: torch.nn.Module, backend: str = "inductor"):
    """torch.compile's version of `model` for batches padded to a few lengths (data.bucket_length;
    train.compile): static lengths, so one graph per length bucket, each specialised to its length,
    and the number of sentences marked dynamic, so that one graph serves every batch of a length."""
    compiled = torch.compile(model, backend=backend, dynamic=False)

    def forward(src: torch.Tensor, tgt_in: torch.Tensor, *args, **kwargs):
        torch._dynamo.maybe_mark_dynamic(src, 0)
        torch._dynamo.maybe_mark_dynamic(tgt_in, 0)
        return compiled(src, tgt_in, *args, **kwargs)

    return forward


def fused_adam_supported(parameters, device: torch.device) -> bool:
    """Whether torch's fused Adam kernel (one pass over all parameters) serves these parameters."""
    return torch.device(device).type in ("cpu", "cuda") and all(p.dtype.is_floating_point for p in parameters)


def parameter_groups(model: Transformer, gates: HeadGatesConfig | None) -> list:
    """What Adam updates: every parameter alike (one group, the paper's), except learned head gates'
    log α, which get a group of their own whose learning rate is model.head_gates.lr_scale times the
    schedule's (its `lr_scale` key; optimizer_update applies it)."""
    if gates is None:
        return list(model.parameters())
    named = list(model.named_parameters())
    weights = [p for name, p in named if not name.endswith("." + LOG_ALPHA)]
    log_alphas = [p for name, p in named if name.endswith("." + LOG_ALPHA)]
    return [{"params": weights}, {"params": log_alphas, "lr_scale": gates.lr_scale}]


def make_optimizer(parameters, t: TrainConfig, lr: float) -> torch.optim.Adam:
    """The paper's Adam: the fused kernel where this torch has one for the device and dtypes, else the
    multi-tensor (foreach) one; never the loop of small operations per tensor. With the fused kernel a
    skipped update is decided on the device (see optimizer_update). `parameters`: tensors, or Adam's
    parameter groups (parameter_groups)."""
    parameters = list(parameters)
    tensors = [p for group in parameters for p in group["params"]] if isinstance(parameters[0], dict) else parameters
    fused = fused_adam_supported(tensors, tensors[0].device)
    return torch.optim.Adam(
        parameters,
        lr=lr,
        betas=(t.adam_beta1, t.adam_beta2),
        eps=t.adam_eps,
        weight_decay=t.weight_decay,
        fused=fused,
        foreach=None if fused else True,
    )


# Verdicts of an update, decided on the device (see Update.verdict)
APPLIED, BAD_LOSS, BAD_GRADIENT, FP16_OVERFLOW = 0, 1, 2, 3


@dataclass
class Update:
    """One update's statistics: the host's own figures at once, the device's as 0-d tensors that the
    training loop reads only when it logs or decides something (read_updates: one read for many).

    verdict: APPLIED, or why the optimiser step was skipped on the device (BAD_LOSS, BAD_GRADIENT,
    FP16_OVERFLOW; with fp16, `scale` is the loss scale the update ran at). skipped: set at once
    (without a verdict) for an update the host had to give up (out of memory).
    """

    lr: float
    tokens: int = 0  # target tokens of the whole update
    padding: float = 0.0  # share of padding cells
    loss_sum: torch.Tensor | None = None
    nll_sum: torch.Tensor | None = None
    grad_norm: torch.Tensor | None = None
    verdict: torch.Tensor | None = None
    scale: torch.Tensor | None = None
    skipped: str = ""

    def read(self) -> dict:
        """The statistics as numbers (one wait for the device): see read_updates."""
        return read_updates([self])[0]


def read_updates(updates: list[Update]) -> list[dict]:
    """Each update's statistics as numbers, from one read of the device for all of them: {"loss", "nll",
    "lr", "grad_norm", "tokens", "padding"} for an applied update, {"skipped": why} for a skipped one
    (with "loss_scale_lowered" for an fp16 overflow whose scale was ≥ 1: the scaler's way of finding its
    scale, not a bad update)."""
    on_device = [u for u in updates if not u.skipped]
    values = []
    if on_device:
        fields = [
            torch.stack([u.loss_sum, u.nll_sum, u.grad_norm.float(), u.verdict.float(), _scale(u)]).double()
            for u in on_device
        ]
        values = iter(torch.stack(fields).cpu().tolist())
    out = []
    for u in updates:
        if u.skipped:
            out.append({"skipped": u.skipped})
            continue
        loss_sum, nll_sum, grad_norm, verdict, scale = next(values)
        if verdict == APPLIED:
            out.append(
                {
                    "loss": round(loss_sum / u.tokens, 4),
                    "nll": round(nll_sum / u.tokens, 4),
                    "lr": u.lr,
                    "grad_norm": round(grad_norm, 3),
                    "tokens": u.tokens,
                    "padding": u.padding,
                }
            )
        elif verdict == FP16_OVERFLOW:
            out.append({"skipped": f"fp16 gradient overflow at loss scale {scale:g}", "loss_scale_lowered": scale >= 1})
        else:
            out.append({"skipped": f"non-finite {'loss' if verdict == BAD_LOSS else 'gradient'}"})
    return out


def _scale(update: Update) -> torch.Tensor:
    return update.scale.float() if update.scale is not None else torch.ones((), device=update.loss_sum.device)


def optimizer_update(
    forward_model,
    ddp_model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    share: list[tuple[Batch, int]],
    t: TrainConfig,
    lr: float,
    procs: Group,
    sizes: tuple[int, int, int] | None = None,
) -> Update:
    """One optimiser update over this process's `share` of the update's batches: (batch, weight) pairs,
    weight 0 for a batch that only joins DDP's gradient exchange (see loop.collate_share).

    forward_model: what the forward pass calls (the compiled model with train.compile, else ddp_model);
    ddp_model: the model in DistributedDataParallel when launched, else the model itself (its
    parameters are clipped). The loss is averaged over the target tokens of the batches of all
    processes: the gradient is the one that a single process computes from all of them with
    accum_steps = their number. sizes: (target tokens, padding cells, cells) of the whole update when the
    caller knows them (data.batch_sizes); else the processes sum their shares' (a collective).

    Nothing here waits for the device: the token counts come from the host's batches, the loss, NLL
    and gradient norm stay on the device (see Update), and an update whose loss or gradient is not
    finite is skipped by the fused Adam kernel itself (its `found_inf` input: no parameter, moment or
    step count changes). Without a fused kernel for the device the host reads that one flag.
    """
    n_tokens, pad, cells = _update_sizes(share, procs, sizes)
    try:
        loss_sum, nll_sum = _accumulate_gradients(forward_model, ddp_model, scaler, share, t, procs, n_tokens)
    except torch.OutOfMemoryError:
        return _out_of_memory(optimizer, procs, n_tokens, lr)
    loss_sum, nll_sum = procs.sum_tensors(loss_sum, nll_sum)
    # After DDP's exchange every process holds the same gradients, so all of them decide alike.
    # fp16: the scale this update ran at (GradScaler's own tensor, copied without waiting for it)
    scale = scaler._get_scale_async().clone() if scaler.is_enabled() else None
    scaler.unscale_(optimizer)  # fp16: gradients back to their true size, before clipping
    grad_norm = torch.nn.utils.clip_grad_norm_(ddp_model.parameters(), t.clip_norm if t.clip_norm > 0 else float("inf"))
    loss_ok = torch.isfinite(loss_sum)
    verdict = torch.where(
        loss_ok,
        torch.where(torch.isfinite(grad_norm), APPLIED, FP16_OVERFLOW if scaler.is_enabled() else BAD_GRADIENT),
        BAD_LOSS,
    )
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr * param_group.get("lr_scale", 1.0)
    fault_point("update")
    _step_unless(optimizer, verdict != APPLIED)
    if scale is not None:
        _update_loss_scale(scaler, scale, loss_ok)
    optimizer.zero_grad(set_to_none=True)
    return Update(lr, n_tokens, round(pad / cells, 3), loss_sum, nll_sum, grad_norm.detach(), verdict, scale)


def _update_sizes(
    share: list[tuple[Batch, int]], procs: Group, sizes: tuple[int, int, int] | None
) -> tuple[int, int, int]:
    """(target tokens, padding cells, cells) of the whole update: `sizes` when the caller knows them,
    else summed over every process's share (a collective)."""
    if sizes is None:
        mine = [(w * b.n_tgt_tokens, *(w * n for n in b.padding_cells)) for b, w in share]
        sizes = procs.sum(*map(sum, zip(*mine)))
    n_tokens, pad, cells = (int(n) for n in sizes)
    return n_tokens, pad, cells


def _accumulate_gradients(
    forward_model,
    ddp_model: torch.nn.Module,
    scaler: torch.amp.GradScaler,
    share: list[tuple[Batch, int]],
    t: TrainConfig,
    procs: Group,
    n_tokens: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward and backward of each batch of the share, the gradients summed (DDP exchanges them after
    the last); returns this process's weighted loss and NLL sums, on the device. The objective is the
    loss per target token of the whole update, plus the L0 penalty of learned head gates if the model
    has them (added once, with the last batch; the logged loss leaves it out)."""
    device = procs.device
    loss_sum = nll_sum = torch.zeros((), dtype=torch.float32, device=device)
    penalty = gate_penalty(ddp_model)
    for k, (batch, weight) in enumerate(share):
        batch = batch.to(device, non_blocking=True)  # from pinned memory on CUDA: overlaps the step
        final = k == len(share) - 1
        with procs.accumulating(ddp_model, final=final):
            with autocast(device, t.precision):
                loss, nll = batch_loss(forward_model, batch, t.label_smoothing)
            # DDP averages the gradients of the processes: × world turns the average into the sum.
            objective = loss * (weight * procs.world) / n_tokens
            if final and penalty is not None:  # every process adds the same term, and DDP averages it
                objective = objective + penalty
            scaler.scale(objective).backward()  # fp16: × the loss scale
        loss_sum = loss_sum + weight * loss.detach()
        nll_sum = nll_sum + weight * nll
    return loss_sum, nll_sum


def _out_of_memory(optimizer: torch.optim.Optimizer, procs: Group, n_tokens: int, lr: float) -> Update:
    """After running out of memory in forward/backward: drop the partial gradients and skip the update;
    with several processes, stop (the others already wait for this one's gradients)."""
    optimizer.zero_grad(set_to_none=True)
    if procs.device.type == "cuda":
        torch.cuda.empty_cache()
    if procs.launched:  # the other processes already wait for this one's gradients: no way to skip
        raise MhatrainError(
            f"out of memory on rank {procs.rank} in an update of {n_tokens} target tokens; with "
            f"several processes an update cannot be skipped: lower train.max_tokens"
        ) from None
    return Update(lr, skipped=f"out of memory on a batch of {n_tokens} target tokens")


def _update_loss_scale(scaler: torch.amp.GradScaler, scale: torch.Tensor, loss_ok: torch.Tensor) -> None:
    """fp16: halve the scale after an overflow (found by unscale_), grow it after 2000 good updates; a
    non-finite loss is no overflow, so then the scale stays `scale` (all on the device)."""
    scaler.update()
    current = scaler._get_scale_async()
    current.copy_(torch.where(loss_ok, current, scale))


def _step_unless(optimizer: torch.optim.Optimizer, skip: torch.Tensor) -> None:
    """optimizer.step(), skipped where `skip` (a 0-d bool tensor) holds: on the device for fused Adam
    (found_inf, as GradScaler passes it), else by reading the flag."""
    if optimizer.defaults.get("fused"):
        optimizer.found_inf = skip.float()
        try:
            optimizer.step()
        finally:
            del optimizer.found_inf
    elif not bool(skip):
        optimizer.step()
