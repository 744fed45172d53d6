"""`mhatrain bench decode`: sentences/s translating the test set, greedy and beam 4.

Two protocols. The default is a trained model (--checkpoint RUN_DIR, default runs/<config name>)
translating the real test set with the run's decode settings: its sentences end at different steps,
as a deployed model's do. Peers, same source batches (length-sorted, decode.batch_tokens, as
`translate_ids` makes them):
  ours             mhatrain.inference.search.beam_search with the decoder cache (int8: Linear layers
                   quantized by torch, inference.quantized)
  CTranslate2      the C++ deployment engine with our weights, converted in this run (bench/deployed.py):
                   float32 against ours in fp32, int8 against our int8 and bf16
Checked before timing: CTranslate2's teacher-forced log-probabilities equal ours (fp32); in each case
both translate every batch once, and the table gives each one's tokens per sentence and BLEU
(comparable numbers of tokens are checked in fp32).

--random-weights (and --quick) keeps the earlier protocol: random weights with every sentence
forced to the same length, which measures uniform lengths only. Peers:
  ours             as above
  ours, no cache   the same search recomputing the whole prefix each step (use_cache=False)
  HF generate      Hugging Face `generate()` of a MarianMTModel of the same dimensions and beam
No peer can pick EOS (its output row is zero, so its logit 0 is never near the top among thousands
of random logits): ours stops at a fixed limit of L tokens + EOS (decode.max_len_a = 0,
max_len_b = L), generate() at max_new_tokens = L + 1 with EOS forced last (forced_eos_token_id).
Checked before timing (fp32, first batch): cached and uncached search give identical output; the
peers generate the same number of tokens per sentence.

With `--against CHECKOUT` the peers are ours and that checkout's search with its own model code
loaded with our weights (an A/B of two versions of this code, see bench/against.py), checked to
give the same translations on every batch (fp32).

With `--versus RUN_DIR` the peers are two trained runs, --checkpoint's (ours) and RUN_DIR's, both with
our search and --checkpoint's decode settings, in the trained protocol's precisions (e.g. a pruned run
against an unpruned one, see bench/versus.py): each row adds its target tokens/s, parameters and
checkpoint bytes.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import torch

from ..core.config import Config, DecodeConfig, ModelConfig
from ..core.runtime import autocast
from ..data.batches import batch_indices
from ..data.tokens import EOS, PAD
from ..inference.deployment import require_ctranslate2
from ..inference.quantized import quantized_model
from ..inference.scoring import bleu_score
from ..inference.search import batch_source_tokens, beam_search
from ..inference.trained import load_run
from ..model.transformer import build_model
from . import against as other
from . import deployed, versus
from .deployed import CT2
from .inputs import bench_config, data_dir, load_tokenizer, pad_sources, test_sources
from .measure import measure_peers
from .memory import Workload
from .options import BenchOptions
from .peers import marian_model, require_transformers
from .report import OURS, BenchResult, Check, Target
from .timing import Step

UNCACHED = "ours, no cache"
RANDOM_PEERS = (OURS, UNCACHED, "HF generate")  # --random-weights
TRAINED_PEERS = (OURS, CT2)  # the default: a trained model
GEN_LEN = {False: 20, True: 6}  # L, tokens before EOS with random weights: full size, --quick
QUICK_SENTENCES = 12
# CTranslate2's tokens per sentence at least 90% of ours: comparable work (fp32). It may generate more: its
# length limit is one per batch (the longest sentence's), ours one per sentence, so a sentence that runs
# to its own limit in ours runs on to the batch's in CTranslate2, which then does more work than ours.
TOKENS_LIKE_OURS = 0.10
# ours ≥ this × CTranslate2's speed: fp32 against its float32, our fastest mode against its int8 (issue 56)
CT2_TARGETS = {"fp32": 0.8, "bf16": 1.0, "int8": 1.0}
UNIFORM_NOTE = (
    "random weights: every sentence is forced to the same length, so this measures uniform lengths only; "
    "real translations end at different steps (the default protocol: a trained --checkpoint)"
)


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """Ours: random weights of `model_cfg` (seeded), or a trained run's checkpoint."""

    model_cfg: ModelConfig
    vocab_size: int
    run_dir: str | None = None
    overrides: tuple[str, ...] = ()  # --set values for the run's config (decode settings, device)


