"""Using a trained run: load it, translate with it, evaluate it on a split."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.console import Console

from ..core import provenance
from ..core.checkpoint import open_run
from ..core.config import Config, apply_override, check_config
from ..core.distributed import resolve_device
from ..core.errors import MhatrainError
from ..core.files import atomic_write_json, atomic_write_text
from ..core.rundir import SENTENCE_NLL_SUFFIX, TOKENIZER_FILE, eval_path
from ..core.runtime import set_threads
from ..data.sources import Corpus, load_split, split_name
from ..data.tokenizer import Tokenizer
from ..data.tokens import PAD
from ..model.transformer import Transformer, build_model, count_parameters
from .likelihood import reference_cross_entropy, sentence_file_text
from .scoring import read_aligned, sacrebleu_test_set, score, show_scores
from .search import translate

MAX_INPUT_CHARS = 10_000  # one sentence a person gives to translate (`translate`, `attention`)


def check_input_length(text: str, where: str) -> None:
    """Refuse a sentence to translate that is over MAX_INPUT_CHARS (a whole file pasted as one line)."""
    if len(text) > MAX_INPUT_CHARS:
        raise MhatrainError(f"{where}: input of {len(text)} characters is over the limit of {MAX_INPUT_CHARS}")


@dataclass
class LoadedRun:
    config: Config
    model: Transformer
    tokenizer: Tokenizer
    device: torch.device
    step: int
    averaged: dict  # for averaged.pt: the checkpoints it averages (averaged_from) and their updates; else empty


def load_run(run_dir: Path, which: str = "best", overrides: list[str] = (), strict: bool = False) -> LoadedRun:
    """strict: use exactly the `which` checkpoint (see open_run). Every command that loads a trained model
    (eval, translate, heads, attention) runs on `train.threads` CPU threads, as its training did."""
    config, state, tokenizer_path = open_run(Path(run_dir), which, log=_warn, strict=strict)
    for item in overrides:
        apply_override(config, item)
    check_config(config, f"{run_dir}/config.yaml", check_paths=False, overrides=overrides)
    set_threads(config.train.threads)
    _check_architecture(config, state["config"], overrides)
    tokenizer = Tokenizer(tokenizer_path)
    if state.get("vocab_size") != tokenizer.vocab_size or state.get("vocab_fingerprint") != tokenizer.fingerprint():
        raise MhatrainError(f"{run_dir}: checkpoint was made with a different vocabulary than spm.model")
    device = resolve_device(config.train.device)
    model = build_model(config.model, tokenizer.vocab_size, PAD)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as exc:
        raise MhatrainError(
            f"{run_dir}: checkpoint weights do not fit the config ({str(exc).splitlines()[0]})"
        ) from None
    model.to(device).eval()
    averaged = {k: state[k] for k in ("averaged_from", "averaged_steps") if k in state}
    return LoadedRun(config, model, tokenizer, device, int(state.get("progress", {}).get("step", 0)), averaged)


def translate_with(run: LoadedRun, sentences: list[str], beam: int | None, alpha: float | None) -> list[str]:
    """Raw sentences → detokenised translations by a loaded run: its decode settings (beam and alpha
    unless given), its device, and the precision it was trained in; a cut sentence is warned of on stderr."""
    return translate(
        run.model,
        run.tokenizer,
        sentences,
        run.config.decode,
        run.device,
        beam,
        alpha,
        run.config.train.precision,
        warn=_warn,
    )


def _warn(message: str) -> None:
    print(message, file=sys.stderr, flush=True)  # stderr: translate's stdout holds only translations


def _check_architecture(config: Config, trained: dict, overrides: list[str]) -> None:
    """Refuse a --set that changes the shape of a trained model (a different n_heads with the same
    d_model would even load, and compute something else). Dropout is off at inference: allowed."""
    for key, value in config.to_dict()["model"].items():
        if key not in ("dropout", "attention_dropout") and trained["model"].get(key) != value:
            given = next((o for o in overrides if o.split("=", 1)[0].strip() == f"model.{key}"), f"model.{key}")
            raise MhatrainError(
                f"--set {given}: the model was trained with model.{key}="
                f"{trained['model'].get(key)!r}; a trained model's architecture cannot change"
            )


@dataclass
class EvalText:
    """What an evaluation translates and scores."""

    name: str  # names the eval files: a split, a source file's name, or a sacreBLEU test set
    src: list[str]
    ref: list[str]
    description: str  # where the text came from, for the report
    data: dict  # its provenance (provenance.corpus_record or files_record)


def eval_text(
    config: Config,
    split: str | None,
    src: Path | None = None,
    ref: Path | None = None,
    sacrebleu_set: str | None = None,
    langpair: str | None = None,
) -> EvalText:
    """A split of the config's source (default: test), a pair of files, or a named sacreBLEU test set."""
    chosen = [
        option
        for option, given in (("--split", split), ("--src/--ref", src or ref), ("--sacrebleu-set", sacrebleu_set))
        if given
    ]
    if len(chosen) > 1:
        raise MhatrainError(f"{' and '.join(chosen)} exclude each other: evaluate one text at a time")
    if (src is None) != (ref is None):
        raise MhatrainError(
            f"{'--src' if src else '--ref'} needs {'--ref' if src else '--src'}: a source file and its reference file"
        )
    if langpair is not None and sacrebleu_set is None:
        raise MhatrainError("--langpair goes with --sacrebleu-set")
    model_pair = f"{config.data.src_lang}-{config.data.tgt_lang}"
    if sacrebleu_set is not None:
        if langpair not in (None, model_pair):
            raise MhatrainError(
                f"--langpair {langpair}: the model translates {model_pair} (data.src_lang, data.tgt_lang)"
            )
        src, ref = sacrebleu_test_set(sacrebleu_set, model_pair)
        name = f"{sacrebleu_set.replace('/', '_')}.{model_pair}"
        return EvalText(
            name,
            *read_aligned({"source": src, "reference": ref}),
            f"sacrebleu:{sacrebleu_set}/{model_pair}",
            {**provenance.files_record(src, ref), "sacrebleu_set": sacrebleu_set, "langpair": model_pair},
        )
    if src is not None:
        name = Path(src).name.removesuffix(".gz")
        return EvalText(
            name, *read_aligned({"--src": src, "--ref": ref}), f"{src}+{ref}", provenance.files_record(src, ref)
        )
    split = split or "test"
    corpus = load_split(config.data, split_name(config, split))
    return EvalText(split, corpus.src, corpus.tgt, corpus.name, provenance.corpus_record(corpus))


