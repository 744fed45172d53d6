"""The `mhatrain` command line: one thin command per stage, its options → one library call. Option
values are parsed and errors turned into one line and an exit status in console/; bench declares its
own options. A library module that loads torch is imported inside the command that calls it, so that
`mhatrain --help`, a command's `--help` and option errors answer without that cost.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console

from .bench import cli_options as bench_option
from .bench.runner import report_benches
from .console import command_options as opt
from .console.shims import root_options, run
from .core.config import load_config
from .core.rundir import default_run_dir

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Train, evaluate and study multi-head attention in Transformer translation models.",
)
console = Console(soft_wrap=True)
app.callback()(root_options)  # --debug and --version


@app.command()
def train(
    config: Path = typer.Argument(..., help="YAML config file."),
    set_: opt.SetOption = None,
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
    from .training.progress import summary_line

    batch_change = opt.parse_batch_change(keep_batch, new_batch, resume)
    cfg = load_config(config, [*(set_ or []), *(["train.tensorboard=true"] if tensorboard else [])])
    run_dir = out or default_run_dir(config)
    out_console = console if is_main_process() else Console(quiet=True)  # under torchrun, rank 0 speaks for all
    out_console.print(f"run directory: {run_dir}")
    summary = run_training(cfg, run_dir, resume=resume, console=out_console, batch_change=batch_change)
    out_console.print(summary_line(summary))


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
    beam: opt.BeamOption = None,
    alpha: opt.AlphaOption = None,
    checkpoint: str = typer.Option(
        "best",
        "--checkpoint",
        metavar="|".join(opt.CHECKPOINTS),
        help="best, last, or averaged (see `mhatrain average`).",
    ),
    set_: opt.SetOption = None,
):
    """Translate a split (or a pair of files, or a sacreBLEU test set) with beam search; score with sacreBLEU and chrF."""
    which = opt.choice(checkpoint, "--checkpoint", opt.CHECKPOINTS)  # before torch loads: errors answer at once
    from .inference.trained import evaluate_run

    evaluate_run(
        run_dir,
        split,
        beam=beam,
        alpha=alpha,
        which=which,
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
    from .inference.scoring import score_files, show_scores, write_scores

    result = score_files(hyp, ref, sacrebleu_set, langpair)
    show_scores(result, f"{hyp} against {result['references']} ({result['sentences']} sentences)", console)
    write_scores(result, json_path, console)


@app.command()
def translate(
    run_dir: Path = typer.Argument(..., help="Run directory made by `mhatrain train`."),
    text: list[str] | None = typer.Argument(None, help="Sentences to translate (default: read stdin, one per line)."),
    beam: opt.BeamOption = None,
    alpha: opt.AlphaOption = None,
    set_: opt.SetOption = None,
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
    from .training.average import average_run, chosen_checkpoints

    paths = chosen_checkpoints(run_dir, checkpoints or [], last)
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
    layout: opt.LayoutOption = None,
    out: Path | None = typer.Option(None, "--out", help="Study directory (default: studies/<config name>)."),
    set_: opt.SetOption = None,
    jobs: int = typer.Option(1, "--jobs", help="Grid points run at once (as subprocesses when > 1)."),
    devices: str | None = typer.Option(None, "--devices", help="Devices shared out to the jobs: cuda:0,cuda:1."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Record the study, print each point's commands only."),
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
    from .study.running.ablate import run_study
    from .study.running.cluster import job_options

    run_study(
        config,
        heads=opt.int_list(heads, "--heads", "head counts"),
        seeds=opt.int_list(seeds, "--seeds", "seeds"),
        out=out,
        overrides=set_ or [],
        jobs=jobs,
        devices_text=devices,
        dry_run=dry_run,
        overwrite=overwrite,
        console=console,
        cluster=job_options(executor, partition, time_min, gpus, cpus),
        allow_code_change=allow_code_change,
        vary=vary or [],
        layouts=layout or [],
    )


@app.command()
def prune(
    run_dir: Path = typer.Argument(..., help="Run directory of a trained model: every λ starts from its best.pt."),
    l0: str = typer.Option("0,0.01,0.03,0.1,0.3", "--l0", help="L0 penalties λ, one fine-tuned run each."),
    out: Path | None = typer.Option(None, "--out", help="Prune directory (default: RUN_DIR-prune)."),
    window: int = typer.Option(200, "--window", help="Settled: the open-head count holds for this many updates."),
    min_updates: int = typer.Option(
        600, "--min-updates", help="No λ run counts as settled before this update (its gates need time to move)."
    ),
    max_updates: int = typer.Option(
        20000, "--max-updates", help="Stop a λ run here even if its gates have not settled (a multiple of --window)."
    ),
    set_: opt.SetOption = None,
    grid: opt.GridOption = None,
):
    """Learned head gates (Voita et al. 2019): fine-tune RUN_DIR per L0 penalty until its gates settle,
    evaluate, cut the closed heads out, report. Rerun the same command to continue."""
    from .study.running.prune import prune_plan, run_prune

    run_prune(prune_plan(run_dir, out, l0, window, min_updates, max_updates, set_ or [], grid), console)


@app.command()
def report(study_dir: Path = typer.Argument(..., help="Study directory made by `mhatrain ablate`.")):
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
        "model beside it (needs pip install 'mhatrain\\[ctranslate2]').",
    ),
    int8: bool = typer.Option(False, "--int8", help="With --ctranslate2: store the weights as int8."),
):
    """Copy a study's or a run's configs, metrics, evaluations, logs and reports (no checkpoints) with paths made
    relative; or, with --ctranslate2, export a run's model for CTranslate2."""
    if ctranslate2 is not None:
        from .inference.deployment import export_for_deployment

        export_for_deployment(source, dest, ctranslate2, int8, console)
        return
    from .study.running.export import export_light_files

    export_light_files(source, dest, overwrite, int8, console)


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
    set_: opt.SetOption = None,
):
    """Draw every head's attention map for a sentence and its translation, with per-head statistics."""
    from .analysis.maps import show_attention

    show_attention(run_dir, sentence, opt.parse_layer(layer), opt.parse_kinds(kind), out, console, set_ or [], html)


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
    set_: opt.SetOption = None,
):
    """Head importance: mask each head, gradient importance (Michel et al. 2019) and pruning curves; or head roles."""
    checkpoint = opt.choice(checkpoint, "--checkpoint", opt.CHECKPOINTS)
    metric = opt.choice(metric, "--metric", ("bleu", "loss"))
    if roles:
        from .analysis.roles import analyse_roles

        analyse_roles(run_dir, split, max_sentences, out, checkpoint, set_ or [], console)
        return
    from .analysis.importance import analyse_heads

    analyse_heads(run_dir, split, metric, max_sentences, beam, out, checkpoint, set_ or [], console)


@app.command()
def bench(
    ctx: typer.Context,
    names: bench_option.Names,
    quick: bench_option.Quick = False,
    repeats: bench_option.Repeats = None,
    warmup: bench_option.Warmup = None,
    precision: bench_option.Precision = None,
    heads: bench_option.Heads = None,
    beams: bench_option.Beams = "1,4",
    device: bench_option.Device = None,
    threads: bench_option.Threads = 0,
    compile_: bench_option.Compile = False,
    memory: bench_option.Memory = None,
    config: bench_option.Config = None,
    set_: opt.SetOption = None,
    data: bench_option.Data = None,
    checkpoint: bench_option.Checkpoint = None,
    random_weights: bench_option.RandomWeights = False,
    max_sentences: bench_option.MaxSentences = 0,
    batches: bench_option.Batches = None,
    against: bench_option.Against = None,
    versus: bench_option.Versus = None,
    json_path: bench_option.Json = None,
    markdown_path: bench_option.Markdown = None,
):
    """Time our attention, training step and decoding against named peers, in one run."""
    report_benches(*bench_option.parse(ctx.params), console, json_path, markdown_path)  # bench parses its options


def main() -> None:
    run(app, sys.argv[1:])


if __name__ == "__main__":
    main()
