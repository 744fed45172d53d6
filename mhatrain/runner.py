"""Using a trained run: load it, translate with it, evaluate it on a split."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from .checkpoint import open_run
from .config import Config, apply_override, validate
from .data import Tokenizer, load_split
from .decode import translate
from .errors import MhatrainError
from .evaluate import score
from .io import atomic_write_json, atomic_write_text
from .model import Transformer, build_model, count_parameters
from .distributed import resolve_device

MAX_INPUT_CHARS = 10_000


@dataclass
class LoadedRun:
    config: Config
    model: Transformer
    tokenizer: Tokenizer
    device: torch.device
    step: int
    averaged: dict  # for averaged.pt: the checkpoints it averages (averaged_from) and their updates; else empty


def load_run(run_dir: Path, which: str = "best", overrides: list[str] = ()) -> LoadedRun:
    config, state, tokenizer_path = open_run(Path(run_dir), which, log=_warn)
    for item in overrides:
        apply_override(config, item)
    validate(config, f"{run_dir}/config.yaml", check_paths=False)
    _check_architecture(config, state["config"], overrides)
    tokenizer = Tokenizer(tokenizer_path)
    if state.get("vocab_size") != tokenizer.vocab_size or state.get("vocab_fingerprint") != tokenizer.fingerprint():
        raise MhatrainError(f"{run_dir}: checkpoint was made with a different vocabulary than spm.model")
    device = resolve_device(config.train.device)
    model = build_model(config.model, tokenizer.vocab_size)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as exc:
        raise MhatrainError(f"{run_dir}: checkpoint weights do not fit the config ({str(exc).splitlines()[0]})") from None
    model.to(device).eval()
    averaged = {k: state[k] for k in ("averaged_from", "averaged_steps") if k in state}
    return LoadedRun(config, model, tokenizer, device, int(state.get("progress", {}).get("step", 0)), averaged)


def _warn(message: str) -> None:
    print(message, file=sys.stderr, flush=True)  # stderr: translate's stdout holds only translations


def _check_architecture(config: Config, trained: dict, overrides: list[str]) -> None:
    """Refuse a --set that changes the shape of a trained model (a different n_heads with the same
    d_model would even load, and compute something else). Dropout is off at inference: allowed."""
    for key, value in config.to_dict()["model"].items():
        if key not in ("dropout", "attention_dropout") and trained["model"].get(key) != value:
            given = next((o for o in overrides if o.split("=", 1)[0].strip() == f"model.{key}"), f"model.{key}")
            raise MhatrainError(f"--set {given}: the model was trained with model.{key}="
                                f"{trained['model'].get(key)!r}; a trained model's architecture cannot change")


def split_name(config: Config, split: str) -> str:
    """Map train/valid/test to the data source's split names; other names pass through."""
    return {"train": config.data.train_split, "valid": config.data.valid_split,
            "validation": config.data.valid_split, "test": config.data.test_split}.get(split, split)


def evaluate_run(run_dir: Path, split: str, beam: int | None, alpha: float | None, which: str,
                 overrides: list[str], console: Console) -> dict:
    run = load_run(run_dir, which, overrides)
    beam = beam or run.config.decode.beam
    alpha = run.config.decode.alpha if alpha is None else alpha
    corpus = load_split(run.config.data, split_name(run.config, split))
    averaged = f" of updates {', '.join(map(str, run.averaged['averaged_steps']))}" if run.averaged else ""
    console.print(f"translating {len(corpus)} sentences of '{split}' with beam {beam}, alpha {alpha} "
                  f"({which} checkpoint{averaged}, update {run.step})")
    started = time.perf_counter()
    hyps = translate(run.model, run.tokenizer, corpus.src, run.config.decode, run.device, beam, alpha,
                     run.config.train.precision)
    seconds = time.perf_counter() - started
    result = score(hyps, corpus.tgt)
    result.update(split=split, source=corpus.name, beam=beam, alpha=alpha, checkpoint=which, update=run.step,
                  parameters=count_parameters(run.model), decode_seconds=round(seconds, 1),
                  sentences_per_s=round(len(hyps) / seconds, 1), **run.averaged)
    out_dir = Path(run_dir) / "eval"
    stem = f"{split}.beam{beam}" + ("" if which == "best" else f".{which}")
    atomic_write_text(out_dir / f"{stem}.hyp.txt", "".join(h + "\n" for h in hyps))
    atomic_write_json(out_dir / f"{stem}.json", result)
    table = Table(title=f"{run_dir} — {split} ({len(hyps)} sentences, beam {beam}, alpha {alpha})")
    table.add_column("metric")
    table.add_column("score", justify="right")
    table.add_row("BLEU (sacreBLEU: cased, detokenised)", f"{result['bleu']:.2f}")
    table.add_row("chrF", f"{result['chrf']:.2f}")
    table.add_row("BLEU lowercased, 13a-tokenised (for the literature)", f"{result['bleu_lowercased_tokenized']:.2f}")
    console.print(table)
    console.print(f"BLEU signature: {result['bleu_signature']}\nchrF signature: {result['chrf_signature']}\n"
                  f"lowercased BLEU signature: {result['bleu_lowercased_tokenized_signature']}", highlight=False)
    console.print(f"hypotheses: {out_dir / (stem + '.hyp.txt')}  report: {out_dir / (stem + '.json')}  "
                  f"({result['sentences_per_s']} sentences/s)")
    return result


def translate_lines(run_dir: Path, lines: list[str] | None, beam: int | None, alpha: float | None,
                    overrides: list[str] = ()) -> list[str]:
    """Translate `lines` (or stdin when None) and print one translation per line."""
    from_stdin = lines is None
    if from_stdin:
        lines = []
        for number, raw in enumerate(sys.stdin.buffer, 1):
            try:
                lines.append(raw.decode("utf-8").rstrip("\r\n"))
            except UnicodeDecodeError as exc:
                raise MhatrainError(f"stdin line {number}: not valid UTF-8 (byte {exc.start})") from None
    for number, line in enumerate(lines, 1):
        where = f"stdin line {number}" if from_stdin else f"argument {number}"
        if not line.strip():
            raise MhatrainError(f"{where}: empty input, nothing to translate")
        if len(line) > MAX_INPUT_CHARS:
            raise MhatrainError(f"{where}: input of {len(line)} characters is over the limit of {MAX_INPUT_CHARS}")
    if not lines:
        raise MhatrainError("no input: give sentences as arguments or on stdin")
    run = load_run(run_dir, overrides=overrides)
    outputs = translate(run.model, run.tokenizer, lines, run.config.decode, run.device, beam, alpha,
                        run.config.train.precision)
    for text in outputs:
        print(text, flush=True)
    return outputs
