"""Timing: warm-up, alternating repetitions, order statistics.

Peers are timed in one run, a sample of each in turn (in this process, except CTranslate2, which
translates in a child process: bench/deployed.py), and the order rotates every round (A B C, B C A,
C A B, ...). A slow phase of the machine (another job, a frequency change)
then lands on every peer alike instead of on whichever was measured last; medians and quartiles
ignore the odd outlier. On CUDA the device is synchronised before and after each sample.

The peak (matmul_peak) is the best FLOP/s of an n×n×n matmul (2 n³ FLOPs) in each dtype over a few
repetitions, measured in the same run on the same device and threads as the peers.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

Step = Callable[[], object]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Summary:
    """Order statistics of one peer's samples, in seconds."""

    median: float
    q1: float
    q3: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, samples: list[float]) -> Summary:
        if len(samples) >= 2:
            q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
        else:
            q1 = q3 = samples[0]
        return cls(statistics.median(samples), q1, q3, min(samples), max(samples), len(samples))


def rotations(names: list[str], rounds: int):
    """The peer order of each round: every peer goes first in turn."""
    for r in range(rounds):
        k = r % len(names)
        yield names[k:] + names[:k]


def time_alternating(steps: dict[str, Step], repeats: int, warmup: int, device: torch.device) -> dict[str, list[float]]:
    """Run each step `warmup` times, then `repeats` timed times, alternating; seconds per sample."""
    names = list(steps)
    for order in rotations(names, warmup):
        for name in order:
            steps[name]()
    synchronize(device)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for order in rotations(names, repeats):
        for name in order:
            synchronize(device)
            started = time.perf_counter()
            steps[name]()
            synchronize(device)
            samples[name].append(time.perf_counter() - started)
    return samples


def ready_step(build: Callable[[bool], Step], compile: bool) -> tuple[Step, str]:
    """Build a peer's step (compiled when asked) and run it once, so that compilation happens here.

    If compiling or the first compiled run fails, the peer is rebuilt eager; the note says why.
    """
    if compile:
        try:
            step = build(True)
            step()
            return step, "compiled"
        except Exception as exc:  # torch.compile raises many kinds (backend, graph, codegen errors)
            first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
            note = f"torch.compile failed ({type(exc).__name__}: {first}); eager"
    else:
        note = "eager"
    step = build(False)
    step()
    return step, note


def matmul_peak(device: torch.device, dtype: torch.dtype, n: int, repeats: int = 5) -> float:
    """Measured FLOP/s of an n×n @ n×n matmul in `dtype`: the best of `repeats`, after 2 warm-ups
    (a peak is what the hardware can do; the peers' FLOP/s use their medians)."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    times = []
    for i in range(repeats + 2):
        synchronize(device)
        started = time.perf_counter()
        a @ b
        synchronize(device)
        if i >= 2:
            times.append(time.perf_counter() - started)
    return 2 * n**3 / min(times)
