"""The `mhatrain` command line: one thin command per stage, options → library calls.

Errors a user can fix (bad config, data, files, options) print one line and exit with status 2;
`--debug` shows the traceback instead. An option with a fixed set of values is a plain string checked
by `choice`, so that every such error reads the same: "--OPTION must be A, B or C, got 'X'".

Imports: a library module that loads torch (most of them: a second or more) is imported inside the
command or helper that calls it, so that `mhatrain --help`, a command's `--help` and option errors
answer without that cost. The module-level imports are the torch-free ones: the option parser, rich,
parts of core, and the bench package's options (its benches load torch when they run).
"""

from __future__ import annotations

import re
import sys
import typing
from pathlib import Path
from typing import Annotated

import click
import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperOption

from .bench import BenchOptions, report_benches
from .bench.options import BENCHES, DECODE_PRECISIONS, DEFAULT_CONFIG, PRECISIONS
from .bench.options import check_options as check_bench_options
from .core.config import load_config
from .core.errors import MhatrainError
from .core.files import atomic_write_json
from .core.rundir import CHECKPOINT_FILES, default_run_dir

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Train, evaluate and study multi-head attention in Transformer translation models.",
)
console = Console(soft_wrap=True)
err_console = Console(stderr=True)
_state = {"debug": False}

SET_HELP = "Override a config value, e.g. --set train.max_tokens=2048 (repeatable)."
# Options that several commands declare alike (typer reads an option from the annotation, its default from
# the parameter): one declaration each.
SetOption = Annotated[list[str] | None, typer.Option("--set", metavar="KEY=VALUE", help=SET_HELP)]
BeamOption = Annotated[int | None, typer.Option("--beam", min=1, help="Beam size (default: decode.beam).")]
AlphaOption = Annotated[float | None, typer.Option("--alpha", min=0.0, help="Length penalty (default: decode.alpha).")]
OPTIONAL_VALUE = ("--html",)  # options whose value may be left out (then the command's default is used)
CHECKPOINTS = tuple(CHECKPOINT_FILES)  # best, last, averaged: what `eval` and `heads` --checkpoint may name
INTERRUPTED = 130  # the exit status of a command stopped by Ctrl-C (128 + SIGINT), as shells expect


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


def _show_version(asked: bool) -> None:
    """--version: the package's version, and in a git checkout its commit (what provenance.json records)."""
    if not asked:
        return
    from .core.provenance import code_version

    code = code_version()
    commit = f" (commit {code['commit'][:12]}{', modified' if code['dirty'] else ''})" if code["commit"] else ""
    console.print(f"mhatrain {code['version']}{commit}", highlight=False)
    raise typer.Exit()


@app.callback()
def _main(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
    version: bool = typer.Option(
        False, "--version", callback=_show_version, is_eager=True, help="Show the version and exit."
    ),
):
    _state["debug"] = debug


@app.command()
def train(
    config: Path = typer.Argument(..., help="YAML config file."),
    set_: SetOption = None,
    out: Path | None = typer.Option(None, "--out", help="Run directory (default: runs/<config name>)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --out from its last checkpoint."),
    keep_batch: bool = typer.Option(
        False,
        "--keep-batch",
        help="With --resume on another number of processes: adjust train.accum_steps to keep the tokens per update.",
    ),
    new_batch: bool = typer.Option(
        False,
        "--new-batch",
        help="With --resume: accept another number of tokens per "
        "update (processes × train.accum_steps × train.max_tokens).",
    ),
    tensorboard: bool = typer.Option(
        False,
        "--tensorboard",
        help="Also write TensorBoard scalars to RUN_DIR/tensorboard "
        "(as --set train.tensorboard=true; needs pip install 'mhatrain\\[tensorboard]').",
    ),
):
    """Train a model from CONFIG into a run directory (under torchrun: one process per device)."""
    from .core.distributed import is_main_process
    from .training.loop import train as run_training

    if keep_batch and new_batch:
        raise MhatrainError(
            "--keep-batch and --new-batch exclude each other: keep the tokens per update, or change them"
        )
    if (keep_batch or new_batch) and not resume:
        raise MhatrainError(f"{'--keep-batch' if keep_batch else '--new-batch'} applies to --resume only")
    cfg = load_config(config, [*(set_ or []), *(["train.tensorboard=true"] if tensorboard else [])])
    run_dir = out or default_run_dir(config)
    out_console = console if is_main_process() else Console(quiet=True)  # under torchrun, rank 0 speaks for all
    out_console.print(f"run directory: {run_dir}")
    summary = run_training(
        cfg,
        run_dir,
        resume=resume,
        console=out_console,
        batch_change="keep" if keep_batch else "new" if new_batch else "",
    )
    out_console.print(
        f"trained {summary['updates']} updates in {summary['train_seconds']:.0f}s "
        f"({summary['tokens_per_s']:.0f} target tokens/s); validation took {summary['valid_share']:.0%} "
        f"of the time"
    )


