"""One case of a bench: ready every peer, time them alternately, then measure each one's peak memory."""

from __future__ import annotations

from dataclasses import dataclass, field

from .memory import Workload, peak_memory_mib
from .options import BenchOptions
from .timing import ready_step, time_alternating


@dataclass
class Measured:
    samples: dict[str, list[float]]  # seconds per sample, per peer
    notes: dict[str, str]  # per peer: "eager", "compiled" or why compilation failed
    memory: dict[str, float | None] = field(default_factory=dict)  # peak MiB per peer (None: not measured)
    problems: list[str] = field(default_factory=list)  # "peer: memory not measured: ..."


def measure_peers(
    workloads: dict[str, Workload],
    options: BenchOptions,
    repeats: int,
    warmup: int,
    memory_workloads: dict[str, Workload] | None = None,
) -> Measured:
    """Time the peers' steps in this process; with options.memory, rerun each (or its entry in
    `memory_workloads`) in a fresh process for its peak memory."""
    steps, notes = {}, {}
    for peer, workload in workloads.items():
        steps[peer], notes[peer] = ready_step(workload.builder(), options.compile)
    measured = Measured(time_alternating(steps, repeats, warmup, options.device), notes)
    del steps  # free the peers before the memory processes start
    if options.memory:
        for peer, workload in (memory_workloads or workloads).items():
            measured.memory[peer], problem = peak_memory_mib(workload, options.device, options.compile, options.threads)
            if problem:
                measured.problems.append(f"{peer}: {problem}")
    return measured
