"""A gated model made smaller: the heads whose learned gates are closed are cut out of the weights.

Head i of an attention module owns rows i·Dh … (i+1)·Dh − 1 of W_Q, W_K and W_V (and of their
biases) and the same columns of W_O (see attention.py: the per-head projections are blocks of one
matrix). A pruned module keeps the blocks of its open heads, in their order, and W_O's columns of each
kept head are multiplied by the head's evaluation gate (1 for a settled gate), so the pruned model
computes what the gated model computes in evaluation, without gates: model.heads_per_layer records
each module's head count, and model.head_gates is dropped.

Shape legend: H heads before pruning · K heads kept · Dh head size · D d_model.
"""

from __future__ import annotations

import dataclasses

import torch

from ..core.config import HeadsPerLayer
from .attention import MultiHeadAttention
from .gates import LOG_ALPHA
from .transformer import KINDS, Transformer


def evaluation_gates(module: MultiHeadAttention) -> torch.Tensor:
    """[H] the gates the module's heads have in evaluation: its learned gates', or 1 for an ungated module."""
    if module.gate is None:
        return torch.ones(module.n_heads, device=module.w_o.weight.device)
    with torch.no_grad():
        return module.gate.deterministic()


def pruned_layout(model: Transformer) -> HeadsPerLayer:
    """The head count of each module once its closed heads (evaluation gate 0) are cut out."""
    return HeadsPerLayer(
        **{kind: [int((evaluation_gates(m) > 0).sum()) for m in model.attention_modules(kind)] for kind in KINDS}
    )


def prune(model: Transformer) -> Transformer:
    """A new model without the closed heads of `model` and without gates, computing what `model` does in
    evaluation (up to float rounding). `model` is left as it was."""
    cfg = dataclasses.replace(model.cfg, head_gates=None, heads_per_layer=pruned_layout(model))
    with torch.random.fork_rng(devices=[]):  # building initialises weights: leave the caller's random state alone
        pruned = Transformer(cfg, model.vocab_size, model.pad_id)
    pruned.load_state_dict(pruned_state(model))
    return pruned.to(model.embed.weight.device).train(model.training)


def pruned_state(model: Transformer) -> dict[str, torch.Tensor]:
    """model.state_dict() with each attention module's closed heads cut out and its gate folded into W_O."""
    state = dict(model.state_dict())
    names = {module: name for name, module in model.named_modules()}
    for kind in KINDS:
        for module in model.attention_modules(kind):
            prefix = names[module] + "."
            state.pop(prefix + LOG_ALPHA, None)
            state.update({prefix + k: v for k, v in _kept_heads(module).items()})
    return state


def _kept_heads(module: MultiHeadAttention) -> dict[str, torch.Tensor]:
    """The weights of one module's open heads: rows of W_Q, W_K, W_V, gated columns of W_O."""
    gates = evaluation_gates(module)  # [H]
    kept = (gates > 0).nonzero(as_tuple=True)[0]  # [K]
    H, Dh, D = module.n_heads, module.d_head, module.d_model
    out = {}
    with torch.no_grad():
        for name in ("w_q", "w_k", "w_v"):
            linear = getattr(module, name)
            out[f"{name}.weight"] = linear.weight.view(H, Dh, D)[kept].reshape(len(kept) * Dh, D).clone()
            if linear.bias is not None:
                out[f"{name}.bias"] = linear.bias.view(H, Dh)[kept].reshape(-1).clone()
        w_o = module.w_o.weight.view(D, H, Dh)[:, kept] * gates[kept].to(module.w_o.weight.dtype)[None, :, None]
        out["w_o.weight"] = w_o.reshape(D, len(kept) * Dh)  # [D, K·Dh]
    return out
