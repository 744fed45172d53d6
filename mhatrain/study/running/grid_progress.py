"""The progress of a head-count grid: runs done, running and left, and an ETA from the finished runs'
times, above each run's own progress display (`mhatrain ablate`, locally or as cluster jobs)."""

from __future__ import annotations

import threading
import time

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn

from ...training.progress import clock
from ..grid.points import Point


class GridDisplay:
    """Grid progress (runs done, running, left, ETA) above each run's own progress display.

    On a terminal it is a live bar (rich ≥ 14 stacks it above the training bar of the run in this
    process, or above one line per subprocess run); elsewhere, one printed line per event.
    """

    def __init__(self, console: Console, total: int, done: int, jobs: int, durations: list[float] = ()):
        """durations: seconds of points finished before (point_seconds), the first basis of the ETA."""
        self.console, self.total, self.done, self.jobs = console, total, done, jobs
        self.running: dict[str, float] = {}
        self.resumed: set[str] = set()
        self.durations: list[float] = list(durations)
        self.failed = 0
        nested_ok = hasattr(console, "_live_stack")  # rich < 14 allows one live display at a time
        self.live = console.is_terminal and (jobs > 1 or nested_ok)
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=30),
            TextColumn("{task.fields[status]}"),
            console=console,
            transient=True,
            disable=not self.live,
        )
        self.task = self.progress.add_task("[bold]grid", total=total, completed=done, status=self.summary())
        self.point_tasks: dict[str, int] = {}
        self._lock = threading.Lock()

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        self.progress.__exit__(*exc)

    def summary(self) -> str:
        left = self.total - self.done - self.failed - len(self.running)
        failed = f", {self.failed} failed" if self.failed else ""
        return f"{self.done}/{self.total} runs done, {len(self.running)} running, {left} left{failed}, ETA {self.eta()}"

    def eta(self) -> str:
        if not self.durations:
            return "after the first run"
        mean = sum(self.durations) / len(self.durations)
        now = time.monotonic()
        left = self.total - self.done - self.failed - len(self.running)
        remaining = left * mean + sum(max(0.0, mean - (now - start)) for start in self.running.values())
        return clock(remaining / max(1, min(self.jobs, left + len(self.running))))

    def start(self, point: Point, where: str = "", resumed: bool = False) -> None:
        with self._lock:
            self.running[point.name] = time.monotonic()
            if resumed:
                self.resumed.add(point.name)
            self.console.print(
                f"[bold]grid[/] {point.name} ({point.label}, seed {point.seed}) starting{where}: {self.summary()}",
                highlight=False,
            )
            if self.live and self.jobs > 1:
                self.point_tasks[point.name] = self.progress.add_task(f"  {point.name}", total=None, status="")
            self._refresh()

    def finish(self, point: Point, outcome: str, ok: bool = True, seconds: float | None = None) -> None:
        """seconds: the point's time over all its sessions (point_seconds), if known."""
        with self._lock:
            wall = time.monotonic() - self.running.pop(point.name, time.monotonic())
            if ok:
                self.done += 1
                self.durations.append(seconds or wall)
            else:
                self.failed += 1
            if point.name in self.point_tasks:
                self.progress.remove_task(self.point_tasks.pop(point.name))
            word = "done" if ok else "[bold red]failed[/]"
            took = clock(wall)
            if point.name in self.resumed:
                took += f" (resumed; {clock(seconds)} in all its sessions)" if seconds else " (resumed)"
            self.console.print(
                f"[bold]grid[/] {point.name} {word} in {took}{': ' + outcome if outcome else ''} — {self.summary()}",
                highlight=False,
            )
            self._refresh()

    def show_point_status(self, point: Point, status: str) -> None:
        with self._lock:
            if point.name in self.point_tasks:
                self.progress.update(self.point_tasks[point.name], status=status[-100:])

    def _refresh(self) -> None:
        self.progress.update(self.task, completed=self.done, status=self.summary())
