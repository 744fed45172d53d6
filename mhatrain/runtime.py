"""How this process computes: checks of the machine's number formats against the config's precision."""

from __future__ import annotations

import time

import torch

BF16_PROBE_SIZE = (
    512  # large enough to hit the blocked GEMM kernels (256 did not show the slow path), small enough to cost < 1 s
)
SLOW_BF16_RATIO = 2.0  # bf16 slower than fp32 by more than this: the CPU has no native bf16 matmul


def _matmul_seconds(dtype: torch.dtype, repeats: int = 3) -> float:
    a = torch.randn(BF16_PROBE_SIZE, BF16_PROBE_SIZE).to(dtype)
    b = torch.randn(BF16_PROBE_SIZE, BF16_PROBE_SIZE).to(dtype)
    a @ b  # warm-up: kernel selection, allocation
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return best


def slow_bf16_warning(device: torch.device, precision: str) -> str | None:
    """A warning line when bf16 is asked for on a CPU whose bf16 matmuls are slower than its fp32 ones.

    CPUs without AVX-512 BF16 or AMX compute bf16 matmuls in a slow fallback (measured 100× slower than
    fp32 on an AVX2-only CPU), so a bf16 config that is fast on one machine can stall on another.
    """
    if precision != "bf16" or torch.device(device).type != "cpu":
        return None
    fp32, bf16 = _matmul_seconds(torch.float32), _matmul_seconds(torch.bfloat16)
    if bf16 <= SLOW_BF16_RATIO * fp32:
        return None
    return (
        f"warning: bf16 matmuls run {bf16 / fp32:.0f}× slower than fp32 on this CPU ("
        f"{torch.backends.cpu.get_cpu_capability()}; no native bf16): training will be very slow; "
        f"--set train.precision=fp32 is faster here (but changes what a run computes)"
    )