@app.command("eval")
def evaluate(
    run_dir: Path = typer.Argument(..., help="Run directory made by `mhatrain train`."),
    split: str | None = typer.Option(
        None, "--split", help="train, valid, test, or a split name of the data source (default: test)."
    ),
    src: Path | None = typer.Option(None, "--src", help="Translate this source file instead (plain or .gz)..."),
    ref: Path | None = typer.Option(None, "--ref", help="...and score against this reference file."),
    sacrebleu_set: str | None = typer.Option(
        None, "--sacrebleu-set", help="Or a named sacreBLEU test set (e.g. wmt14), read from sacreBLEU's cache."
    ),
    langpair: str | None = typer.Option(
        None, "--langpair", help="With --sacrebleu-set: its language pair (default: data.src_lang-data.tgt_lang)."
    ),
    beam: BeamOption = None,
    alpha: AlphaOption = None,
    checkpoint: str = typer.Option(
        "best", "--checkpoint", metavar="|".join(CHECKPOINTS), help="best, last, or averaged (see `mhatrain average`)."
    ),
    set_: SetOption = None,
):
    """Translate a split (or a pair of files, or a sacreBLEU test set) with beam search; score with sacreBLEU and chrF."""
    checkpoint = choice(checkpoint, "--checkpoint", CHECKPOINTS)
    from .inference.trained import evaluate_run

    evaluate_run(
        run_dir,
        split,
        beam=beam,
        alpha=alpha,
        which=checkpoint,
        overrides=set_ or [],
        console=console,
        src=src,
        ref=ref,
        sacrebleu_set=sacrebleu_set,
        langpair=langpair,
    )


@app.command()
def score(
    hyp: Path = typer.Option(..., "--hyp", help="Hypotheses: detokenised text, one sentence per line (plain or .gz)."),
    ref: Path | None = typer.Option(None, "--ref", help="References, line by line with --hyp (plain or .gz)."),
    sacrebleu_set: str | None = typer.Option(
        None,
        "--sacrebleu-set",
        help="Or the references of a named sacreBLEU test set (e.g. wmt14), read from sacreBLEU's cache.",
    ),
    langpair: str | None = typer.Option(
        None, "--langpair", help="With --sacrebleu-set: its language pair, e.g. en-de."
    ),
    json_path: Path | None = typer.Option(
        None, "--json", help="Also write the scores, signatures and provenance as JSON."
    ),
):
    """Score an existing hypothesis file: sacreBLEU BLEU, chrF and lowercased BLEU, with signatures."""
    from .inference.scoring import score_files, show_scores

    result = score_files(hyp, ref, sacrebleu_set, langpair)
    show_scores(result, f"{hyp} against {result['references']} ({result['sentences']} sentences)", console)
    if json_path is not None:
        atomic_write_json(json_path, result)
        console.print(f"report: {json_path}")


