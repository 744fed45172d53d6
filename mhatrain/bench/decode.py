"""`mhatrain bench decode`: sentences/s translating the test set, greedy and beam 4.

Peers, same source batches (length-sorted, decode.batch_tokens, as `translate_ids` makes them):
  ours             mhatrain.inference.search.beam_search with the decoder cache
  ours, no cache   the same search recomputing the whole prefix each step (use_cache=False)
  HF generate      Hugging Face `generate()` of a MarianMTModel of the same dimensions and beam
Fair lengths: every peer runs the same number of decoder steps per batch. With random weights
(the default) no peer can pick EOS (its output row is zero, so its logit 0 is never near the top
among thousands of random logits): ours stops at a fixed limit of L tokens + EOS
(decode.max_len_a = 0, max_len_b = L), generate() at max_new_tokens = L + 1 with EOS forced last
(forced_eos_token_id), so neither pays for a per-step length rule. With --checkpoint ours
translates with the trained run's weights and decode settings, and generate() is forced to the
longest translation ours produced in each batch (min_new_tokens, a per-step logits processor).
Checked before timing (fp32, first batch): cached and uncached search give identical output;
the peers generate the same number of tokens per sentence.

With `--against CHECKOUT` the peers are ours and that checkout's search with its own model code
loaded with our weights (an A/B of two versions of this code, see bench/against.py), checked to
give the same translations on every batch.
"""

from __future__ import annotations

import dataclasses

import torch

from ..core.config import Config, DecodeConfig, ModelConfig
from ..core.runtime import autocast
from ..data.batches import batch_indices
from ..data.tokens import EOS, PAD
from ..inference.search import batch_source_tokens, beam_search
from ..inference.trained import load_run
from ..model.transformer import build_model
from . import against as other
from .inputs import bench_config, data_dir, load_tokenizer, pad_sources, test_sources
from .measure import measure_peers
from .memory import Workload
from .options import BenchOptions
from .peers import marian_model, require_transformers
from .report import OURS, BenchResult, Check, Target
from .timing import Step

UNCACHED = "ours, no cache"
PEERS = (OURS, UNCACHED, "HF generate")
GEN_LEN = {False: 20, True: 6}  # L, tokens before EOS with random weights: full size, --quick
QUICK_SENTENCES = 12


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """Ours: random weights of `model_cfg` (seeded), or a trained run's checkpoint."""

    model_cfg: ModelConfig
    vocab_size: int
    run_dir: str | None = None
    overrides: tuple[str, ...] = ()  # --set values for the run's config (decode settings, device)


def our_model(source: ModelSource, device, seed: int) -> torch.nn.Module:
    if source.run_dir is not None:
        return load_run(source.run_dir, overrides=source.overrides).model.to(device).eval()
    torch.manual_seed(seed)
    model = build_model(source.model_cfg, source.vocab_size).to(device).eval()
    _never_end(model.output)
    return model


def their_search(source: ModelSource, device, seed: int, against: str):
    """The other checkout's model, loaded with our model's weights, and its beam_search."""
    model = other.import_role(against, "model").build_model(source.model_cfg, source.vocab_size)
    model.load_state_dict(our_model(source, device, seed).state_dict())
    return model.to(device).eval(), other.import_role(against, "search").beam_search


def _never_end(output: torch.nn.Linear) -> None:
    """Zero EOS's output row (random weights): every sentence runs to the length limit."""
    with torch.no_grad():
        output.weight[EOS].zero_()
        if output.bias is not None:
            output.bias[EOS] = 0.0


def decode_step(
    peer: str,
    source: ModelSource,
    batches: list[torch.Tensor],
    forced: list[int],
    beam: int,
    decode_cfg: DecodeConfig,
    precision: str,
    device,
    seed: int,
    compile: bool = False,
    against: str | None = None,
) -> Step:
    """One sample: decode every batch; the step returns each batch's output (hyps or generate's ids).

    against: a checkout whose model code and search the peer that is not ours uses."""
    device = torch.device(device)
    batches = [src.to(device) for src in batches]
    if peer == "HF generate":
        require_transformers("the HF generate peer")
        torch.manual_seed(seed)
        model = marian_model(source.model_cfg, source.vocab_size).to(device).eval()
        random_weights = source.run_dir is None
        if random_weights:
            _never_end(model.get_output_embeddings())
        if compile:
            model.forward = torch.compile(model.forward, dynamic=True)
        search = {"num_beams": beam, "length_penalty": decode_cfg.alpha} if beam > 1 else {"num_beams": 1}

        def step():
            with autocast(device, precision):
                return [
                    model.generate(
                        input_ids=src,
                        attention_mask=src != PAD,
                        do_sample=False,
                        max_new_tokens=n + 1,
                        **({} if random_weights else {"min_new_tokens": n}),
                        **search,
                    )
                    for src, n in zip(batches, forced)
                ]

        return step

    if against is not None and peer != OURS:
        model, search = their_search(source, device, seed, against)
    else:
        model, search = our_model(source, device, seed), beam_search
    if compile:
        model.encode = torch.compile(model.encode, dynamic=True)
        model.decode = torch.compile(model.decode, dynamic=True)
    use_cache = peer != UNCACHED

    def step():
        with autocast(device, precision):
            return [search(model, src, decode_cfg, beam, use_cache=use_cache) for src in batches]

    return step


