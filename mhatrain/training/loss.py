"""Label-smoothed cross-entropy from logits, a block of rows at a time.

With z the logits of one target position, lse = log Σ_j exp z_j, log p = z - lse and g the gold token:

    NLL  = -log p_g
    loss = (1 - ε) · NLL + ε · mean_j(-log p_j)
    ∂loss/∂z_j = p_j - (1 - ε) · [j = g] - ε / V,      p = softmax(z)

So the forward pass needs only log p_g and the mean of each row's log p, and the backward pass
rebuilds p from the logits (one softmax kernel per block). No [N, V] fp32 log-probability tensor
is kept for the backward pass or read back: each block of rows is widened to fp32 while it is in
cache. The logits (bf16 under autocast) are what the backward pass keeps, half the memory of fp32
log-probabilities.

Blocks are sized from the vocabulary and a per-device budget of fp32 scratch: on the CPU a block
stays in cache (4 MiB), on a GPU it may take far more (each block costs a few kernel launches, and a
paper-size 37k vocabulary would otherwise be cut into hundreds of blocks per batch).
"""

from __future__ import annotations

import torch

BLOCK_BYTES = {"cpu": 4 << 20}  # fp32 scratch per block, per device type
DEFAULT_BLOCK_BYTES = 512 << 20  # devices not listed (CUDA): a memory budget, not a cache size


def smoothed_cross_entropy(
    logits: torch.Tensor, gold: torch.Tensor, smoothing: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [N, V], gold [N] → per-row smoothed loss [N] (differentiable) and NLL [N] (not), fp32."""
    return _SmoothedCrossEntropy.apply(logits, gold, smoothing)


def block_rows(n_cols: int, device: torch.device) -> int:
    """Rows per block: as many fp32 rows of `n_cols` as the device's scratch budget holds (at least one)."""
    budget = BLOCK_BYTES.get(torch.device(device).type, DEFAULT_BLOCK_BYTES)
    return max(1, budget // (4 * max(1, n_cols)))


def _blocks(n_rows: int, n_cols: int, device: torch.device):
    step = block_rows(n_cols, device)
    for start in range(0, n_rows, step):
        yield slice(start, min(start + step, n_rows))


class _SmoothedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, gold: torch.Tensor, smoothing: float):
        N, V = logits.shape
        nll = torch.empty(N, dtype=torch.float32, device=logits.device)
        mean = torch.empty(N, dtype=torch.float32, device=logits.device)  # mean_j log p_j
        for rows in _blocks(N, V, logits.device):
            log_p = torch.log_softmax(logits[rows].float(), dim=1)  # one kernel: max, sum, write
            nll[rows] = -log_p.gather(1, gold[rows, None]).squeeze(1)
            mean[rows] = log_p.mean(dim=1)
        loss = (1.0 - smoothing) * nll - smoothing * mean
        ctx.save_for_backward(logits, gold)
        ctx.smoothing = smoothing
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, _grad_nll):
        logits, gold = ctx.saved_tensors
        eps = ctx.smoothing
        N, V = logits.shape
        grad = torch.empty_like(logits)
        grad_loss = grad_loss.float()
        for rows in _blocks(N, V, logits.device):
            g = grad_loss[rows, None]  # [n, 1]
            p = torch.softmax(logits[rows].float(), dim=1)
            if eps:
                p.sub_(eps / V)
            p.mul_(g)
            p.scatter_add_(1, gold[rows, None], -(1.0 - eps) * g)
            grad[rows] = p
        return grad, None, None
