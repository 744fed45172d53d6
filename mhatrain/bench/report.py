"""Bench results: rows per (case, peer), targets with PASS/MISS, equality checks; rich, JSON, Markdown.

A ratio is always the peer's median time divided by ours for the same case (same inputs, same
work): above 1 ours is faster. Targets are the issue's minimum ratios or FLOP shares.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from rich.table import Table

from ..core.columns import unwrapped
from ..core.files import atomic_write_text
from .timing import Summary

OURS = "ours"


@dataclass
class Row:
    case: str  # e.g. "h=8 fp32", "beam 4 bf16"
    peer: str
    time: Summary  # seconds per sample
    work: float  # units of work per sample (tokens, sentences)
    unit: str  # "tokens/s", "sentences/s"
    ratio: float  # this peer's median time / ours
    memory_mib: float | None = None
    metrics: dict = field(default_factory=dict)  # bench-specific: FLOP/s shares, generated tokens
    note: str = ""

    @property
    def throughput(self) -> float:
        return self.work / self.time.median


@dataclass
class Target:
    case: str
    peer: str  # the row the target applies to
    metric: str  # "ratio" or a key of Row.metrics
    minimum: float
    label: str  # e.g. "≥ 5× article loop"
    value: float | None = None
    passed: bool | None = None


@dataclass
class Check:
    """A correctness check run before timing (e.g. peers give our output with our weights)."""

    name: str
    passed: bool
    detail: str


@dataclass
class BenchResult:
    bench: str
    settings: dict
    rows: list[Row] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    judged: bool = False  # whether the targets were judged (not at --quick's toy sizes)
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    extra_columns: tuple[tuple[str, str, str], ...] = ()  # (metric key, header, format) shown per row

    def add_case(
        self,
        case: str,
        samples: dict[str, list[float]],
        work: float,
        unit: str,
        memory: dict[str, float | None] | None = None,
        notes: dict[str, str] | None = None,
        metrics: dict[str, dict] | None = None,
    ) -> None:
        """Rows for one case from each peer's timing samples (ours must be among them)."""
        ours = Summary.of(samples[OURS]).median
        for peer, peer_samples in samples.items():
            summary = Summary.of(peer_samples)
            self.rows.append(
                Row(
                    case,
                    peer,
                    summary,
                    work,
                    unit,
                    summary.median / ours,
                    (memory or {}).get(peer),
                    (metrics or {}).get(peer, {}),
                    (notes or {}).get(peer, ""),
                )
            )

    def row(self, case: str, peer: str) -> Row | None:
        return next((r for r in self.rows if r.case == case and r.peer == peer), None)

    def judge(self, applies: bool = True) -> None:
        """Fill each target's value and PASS/MISS from the rows. The targets are set for the full-size
        benches: at --quick's toy sizes (applies False) the values are filled but nothing is judged."""
        self.judged = applies
        for target in self.targets:
            row = self.row(target.case, target.peer)
            value = None if row is None else (row.ratio if target.metric == "ratio" else row.metrics.get(target.metric))
            target.value = value
            target.passed = None if value is None or not applies else value >= target.minimum
        if self.targets and not applies:
            self.notes.append(
                "--quick: toy shapes and models, so no target is judged (they are set for the full-size bench)"
            )

    def targets_of(self, row: Row) -> list[Target]:
        return [t for t in self.targets if t.case == row.case and t.peer == row.peer]

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("extra_columns")
        for row, raw in zip(self.rows, out["rows"]):
            raw["throughput"] = row.throughput
        return out


# ----------------------------------------------------------------------------- machine


def describe_machine(device: torch.device) -> dict:
    info = {
        "cpu": _cpu_model(),
        "logical_cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": str(device),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    return info


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# ----------------------------------------------------------------------------- rendering


def _seconds(s: float) -> str:
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} µs"


def _columns(result: BenchResult) -> list[str]:
    unit = result.rows[0].unit if result.rows else "throughput"
    return (
        ["case", "peer", "median", "IQR", "min–max", unit, "vs ours", "peak MiB"]
        + [header for _, header, _ in result.extra_columns]
        + (["target", "status"] if result.judged else [])
    )


def _cells(result: BenchResult, row: Row) -> list[str]:
    t = row.time
    cells = [
        row.case,
        row.peer + (f" ({row.note})" if row.note and row.note != "eager" else ""),
        _seconds(t.median),
        f"{_seconds(t.q1)}–{_seconds(t.q3)}",
        f"{_seconds(t.min)}–{_seconds(t.max)}",
        f"{row.throughput:,.1f}",
        f"{row.ratio:.2f}×",
        "—" if row.memory_mib is None else f"{row.memory_mib:,.0f}",
    ]
    for key, _, fmt in result.extra_columns:
        value = row.metrics.get(key)
        cells.append("—" if value is None else format(value, fmt))
    if result.judged:
        targets = result.targets_of(row)
        cells.append("; ".join(t.label for t in targets))
        cells.append("; ".join("—" if t.passed is None else ("PASS" if t.passed else "MISS") for t in targets))
    return cells


def print_result(result: BenchResult, console) -> None:

    table = Table(title=f"mhatrain bench {result.bench}")
    for name in _columns(result):
        table.add_column(name, justify="left" if name in ("case", "peer", "target") else "right")
    previous = None
    for row in result.rows:
        if previous is not None and row.case != previous:
            table.add_section()
        previous = row.case
        cells = _cells(result, row)
        if result.judged:
            cells[-1] = cells[-1].replace("PASS", "[green]PASS[/]").replace("MISS", "[red]MISS[/]")
        table.add_row(*cells)
    _print_wide(console, table)
    for check in result.checks:
        mark = "[green]ok[/]" if check.passed else "[red]FAILED[/]"
        console.print(f"check {mark}: {check.name} ({check.detail})", highlight=False)
    for note in result.notes:
        console.print(f"note: {note}", highlight=False)


def _print_wide(console, table) -> None:
    """In a log file (no terminal) print at the table's natural width, not squeezed into 80 columns,
    unless $COLUMNS asks for a width (core.columns)."""
    width = console.width
    if unwrapped(console):
        console.width = max(width, console.measure(table, options=console.options.update_width(1000)).maximum)
    try:
        console.print(table)
    finally:
        console.width = width


def markdown(results: list[BenchResult], machine: dict) -> str:
    lines = [
        "<!-- written by `mhatrain bench ... --markdown`; ratios are peer time / our time -->",
        "",
        "Machine: " + ", ".join(f"{k} {v}" for k, v in machine.items()),
        "",
    ]
    for result in results:
        lines += [
            f"### mhatrain bench {result.bench}",
            "",
            "Settings: " + ", ".join(f"{k}={v}" for k, v in result.settings.items()),
            "",
        ]
        columns = _columns(result)
        lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        for row in result.rows:
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in _cells(result, row)) + " |")
        lines.append("")
        lines += [f"- check {'ok' if c.passed else 'FAILED'}: {c.name} ({c.detail})" for c in result.checks]
        lines += [f"- note: {n}" for n in result.notes]
        lines.append("")
    return "\n".join(lines)


def write_outputs(
    results: list[BenchResult], machine: dict, json_path: Path | None, markdown_path: Path | None
) -> None:
    if json_path is not None:
        payload = {"machine": machine, "benches": [r.to_dict() for r in results]}
        atomic_write_text(Path(json_path), json.dumps(payload, indent=2) + "\n")
    if markdown_path is not None:
        atomic_write_text(Path(markdown_path), markdown(results, machine))
