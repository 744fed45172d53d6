"""What a `mhatrain bench` run measures and how: the options shared by every bench.

Defaults are per bench (attention samples are milliseconds, decode samples are minutes); `--quick`
shrinks shapes, models and repetitions and leaves out the peak-memory processes (unless --memory), a
smoke run of every part whose numbers do not speak for full size (no targets are judged).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.config import heads_divide, load_config
from ..core.errors import MhatrainError
from ..core.rundir import default_run_dir, is_run_dir
from .against import check_checkout

if TYPE_CHECKING:  # torch is imported when a bench runs, so that option errors come at once
    import torch

BENCHES = ("attention", "train", "decode")
# --config's default: the Multi30k config of a source checkout, relative to the current directory (as
# `mhatrain train`'s runs/); an installed package has none, and then --config is needed.
DEFAULT_CONFIG = Path("configs") / "multi30k.yaml"
PRECISIONS = ("fp32", "bf16")  # what every bench measures; decode also int8 (DECODE_PRECISIONS)
DECODE_PRECISIONS = (*PRECISIONS, "int8")  # int8: Linear layers quantized (ours: torch's dynamic quantization)
QUICK_D_MODEL = 64  # --quick: the width of the attention layer and of the train/decode models

# bench: (repeats, warm-up rounds), full size and --quick
REPETITIONS = {"attention": ((20, 3), (3, 1)), "train": ((5, 1), (2, 1)), "decode": ((3, 1), (2, 1))}


@dataclass
class BenchOptions:
    device: torch.device = field(default_factory=lambda: _cpu())
    quick: bool = False
    repeats: int | None = None  # None: the bench's default
    warmup: int | None = None
    precisions: tuple[str, ...] | None = None  # None: fp32 and bf16 (decode: the config's precision)
    heads: tuple[int, ...] = (1, 4, 8, 16, 32)  # attention
    beams: tuple[int, ...] = (1, 4)  # decode
    compile: bool = False
    memory: bool | None = None  # None: measured, except with --quick (fresh processes cost seconds each)
    threads: int = 0  # 0: torch's default
    config: Path = DEFAULT_CONFIG
    overrides: tuple[str, ...] = ()  # --set section.key=value, applied to the config
    data_dir: Path | None = None  # None: the config's data.local_dir, else synthetic input
    checkpoint: Path | None = None  # decode: a run directory for ours (None: the config's default run)
    random_weights: bool = False  # decode: random weights, every sentence forced to one length (--quick implies it)
    max_sentences: int = 0  # decode: 0 = the whole test set
    batches: int | None = None  # train: batches per timed sample
    against: Path | None = None  # train, decode: another checkout whose step or search is the only peer (an A/B)
    versus: Path | None = None  # decode: another trained run, timed against --checkpoint's with our search
    seed: int = 1

    def __post_init__(self):
        if self.memory is None:
            self.memory = not self.quick

    def load_config(self):
        """The config file with the --set overrides (data paths are checked where they are used)."""
        if self.config == DEFAULT_CONFIG and not DEFAULT_CONFIG.is_file():
            raise MhatrainError(
                f"no --config given, and {DEFAULT_CONFIG} (a source checkout's) is not in {Path.cwd()}: "
                f"pass --config FILE"
            )
        return load_config(self.config, self.overrides, check_paths=False)

    def decode_checkpoint(self) -> Path | None:
        """The trained run `bench decode` measures: --checkpoint, else the run `mhatrain train --config`
        writes by default (runs/<config name>); None with --random-weights or --quick."""
        if self.checkpoint is not None:
            return Path(self.checkpoint)
        if self.random_weights or self.quick:
            return None
        run = default_run_dir(self.config)
        if not is_run_dir(run):
            raise MhatrainError(
                f"bench decode measures a trained model, and {run} is not a run directory: pass --checkpoint "
                f"RUN_DIR (made by mhatrain train), or --random-weights to time random weights at uniform lengths"
            )
        return run

    def chosen_precisions(self, default: tuple[str, ...], log) -> tuple[tuple[str, ...], str | None]:
        """The precisions a bench measures, and a note on what it left out: --precision's as given; else
        `default`, less bf16 on a CPU without native bf16, where one bf16 case takes tens of times as
        long as fp32 and times a mode nobody should train in there (--precision bf16 still measures it). The
        note is logged here; the bench adds it to its result."""
        if self.precisions is not None or "bf16" not in default:
            return self.precisions or default, None
        from ..core.runtime import bf16_slowdown  # imports torch: only once a bench runs

        slowdown = bf16_slowdown(self.device)
        if slowdown is None:
            return default, None
        kept = tuple(p for p in default if p != "bf16") or ("fp32",)
        note = (
            f"bf16 left out: its matmuls run {slowdown:.0f}× slower than fp32 on this CPU (no native bf16); "
            f"--precision bf16 measures it anyway"
        )
        log(f"bench: {note}")
        return kept, note

    def repetitions(self, bench: str) -> tuple[int, int]:
        repeats, warmup = REPETITIONS[bench][1 if self.quick else 0]
        return self.repeats or repeats, warmup if self.warmup is None else self.warmup


def _cpu() -> torch.device:
    import torch

    return torch.device("cpu")


def check_heads(heads: tuple[int, ...], d_model: int) -> None:
    bad = [h for h in heads if not heads_divide(d_model, h)]
    if bad:
        raise MhatrainError(f"--heads {','.join(map(str, heads))}: h={bad[0]} does not divide d_model={d_model}")


def check_options(names: list[str], options: BenchOptions, heads_given: bool) -> None:
    """Fail in one line, before anything is measured, on options that cannot work."""
    if heads_given and "attention" not in names:
        raise MhatrainError("--heads applies to `mhatrain bench attention` only")
    if options.checkpoint is not None or options.random_weights:
        option = "--checkpoint" if options.checkpoint is not None else "--random-weights"
        if "decode" not in names:
            raise MhatrainError(f"{option} applies to `mhatrain bench decode` only")
        if options.checkpoint is not None and options.random_weights:
            raise MhatrainError(
                "--checkpoint and --random-weights exclude each other: a trained model, or random weights"
            )
        if options.checkpoint is not None:
            _require_run_dir("--checkpoint", options.checkpoint)
    if "int8" in (options.precisions or ()) and names != ["decode"]:
        raise MhatrainError("--precision int8 applies to `mhatrain bench decode` only")
    if options.against is not None:
        if names not in (["train"], ["decode"]):
            raise MhatrainError("--against applies to one bench, `mhatrain bench train` or `mhatrain bench decode`")
        check_checkout(options.against)
    if options.versus is not None:
        _check_versus(names, options)
    config = options.load_config()
    if "attention" in names:
        check_heads(options.heads, QUICK_D_MODEL if options.quick else config.model.d_model)
    ct2_peer = options.against is None and options.versus is None
    if "decode" in names and ct2_peer and options.decode_checkpoint() is not None:
        from ..inference.deployment import require_ctranslate2  # imports torch: only once the options are known good

        require_ctranslate2("bench decode (its CTranslate2 peer; --random-weights needs no engine)")
    random_decode = "decode" in names and options.decode_checkpoint() is None
    needs_transformers = [
        n for n in names if (n == "train" or (n == "decode" and random_decode)) and options.against is None
    ]
    if needs_transformers:
        from .peers import require_transformers  # imports torch: only once the options are known good

        require_transformers(f"bench {' and '.join(needs_transformers)}")


def _require_run_dir(option: str, path: Path) -> None:
    if not is_run_dir(Path(path)):
        raise MhatrainError(f"{option} {path}: not a run directory (no config.yaml)")


def _check_versus(names: list[str], options: BenchOptions) -> None:
    """--versus times two trained runs with our search: not with another checkout's search or random weights."""
    if "decode" not in names:
        raise MhatrainError("--versus applies to `mhatrain bench decode` only")
    clash = "--against" if options.against is not None else "--random-weights" if options.random_weights else None
    if clash is not None:
        raise MhatrainError(
            f"--versus and {clash} exclude each other: --versus times two trained runs, both with our search"
        )
    _require_run_dir("--versus", options.versus)
    if options.decode_checkpoint() is None:  # --quick without --checkpoint
        raise MhatrainError("--versus times two trained runs: give the other one with --checkpoint RUN_DIR")