def generated_tokens(peer: str, output) -> list[int]:
    """Tokens generated per sentence, EOS included."""
    if peer == "HF generate":
        return (output[:, 1:] != PAD).sum(1).tolist()  # column 0 is the decoder start token
    return [len(hyp) + 1 for hyp in output]


def run(options: BenchOptions, log) -> BenchResult:
    """Time every peer's search on the same sentences, for each beam size and precision."""
    against = str(options.against) if options.against is not None else None
    if against is None:
        require_transformers("bench decode (its HF generate peer)")
    peers = (OURS, other.label(options.against)) if against is not None else PEERS
    config, source, sources, where = _inputs(options, log)
    precisions, left_out = options.chosen_precisions((config.train.precision,), log)
    length = GEN_LEN[options.quick]
    if source.run_dir is None:  # random weights: every sentence is decoded to a fixed length
        decode_cfg = dataclasses.replace(config.decode, max_len_a=0.0, max_len_b=length)
    else:
        decode_cfg = config.decode
    result = _new_result(options, config, source, f"{len(sources)} from {where}", precisions, length, against)
    if left_out:
        result.notes.append(left_out)
    for beam in options.beams:
        # the batches decode.translate_ids makes: length-sorted, within its budget of source tokens
        order = batch_indices([len(s) + 1 for s in sources], batch_source_tokens(decode_cfg, beam))
        batches = [pad_sources([sources[i] for i in indices]) for indices in order]
        if against is not None:
            forced = [length] * len(batches)  # no generate() peer to force
            check, per_sentence = _check_against(
                source, batches, beam, decode_cfg, options.device, options.seed, against, peers[1]
            )
        else:
            forced = _forced_lengths(source, batches, beam, decode_cfg, length, options.device, options.seed)
            check, per_sentence = _check(source, batches[0], forced[0], beam, decode_cfg, options.device, options.seed)
        result.checks += check
        for precision in precisions:
            case = f"{'greedy' if beam == 1 else f'beam {beam}'} {precision}"
            log(f"bench decode: {case}")
            measured = _measure_case(options, source, batches, forced, beam, decode_cfg, precision, peers, against)
            result.notes += [f"{case} {problem}" for problem in measured.problems]
            metrics = {peer: {"tokens_per_sentence": per_sentence[peer]} for peer in peers}
            result.add_case(
                case, measured.samples, len(sources), "sentences/s", measured.memory, measured.notes, metrics
            )
            if beam == 4 and against is None:
                result.targets += [
                    Target(case, UNCACHED, "ratio", 3.0, "ours ≥ 3×"),
                    Target(case, "HF generate", "ratio", 1.5, "ours ≥ 1.5×"),
                ]
            elif beam == 1 and against is None:  # issue 14
                result.targets.append(Target(case, "HF generate", "ratio", 1.3, "ours ≥ 1.3×"))
    result.notes.append("peak memory: decoding the batch with the most source cells; tokens/sent. from the first batch")
    return result


def _new_result(
    options: BenchOptions, config: Config, source: ModelSource, sentences: str, precisions, length, against
):
    """The bench's result with its settings: the model, its weights, the sentences, how it was measured."""
    m = config.model
    random_weights = source.run_dir is None
    if random_weights:
        generated = f"{length} + EOS per sentence"
    else:
        generated = "each search's own" if against is not None else "ours' own; generate() forced to match"
    repeats, warmup = options.repetitions("decode")
    result = BenchResult(
        "decode",
        {
            "model": f"{m.n_encoder_layers}+{m.n_decoder_layers} layers, d_model {m.d_model}, {m.n_heads} heads, "
            f"vocab {source.vocab_size}",
            "weights": "random (lengths forced)" if random_weights else f"trained: {source.run_dir}",
            "sentences": sentences,
            "beams": list(options.beams),
            "generated_tokens": generated,
            "precisions": list(precisions),
            "repeats": repeats,
            "warmup": warmup,
            "compile": options.compile,
            "device": str(options.device),
        },
        extra_columns=(("tokens_per_sentence", "tokens/sent.", ".1f"),),
    )
    if against is not None:
        result.settings["against"] = against
    return result


