"""The options several commands declare alike, and option values → typed values: one parser for each
kind of option value, each failing with the one-line error that reads the same for every option
("--OPTION must be A, B or C, got 'X'")."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from ..core.errors import MhatrainError
from ..core.rundir import CHECKPOINT_FILES

SET_HELP = "Override a config value, e.g. --set train.max_tokens=2048 (repeatable)."
# Options that several commands declare alike (typer reads an option from the annotation, its default from
# the parameter): one declaration each.
SetOption = Annotated[list[str] | None, typer.Option("--set", metavar="KEY=VALUE", help=SET_HELP)]
BeamOption = Annotated[int | None, typer.Option("--beam", min=1, help="Beam size (default: decode.beam).")]
AlphaOption = Annotated[float | None, typer.Option("--alpha", min=0.0, help="Length penalty (default: decode.alpha).")]
GRID_HELP = (
    "A head-count study (`mhatrain ablate`) whose mean test scores per h the prune report sets beside the gates."
)
GridOption = Annotated[Path | None, typer.Option("--grid", metavar="STUDY_DIR", help=GRID_HELP)]
LAYOUT_HELP = (
    "A fixed-layout control, e.g. gates=PRUNE_DIR/l0=0.03/layout.yaml (repeatable): per seed, a model trained from "
    "scratch with the file's model.heads_per_layer, point layout-NAME-seedS; the report tests it against h=8 and h=1."
)
LayoutOption = Annotated[list[str] | None, typer.Option("--layout", metavar="NAME=FILE", help=LAYOUT_HELP)]
CHECKPOINTS = tuple(CHECKPOINT_FILES)  # best, last, averaged: what `eval` and `heads` --checkpoint may name


def parse_batch_change(keep_batch: bool, new_batch: bool, resume: bool) -> str:
    """train's --keep-batch / --new-batch → what a resume does to the tokens per update: keep, new or ""."""
    if keep_batch and new_batch:
        raise MhatrainError(
            "--keep-batch and --new-batch exclude each other: keep the tokens per update, or change them"
        )
    if (keep_batch or new_batch) and not resume:
        raise MhatrainError(f"{'--keep-batch' if keep_batch else '--new-batch'} applies to --resume only")
    return "keep" if keep_batch else "new" if new_batch else ""


def int_list(text: str, option: str, what: str, minimum: int | None = None) -> list[int]:
    """`--heads 1,4,8`: a comma-separated list of distinct integers (each ≥ minimum, when given), in
    the order given; one-line error otherwise. The one parser of such options: library functions
    take the list."""
    items = [item.strip() for item in str(text).split(",")]
    if not any(items):
        raise MhatrainError(f"{option}: give a comma-separated list of {what}, e.g. {option} 1,4,8")
    values: list[int] = []
    for item in items:
        if not re.fullmatch(r"[+-]?\d+", item):
            raise MhatrainError(f"{option}: {item!r} is not an integer (give a comma-separated list of {what})")
        value = int(item)
        if value in values:
            raise MhatrainError(f"{option}: {value} is given twice")
        if minimum is not None and value < minimum:
            raise MhatrainError(f"{option}: {value} is below {minimum} (give a comma-separated list of {what})")
        values.append(value)
    return values


def choice(value: str, option: str, choices: tuple[str, ...]) -> str:
    """`value` if it is one of `choices`, else the one-line error."""
    if value not in choices:
        listed = ", ".join(choices[:-1]) + f" or {choices[-1]}" if len(choices) > 1 else choices[0]
        raise MhatrainError(f"{option} must be {listed}, got {value!r}")
    return value


def parse_kinds(kind: str) -> tuple[str, ...]:
    """--kind: one kind of attention, or all of them."""
    from ..analysis.maps import KINDS  # imports torch: only once a command runs

    return KINDS if choice(kind, "--kind", (*KINDS, "all")) == "all" else (kind,)


def parse_layer(layer: str) -> int | None:
    """--layer: a layer number (from 1), or None for all (the model decides which numbers exist)."""
    if layer == "all":
        return None
    try:
        return int(layer)
    except ValueError:
        raise MhatrainError(f"--layer must be a layer number (from 1) or all, got {layer!r}") from None


def parse_device(text: str | None):
    """--device of the benches: cpu, cuda or cuda:N (default: cuda when available) → torch.device."""
    import torch  # only once a command runs: `mhatrain --help` answers without it

    from ..core.runtime import is_device_name

    if text is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not is_device_name(text):
        raise MhatrainError(f"--device must be cpu, cuda or cuda:N, got {text!r}")
    if text.startswith("cuda") and not torch.cuda.is_available():
        raise MhatrainError(f"--device {text} but CUDA is not available on this machine")
    return torch.device(text)