@app.command()
def translate(
    run_dir: Path = typer.Argument(..., help="Run directory made by `mhatrain train`."),
    text: list[str] | None = typer.Argument(None, help="Sentences to translate (default: read stdin, one per line)."),
    beam: BeamOption = None,
    alpha: AlphaOption = None,
    set_: SetOption = None,
):
    """Translate sentences given as arguments, or stdin line by line."""
    from .inference.trained import translate_lines

    lines = list(text) if text else None
    translate_lines(run_dir, lines, beam, alpha, set_ or [])


@app.command()
def average(
    run_dir: Path = typer.Argument(..., help="Run directory made by `mhatrain train`."),
    checkpoints: list[Path] | None = typer.Argument(
        None, help="Checkpoints to average (same config and vocabulary), or none with --last."
    ),
    last: int = typer.Option(
        0,
        "--last",
        help="Average the run's newest N snapshots (train.keep_checkpoints), "
        "as the paper averages its last 5 checkpoints.",
    ),
):
    """Average checkpoints' weights into RUN_DIR/averaged.pt (evaluate with --checkpoint averaged)."""
    from .training.average import average_run, last_snapshots

    if bool(checkpoints) == bool(last):
        raise MhatrainError(
            "average: give either checkpoint files or --last N, not both"
            if checkpoints
            else "average: give checkpoint files to average, or --last N for the run's newest snapshots"
        )
    paths = list(checkpoints) if checkpoints else last_snapshots(run_dir, last)
    target = average_run(run_dir, paths)
    console.print(f"averaged {len(paths)} checkpoints into {target}: {', '.join(p.name for p in paths)}")


