"""What Typer does not do as `mhatrain` needs: write parameters in --help as the docs do, take an
option whose value may be left out, and end every failure with one line and an exit status.

Errors a user can fix (bad config, data, files, options) print one line and exit with status 2;
`--debug` shows the traceback instead; Ctrl-C exits with 130.
"""

from __future__ import annotations

import sys
import typing
from pathlib import Path

import click
import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperOption

from ..core.errors import MhatrainError

OPTIONAL_VALUE = ("--html",)  # options whose value may be left out (then the command's default is used)
INTERRUPTED = 130  # the exit status of a command stopped by Ctrl-C (128 + SIGINT), as shells expect
err_console = Console(stderr=True)
_given = {"debug": False}  # --debug, once the options are parsed


def show_version(asked: bool) -> None:
    """--version: the package's version, and in a git checkout its commit (what provenance.json records)."""
    if not asked:
        return
    from ..core.provenance import code_version

    code = code_version()
    commit = f" (commit {code['commit'][:12]}{', modified' if code['dirty'] else ''})" if code["commit"] else ""
    Console(soft_wrap=True).print(f"mhatrain {code['version']}{commit}", highlight=False)
    raise typer.Exit()


def root_options(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
    version: bool = typer.Option(
        False, "--version", callback=show_version, is_eager=True, help="Show the version and exit."
    ),
):
    # `mhatrain`'s own options, before the command: the app's callback (no docstring: the app has its help)
    _given["debug"] = debug


def run(app: typer.Typer, args: list[str]) -> None:
    """Run the app on the command line `args` and exit with its status."""
    help_words()
    try:
        status = app(args=with_optional_values(args), standalone_mode=False)
        # Typer turns Ctrl-C in a command into the status 130, returned rather than raised
        if status == INTERRUPTED:
            err_console.print("interrupted")
        if isinstance(status, int) and status:
            sys.exit(status)
    except MhatrainError as exc:
        if _given["debug"]:
            raise
        print_error(str(exc))
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
        if type(exc).__name__ == "OutOfMemoryError" and not _given["debug"]:  # training steps skip their own
            print_error(
                f"out of GPU memory ({str(exc).splitlines()[0][:120]}); lower train.max_tokens or "
                f"decode.batch_tokens with --set"
            )
            sys.exit(2)
        if not isinstance(exc, usage_errors) or _given["debug"]:
            raise
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare `mhatrain`: the help text
            exc.show()
            sys.exit(exc.exit_code)
        ctx = getattr(exc, "ctx", None)
        hint = f" (see: {ctx.command_path} --help)" if ctx is not None else ""
        print_error(" ".join(exc.format_message().split()) + hint)
        sys.exit(exc.exit_code or 2)


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


def print_error(message: str) -> None:
    # escape: a message quoting user input such as "[x]" must print as it is, not as console markup
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def _parser_exceptions() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """Usage-error and abort classes of the option parser. Typer ≥ 0.2x parses with its own copy
    of click, whose exceptions derive from typer.TyperException, not from click's."""
    usage = [click.exceptions.ClickException]
    if hasattr(typer, "TyperException"):
        usage.append(typer.TyperException)
    return tuple(usage), (click.exceptions.Abort, typer.Abort)


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


def help_words() -> None:
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