def our_model(source: ModelSource, device, seed: int, precision: str = "fp32") -> torch.nn.Module:
    """Our model on `device`; int8: its Linear layers quantized (inference.quantized)."""
    if source.run_dir is not None:
        model = load_run(source.run_dir, overrides=source.overrides).model.to(device).eval()
    else:
        torch.manual_seed(seed)
        model = build_model(source.model_cfg, source.vocab_size, PAD).to(device).eval()
        _never_end(model.output)
    return quantized_model(model) if precision == "int8" else model


def their_search(source: ModelSource, device, seed: int, against: str, precision: str = "fp32"):
    """The other checkout's model, loaded with our model's weights, and its beam_search; int8: quantized by
    its own inference.quantized (by ours if it has none), so that an A/B also compares what int8 quantizes."""
    model = other.peer_model(against, source.model_cfg, source.vocab_size, PAD)
    model.load_state_dict(our_model(source, device, seed).state_dict())
    model = model.to(device).eval()
    if precision == "int8":
        has_own = other.role_module(against, "quantized") is not None
        model = (other.import_role(against, "quantized").quantized_model if has_own else quantized_model)(model)
    return model, other.import_role(against, "search").beam_search


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
    engine_dir: str | None = None,
    versus: ModelSource | None = None,
) -> Step:
    """One sample: decode every batch; the step returns each batch's output (hyps or generate's ids).

    against: a checkout whose model code and search the peer that is not ours uses. engine_dir: our
    weights converted for CTranslate2 (its peer). versus: the other trained run, decoded by our search."""
    device = torch.device(device)
    if peer == CT2:
        return deployed.engine_step(Path(engine_dir), batches, beam, decode_cfg, precision, device)
    batches = [src.to(device) for src in batches]
    if peer == "HF generate":
        return _generate_step(source, batches, forced, beam, decode_cfg, precision, device, seed, compile)
    if against is not None and peer != OURS:
        model, search = their_search(source, device, seed, against, precision)
    else:
        chosen = versus if versus is not None and peer != OURS else source
        model, search = our_model(chosen, device, seed, precision), beam_search
    if compile:
        model.encode = torch.compile(model.encode, dynamic=True)
        model.decode = torch.compile(model.decode, dynamic=True)
    use_cache = peer != UNCACHED

    def step():
        with autocast(device, precision):
            return [search(model, src, decode_cfg, beam, use_cache=use_cache) for src in batches]

    return step


def _generate_step(source: ModelSource, batches, forced, beam, decode_cfg, precision, device, seed, compile) -> Step:
    """Hugging Face generate() of a MarianMT model of our dimensions (random weights, forced lengths)."""
    require_transformers("the HF generate peer")
    torch.manual_seed(seed)
    model = marian_model(source.model_cfg, source.vocab_size).to(device).eval()
    _never_end(model.get_output_embeddings())
    if compile:
        model.forward = torch.compile(model.forward, dynamic=True)
    search = {"num_beams": beam, "length_penalty": decode_cfg.alpha} if beam > 1 else {"num_beams": 1}

    def step():
        with autocast(device, precision):
            return [
                model.generate(
                    input_ids=src, attention_mask=src != PAD, do_sample=False, max_new_tokens=n + 1, **search
                )
                for src, n in zip(batches, forced)
            ]

    return step


def generated_tokens(peer: str, output) -> list[int]:
    """Tokens generated per sentence, EOS included."""
    if peer == "HF generate":
        return (output[:, 1:] != PAD).sum(1).tolist()  # column 0 is the decoder start token
    return [len(hyp) + 1 for hyp in output]


@dataclasses.dataclass
class Inputs:
    """What the bench decodes, and with what."""

    config: Config
    source: ModelSource
    sentences: list[list[int]]  # source token ids
    references: list[str] | None  # the test split's references (None: synthetic sources)
    tokenizer: object | None
    where: str  # where the sentences came from, for the report
    versus: ModelSource | None = None  # --versus: the other trained run
    sizes: dict[str, dict] = dataclasses.field(default_factory=dict)  # --versus: versus.sizes per peer

    @property
    def trained(self) -> bool:
        return self.source.run_dir is not None


