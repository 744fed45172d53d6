"""`mhatrain bench train`: target tokens/s of full training steps, and FLOP/s against the matmul peak.

Peers, all of the config's dimensions (configs/multi30k.yaml by default), same batches, same step:
  ours             mhatrain.model.transformer.build_model
  nn.Transformer   torch.nn.Transformer + our embeddings, positions, dropout placement, tied output
                   (bench.peers.TorchTransformerSeq2Seq; checked: with our weights, our logits)
  MarianMT         Hugging Face MarianMTModel of the same dimensions (ReLU, tied embeddings;
                   post-LN: Marian has no pre-LN option; same FLOPs, different function)
A step is what `mhatrain train` does per update, by the same function (mhatrain.training.step.optimizer_update):
forward under autocast, label-smoothed loss, backward, gradient clipping (train.clip_norm), Adam step.
A sample is `--batches` such steps on the same batches for every peer.
With `--against CHECKOUT` the peers are ours and that checkout's step (an A/B of two versions of
this code, see bench/against.py), checked to compute the same loss and gradients.
"""

from __future__ import annotations

import dataclasses

import torch

from ..core.config import Config, ModelConfig, TrainConfig
from ..core.distributed import Group
from ..core.errors import MhatrainError
from ..core.runtime import loss_scaler
from ..data.batches import Batch, bucket_length
from ..data.tokens import PAD
from ..model.flops import training_flops
from ..model.transformer import build_model, count_parameters
from ..training import step as update_step
from ..training.step import batch_loss
from . import against as other
from .inputs import bench_config, training_batches
from .measure import measure_peers
from .memory import Workload
from .options import BenchOptions
from .peers import MarianSeq2Seq, TorchTransformerSeq2Seq, require_transformers
from .report import OURS, BenchResult, Check, Target
from .timing import Step, Summary, matmul_peak

PEERS = (OURS, "nn.Transformer", "MarianMT")
LR = 1e-4  # a fixed learning rate: the schedule does not change the cost of a step
BATCHES = {False: 4, True: 2}  # batches per sample: full size, --quick
AGAINST_SPEEDUP = 1.4  # issue 14: a training step ≥ 1.4× the one of commit 062a073
PEAK_SIZE = {"cpu": (2048, 256), "cuda": (8192, 1024)}  # matmul n: full size, --quick


def peak_shares(achieved: float, peaks: dict[str, float], precision: str) -> dict[str, float]:
    """The achieved FLOP/s as shares of the in-run matmul peaks. The share of the bf16 peak is left out
    of an fp32 row where bf16 is the slower mode (a CPU without native bf16): a share above 100% of a
    slow path says nothing."""
    shares = {"fp32_peak_share": achieved / peaks["fp32"]}
    if precision == "bf16" or peaks["bf16"] >= peaks["fp32"]:
        shares["bf16_peak_share"] = achieved / peaks["bf16"]
    return shares


def build_seq2seq(peer: str, cfg: ModelConfig, vocab_size: int) -> torch.nn.Module:
    if peer == OURS:
        return build_model(cfg, vocab_size, PAD)
    if peer == "nn.Transformer":
        return TorchTransformerSeq2Seq(cfg, vocab_size)
    if peer == "MarianMT":
        return MarianSeq2Seq(cfg, vocab_size)
    raise ValueError(peer)


def train_step(
    peer: str,
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    vocab_size: int,
    batches: list[Batch],
    precision: str,
    device,
    seed: int,
    compile: bool = False,
    against: str | None = None,
) -> Step:
    """One sample: `mhatrain train`'s update (mhatrain.training.step.optimizer_update) on each batch in turn.

    against: a checkout whose model and update the peer that is not ours uses."""
    device = torch.device(device)
    torch.manual_seed(seed)
    t = dataclasses.replace(train_cfg, precision=precision)
    if against is None or peer == OURS:
        return _updates(update_step, build_seq2seq(peer, model_cfg, vocab_size), t, batches, device, compile)
    model = other.peer_model(against, model_cfg, vocab_size, PAD)
    if other.role_module(against, "step"):
        return _updates(other.import_role(against, "step"), model, t, batches, device, compile)
    return _legacy_updates(other.import_role(against, "train"), model, t, batches, device, compile)


