"""Learned head gates: one hard-concrete gate per head (Louizos, Welling & Kingma 2018, "Learning
Sparse Neural Networks through L0 Regularization"), as Voita et al. 2019 use them to prune heads.

    u ~ U(0, 1),   s = sigmoid((log u − log(1 − u) + log α) / β)      (training: a sample)
    s = sigmoid(log α)                                                  (evaluation: no noise)
    gate = min(1, max(0, s · (ζ − γ) + γ))                               the stretched, clipped sigmoid
    P(gate ≠ 0) = sigmoid(log α − β · log(−γ / ζ))                       the L0 penalty of one head

with β the temperature and (γ, ζ) the stretch (model.head_gates). Stretching past [0, 1] and clipping
back gives the gate mass at exactly 0 and exactly 1, so a head can be closed for good.

Evaluation uses Louizos et al.'s test-time gate, the clipped stretched sigmoid of log α without
noise, not a hard 0/1 threshold: it is the gate training converges to (a trained log α far from 0
gives exactly 0 or 1); it is exactly 0 whenever sigmoid(log α) ≤ −γ / (ζ − γ) (log α ≤ −2.4 with
the default stretch), so "closed" has one meaning for pruning, gate = 0; and an open head's gate,
even one in (0, 1), folds into W_O's columns, so a pruned model computes what the gated one does
(model/pruning.py). A threshold would change the outputs of a model whose gates have not settled.

Shape legend: H heads of the attention module.
"""

from __future__ import annotations

import math

import torch
from torch import nn

LOG_ALPHA = "gate.log_alpha"  # the name of a gate's parameter under its attention module (checkpoints, optimiser)
INITIAL_LOG_ALPHA = 3.0  # every gate starts open at evaluation (gate = 1 for log α ≥ ~2.4 with the default stretch)


class HardConcreteGate(nn.Module):
    """The gates of one attention module's heads: forward() → [H] multipliers on the heads' outputs,
    sampled in training (one draw per head and forward pass), deterministic in evaluation."""

    def __init__(self, n_heads: int, temperature: float, stretch: tuple[float, float]):
        super().__init__()
        self.log_alpha = nn.Parameter(torch.full((n_heads,), INITIAL_LOG_ALPHA))
        self.temperature = temperature
        self.low, self.high = stretch  # γ < 0, ζ > 1

    def forward(self) -> torch.Tensor:
        """[H]: a sample of the gates in training, the deterministic gate in evaluation."""
        return self.sample() if self.training else self.deterministic()

    def sample(self) -> torch.Tensor:
        """[H]: one draw of each head's gate (the noise from torch's random state, which a resume restores)."""
        u = torch.rand_like(self.log_alpha).clamp(1e-6, 1 - 1e-6)  # away from 0 and 1: finite logits
        return self._stretched(torch.sigmoid((torch.log(u) - torch.log1p(-u) + self.log_alpha) / self.temperature))

    def deterministic(self) -> torch.Tensor:
        """[H]: the evaluation gate, min(1, max(0, sigmoid(log α) · (ζ − γ) + γ))."""
        return self._stretched(torch.sigmoid(self.log_alpha))

    def _stretched(self, s: torch.Tensor) -> torch.Tensor:
        return (s * (self.high - self.low) + self.low).clamp(0.0, 1.0)

    def p_open(self) -> torch.Tensor:
        """[H]: P(gate ≠ 0) of each head in training, in closed form: the L0 penalty's terms."""
        return torch.sigmoid(self.log_alpha - self.temperature * math.log(-self.low / self.high))

    def extra_repr(self) -> str:
        return f"heads={self.log_alpha.numel()}, temperature={self.temperature}, stretch=({self.low}, {self.high})"
