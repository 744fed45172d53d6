"""`mhatrain bench attention`: forward + backward of one self-attention layer with a padding mask.

Peers, all holding the same weights (checked: same output as ours before timing):
  ours                    mhatrain.model.attention.MultiHeadAttention (all heads in one batched op)
  nn.MultiheadAttention   torch's module, batch_first, packed Q/K/V in-projection
  article loop            the explainer article's per-head loop, repaired (bench.peers)
Input: a Multi30k-like batch of 128 sentences × 32 positions (lengths 10–32, the rest padding,
~2,700 real tokens), d_model from the config; a sample is one forward and backward pass
(gradients for the input and the weights). Throughput counts real (non-padding) tokens.
"""

from __future__ import annotations

import torch

from ..core.runtime import autocast
from ..model.attention import MultiHeadAttention
from .measure import measure_peers
from .memory import Workload
from .options import QUICK_D_MODEL, BenchOptions, check_heads
from .peers import ArticleMultiHeadAttention, torch_mha_from
from .report import OURS, BenchResult, Check, Target
from .timing import Step

PEERS = (OURS, "nn.MultiheadAttention", "article loop")
FULL_SHAPE = {"batch": 128, "length": 32, "min_length": 10}
QUICK_SHAPE = {"batch": 8, "length": 12, "min_length": 4}


def make_inputs(
    batch: int, length: int, min_length: int, d_model: int, seed: int, device
) -> tuple[torch.Tensor, torch.Tensor]:
    """x: [B, T, D] ~ N(0, 1); valid: [B, T], True at real tokens (lengths uniform in [min, T], one of T)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_length, length + 1, (batch,), generator=g)
    lengths[0] = length
    valid = torch.arange(length)[None, :] < lengths[:, None]
    x = torch.randn(batch, length, d_model, generator=g)
    return x.to(device), valid.to(device)


def attention_forward(peer: str, d_model: int, n_heads: int, seed: int, device, compile: bool = False):
    """(module, forward(x, valid) -> [B, T, D]) for one peer, with the weights of ours from `seed`."""
    torch.manual_seed(seed)
    ours = MultiHeadAttention(d_model, n_heads)
    if peer == OURS:
        module = ours
        call = lambda m, x, valid: m(x, x, valid[:, None, None, :])[0]  # noqa: E731
    elif peer == "nn.MultiheadAttention":
        module = torch_mha_from(ours)
        call = lambda m, x, valid: m(x, x, x, key_padding_mask=~valid, need_weights=False)[0]  # noqa: E731
    elif peer == "article loop":
        module = ArticleMultiHeadAttention(d_model, n_heads).load_from(ours)
        call = lambda m, x, valid: m(x, x, x, valid[:, None, :])  # noqa: E731
    else:
        raise ValueError(peer)
    module.to(device).train()
    run = torch.compile(module) if compile else module
    return module, lambda x, valid: call(run, x, valid)


def attention_step(
    peer: str, d_model: int, n_heads: int, shape: dict, precision: str, device, seed: int, compile: bool = False
) -> Step:
    """One sample: forward under `precision`, then backward of the output's sum."""
    device = torch.device(device)
    module, forward = attention_forward(peer, d_model, n_heads, seed, device, compile)
    x, valid = make_inputs(**shape, d_model=d_model, seed=seed + 1, device=device)
    x.requires_grad_(True)

    def step():
        module.zero_grad(set_to_none=True)
        x.grad = None
        with autocast(device, precision):
            out = forward(x, valid)
        out.sum().backward()

    return step


@torch.no_grad()
def check_same_output(d_model: int, n_heads: int, shape: dict, precision: str, device, seed: int) -> Check:
    """Every peer with our weights gives our output (fp32: 1e-4; bf16: 5% of the output's scale)."""
    x, valid = make_inputs(**shape, d_model=d_model, seed=seed + 1, device=device)
    outputs = {}
    for peer in PEERS:
        _, forward = attention_forward(peer, d_model, n_heads, seed, device)
        with autocast(device, precision):
            outputs[peer] = forward(x, valid).float()
    scale = float(outputs[OURS].abs().max())
    tolerance = 1e-4 * max(1.0, scale) if precision == "fp32" else 5e-2 * max(1.0, scale)
    diffs = {peer: float((out - outputs[OURS]).abs().max()) for peer, out in outputs.items() if peer != OURS}
    detail = ", ".join(f"{peer} max |Δ| {d:.1e}" for peer, d in diffs.items()) + f" (tolerance {tolerance:.0e})"
    return Check(
        f"h={n_heads} {precision}: peers with our weights give our output",
        all(d <= tolerance for d in diffs.values()),
        detail,
    )


def run(options: BenchOptions, log) -> BenchResult:
    config = options.load_config()
    d_model = QUICK_D_MODEL if options.quick else config.model.d_model
    check_heads(options.heads, d_model)
    shape = QUICK_SHAPE if options.quick else FULL_SHAPE
    precisions, left_out = options.chosen_precisions(("fp32", "bf16"), log)
    repeats, warmup = options.repetitions("attention")
    device = options.device
    _, valid = make_inputs(**shape, d_model=d_model, seed=options.seed + 1, device="cpu")
    tokens = int(valid.sum())
    result = BenchResult(
        "attention",
        {
            "d_model": d_model,
            "batch": f"{shape['batch']} × {shape['length']} (lengths {shape['min_length']}–{shape['length']})",
            "real_tokens": tokens,
            "heads": list(options.heads),
            "precisions": list(precisions),
            "repeats": repeats,
            "warmup": warmup,
            "compile": options.compile,
            "device": str(device),
        },
    )
    if left_out:
        result.notes.append(left_out)
    for precision in precisions:
        for h in options.heads:
            case = f"h={h} {precision}"
            log(f"bench attention: {case}")
            result.checks.append(check_same_output(d_model, h, shape, precision, device, options.seed))
            workloads = {
                peer: Workload(
                    __name__,
                    "attention_step",
                    dict(
                        peer=peer,
                        d_model=d_model,
                        n_heads=h,
                        shape=shape,
                        precision=precision,
                        device=str(device),
                        seed=options.seed,
                    ),
                )
                for peer in PEERS
            }
            measured = measure_peers(workloads, options, repeats, warmup)
            result.notes += [f"{case} {problem}" for problem in measured.problems]
            result.add_case(case, measured.samples, tokens, "tokens/s", measured.memory, measured.notes)
            # issue 14: at least nn.MultiheadAttention's speed at every h (the article loop is shown, not a target)
            result.targets.append(Target(case, "nn.MultiheadAttention", "ratio", 1.0, "ours ≥ 1.0×"))
    result.notes.append(
        "a sample is forward + backward (input and weight gradients) of one self-attention "
        "layer with a key padding mask; ratio = peer median / our median"
    )
    return result