def _measure_case(options, source, batches, forced, beam: int, decode_cfg, precision: str, peers, against):
    """Every peer's search of all batches, timed alternately; peak memory on the batch with the most cells."""
    common = dict(
        source=source,
        beam=beam,
        decode_cfg=decode_cfg,
        precision=precision,
        device=str(options.device),
        seed=options.seed,
    )
    if against is not None:
        common["against"] = against
    workloads = {
        peer: Workload(
            __name__,
            "decode_step",
            dict(peer=peer, batches=batches, forced=forced, **common),
            imports=("transformers",) if peer == "HF generate" else (),
        )
        for peer in peers
    }
    largest = max(range(len(batches)), key=lambda b: batches[b].numel())
    one_batch = {
        peer: dataclasses.replace(w, kwargs={**w.kwargs, "batches": [batches[largest]], "forced": [forced[largest]]})
        for peer, w in workloads.items()
    }
    repeats, warmup = options.repetitions("decode")
    return measure_peers(workloads, options, repeats, warmup, memory_workloads=one_batch)


def _inputs(options: BenchOptions, log) -> tuple[Config, ModelSource, list[list[int]], str]:
    """The config, our model's source, and the source sentences' token ids."""
    n = options.max_sentences or (QUICK_SENTENCES if options.quick else 0)
    if options.checkpoint is not None:
        run = load_run(options.checkpoint, overrides=options.overrides)
        config = run.config
        source = ModelSource(config.model, run.tokenizer.vocab_size, str(options.checkpoint), options.overrides)
        sources, where = test_sources(options, config, run.tokenizer, n, log)
        return config, source, sources, where
    config = bench_config(options)
    directory = data_dir(options, config)
    tokenizer = load_tokenizer(config, directory, log) if directory is not None else None
    vocab = tokenizer.vocab_size if tokenizer is not None else config.data.vocab_size
    sources, where = test_sources(options, config, tokenizer, n, log)
    return config, ModelSource(config.model, vocab), sources, where


def _forced_lengths(source: ModelSource, batches, beam, decode_cfg, length, device, seed) -> list[int]:
    """Tokens before EOS that generate() must produce per batch: L, or the longest of ours' translations."""
    if source.run_dir is None:
        return [length] * len(batches)
    outputs = decode_step(OURS, source, batches, [0] * len(batches), beam, decode_cfg, "fp32", device, seed)()
    return [max(len(hyp) for hyp in hyps) for hyps in outputs]


def _check_against(
    source: ModelSource, batches, beam, decode_cfg, device, seed, against: str, name: str
) -> tuple[list[Check], dict[str, float]]:
    """In fp32, on every batch: the other checkout's search gives our translations."""
    outputs = {
        peer: [
            hyp
            for hyps in decode_step(
                peer, source, batches, [0] * len(batches), beam, decode_cfg, "fp32", device, seed, against=against
            )()
            for hyp in hyps
        ]
        for peer in (OURS, name)
    }
    ours, theirs = outputs[OURS], outputs[name]
    label = "greedy" if beam == 1 else f"beam {beam}"
    check = Check(
        f"{label}: {name} with our weights gives our translations (fp32, every batch)",
        ours == theirs,
        f"{sum(a == b for a, b in zip(ours, theirs))}/{len(ours)} identical",
    )
    per_sentence = {peer: sum(len(h) + 1 for h in out) / len(out) for peer, out in outputs.items()}
    return [check], per_sentence


def _check(source: ModelSource, batch, n, beam, decode_cfg, device, seed) -> tuple[list[Check], dict[str, float]]:
    """On one batch in fp32: cached = uncached output; every peer generates the same tokens per sentence."""
    outputs = {
        peer: decode_step(peer, source, [batch], [n], beam, decode_cfg, "fp32", device, seed)()[0] for peer in PEERS
    }
    tokens = {peer: generated_tokens(peer, out) for peer, out in outputs.items()}
    per_sentence = {peer: sum(t) / len(t) for peer, t in tokens.items()}
    label = "greedy" if beam == 1 else f"beam {beam}"
    same = outputs[OURS] == outputs[UNCACHED]
    checks = [
        Check(
            f"{label}: cached and uncached search give the same translations (fp32, first batch)",
            same,
            f"{sum(a == b for a, b in zip(outputs[OURS], outputs['ours, no cache']))}/{batch.size(0)} identical",
        )
    ]
    if source.run_dir is None:
        equal = all(t == tokens[OURS] for t in tokens.values())
        checks.append(
            Check(
                f"{label}: every peer generates the same tokens per sentence (first batch)",
                equal,
                ", ".join(f"{peer} {v:.1f}" for peer, v in per_sentence.items()),
            )
        )
    return checks, per_sentence