def run(options: BenchOptions, log) -> BenchResult:
    """Time every peer's search on the same sentences, for each beam size and precision."""
    inputs = _inputs(options, log)
    against = str(options.against) if options.against is not None else None
    if against is not None:
        peers = (OURS, other.label(options.against))
    elif inputs.versus is not None:
        peers = (OURS, versus.label(options.versus))
    elif inputs.trained:
        require_ctranslate2("bench decode (its CTranslate2 peer)")
        peers = TRAINED_PEERS
    else:
        require_transformers("bench decode --random-weights (its HF generate peer)")
        peers = RANDOM_PEERS
    # a trained model: fp32 (against CTranslate2 float32), the run's precision and int8 (against its int8)
    trained = ("fp32", inputs.config.train.precision, "int8") if inputs.trained and against is None else ()
    precisions, left_out = options.chosen_precisions(
        tuple(dict.fromkeys(trained)) or (inputs.config.train.precision,), log
    )
    length = GEN_LEN[options.quick]
    if inputs.trained:
        decode_cfg = inputs.config.decode
    else:  # random weights: every sentence is decoded to a fixed length
        decode_cfg = dataclasses.replace(inputs.config.decode, max_len_a=0.0, max_len_b=length)
    result = _new_result(options, inputs, precisions, length, against)
    result.notes += [left_out] if left_out else []
    if inputs.versus is not None:
        result.notes.append(versus.size_note(inputs.sizes, peers[1]))
    with tempfile.TemporaryDirectory(prefix="mhatrain-ct2-") as scratch:
        engine_dir = None
        if peers == TRAINED_PEERS:
            log("bench decode: converting our weights for CTranslate2")
            model = our_model(inputs.source, "cpu", options.seed)
            engine_dir = str(deployed.convert(model, inputs.tokenizer, Path(scratch) / "ct2"))
        for beam in options.beams:
            _run_beam(options, inputs, result, peers, beam, decode_cfg, precisions, length, against, engine_dir, log)
    result.notes.append("peak memory: decoding the batch with the most source cells")
    return result


def _run_beam(options, inputs: Inputs, result, peers, beam, decode_cfg, precisions, length, against, engine_dir, log):
    """Every precision's case of one beam size: checks, then the peers timed."""
    sources = inputs.sentences
    # the batches decode.translate_ids makes: length-sorted, within its budget of source tokens
    order = batch_indices([len(s) + 1 for s in sources], batch_source_tokens(decode_cfg, beam))
    batches = [pad_sources([sources[i] for i in indices]) for indices in order]
    forced = [length] * len(batches)  # generate()'s tokens per batch (random weights only)
    common = dict(beam=beam, decode_cfg=decode_cfg, device=options.device, seed=options.seed)
    if against is not None:
        check, metrics = _check_against(inputs.source, batches, against=against, name=peers[1], **common)
    elif engine_dir is not None:
        check, metrics = [], {}
        if beam == options.beams[0]:
            first = decode_step(OURS, inputs.source, batches[:1], forced, precision="fp32", **common)()[0]
            check.append(
                deployed.log_prob_check(
                    our_model(inputs.source, "cpu", options.seed), Path(engine_dir), batches[0], first
                )
            )
    elif inputs.versus is not None:
        check, metrics = [], {}  # two models: different translations, nothing to check equal
    else:
        check, metrics = _check(inputs.source, batches[0], forced[0], **common)
    result.checks += check
    for precision in precisions:
        case = f"{'greedy' if beam == 1 else f'beam {beam}'} {precision}"
        log(f"bench decode: {case}")
        if engine_dir is not None:
            case_checks, metrics = _check_trained(inputs, batches, order, precision, engine_dir, **common)
            result.checks += case_checks
        elif inputs.versus is not None:
            metrics = _translation_metrics(inputs, batches, order, peers, precision, versus=inputs.versus, **common)
            metrics = {peer: {**metrics[peer], **inputs.sizes[peer]} for peer in peers}
        given = dict(against=against, engine_dir=engine_dir, versus=inputs.versus)
        peer_args = {key: value for key, value in given.items() if value is not None}
        measured = _measure_case(options, inputs.source, batches, forced, beam, decode_cfg, precision, peers, peer_args)
        result.notes += [f"{case} {problem}" for problem in measured.problems]
        result.add_case(case, measured.samples, len(sources), "sentences/s", measured.memory, measured.notes, metrics)
        if inputs.versus is not None:
            versus.add_token_rates(result, case)
        result.targets += _targets(case, beam, precision, peers)