def _updates(step_module, model: torch.nn.Module, t: TrainConfig, batches: list[Batch], device, compile: bool) -> Step:
    """A step that runs `step_module.optimizer_update` (the trainer's) once per batch, in one process."""
    model = model.to(device).train()
    optimizer = step_module.make_optimizer(model.parameters(), t, LR)  # the trainer's, for every peer
    scaler = loss_scaler(device, t.precision)
    if compile and hasattr(step_module, "compile_model"):  # as train.compile: length buckets, one graph each
        forward_model = step_module.compile_model(model)
        limit = getattr(getattr(model, "cfg", None), "max_positions", 1 << 30)
        batches = [b.padded_to(bucket_length(max(b.src.size(1), b.tgt_in.size(1)), limit)) for b in batches]
    else:
        forward_model = torch.compile(model) if compile else model
    shares = [[(batch.to(device), 1)] for batch in batches]  # on the device already, as a prefetched batch
    procs = Group(device)

    def step():
        results = [
            step_module.optimizer_update(forward_model, model, optimizer, scaler, share, t, LR, procs)
            for share in shares
        ]
        # The statistics read once per sample, as training reads them once per log line (a checkout from
        # before step.Update returns them read already)
        if hasattr(step_module, "read_updates"):
            results = step_module.read_updates(results)
        for stats in results:
            if "skipped" in stats:  # a skipped update is not the cost of a step
                raise MhatrainError(f"bench train: an update was skipped ({stats['skipped']})")

    return step


def _legacy_updates(
    train_module, model: torch.nn.Module, t: TrainConfig, batches: list[Batch], device, compile: bool
) -> Step:
    """For a checkout from before step.py (e.g. 062a073), whose update cannot be called on its own: the
    update rebuilt from its train module's autocast, loss and optimiser, as its `_update` runs them."""
    model = model.to(device).train()
    optimizer = train_module.make_optimizer(model.parameters(), t, LR)
    forward_model = torch.compile(model) if compile else model
    on_device = [(batch.to(device), batch.n_tgt_tokens) for batch in batches]
    clip = t.clip_norm if t.clip_norm > 0 else float("inf")

    def step():
        for batch, n_tokens in on_device:
            with train_module.autocast(device, t.precision):
                loss, _ = train_module.batch_loss(forward_model, batch, t.label_smoothing)
            (loss / n_tokens).backward()
            float(loss.detach())  # the loop reads the loss every update (logging, non-finite check)
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    return step


@torch.no_grad()
def check_torch_transformer(cfg: ModelConfig, vocab_size: int, batch: Batch, device, seed: int) -> Check:
    """nn.Transformer loaded with our weights gives our logits (fp32, eval, real target positions)."""
    torch.manual_seed(seed)
    ours = build_model(cfg, vocab_size, PAD).to(device).eval()
    peer = TorchTransformerSeq2Seq(cfg, vocab_size).to(device).eval().load_ours(ours)
    batch = batch.to(device)
    real = batch.tgt_out != PAD
    a, b = ours(batch.src, batch.tgt_in)[real], peer(batch.src, batch.tgt_in)[real]
    diff, scale = float((a - b).abs().max()), float(a.abs().max())
    tolerance = 1e-4 * max(1.0, scale)
    return Check(
        "nn.Transformer with our weights gives our logits (fp32)",
        diff <= tolerance,
        f"max |Δ| {diff:.1e}, tolerance {tolerance:.0e}",
    )


