"""Label-smoothed cross-entropy from logits, a block of rows at a time.

With z the logits of one target position, lse = log Σ_j exp z_j and g the gold token:

    NLL  = lse - z_g
    loss = (1 - ε) · NLL + ε · mean_j(-log p_j) = lse - (1 - ε) · z_g - ε · mean_j z_j
    ∂loss/∂z_j = p_j - (1 - ε) · [j = g] - ε / V,      p = softmax(z)

So the forward pass needs only lse and the mean of each row, and the backward pass rebuilds p
from the logits and lse. No [N, V] fp32 log-probability tensor is written, kept for the backward
pass or read back: each block of rows is widened to fp32 while it is in cache. The logits
(bf16 under autocast) are what the backward pass keeps, half the memory of fp32 log-probabilities.
"""

from __future__ import annotations

import torch

BLOCK_ELEMENTS = 1 << 20  # fp32 scratch per block: 4 MiB


def smoothed_cross_entropy(logits: torch.Tensor, gold: torch.Tensor,
                           smoothing: float) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [N, V], gold [N] → per-row smoothed loss [N] (differentiable) and NLL [N] (not), fp32."""
    return _SmoothedCrossEntropy.apply(logits, gold, smoothing)


def _blocks(n_rows: int, n_cols: int):
    step = max(1, BLOCK_ELEMENTS // max(1, n_cols))
    for start in range(0, n_rows, step):
        yield slice(start, min(start + step, n_rows))


class _SmoothedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, gold: torch.Tensor, smoothing: float):
        N, V = logits.shape
        lse = torch.empty(N, dtype=torch.float32, device=logits.device)
        mean = torch.empty(N, dtype=torch.float32, device=logits.device)
        for rows in _blocks(N, V):
            z = logits[rows].float()
            lse[rows] = torch.logsumexp(z, dim=1)
            mean[rows] = z.mean(dim=1)
        nll = lse - logits.gather(1, gold[:, None]).squeeze(1).float()
        loss = (1.0 - smoothing) * nll + smoothing * (lse - mean)
        ctx.save_for_backward(logits, gold, lse)
        ctx.smoothing = smoothing
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, _grad_nll):
        logits, gold, lse = ctx.saved_tensors
        eps = ctx.smoothing
        N, V = logits.shape
        grad = torch.empty_like(logits)
        grad_loss = grad_loss.float()
        for rows in _blocks(N, V):
            g = grad_loss[rows, None]  # [n, 1]
            p = torch.exp(logits[rows].float() - lse[rows, None])  # softmax of the block's rows
            p.mul_(g)
            if eps:
                p.sub_(g * (eps / V))
            p.scatter_add_(1, gold[rows, None], -(1.0 - eps) * g)
            grad[rows] = p
        return grad, None, None
