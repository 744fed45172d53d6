"""Running the benches a `mhatrain bench` command names: in order, each one's table printed as it
finishes, the JSON and Markdown written, and a failed correctness check failing the command."""

from __future__ import annotations

import importlib

from ..core.errors import MhatrainError
from .options import BenchOptions

# Each bench, its report and the runtime import torch: they load when a bench runs, so that
# `mhatrain bench --help` and option errors answer at once.


def run_benches(names: list[str], options: BenchOptions, log=print) -> list:
    """Run the named benches in order (a list of report.BenchResult, their targets judged unless
    --quick); `log` receives progress lines."""
    _apply_threads(options)
    results = [importlib.import_module(f"{__package__}.{name}_bench").run(options, log) for name in names]
    for result in results:
        result.judge(applies=not options.quick)
    return results


def report_benches(names: list[str], options: BenchOptions, console, json_path=None, markdown_path=None) -> list:
    """Run the benches, print each one's table as it finishes, write JSON/Markdown; a failed
    correctness check fails the command after the outputs are written."""
    from .report import describe_machine, print_result, write_outputs  # torch: see above

    _apply_threads(options)
    machine = describe_machine(options.device)
    console.print("machine: " + ", ".join(f"{key} {value}" for key, value in machine.items()), highlight=False)
    results = []
    for name in names:
        results += run_benches([name], options, log=lambda line: console.print(line, style="dim", highlight=False))
        print_result(results[-1], console)
    write_outputs(results, machine, json_path, markdown_path)
    for path in (json_path, markdown_path):
        if path is not None:
            console.print(f"wrote {path}")
    failed = [f"{r.bench}: {c.name}" for r in results for c in r.checks if not c.passed]
    if failed:
        raise MhatrainError(
            f"{len(failed)} correctness check(s) failed, so the ratios compare different "
            f"computations; first: {failed[0]}"
        )
    return results


def _apply_threads(options: BenchOptions) -> None:
    from ..core.runtime import set_threads  # torch: see above

    set_threads(options.threads)