@app.command()
def ablate(
    config: Path = typer.Argument(..., help="YAML config file: every grid point starts from it."),
    heads: str = typer.Option("1,4,8,16,32", "--heads", help="Head counts h; each must divide model.d_model."),
    seeds: str = typer.Option("1", "--seeds", help="Seeds (train.seed), e.g. 1,2,3."),
    vary: list[str] | None = typer.Option(
        None,
        "--vary",
        metavar="KEY=V1,V2",
        help="Also vary a config key, e.g. --vary model.norm=pre,post (repeatable): every combination of "
        "the values is a cell with the whole heads × seeds grid, and `report` maps where extra heads help. "
        "Keys that change together are one factor: --vary K1,K2=A:B,C:D makes the cells "
        "(K1=A, K2=B) and (K1=C, K2=D), e.g. d_model with d_ff.",
    ),
    out: Path | None = typer.Option(None, "--out", help="Study directory (default: studies/<config name>)."),
    set_: SetOption = None,
    jobs: int = typer.Option(1, "--jobs", help="Grid points run at once (as subprocesses when > 1)."),
    devices: str | None = typer.Option(None, "--devices", help="Devices shared out to the jobs: cuda:0,cuda:1."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Record the study, print each point's command, train nothing."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Delete the runs of a study with another config first."),
    allow_code_change: bool = typer.Option(
        False, "--allow-code-change", help="Continue a study whose runs another commit started (mixes code versions)."
    ),
    executor: str | None = typer.Option(
        None,
        "--executor",
        metavar="slurm|local",  # study.cluster.EXECUTORS, spelt out: importing it here would load torch
        # rich markup would read [slurm] as a style and print nothing of it: the backslash escapes it
        help="Run each point as a job through submitit: slurm, "
        "or local (subprocesses on this machine). Needs pip install 'mhatrain\\[slurm]'.",
    ),
    partition: str | None = typer.Option(None, "--partition", help="With --executor slurm: the SLURM partition."),
    time_min: int | None = typer.Option(None, "--time", help="With --executor: wall-clock limit per point, minutes."),
    gpus: int | None = typer.Option(None, "--gpus", help="With --executor: GPUs per point."),
    cpus: int | None = typer.Option(None, "--cpus", help="With --executor: CPU cores per point (also train.threads)."),
):
    """Head-count study (Table 3 A): train and evaluate every (h, seed) with d_k = d_model / h, then report."""
    if executor is None and any(v is not None for v in (partition, time_min, gpus, cpus)):
        raise MhatrainError("--partition, --time, --gpus and --cpus go with --executor slurm or local")
    head_counts = int_list(heads, "--heads", "head counts")
    seed_list = int_list(seeds, "--seeds", "seeds")
    from .study.running.ablate import run_study
    from .study.running.cluster import EXECUTORS, JobOptions

    cluster = None
    if executor is not None:
        cluster = JobOptions(choice(executor, "--executor", EXECUTORS), partition, time_min, gpus, cpus)
    run_study(
        config,
        heads=head_counts,
        seeds=seed_list,
        out=out,
        overrides=set_ or [],
        jobs=jobs,
        devices_text=devices,
        dry_run=dry_run,
        overwrite=overwrite,
        console=console,
        cluster=cluster,
        allow_code_change=allow_code_change,
        vary=vary or [],
    )


@app.command()
def prune(
    run_dir: Path = typer.Argument(..., help="Run directory of a trained model: every λ starts from its best.pt."),
    l0: str = typer.Option("0,0.01,0.03,0.1,0.3", "--l0", help="L0 penalties λ, one fine-tuned run each."),
    out: Path | None = typer.Option(None, "--out", help="Prune directory (default: RUN_DIR-prune)."),
    window: int = typer.Option(
        200, "--window", help="Gates have settled when the open-head count stays the same over this many updates."
    ),
    min_updates: int = typer.Option(
        2000, "--min-updates", help="No λ run counts as settled before this update (its gates need time to move)."
    ),
    max_updates: int = typer.Option(
        20000, "--max-updates", help="Stop a λ run here even if its gates have not settled (a multiple of --window)."
    ),
    set_: SetOption = None,
):
    """Learned head gates (Voita et al. 2019): fine-tune RUN_DIR per L0 penalty until its gates settle,
    evaluate, cut the closed heads out, report. Rerun the same command to continue."""
    from .study.running.prune import PrunePlan, parse_l0s, run_prune

    target = out if out is not None else run_dir.with_name(run_dir.name + "-prune")
    run_prune(PrunePlan(run_dir, target, parse_l0s(l0), window, min_updates, max_updates, set_ or []), console)


@app.command()
def report(
    study_dir: Path = typer.Argument(..., help="Study directory made by `mhatrain ablate`."),
):
    """Report a head-count study (also a partial one): tables, significance tests against h=8 and a plot."""
    from .study.reports.study_report import report_study

    report_study(study_dir, console)


@app.command()
def curves(
    paths: list[Path] = typer.Argument(..., help="Run directories, or one study directory (mean over seeds per h)."),
    out: Path | None = typer.Option(
        None, "--out", help="PNG to write (default: DIR/curves.png for one directory, ./curves.png for several)."
    ),
):
    """Learning curves: validation BLEU and perplexity and training loss against updates, best checkpoints marked."""
    from .study.reports.curves import draw_curves

    draw_curves(paths, out, console)


@app.command()
def export(
    source: Path = typer.Argument(..., help="Study directory made by `mhatrain ablate`, or a run directory."),
    dest: Path | None = typer.Argument(
        None, help="New or empty directory to copy the light files into (e.g. results/NAME)."
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Write into a DEST that holds files: replace those the export writes, keep others."
    ),
    ctranslate2: Path | None = typer.Option(
        None,
        "--ctranslate2",
        metavar="DIR",
        help="Instead: write the run's best model as a CTranslate2 model directory DIR, with its SentencePiece "
        "model beside it (needs pip install 'mhatrain[ctranslate2]').",
    ),
    int8: bool = typer.Option(False, "--int8", help="With --ctranslate2: store the weights as int8."),
):
    """Copy a study's or a run's configs, metrics, evaluations, logs and reports (no checkpoints) with paths made
    relative; or, with --ctranslate2, export a run's model for CTranslate2."""
    if ctranslate2 is not None:
        if dest is not None:
            raise MhatrainError("export --ctranslate2 DIR writes DIR: give no DEST")
        from .inference.deployment import export_run

        written = export_run(source, ctranslate2, "int8" if int8 else "float32")
        console.print(
            f"export: CTranslate2 model ({written.quantization} weights) written to {written.directory}; "
            f"CTranslate2 loads it in {written.load_seconds:.2f} s",
            highlight=False,
        )
        return
    if int8:
        raise MhatrainError("--int8 applies to export --ctranslate2 only")
    if dest is None:
        raise MhatrainError("export needs DEST (a directory to copy the light files into), or --ctranslate2 DIR")
    from .study.running.export import export as export_files

    count, kept = export_files(source, dest, overwrite=overwrite)
    console.print(
        f"export: {count} files written to {dest} (absolute paths made relative to {Path.cwd()})", highlight=False
    )
    if kept:
        shown = ", ".join(str(p.relative_to(dest)) for p in kept[:5]) + (", ..." if len(kept) > 5 else "")
        console.print(
            f"export: {len(kept)} file{'s' if len(kept) != 1 else ''} already there "
            f"{'was' if len(kept) == 1 else 'were'} kept: {shown}",
            highlight=False,
        )


@app.command()
def attention(
    run_dir: Path = typer.Argument(..., help="Run directory made by `mhatrain train`."),
    sentence: str = typer.Argument(..., help="Source sentence to translate and look at."),
    layer: str = typer.Option("all", "--layer", help="Layer number (from 1) or all."),
    kind: str = typer.Option("all", "--kind", help="enc-self, dec-self, cross or all."),
    out: Path | None = typer.Option(None, "--out", help="Output directory (default: RUN_DIR/heads)."),
    html: str | None = typer.Option(
        None,
        "--html",
        metavar="[FILE]",
        help="Also write an interactive, self-contained HTML head view to FILE "
        "(default: attention-SENTENCE.html in the output directory, beside the sentence's other files).",
    ),
    set_: SetOption = None,
):
    """Draw every head's attention map for a sentence and its translation, with per-head statistics."""
    from .analysis.maps import show_attention

    show_attention(run_dir, sentence, parse_layer(layer), parse_kinds(kind), out, console, set_ or [], html)


@app.command()
def heads(
    run_dir: Path = typer.Argument(..., help="Run directory made by `mhatrain train`."),
    split: str = typer.Option("valid", "--split", help="train, valid, test, or a split name of the data source."),
    metric: str = typer.Option(
        "bleu", "--metric", help="bleu (decode; also reports loss) or loss (teacher forcing only, fast)."
    ),
    max_sentences: int = typer.Option(
        500, "--max-sentences", min=0, help="Judge heads on the first N pairs (0 = all)."
    ),
    beam: int = typer.Option(1, "--beam", min=1, help="Beam size for BLEU (1 = greedy, fastest)."),
    out: Path | None = typer.Option(None, "--out", help="Output directory (default: RUN_DIR/heads)."),
    checkpoint: str = typer.Option(
        "best",
        "--checkpoint",
        help="best, last, or averaged (see `mhatrain average`); others than best name their files.",
    ),
    roles: bool = typer.Option(
        False,
        "--roles",
        help="Instead: what each head does over the sentences (entropy, "
        "confidence, neighbour/sink/diagonal weight) and its class.",
    ),
    set_: SetOption = None,
):
    """Head importance: mask each head, gradient importance (Michel et al. 2019) and pruning curves; or head roles."""
    checkpoint = choice(checkpoint, "--checkpoint", CHECKPOINTS)
    metric = choice(metric, "--metric", ("bleu", "loss"))
    if roles:
        from .analysis.roles import analyse_roles

        analyse_roles(run_dir, split, max_sentences, out, checkpoint, set_ or [], console)
        return
    from .analysis.importance import analyse_heads

    analyse_heads(
        run_dir,
        split,
        metric,
        max_sentences,
        beam,
        out,
        checkpoint,
        set_ or [],
        console,
    )


# ----------------------------------------------------------------------------- bench: its options, then the command
# Twenty-one options: declared here as annotated types (typer reads the option from the annotation, the
# default from the parameter), so that the command's signature and body read at a glance.

BenchNames = Annotated[list[str], typer.Argument(help="attention, train and/or decode (run in that order).")]
BenchQuick = Annotated[
    bool,
    typer.Option(
        "--quick",
        help="Tiny shapes and models, few repetitions, no peak memory: a smoke run of every part (about a "
        "minute of CPU time for all three); it judges no targets, which are set for full size.",
    ),
]
BenchRepeats = Annotated[
    int | None,
    typer.Option("--repeats", min=1, help="Timed samples per peer (default: attention 20, train 5, decode 3)."),
]
BenchWarmup = Annotated[
    int | None,
    typer.Option(
        "--warmup", min=0, help="Untimed rounds per peer before timing (default: attention 3, train 1, decode 1)."
    ),
]
BenchPrecision = Annotated[
    str | None,
    typer.Option(
        "--precision",
        help="fp32, bf16, both, or a list such as fp32,int8 (int8: decode only, Linear layers quantized; default: "
        "both; decode: the config's train.precision, and fp32 and int8 with a trained model; by default bf16 is "
        "left out, with a note, on a CPU without native bf16).",
    ),
]
BenchHeads = Annotated[str | None, typer.Option("--heads", help="attention: head counts h (default 1,4,8,16,32).")]
BenchBeams = Annotated[str, typer.Option("--beams", help="decode: beam sizes (1 = greedy).")]
BenchDevice = Annotated[
    str | None, typer.Option("--device", help="cpu, cuda or cuda:N (default: cuda when available).")
]
BenchThreads = Annotated[int, typer.Option("--threads", min=0, help="CPU threads for torch (0 = torch's default).")]
BenchCompile = Annotated[
    bool, typer.Option("--compile", help="torch.compile each peer (falls back to eager with a note).")
]
BenchMemory = Annotated[
    bool | None,
    typer.Option(
        "--memory/--no-memory",
        help="Measure each peer's peak memory in a fresh process (default: yes, but no with --quick).",
    ),
]
BenchConfig = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="Model, batches and decoding settings (default: configs/multi30k.yaml in the current directory, "
        "a source checkout's root).",
    ),
]
BenchData = Annotated[
    Path | None,
    typer.Option(
        "--data",
        help="train/decode: folder of parallel text, e.g. Multi30k's raw .gz files (default: data.local_dir; synthetic if absent).",
    ),
]
BenchCheckpoint = Annotated[
    Path | None,
    typer.Option(
        "--checkpoint",
        help="decode: the trained run whose best weights and decode settings are measured "
        "(default: runs/<config name>, what mhatrain train makes of --config).",
    ),
]
BenchRandomWeights = Annotated[
    bool,
    typer.Option(
        "--random-weights",
        help="decode: random weights with every sentence forced to one length, instead of a trained run "
        "(measures uniform lengths only; --quick implies it).",
    ),
]
BenchMaxSentences = Annotated[
    int, typer.Option("--max-sentences", min=0, help="decode: the first N test sentences (0 = all).")
]
BenchBatches = Annotated[
    int | None, typer.Option("--batches", min=1, help="train: batches per timed sample (default 4).")
]
BenchAgainst = Annotated[
    Path | None,
    typer.Option(
        "--against",
        help="train, decode: time another checkout's step or search (its root folder) against ours, instead of the usual peers.",
    ),
]
BenchJson = Annotated[Path | None, typer.Option("--json", help="Also write the results as JSON.")]
BenchMarkdown = Annotated[Path | None, typer.Option("--markdown", help="Also write the tables as Markdown.")]


