"""Peak memory of one peer, measured in a fresh process.

`ru_maxrss` is the largest resident set a process ever had, so peers measured one after the other in
one process would all report the largest of them. Each peer therefore runs in its own spawned
process: it imports what the peer needs (torch, mhatrain, transformers) and receives its inputs;
then it runs a few small operations (torch's first use allocates thread pools and kernel caches,
the same for every peer), resets the kernel's high-water mark to the current resident set (see
PeakRSS), builds the peer, runs its step twice (the first run of an optimiser step allocates
Adam's state) and reports how far the peak rose: model, optimiser state, activations, workspace
and allocator caches, without interpreter and libraries.
On CUDA it reports `torch.cuda.max_memory_allocated` instead (tensors only).
"""

from __future__ import annotations

import importlib
import multiprocessing
import resource
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..core.runtime import autocast, set_threads
from .timing import Step, ready_step


@dataclass(frozen=True)
class Workload:
    """A picklable recipe for one peer's step: `module.function(**kwargs, compile=...)` returns it."""

    module: str
    function: str
    kwargs: dict = field(default_factory=dict, hash=False)
    imports: tuple[str, ...] = ()  # imported before the baseline is taken (e.g. "transformers")

    def builder(self) -> Callable[[bool], Step]:
        function = getattr(importlib.import_module(self.module), self.function)
        return lambda compile: function(compile=compile, **self.kwargs)


def peak_memory_mib(
    workload: Workload, device: torch.device, compile: bool, threads: int, timeout: float = 3600
) -> tuple[float | None, str]:
    """(peak MiB of running the workload in a fresh process, note); None when the child failed."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_measure, args=(workload, str(device), compile, threads, send), daemon=True)
    child.start()
    send.close()
    try:
        if receive.poll(timeout):
            status, value = receive.recv()
        else:
            status, value = "error", f"no answer within {timeout:.0f}s"
    except EOFError:  # the child died without answering (killed for memory, crashed)
        status, value = "error", "the measuring process died"
    child.join(timeout=30)
    if child.is_alive():
        child.kill()
    return (value, "") if status == "ok" else (None, f"memory not measured: {value}")


def _warm_runtime(device: torch.device) -> None:
    """Torch's first operations allocate thread pools, kernel caches and autograd's engine (tens of
    MiB, the same for every peer): run a few before the baseline so the figure is the peer's own."""
    x = torch.randn(64, 64, device=device, requires_grad=True)
    for precision in ("fp32", "bf16"):
        with autocast(device, precision):
            y = torch.nn.functional.linear(x, x).softmax(-1) @ x
        y.sum().backward()


class PeakRSS:
    """Growth of the process's peak resident set from now on, in KiB.

    Linux: reset the high-water mark VmHWM to the current resident set (`5` into
    /proc/self/clear_refs), later read VmHWM. `ru_maxrss` is no use here: it also carries the size
    of the parent that forked this process before it exec'd Python. Elsewhere: `ru_maxrss` growth
    (which misses peaks below the peak while importing).
    """

    def __init__(self):
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.start, self.proc = _status_kib("VmRSS"), True
        except (OSError, IndexError, ValueError):
            self.start, self.proc = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, False

    def growth_kib(self) -> int:
        peak = _status_kib("VmHWM") if self.proc else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak - self.start


def _status_kib(field: str) -> int:
    return int(Path("/proc/self/status").read_text().split(f"{field}:")[1].split()[0])


def _measure(workload: Workload, device_name: str, compile: bool, threads: int, conn) -> None:
    try:
        set_threads(threads)
        for name in workload.imports:
            importlib.import_module(name)
        build = workload.builder()
        device = torch.device(device_name)
        _warm_runtime(device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        peak = PeakRSS()
        step, _ = ready_step(build, compile)
        step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            mib = torch.cuda.max_memory_allocated(device) / 2**20
        else:
            mib = peak.growth_kib() / 1024
        conn.send(("ok", round(mib, 1)))
    except BaseException as exc:  # report anything, the parent prints it as a note
        conn.send(
            ("error", f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ''}")
        )
    finally:
        conn.close()
