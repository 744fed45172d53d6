"""How wide each head is, without torch: reports and study tables ask this too, on paths that must
start fast. core.config checks the rules a config's sizes must satisfy (heads_divide); the sizes
themselves are the model's."""

from __future__ import annotations


def head_size(d_model: int, n_heads: int, d_head: int | None = None) -> int:
    """d_k = d_v of each head: model.d_head when set, else d_model / n_heads (the paper's rule, which
    core.config.heads_divide checks when a config loads). The one place that says how wide a head is:
    attention, reports, FLOP counts."""
    return d_head if d_head is not None else d_model // n_heads