@app.command()
def bench(
    names: BenchNames,
    quick: BenchQuick = False,
    repeats: BenchRepeats = None,
    warmup: BenchWarmup = None,
    precision: BenchPrecision = None,
    heads: BenchHeads = None,
    beams: BenchBeams = "1,4",
    device: BenchDevice = None,
    threads: BenchThreads = 0,
    compile_: BenchCompile = False,
    memory: BenchMemory = None,
    config: BenchConfig = None,
    set_: SetOption = None,
    data: BenchData = None,
    checkpoint: BenchCheckpoint = None,
    random_weights: BenchRandomWeights = False,
    max_sentences: BenchMaxSentences = 0,
    batches: BenchBatches = None,
    against: BenchAgainst = None,
    json_path: BenchJson = None,
    markdown_path: BenchMarkdown = None,
):
    """Time our attention, training step and decoding against named peers, in one process and run."""
    chosen = parse_bench_names(list(names))
    options = BenchOptions(
        device=parse_device(device),
        quick=quick,
        repeats=repeats,
        warmup=warmup,
        precisions=parse_precision(precision),
        heads=tuple(int_list(heads, "--heads", "head counts", 1)) if heads is not None else BenchOptions.heads,
        beams=tuple(int_list(beams, "--beams", "beam sizes", 1)),
        compile=compile_,
        memory=memory,
        threads=threads,
        config=config or DEFAULT_CONFIG,
        overrides=tuple(set_ or ()),
        data_dir=data,
        checkpoint=checkpoint,
        random_weights=random_weights,
        max_sentences=max_sentences,
        batches=batches,
        against=against,
    )
    check_bench_options(chosen, options, heads_given=heads is not None)
    report_benches(chosen, options, console, json_path, markdown_path)


