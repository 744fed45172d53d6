"""What a grid point costs before it trains: its head size d_k, its parameters and its training FLOPs per
target token, which change with d_model, model.d_head and the layer sizes; and the plan `ablate` shows
of a varied study (per cell and h, and the training compute left). Models are built on the meta device:
no memory, no weights.
"""

from __future__ import annotations

import copy

import torch

from ...core.config import Config, apply_override, config_from_dict
from ...core.errors import MhatrainError
from ...data.tokens import PAD
from ...model.flops import forward_macs
from ...model.sizes import head_size
from ...model.transformer import build_model, count_parameters
from .directory import Study
from .points import Cell, cell_name

COST_LENGTH = 20  # tokens per sentence (each side) at which FLOPs per target token are quoted


def point_cost(config: Config, vocab_size: int | None = None) -> dict:
    """d_k, parameters and training FLOPs per target token (6 × forward multiply-accumulates of a pair of
    COST_LENGTH-token sentences, over COST_LENGTH) of the model a config builds; vocab_size defaults to
    data.vocab_size (the trained tokenizer's may be a little smaller). The model is built on the meta
    device: no memory, no weights."""
    m = config.model
    vocab = vocab_size or config.data.vocab_size
    with torch.device("meta"):
        parameters = count_parameters(build_model(m, vocab, PAD))
    lengths = torch.tensor([COST_LENGTH])
    return {
        "d_head": head_size(m.d_model, m.n_heads, m.d_head),
        "parameters": parameters,
        "flops_per_token": 6 * forward_macs(m, vocab, lengths, lengths) // COST_LENGTH,
    }


def plan_lines(study: Study, config: Config) -> list[str]:
    """What `ablate` shows before training a varied study: the cells, and per cell and h the head size,
    parameters and FLOPs per token, the runs' states, and an upper bound of the training compute left."""
    heads = sorted({p.heads for p in study.points})
    seeds = list(dict.fromkeys(p.seed for p in study.points))
    cells = list(dict.fromkeys(p.cell for p in study.points))
    factors = " × ".join(f"{key} ∈ {{{', '.join(values)}}}" for key, values in study.factors.items())
    lines = [
        f"study {study.dir}: {len(cells)} cells ({factors}), each h ∈ {{{', '.join(map(str, heads))}}} × seeds "
        f"{{{', '.join(map(str, seeds))}}} = {len(study.points)} runs; training FLOPs per target token at "
        f"{COST_LENGTH}-token sentences"
    ]
    costs, left = {}, 0.0
    for cell in cells:
        lines.append(f"  {cell_name(cell)}:")
        for h in heads:
            cost = costs[cell, h] = point_cost(cell_config(config, cell, h))
            states = [study.state(p) for p in study.points if p.cell == cell and p.heads == h]
            shown = ", ".join(f"{states.count(s)} {s}" for s in dict.fromkeys(states))
            lines.append(
                f"    h={h:<3} d_k={cost['d_head']:<4} {cost['parameters']:>12,} parameters "
                f"{cost['flops_per_token'] / 1e6:>9,.1f} MFLOPs/token  {shown}"
            )
            tokens = config.train.max_steps * config.train.max_tokens * config.train.accum_steps
            left += tokens * cost["flops_per_token"] * sum(s in ("pending", "training") for s in states)
    cheapest = min(c["flops_per_token"] for c in costs.values())
    dearest = max(c["flops_per_token"] for c in costs.values())
    lines.append(f"  the dearest point costs {dearest / cheapest:.2f}× the cheapest per token")
    if config.train.max_steps:
        lines.append(
            f"  at most {_flops_text(left)} of training left (train.max_steps × train.max_tokens × "
            f"train.accum_steps target tokens per unfinished run; validation and evaluation not counted)"
        )
    return lines


def _flops_text(flops: float) -> str:
    for unit, scale in (("PFLOPs", 1e15), ("TFLOPs", 1e12), ("GFLOPs", 1e9)):
        if flops >= scale:
            return f"{flops / scale:,.1f} {unit}"
    return f"{flops:,.0f} FLOPs"


def cell_config(config: Config, cell: Cell, heads: int) -> Config:
    result = copy.deepcopy(config)
    for item in [*(f"{key}={value}" for key, value in cell), f"model.n_heads={heads}"]:
        apply_override(result, item)
    return result


def cell_flops(base_config: dict, cell: Cell, heads: int) -> int | None:
    """Training FLOPs per target token of the cell's model with h heads (None without base-config.yaml)."""
    if not base_config:
        return None
    try:
        config = cell_config(config_from_dict(base_config, "base-config.yaml", check_paths=False), cell, heads)
    except MhatrainError:
        return None
    return point_cost(config)["flops_per_token"]
