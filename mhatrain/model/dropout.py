"""Dropout with cheap random bits on the CPU; torch's fused kernel elsewhere.

On CPU, `F.dropout` draws one random number (32 random bits and a float conversion) per element,
which costs more than the rest of a dropout-heavy layer (measurements: docs/performance.md,
"Dropout"). Here each element gets one uniform random byte, cut from 64-bit random words: p is rounded to a multiple of
1/256 and the kept values are scaled by 1 / (1 - p_rounded), so the expectation is unchanged.
A p that rounds to 0 or to 1 (below 1/512, or from 511/512 on) would drop nothing or divide by zero,
so it goes to `F.dropout` with the exact p. The bits come from torch's default generator, so runs
stay reproducible from the seed. Under torch.compile it is `F.dropout` too (same expectation, exact p):
`random_()` cannot be traced and would break the graph at every dropout.
On a GPU `F.dropout` is one fused kernel (random bits, mask, scale), cheaper than any of this.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

LEVELS = 256  # one random byte per element


def byte_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    if not training or p == 0.0:
        return x
    if torch.compiler.is_compiling():
        return F.dropout(x, p, training)
    threshold = round(p * LEVELS)  # drop where the random byte < threshold
    if threshold in (0, LEVELS):  # p not representable in bytes: drop with the exact p
        return F.dropout(x, p, training=True)
    keep = 1.0 - threshold / LEVELS
    n = x.numel()
    # random_() fills int64 with values in [0, 2^63): the top byte has only 7 random bits, so
    # each word gives 7 uniform bytes.
    words = torch.empty((n + 6) // 7, dtype=torch.int64, device=x.device).random_()
    random_bytes = words.view(torch.uint8).view(-1, 8)[:, :7].reshape(-1)[:n].view(x.shape)
    # 0 or 1 / keep: one multiplication forward and one backward (x · mask · scale took two each).
    scaled_mask = (random_bytes >= threshold).to(x.dtype).mul_(1.0 / keep)
    return x * scaled_mask


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout: byte_dropout on the CPU, F.dropout on other devices."""
    if x.device.type == "cpu":
        return byte_dropout(x, p, training)
    return F.dropout(x, p, training)


class Dropout(nn.Module):
    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
