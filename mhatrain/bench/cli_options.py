"""How `mhatrain bench` declares its options, and how their values become the benches and BenchOptions.

Twenty-two options: declared here as annotated types (typer reads the option from the annotation, the
default from the parameter), so that the command's signature and body read at a glance in cli.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..console.command_options import choice, int_list, parse_device
from ..core.errors import MhatrainError
from .options import BENCHES, DECODE_PRECISIONS, DEFAULT_CONFIG, PRECISIONS, BenchOptions, check_options

Names = Annotated[list[str], typer.Argument(help="attention, train and/or decode (run in that order).")]
Quick = Annotated[
    bool,
    typer.Option(
        "--quick",
        help="Tiny shapes and models, few repetitions, no peak memory: a smoke run of every part (about a "
        "minute of CPU time for all three); it judges no targets, which are set for full size.",
    ),
]
Repeats = Annotated[
    int | None,
    typer.Option("--repeats", min=1, help="Timed samples per peer (default: attention 20, train 5, decode 3)."),
]
Warmup = Annotated[
    int | None,
    typer.Option(
        "--warmup", min=0, help="Untimed rounds per peer before timing (default: attention 3, train 1, decode 1)."
    ),
]
Precision = Annotated[
    str | None,
    typer.Option(
        "--precision",
        help="fp32, bf16, both, or a list such as fp32,int8 (int8: decode only, Linear layers quantized; default: "
        "both; decode: the config's train.precision, and fp32 and int8 with a trained model; by default bf16 is "
        "left out, with a note, on a CPU without native bf16).",
    ),
]
Heads = Annotated[str | None, typer.Option("--heads", help="attention: head counts h (default 1,4,8,16,32).")]
Beams = Annotated[str, typer.Option("--beams", help="decode: beam sizes (1 = greedy).")]
Device = Annotated[str | None, typer.Option("--device", help="cpu, cuda or cuda:N (default: cuda when available).")]
Threads = Annotated[int, typer.Option("--threads", min=0, help="CPU threads for torch (0 = torch's default).")]
Compile = Annotated[bool, typer.Option("--compile", help="torch.compile each peer (falls back to eager with a note).")]
Memory = Annotated[
    bool | None,
    typer.Option(
        "--memory/--no-memory",
        help="Measure each peer's peak memory in a fresh process (default: yes, but no with --quick).",
    ),
]
Config = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="Model, batches and decoding settings (default: configs/multi30k.yaml in the current directory, "
        "a source checkout's root).",
    ),
]
Data = Annotated[
    Path | None,
    typer.Option(
        "--data",
        help="train/decode: folder of parallel text, e.g. Multi30k's raw .gz files (default: data.local_dir; synthetic if absent).",
    ),
]
Checkpoint = Annotated[
    Path | None,
    typer.Option(
        "--checkpoint",
        help="decode: the trained run whose best weights and decode settings are measured "
        "(default: runs/<config name>, what mhatrain train makes of --config).",
    ),
]
RandomWeights = Annotated[
    bool,
    typer.Option(
        "--random-weights",
        help="decode: random weights with every sentence forced to one length, instead of a trained run "
        "(measures uniform lengths only; --quick implies it).",
    ),
]
MaxSentences = Annotated[
    int, typer.Option("--max-sentences", min=0, help="decode: the first N test sentences (0 = all).")
]
Batches = Annotated[int | None, typer.Option("--batches", min=1, help="train: batches per timed sample (default 4).")]
Against = Annotated[
    Path | None,
    typer.Option(
        "--against",
        help="train, decode: time another checkout's step or search (its root folder) against ours, instead of the usual peers.",
    ),
]
Versus = Annotated[
    Path | None,
    typer.Option(
        "--versus",
        help="decode: another trained run (e.g. the unpruned one) timed against --checkpoint's, both with our "
        "search and --checkpoint's decode settings; each row adds parameters, best.pt bytes and target tokens/s.",
    ),
]
Json = Annotated[Path | None, typer.Option("--json", help="Also write the results as JSON.")]
Markdown = Annotated[Path | None, typer.Option("--markdown", help="Also write the tables as Markdown.")]


def parse(params: dict) -> tuple[list[str], BenchOptions]:
    """The benches to run and their options, from the command's parameter values (typer's ctx.params):
    parsed, defaulted and checked before anything is measured."""
    chosen = parse_bench_names(list(params["names"]))
    heads = params["heads"]
    options = BenchOptions(
        device=parse_device(params["device"]),
        quick=params["quick"],
        repeats=params["repeats"],
        warmup=params["warmup"],
        precisions=parse_precision(params["precision"]),
        heads=tuple(int_list(heads, "--heads", "head counts", 1)) if heads is not None else BenchOptions.heads,
        beams=tuple(int_list(params["beams"], "--beams", "beam sizes", 1)),
        compile=params["compile_"],
        memory=params["memory"],
        threads=params["threads"],
        config=params["config"] or DEFAULT_CONFIG,
        overrides=tuple(params["set_"] or ()),
        data_dir=params["data"],
        checkpoint=params["checkpoint"],
        random_weights=params["random_weights"],
        max_sentences=params["max_sentences"],
        batches=params["batches"],
        against=params["against"],
        versus=params["versus"],
    )
    check_options(chosen, options, heads_given=heads is not None)
    return chosen, options


def parse_bench_names(names: list[str]) -> list[str]:
    """The benches to run, each once, in the order given."""
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        raise MhatrainError(f"unknown bench {unknown[0]!r}: choose from {', '.join(BENCHES)}")
    if not names:
        raise MhatrainError(f"name a bench: {', '.join(BENCHES)}")
    return list(dict.fromkeys(names))


def parse_precision(text: str | None) -> tuple[str, ...] | None:
    """--precision of the benches: fp32, bf16, both, or a comma-separated list of DECODE_PRECISIONS;
    None: each bench's default."""
    if text is None:
        return None
    if text == "both":
        return PRECISIONS
    items = [item.strip() for item in text.split(",")]
    for item in items:
        choice(item, "--precision", (*DECODE_PRECISIONS, "both"))
    return tuple(dict.fromkeys(items))