# ----------------------------------------------------------------------------- option values → typed values


def choice(value: str, option: str, choices: tuple[str, ...]) -> str:
    """`value` if it is one of `choices`, else the one-line error."""
    if value not in choices:
        listed = ", ".join(choices[:-1]) + f" or {choices[-1]}" if len(choices) > 1 else choices[0]
        raise MhatrainError(f"{option} must be {listed}, got {value!r}")
    return value


def parse_kinds(kind: str) -> tuple[str, ...]:
    """--kind: one kind of attention, or all of them."""
    from .analysis.maps import KINDS

    return KINDS if choice(kind, "--kind", (*KINDS, "all")) == "all" else (kind,)


def parse_layer(layer: str) -> int | None:
    """--layer: a layer number (from 1), or None for all (the model decides which numbers exist)."""
    if layer == "all":
        return None
    try:
        return int(layer)
    except ValueError:
        raise MhatrainError(f"--layer must be a layer number (from 1) or all, got {layer!r}") from None


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


def parse_device(text: str | None):
    """--device of the benches: cpu, cuda or cuda:N (default: cuda when available) → torch.device."""
    import torch

    from .core.runtime import is_device_name

    if text is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not is_device_name(text):
        raise MhatrainError(f"--device must be cpu, cuda or cuda:N, got {text!r}")
    if text.startswith("cuda") and not torch.cuda.is_available():
        raise MhatrainError(f"--device {text} but CUDA is not available on this machine")
    return torch.device(text)


