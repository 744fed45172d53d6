"""The `mhatrain` command line: one thin command per stage, options → library calls.

Errors a user can fix (bad config, data, files, options) print one line and exit with status 2;
`--debug` shows the traceback instead.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

from .errors import MhatrainError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Train, evaluate and study multi-head attention in Transformer translation models.")
console = Console(soft_wrap=True)
err_console = Console(stderr=True)
_state = {"debug": False}

SET_HELP = "Override a config value, e.g. --set train.max_tokens=2048 (repeatable)."


@app.callback()
def _main(debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors.")):
    _state["debug"] = debug


@app.command()
def train(
    config: Path = typer.Argument(..., help="YAML config file."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default: runs/<config name>)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --out from its last checkpoint."),
):
    """Train a model from CONFIG into a run directory."""
    from .config import load_config
    from .train import train as run_training

    cfg = load_config(config, set_ or [])
    run_dir = out or Path("runs") / config.stem
    console.print(f"run directory: {run_dir}")
    summary = run_training(cfg, run_dir, resume=resume, console=console)
    console.print(f"trained {summary['updates']} updates in {summary['train_seconds']:.0f}s "
                  f"({summary['tokens_per_s']:.0f} target tokens/s); validation took {summary['valid_share']:.0%} of the time")


@app.command("eval")
def evaluate(
    run_dir: Path = typer.Argument(..., help="Run directory made by `mhatrain train`."),
    split: str = typer.Option("test", "--split", help="train, valid, test, or a split name of the data source."),
    beam: Optional[int] = typer.Option(None, "--beam", min=1, help="Beam size (default: decode.beam)."),
    alpha: Optional[float] = typer.Option(None, "--alpha", min=0.0, help="Length penalty (default: decode.alpha)."),
    checkpoint: str = typer.Option("best", "--checkpoint", help="best or last."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
):
    """Translate a split with beam search and score it with sacreBLEU and chrF."""
    from .runner import evaluate_run

    if checkpoint not in ("best", "last"):
        raise MhatrainError(f"--checkpoint must be best or last, got {checkpoint!r}")
    evaluate_run(run_dir, split, beam, alpha, checkpoint, set_ or [], console)


@app.command()
def translate(
    run_dir: Path = typer.Argument(..., help="Run directory made by `mhatrain train`."),
    text: Optional[List[str]] = typer.Argument(None, help="Sentences to translate (default: read stdin, one per line)."),
    beam: Optional[int] = typer.Option(None, "--beam", min=1, help="Beam size (default: decode.beam)."),
    alpha: Optional[float] = typer.Option(None, "--alpha", min=0.0, help="Length penalty (default: decode.alpha)."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
):
    """Translate sentences given as arguments, or stdin line by line."""
    from .runner import translate_lines

    lines = list(text) if text else None
    translate_lines(run_dir, lines, beam, alpha, set_ or [])


@app.command()
def attention(
    run_dir: Path = typer.Argument(..., help="Run directory made by `mhatrain train`."),
    sentence: str = typer.Argument(..., help="Source sentence to translate and look at."),
    layer: str = typer.Option("all", "--layer", help="Layer number (from 1) or all."),
    kind: str = typer.Option("all", "--kind", help="enc-self, dec-self, cross or all."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output directory (default: RUN_DIR/heads)."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
):
    """Draw every head's attention map for a sentence and its translation, with per-head statistics."""
    from .heads import show_attention

    show_attention(run_dir, sentence, layer, kind, out, console, set_ or [])


@app.command()
def heads(
    run_dir: Path = typer.Argument(..., help="Run directory made by `mhatrain train`."),
    split: str = typer.Option("valid", "--split", help="train, valid, test, or a split name of the data source."),
    metric: str = typer.Option("bleu", "--metric", help="bleu (decode; also reports loss) or loss (teacher forcing only, fast)."),
    max_sentences: int = typer.Option(500, "--max-sentences", min=0, help="Judge heads on the first N pairs (0 = all)."),
    beam: int = typer.Option(1, "--beam", min=1, help="Beam size for BLEU (1 = greedy, fastest)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output directory (default: RUN_DIR/heads)."),
    checkpoint: str = typer.Option("best", "--checkpoint", help="best or last."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
):
    """Head importance: mask each head, gradient importance (Michel et al. 2019) and pruning curves."""
    from .heads import analyse_heads

    analyse_heads(run_dir, split, metric, max_sentences, beam, out, checkpoint, set_ or [], console)


def main() -> None:
    try:
        app(standalone_mode=False)
    except MhatrainError as exc:
        if _state["debug"]:
            raise
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as exc:  # click usage errors and the like
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        if isinstance(exc, click.exceptions.Abort):
            sys.exit(130)
        raise


if __name__ == "__main__":
    main()
