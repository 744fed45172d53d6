"""The run directory's vocabulary: the one module that names a run directory's files (no torch needed).

A run directory holds everything a run needs and produces:
    config.yaml         the resolved config          spm.model     the tokenizer
    last.pt             latest training state        last.prev.pt  the one before it (fallback)
    best.pt             best weights by the early-stopping metric
    snapshots/          stepNNNNNNNN.pt: the weights of the last train.keep_checkpoints checkpoints
    averaged.pt         the mean of some checkpoints' weights (`mhatrain average`)
    metrics.jsonl       training and validation records
    train_summary.json  written when training ends: the run is trained
    eval/               NAME.beamK[.alphaA][.last|.averaged].{json,hyp.txt,nll.tsv}: `mhatrain eval` (eval_path);
                        .nll.tsv: each reference's summed NLL and tokens (inference.likelihood)
Reading and writing checkpoints themselves (torch) is core.checkpoint's.
"""

from __future__ import annotations

from pathlib import Path

from .files import read_json

CONFIG_FILE = "config.yaml"
RUNS_DIR = "runs"  # where `mhatrain train CONFIG` puts its run without --out: runs/<config name>


def default_run_dir(config: Path) -> Path:
    """The run directory `mhatrain train CONFIG` writes without --out (relative to the current directory)."""
    return Path(RUNS_DIR) / Path(config).stem


TOKENIZER_FILE = "spm.model"


LAST = "last.pt"


LAST_PREV = "last.prev.pt"


BEST = "best.pt"


AVERAGED = "averaged.pt"


SNAPSHOTS_DIR = "snapshots"


METRICS_FILE = "metrics.jsonl"


SUMMARY_FILE = "train_summary.json"


EVAL_DIR = "eval"


SENTENCE_NLL_SUFFIX = ".nll.tsv"  # beside an evaluation's .hyp.txt: per-sentence reference cross-entropy


# The checkpoint each `which` (eval --checkpoint) reads, then its fallbacks when it is damaged.
CHECKPOINT_FILES = {"best": (BEST, LAST, LAST_PREV), "last": (LAST, LAST_PREV), "averaged": (AVERAGED,)}


def snapshot_path(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / SNAPSHOTS_DIR / f"step{step:08d}.pt"


def list_snapshots(run_dir: Path) -> list[tuple[int, Path]]:
    """(update, path) of the run's weight snapshots, oldest first."""
    found = []
    for path in (Path(run_dir) / SNAPSHOTS_DIR).glob("step*.pt"):
        digits = path.name[len("step") : -len(".pt")]
        if digits.isdigit():
            found.append((int(digits), path))
    return sorted(found)


def is_run_dir(path: Path) -> bool:
    return (Path(path) / CONFIG_FILE).is_file()


def has_started(run_dir: Path) -> bool:
    """Whether training has left anything to resume from: a checkpoint or a metrics record."""
    return any((Path(run_dir) / name).exists() for name in (LAST, LAST_PREV, METRICS_FILE))


def read_summary(run_dir: Path) -> dict | None:
    """train_summary.json, written when training ends; None while the run has not finished training."""
    return read_json(Path(run_dir) / SUMMARY_FILE)


def is_trained(run_dir: Path) -> bool:
    return read_summary(run_dir) is not None


def read_eval(run_dir: Path, split: str, beam: int) -> dict | None:
    """The report of `eval --split SPLIT` (best checkpoint, beam K, the config's alpha); None if it has not run."""
    return read_json(eval_path(run_dir, split, beam))


def eval_stem(split: str, beam: int, which: str = "best", alpha: float | None = None) -> str:
    """The name (without .json / .hyp.txt) of an evaluation file in RUN_DIR/eval: `test.beam4`, and
    `.alpha1` when alpha is not the config's decode.alpha (None), `.last` / `.averaged` for a checkpoint
    other than best. The one place that names these files."""
    return (
        f"{split}.beam{beam}" + ("" if alpha is None else f".alpha{alpha:g}") + ("" if which == "best" else f".{which}")
    )


def eval_path(
    run_dir: Path, split: str, beam: int, which: str = "best", alpha: float | None = None, suffix: str = ".json"
) -> Path:
    return Path(run_dir) / EVAL_DIR / (eval_stem(split, beam, which, alpha) + suffix)
