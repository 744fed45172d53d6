"""`mhatrain bench decode --checkpoint RUN_DIR --versus OTHER_RUN`: two trained runs, both decoded by our
search, timed against each other in one run.

Made for a pruned run (`mhatrain prune`) against an unpruned one (e.g. the h=8 run it came from): what
pruning buys in parameters, checkpoint bytes and decoding speed, as ratios measured in the same process,
alternately (measure_peers), which two separate `bench` runs on a shared machine cannot give.

Both runs decode the same source batches, tokenized and length-sorted by --checkpoint's tokenizer, so the
runs must share one; both use --checkpoint's decode settings (alpha, length limits) and the bench's beams.
They are different models, so their translations differ and are not checked for equality: each run's
row gives its tokens per sentence, BLEU and target tokens/s instead (a faster model that generates
shorter translations does less work per sentence, which sentences/s alone would hide).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..core.errors import MhatrainError
from ..core.rundir import BEST, TOKENIZER_FILE
from ..inference.trained import LoadedRun, load_run
from ..model.transformer import count_parameters
from .report import OURS, BenchResult

# the per-peer columns of the table, after tokens per sentence and BLEU (what the CTranslate2 mode shows)
COLUMNS = (
    ("tokens_per_s", "target tok/s", ",.1f"),
    ("tokens_per_s_ratio", "tok/s vs ours", ".2f"),
    ("parameters", "parameters", ","),
    ("checkpoint_bytes", f"{BEST} bytes", ","),
)


def label(path: Path) -> str:
    """The other run's name in the tables: its path as given (never "ours")."""
    return str(path) if str(path) != OURS else f"./{path}"


def load_other(path: Path, ours: LoadedRun, overrides: tuple[str, ...]) -> tuple[LoadedRun, tuple[str, ...]]:
    """The other run, loaded with the bench's --set overrides and ours' CPU threads (load_run sets a run's
    own train.threads, so each decode_step that loads it would otherwise change the thread count both
    runs are timed on), and those overrides; refused in one line if its tokenizer is not ours."""
    overrides = (*overrides, f"train.threads={torch.get_num_threads()}")  # ours is loaded: its thread count
    other = load_run(path, overrides=overrides)
    if other.tokenizer.fingerprint() != ours.tokenizer.fingerprint():
        raise MhatrainError(
            f"--versus {path}: its tokenizer ({TOKENIZER_FILE}) differs from the --checkpoint run's, so the two "
            f"cannot decode the same source batches; compare runs trained on one tokenizer"
        )
    return other, overrides


def sizes(run_dir: Path, run: LoadedRun) -> dict:
    """What a run costs to keep: its parameters (tied weights once) and the bytes of its best.pt on disk."""
    best = Path(run_dir) / BEST
    return {
        "parameters": count_parameters(run.model),
        "checkpoint_bytes": best.stat().st_size if best.is_file() else None,
    }


def add_token_rates(result: BenchResult, case: str) -> None:
    """Each row of `case`: target tokens/s (sentences/s × its tokens per sentence) and ours' tokens/s over
    this row's, oriented as the "vs ours" column (above 1 ours is faster)."""
    rows = [row for row in result.rows if row.case == case]
    for row in rows:
        row.metrics["tokens_per_s"] = row.throughput * row.metrics["tokens_per_sentence"]
    ours = next(row for row in rows if row.peer == OURS).metrics["tokens_per_s"]
    for row in rows:
        row.metrics["tokens_per_s_ratio"] = ours / row.metrics["tokens_per_s"]


def size_note(peer_sizes: dict[str, dict], other: str) -> str:
    """Ours over the other run: parameters and checkpoint bytes, and where the speed ratios are."""
    ours, theirs = peer_sizes[OURS], peer_sizes[other]
    ratios = [
        f"{name} {ours[key] / theirs[key]:.3f}× ({ours[key]:,} against {theirs[key]:,})"
        for key, name in (("parameters", "parameters"), ("checkpoint_bytes", f"{BEST} bytes"))
        if ours[key] and theirs[key]
    ]
    return (
        f"ours/{other}: {', '.join(ratios) or 'no sizes'}; sentences/s: the 'vs ours' column of its rows, "
        f"target tokens/s: 'tok/s vs ours' (both runs with --checkpoint's decode settings)"
    )