def evaluate_run(
    run_dir: Path,
    split: str | None,
    beam: int | None,
    alpha: float | None,
    which: str,
    overrides: list[str],
    console: Console,
    src: Path | None = None,
    ref: Path | None = None,
    sacrebleu_set: str | None = None,
    langpair: str | None = None,
) -> dict:
    """Translate a text (see eval_text) with beam search, score it, write eval/NAME.beamK.{hyp.txt,json}."""
    run = load_run(run_dir, which, overrides, strict=True)
    beam = beam or run.config.decode.beam
    own_alpha = alpha is not None and alpha != run.config.decode.alpha  # named in the file: others don't overwrite
    alpha = run.config.decode.alpha if alpha is None else alpha
    text = eval_text(run.config, split, src, ref, sacrebleu_set, langpair)
    averaged = f" of updates {', '.join(map(str, run.averaged['averaged_steps']))}" if run.averaged else ""
    console.print(
        f"translating {len(text.src)} sentences of '{text.name}' with beam {beam}, alpha {alpha} "
        f"({which} checkpoint{averaged}, update {run.step})"
    )
    started = time.perf_counter()
    hyps = translate_with(run, text.src, beam, alpha)
    seconds = time.perf_counter() - started
    result = score(hyps, text.ref)
    cross_entropy = reference_cross_entropy(
        run.model,
        run.tokenizer,
        Corpus(text.name, text.src, text.ref),
        run.config.data.max_length,
        run.config.train.max_tokens,
        run.device,
        run.config.train.precision,
    )
    result.update(
        cross_entropy=cross_entropy.summary(run.config.train.precision),
        split=text.name,
        source=text.description,
        beam=beam,
        alpha=alpha,
        checkpoint=which,
        update=run.step,
        parameters=count_parameters(run.model),
        decode_seconds=round(seconds, 1),
        sentences_per_s=round(len(hyps) / seconds, 1),
        **run.averaged,
        provenance=provenance.session(run.device, {text.name: text.data}, Path(run_dir) / TOKENIZER_FILE),
    )
    named_alpha = alpha if own_alpha else None
    hyp_path = eval_path(run_dir, text.name, beam, which, named_alpha, suffix=".hyp.txt")
    json_path = eval_path(run_dir, text.name, beam, which, named_alpha)
    nll_path = eval_path(run_dir, text.name, beam, which, named_alpha, suffix=SENTENCE_NLL_SUFFIX)
    result["cross_entropy"]["file"] = nll_path.name
    atomic_write_text(hyp_path, "".join(h + "\n" for h in hyps))
    atomic_write_text(nll_path, sentence_file_text(cross_entropy))
    atomic_write_json(json_path, result)
    show_scores(result, f"{run_dir} — {text.name} ({len(hyps)} sentences, beam {beam}, alpha {alpha})", console)
    console.print(f"hypotheses: {hyp_path}  report: {json_path}  ({result['sentences_per_s']} sentences/s)")
    return result


def translate_lines(
    run_dir: Path, lines: list[str] | None, beam: int | None, alpha: float | None, overrides: list[str] = ()
) -> list[str]:
    """Translate `lines` (or stdin when None) and print one translation per line. A blank line of stdin
    gives a blank line, as in a file to translate (one output line per input line); a blank argument
    is a mistake (an unset shell variable) and an error."""
    from_stdin = lines is None
    if from_stdin:
        if sys.stdin.isatty():  # else a user who typed only `mhatrain translate RUN` sees a command that hangs
            _warn("reading sentences from the terminal, one per line; Ctrl-D ends the input and translates them")
        lines = []
        for number, raw in enumerate(sys.stdin.buffer, 1):
            try:
                lines.append(raw.decode("utf-8").rstrip("\r\n"))
            except UnicodeDecodeError as exc:
                raise MhatrainError(f"stdin line {number}: not valid UTF-8 (byte {exc.start})") from None
    for number, line in enumerate(lines, 1):
        where = f"stdin line {number}" if from_stdin else f"argument {number}"
        if not line.strip() and not from_stdin:
            raise MhatrainError(f"{where}: empty input, nothing to translate")
        check_input_length(line, where)
    if not lines:
        raise MhatrainError("no input: give sentences as arguments or on stdin")
    run = load_run(run_dir, overrides=overrides)
    sentences = [line for line in lines if line.strip()]
    translated = iter(translate_with(run, sentences, beam, alpha) if sentences else [])
    outputs = [next(translated) if line.strip() else "" for line in lines]
    for text in outputs:
        print(text, flush=True)
    return outputs