def check_against(
    cfg: ModelConfig,
    train_cfg: TrainConfig,
    vocab_size: int,
    batch: Batch,
    device,
    seed: int,
    against: str,
    name: str,
) -> Check:
    """The other checkout's model, loaded with our weights, gives our loss and gradients (fp32, no dropout)."""
    their_loss = other.import_role(against, "step" if other.role_module(against, "step") else "train").batch_loss
    torch.manual_seed(seed)
    ours = build_model(cfg, vocab_size, PAD).to(device).eval()
    theirs = other.peer_model(against, cfg, vocab_size, PAD).to(device).eval()
    theirs.load_state_dict(ours.state_dict())
    batch = batch.to(device)
    results = []
    for model, loss_of in ((ours, batch_loss), (theirs, their_loss)):
        loss, _ = loss_of(model, batch, train_cfg.label_smoothing)
        (loss / batch.n_tgt_tokens).backward()
        results.append((float(loss.detach()), {n: p.grad for n, p in model.named_parameters()}))
    (a, grads_a), (b, grads_b) = results
    loss_diff = abs(a - b) / max(1.0, abs(a))
    grad_diff = max(
        float((grads_a[n] - grads_b[n]).abs().max()) / max(1e-6, float(grads_a[n].abs().max())) for n in grads_a
    )
    # fp32 kernels that sum in another order (the loss's log-softmax, SDPA's causal mode) differ in
    # the last bits, and 12 layers of backward pass amplify that (docs/performance.md, "Design measurements").
    passed = loss_diff <= 1e-5 and grad_diff <= 1e-3
    return Check(
        f"{name} with our weights gives our loss and gradients (fp32)",
        passed,
        f"loss rel. |Δ| {loss_diff:.1e}, largest gradient |Δ| / max |g| {grad_diff:.1e}",
    )


PEAK_SECONDS = 0.5  # the longest one peak matmul may take: a CPU without native bf16 runs it far slower


def measure_peaks(device: torch.device, quick: bool) -> dict[str, float]:
    """Matmul peaks in fp32 and bf16. A dtype whose probe matmul is slow (bf16 emulated on a CPU without
    AVX-512 BF16 or AMX) is measured at a smaller n, so the bench does not stall on it."""
    n = PEAK_SIZE[device.type][1 if quick else 0]
    peaks: dict = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        size = n
        rate = matmul_peak(device, dtype, min(n, 256), repeats=1)
        while size > 256 and 2 * size**3 / rate > PEAK_SECONDS:
            size //= 2
        peaks[name] = matmul_peak(device, dtype, size)
        peaks[f"n_{name}"] = size
    return peaks


def run(options: BenchOptions, log) -> BenchResult:
    """Time every peer's training step on the same batches, in each precision, against the matmul peak."""
    against = str(options.against) if options.against is not None else None
    peers = (OURS, other.label(options.against)) if against is not None else PEERS
    if "MarianMT" in peers:
        require_transformers("bench train (its MarianMT peer)")
    config: Config = bench_config(options)
    precisions, left_out = options.chosen_precisions(("fp32", "bf16"), log)
    inputs = training_batches(options, config, options.batches or BATCHES[options.quick], log)
    tokens = sum(b.n_tgt_tokens for b in inputs.batches)
    flops = sum(training_flops(config.model, inputs.vocab_size, b.src, b.tgt_out, PAD) for b in inputs.batches)
    peaks = measure_peaks(options.device, options.quick)
    result = _new_result(options, config, inputs, precisions, tokens, flops, peaks)
    if left_out:
        result.notes.append(left_out)
    sizes = f"n={peaks['n_fp32']}" + ("" if peaks["n_bf16"] == peaks["n_fp32"] else f", bf16 n={peaks['n_bf16']}")
    log(
        f"bench train: matmul peak fp32 {peaks['fp32'] / 1e9:,.1f} GFLOP/s, bf16 {peaks['bf16'] / 1e9:,.1f} GFLOP/s "
        f"({sizes}); {flops / tokens / 1e6:.1f} MFLOP per target token"
    )
    _check_peers(result, options, config, inputs, against, peers)
    for precision in precisions:
        log(f"bench train: {precision}")
        _measure_case(result, options, config, inputs, precision, peers, against, tokens, flops, peaks)
    result.notes.append(
        "FLOP/s = model FLOPs of the sample's batches (see docs/performance.md) / median time; "
        "shares are of the matmul peak measured in this run"
    )
    return result


