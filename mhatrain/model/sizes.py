"""How wide each head is and how many heads each attention module has, without torch: reports and
study tables ask this too, on paths that must start fast. core.config checks the rules a config's
sizes must satisfy (heads_divide, one count per layer); the sizes themselves are the model's."""

from __future__ import annotations

from ..core.config import ModelConfig


def head_size(d_model: int, n_heads: int, d_head: int | None = None) -> int:
    """d_k = d_v of each head: model.d_head when set, else d_model / n_heads (the paper's rule, which
    core.config.heads_divide checks when a config loads). The one place that says how wide a head is:
    attention, reports, FLOP counts."""
    return d_head if d_head is not None else d_model // n_heads


def heads_in(cfg: ModelConfig, kind: str, layer: int) -> int:
    """The heads of the attention module of `kind` (enc_self, dec_self, cross) in layer `layer` (from 0):
    model.heads_per_layer's count when it gives one, else model.n_heads."""
    counts = getattr(cfg.heads_per_layer, kind) if cfg.heads_per_layer is not None else []
    return counts[layer] if counts else cfg.n_heads


def model_head_size(cfg: ModelConfig) -> int:
    """d_k = d_v of every head of the model, whatever each layer's head count: n_heads' head size."""
    return head_size(cfg.d_model, cfg.n_heads, cfg.d_head)