def with_optional_values(args: list[str]) -> list[str]:
    """Typer's parser has no options with an optional value: a bare `--html` (last, or followed by
    another option) is passed on as `--html=`, the empty value that stands for the default."""
    args = list(args)
    end = args.index("--") if "--" in args else len(args)  # after `--` everything is an argument
    for i in range(end):
        following = args[i + 1] if i + 1 < end else None
        if args[i] in OPTIONAL_VALUE and (following is None or (following.startswith("-") and following != "-")):
            args[i] += "="
    return args


def main() -> None:
    _help_words()
    try:
        status = app(args=with_optional_values(sys.argv[1:]), standalone_mode=False)
        # Typer turns Ctrl-C in a command into the status 130, returned rather than raised
        if status == INTERRUPTED:
            err_console.print("interrupted")
        if isinstance(status, int) and status:
            sys.exit(status)
    except MhatrainError as exc:
        if _state["debug"]:
            raise
        _print_error(str(exc))
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(INTERRUPTED)
    except SystemExit:
        raise
    except Exception as exc:  # from outside mhatrain: the option parser's usage errors and aborts, torch's OOM
        usage_errors, aborts = _parser_exceptions()
        if isinstance(exc, aborts):
            sys.exit(INTERRUPTED)
        if type(exc).__name__ == "OutOfMemoryError" and not _state["debug"]:  # training steps skip their own
            _print_error(
                f"out of GPU memory ({str(exc).splitlines()[0][:120]}); lower train.max_tokens or "
                f"decode.batch_tokens with --set"
            )
            sys.exit(2)
        if not isinstance(exc, usage_errors) or _state["debug"]:
            raise
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare `mhatrain`: the help text
            exc.show()
            sys.exit(exc.exit_code)
        ctx = getattr(exc, "ctx", None)
        hint = f" (see: {ctx.command_path} --help)" if ctx is not None else ""
        _print_error(" ".join(exc.format_message().split()) + hint)
        sys.exit(exc.exit_code or 2)