def _new_result(options: BenchOptions, config: Config, inputs, precisions, tokens: int, flops: int, peaks: dict):
    """The bench's result with its settings: the model, the batches, the peaks, how it was measured."""
    m = config.model
    repeats, warmup = options.repetitions("train")
    return BenchResult(
        "train",
        {
            "config": str(options.config),
            "quick": options.quick,
            "model": f"{m.n_encoder_layers}+{m.n_decoder_layers} layers, d_model {m.d_model}, d_ff {m.d_ff}, "
            f"{m.n_heads} heads, {m.norm}-LN, vocab {inputs.vocab_size}",
            "batches": f"{len(inputs.batches)} × ≤{config.train.max_tokens} tokens from {inputs.source}",
            "target_tokens_per_sample": tokens,
            "model_flops_per_target_token": round(flops / tokens),
            "peak_fp32_gflops": float(f"{peaks['fp32'] / 1e9:.4g}"),
            "peak_bf16_gflops": float(f"{peaks['bf16'] / 1e9:.4g}"),
            "peak_matmul_n": peaks["n_fp32"],
            "peak_matmul_n_bf16": peaks["n_bf16"],
            "precisions": list(precisions),
            "repeats": repeats,
            "warmup": warmup,
            "compile": options.compile,
            "device": str(options.device),
        },
        extra_columns=(
            ("gflops", "GFLOP/s", ",.1f"),
            ("bf16_peak_share", "% bf16 peak", ".1%"),
            ("fp32_peak_share", "% fp32 peak", ".1%"),
        ),
    )


def _check_peers(result: BenchResult, options: BenchOptions, config: Config, inputs, against, peers) -> None:
    """Before timing: the peers compute what ours computes (the other checkout, or nn.Transformer)."""
    vocab, batch = inputs.vocab_size, inputs.batches[0]
    if against is not None:
        result.settings["against"] = against
        result.checks.append(
            check_against(config.model, config.train, vocab, batch, options.device, options.seed, against, peers[1])
        )
    else:
        result.checks.append(check_torch_transformer(config.model, vocab, batch, options.device, options.seed))
        _describe_peers(result, config.model, vocab)


def _measure_case(
    result: BenchResult, options, config: Config, inputs, precision: str, peers, against, tokens, flops, peaks
) -> None:
    """One precision: every peer timed alternately, its FLOP/s and peak shares, and the case's targets."""
    workloads = {
        peer: Workload(
            __name__,
            "train_step",
            dict(
                peer=peer,
                model_cfg=config.model,
                train_cfg=config.train,
                vocab_size=inputs.vocab_size,
                batches=inputs.batches,
                precision=precision,
                device=str(options.device),
                seed=options.seed,
                against=against,
            ),
            imports=("transformers",) if peer == "MarianMT" else (),
        )
        for peer in peers
    }
    repeats, warmup = options.repetitions("train")
    measured = measure_peers(workloads, options, repeats, warmup)
    result.notes += [f"{precision} {problem}" for problem in measured.problems]
    metrics = {}
    for peer, peer_samples in measured.samples.items():
        achieved = flops / Summary.of(peer_samples).median
        metrics[peer] = {"gflops": achieved / 1e9, **peak_shares(achieved, peaks, precision)}
    result.add_case(precision, measured.samples, tokens, "tokens/s", measured.memory, measured.notes, metrics)
    if against is not None:
        result.targets.append(Target(precision, peers[1], "ratio", AGAINST_SPEEDUP, f"ours ≥ {AGAINST_SPEEDUP}×"))
    else:
        result.targets += [
            Target(precision, "nn.Transformer", "ratio", 1.3, "ours ≥ 1.3×"),
            Target(precision, "MarianMT", "ratio", 1.5, "ours ≥ 1.5×"),
        ]
    if precision == "bf16":
        result.targets.append(Target(precision, OURS, "bf16_peak_share", 0.45, "≥ 45% bf16 peak"))


def _describe_peers(result: BenchResult, cfg: ModelConfig, vocab: int) -> None:
    counts = {peer: count_parameters(build_seq2seq(peer, cfg, vocab)) for peer in PEERS}
    result.notes.append("trainable parameters: " + ", ".join(f"{p} {n:,}" for p, n in counts.items()))
    if cfg.norm == "pre":
        result.notes.append("MarianMT has no pre-LN option: it runs post-LN (same FLOPs)")
    largest, smallest = max(counts.values()), min(counts.values())
    result.checks.append(
        Check(
            "peers have our dimensions (trainable parameters within 1%)",
            largest <= 1.01 * smallest,
            f"{smallest:,}–{largest:,}",
        )
    )