def _targets(case: str, beam: int, precision: str, peers) -> list[Target]:
    if peers == TRAINED_PEERS:
        minimum = CT2_TARGETS[precision]
        return [Target(case, CT2, "ratio", minimum, f"ours ≥ {minimum:g}× {CT2}")]
    if peers != RANDOM_PEERS:
        return []  # an A/B of two versions has no target
    if beam == 4:
        return [
            Target(case, UNCACHED, "ratio", 3.0, "ours ≥ 3×"),
            Target(case, "HF generate", "ratio", 1.5, "ours ≥ 1.5×"),
        ]
    return [Target(case, "HF generate", "ratio", 1.3, "ours ≥ 1.3×")] if beam == 1 else []  # issue 14


def _new_result(options: BenchOptions, inputs: Inputs, precisions, length, against) -> BenchResult:
    """The bench's result with its settings: the model, its weights, the sentences, how it was measured."""
    if not inputs.trained:
        generated = f"{length} + EOS per sentence"
    else:
        generated = "each search's own (the run's decode settings)"
    repeats, warmup = options.repetitions("decode")
    result = BenchResult(
        "decode",
        {
            "model": _describe(inputs.source),
            "weights": f"trained: {inputs.source.run_dir}" if inputs.trained else "random (lengths forced)",
            "sentences": f"{len(inputs.sentences)} from {inputs.where}",
            "beams": list(options.beams),
            "generated_tokens": generated,
            "precisions": list(precisions),
            "repeats": repeats,
            "warmup": warmup,
            "compile": options.compile,
            "device": str(options.device),
        },
        extra_columns=(("tokens_per_sentence", "tokens/sent.", ".1f"), ("bleu", "BLEU", ".2f"))
        + (versus.COLUMNS if inputs.versus is not None else ()),
    )
    if inputs.trained:
        d = inputs.config.decode
        result.settings["decode"] = f"alpha {d.alpha}, max_len_a {d.max_len_a}, max_len_b {d.max_len_b}"
    else:
        result.notes.append(UNIFORM_NOTE)
    if inputs.versus is not None:
        result.settings["versus"] = f"trained: {inputs.versus.run_dir}, {_describe(inputs.versus)}"
        result.settings["decode"] += " (--checkpoint's, for both runs)"
    if against is not None:
        result.settings["against"] = against
    return result


def _describe(source: ModelSource) -> str:
    """A model's shape for the report's settings; a pruned model's heads layer by layer."""
    m = source.model_cfg
    heads = f"{m.n_heads} heads"
    if m.heads_per_layer is not None:
        layout = m.heads_per_layer
        heads = f"heads per layer enc_self {layout.enc_self}, dec_self {layout.dec_self}, cross {layout.cross}"
    return f"{m.n_encoder_layers}+{m.n_decoder_layers} layers, d_model {m.d_model}, {heads}, {m.norm}-norm, vocab {source.vocab_size}"