# ----------------------------------------------------------------------------- how parameters are written
# --help and docs/commands.md (scripts/make_docs.py) write a parameter the same way, from these.

TYPE_WORDS = {Path: "PATH", int: "N", float: "NUMBER", str: "TEXT"}


def argument_name(param) -> str:
    """An argument as --help and the docs name it: CONFIG; TEXT... when it repeats."""
    return param.name.upper() + ("..." if param.nargs == -1 else "")


def argument_usage(param) -> str:
    """An argument in a usage line: CONFIG, or [TEXT...] when it may be left out."""
    return argument_name(param) if param.required else f"[{argument_name(param)}]"


def value_word(param) -> str:
    """What an option's value looks like: its metavar, else its choices, else its type (PATH, N, NUMBER, TEXT)."""
    if getattr(param, "metavar", None):
        return param.metavar
    choices = _choices(param)
    if choices:
        return "|".join(choices)
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    while typing.get_args(annotation):  # X | None, list[X]: X
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    name = getattr(getattr(param, "type", None), "name", "text")  # older Typer: click's type
    return TYPE_WORDS.get(annotation, {"path": "PATH", "integer": "N", "float": "NUMBER"}.get(name, "TEXT"))


def _choices(param) -> tuple[str, ...]:
    """The allowed values of a parameter typed with Literal[...] (or a click Choice)."""
    choices = getattr(getattr(param, "type", None), "choices", None)
    if choices:
        return tuple(str(c) for c in choices)
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if typing.get_origin(annotation) is typing.Literal:
        return tuple(str(c) for c in typing.get_args(annotation))
    return ()


def _help_words() -> None:
    """Typer ≥ 0.2x writes parameters its own way in --help: `{config}` and `[checkpoints]...` in the
    usage line, a type such as `<path>` or `<list[Path]>` after each, `<bool>` after flags. Write them
    as the docs do instead: `CONFIG`, `[CHECKPOINTS]...`, `--out PATH`, flags bare."""
    from typer.core import TyperArgument

    if getattr(TyperOption, "help_words", False) or not hasattr(TyperOption, "display_type_rich"):
        return  # done, or an older Typer, which writes them as click does
    TyperOption.display_type_rich = lambda self, ctx: None if getattr(self, "is_flag", False) else value_word(self)
    TyperArgument.display_type_rich = lambda self, ctx: None  # the name says it: CONFIG, RUN_DIR
    TyperArgument.display_name_raw = property(lambda self: self.metavar or self.name.upper())
    TyperArgument.get_usage_pieces = lambda self, ctx: [argument_usage(self)]
    TyperOption.help_words = True


def _print_error(message: str) -> None:
    # escape: a message quoting user input such as "[x]" must print as it is, not as console markup
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def _parser_exceptions() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """Usage-error and abort classes of the option parser. Typer ≥ 0.2x parses with its own copy
    of click, whose exceptions derive from typer.TyperException, not from click's."""
    usage = [click.exceptions.ClickException]
    if hasattr(typer, "TyperException"):
        usage.append(typer.TyperException)
    return tuple(usage), (click.exceptions.Abort, typer.Abort)


if __name__ == "__main__":
    main()