def _measure_case(options, source, batches, forced, beam: int, decode_cfg, precision: str, peers, peer_args: dict):
    """Every peer's search of all batches, timed alternately; peak memory on the batch with the most cells.
    peer_args: decode_step's arguments for the peer that is not ours (against, engine_dir, versus)."""
    common = dict(
        source=source,
        beam=beam,
        decode_cfg=decode_cfg,
        precision=precision,
        device=str(options.device),
        seed=options.seed,
        **peer_args,
    )
    workloads = {
        peer: Workload(
            __name__,
            "decode_step",
            dict(peer=peer, batches=batches, forced=forced, **common),
            imports=("transformers",) if peer == "HF generate" else ("ctranslate2",) if peer == CT2 else (),
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


def _inputs(options: BenchOptions, log) -> Inputs:
    """The config, our model's source, the source sentences' token ids and their references."""
    n = options.max_sentences or (QUICK_SENTENCES if options.quick else 0)
    checkpoint = options.decode_checkpoint()
    if checkpoint is not None:
        threads = (f"train.threads={options.threads}",) if options.threads else ()
        overrides = (*options.overrides, *threads)  # the bench's threads, not the ones the run trained on
        run = load_run(checkpoint, overrides=overrides)
        config = run.config
        source = ModelSource(config.model, run.tokenizer.vocab_size, str(checkpoint), overrides)
        sources, where, references = test_sources(options, config, run.tokenizer, n, log)
        inputs = Inputs(config, source, sources, references, run.tokenizer, where)
        if options.versus is not None:
            other, other_overrides = versus.load_other(options.versus, run, overrides)
            inputs.versus = ModelSource(
                other.config.model, other.tokenizer.vocab_size, str(options.versus), other_overrides
            )
            inputs.sizes = {
                OURS: versus.sizes(checkpoint, run),
                versus.label(options.versus): versus.sizes(options.versus, other),
            }
        return inputs
    config = bench_config(options)
    directory = data_dir(options, config)
    tokenizer = load_tokenizer(config, directory, log) if directory is not None else None
    vocab = tokenizer.vocab_size if tokenizer is not None else config.data.vocab_size
    sources, where, _ = test_sources(options, config, tokenizer, n, log)
    return Inputs(config, ModelSource(config.model, vocab), sources, None, None, where)


def _translation_metrics(inputs: Inputs, batches, order, peers, precision: str, **step_kwargs) -> dict[str, dict]:
    """Each peer translates every batch once in `precision`: its tokens per sentence and BLEU."""
    metrics = {}
    for peer in peers:
        outputs = decode_step(peer, inputs.source, batches, [0] * len(batches), precision=precision, **step_kwargs)()
        hyps: list[list[int]] = [[] for _ in inputs.sentences]
        for indices, batch_hyps in zip(order, outputs):
            for i, hyp in zip(indices, batch_hyps):
                hyps[i] = hyp
        tokens = sum(len(h) + 1 for h in hyps) / len(hyps)
        bleu = bleu_score(inputs.tokenizer.decode(hyps), inputs.references)[0] if inputs.references else None
        metrics[peer] = {"tokens_per_sentence": tokens, "bleu": bleu}
    return metrics


def _check_trained(
    inputs: Inputs, batches, order, precision: str, engine_dir: str, **common
) -> tuple[list[Check], dict]:
    """Both peers' tokens per sentence and BLEU (_translation_metrics); in fp32, CTranslate2 generates
    about as many tokens per sentence as ours (comparable work)."""
    metrics = _translation_metrics(inputs, batches, order, TRAINED_PEERS, precision, engine_dir=engine_dir, **common)
    if precision != "fp32":
        return [], metrics
    ours, theirs = metrics[OURS]["tokens_per_sentence"], metrics[CT2]["tokens_per_sentence"]
    label = "greedy" if common["beam"] == 1 else f"beam {common['beam']}"
    check = Check(
        f"{label}: {CT2} float32 generates comparable tokens per sentence (no fewer than "
        f"{1 - TOKENS_LIKE_OURS:.0%} of ours, fp32, every batch; more only makes the ratio conservative)",
        theirs >= (1 - TOKENS_LIKE_OURS) * ours,
        f"ours {ours:.2f}, {CT2} {theirs:.2f}",
    )
    return [check], metrics


def _check_against(
    source: ModelSource, batches, beam, decode_cfg, device, seed, against: str, name: str
) -> tuple[list[Check], dict[str, dict]]:
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
    metrics = {peer: {"tokens_per_sentence": sum(len(h) + 1 for h in out) / len(out)} for peer, out in outputs.items()}
    return [check], metrics


def _check(source: ModelSource, batch, n, beam, decode_cfg, device, seed) -> tuple[list[Check], dict[str, dict]]:
    """On one batch in fp32 (random weights): cached = uncached output; every peer generates the same
    tokens per sentence."""
    outputs = {
        peer: decode_step(peer, source, [batch], [n], beam, decode_cfg, "fp32", device, seed)()[0]
        for peer in RANDOM_PEERS
    }
    tokens = {peer: generated_tokens(peer, out) for peer, out in outputs.items()}
    per_sentence = {peer: sum(t) / len(t) for peer, t in tokens.items()}
    label = "greedy" if beam == 1 else f"beam {beam}"
    same = outputs[OURS] == outputs[UNCACHED]
    checks = [
        Check(
            f"{label}: cached and uncached search give the same translations (fp32, first batch)",
            same,
            f"{sum(a == b for a, b in zip(outputs[OURS], outputs[UNCACHED]))}/{batch.size(0)} identical",
        ),
        Check(
            f"{label}: every peer generates the same tokens per sentence (first batch)",
            all(t == tokens[OURS] for t in tokens.values()),
            ", ".join(f"{peer} {v:.1f}" for peer, v in per_sentence.items()),
        ),
    ]
    return checks, {peer: {"tokens_per_sentence": v} for peer, v in per_sentence.items()}
