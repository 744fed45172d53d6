"""How this process computes: the autocast context of a precision, the loss scaler fp16 needs, torch's
thread count, which device names the options accept, and a check of the machine's number formats
against the config's precision.

bf16 has fp32's exponent range: gradients do not underflow, no scaling is needed. fp16 (for GPUs
without bf16) has a narrow range: the loss is multiplied by a dynamic scale before the backward pass,
the gradients are divided by it before clipping and the Adam step, and the scale is halved after an
update whose gradients overflowed (that update is skipped) and doubled after 2000 good ones.
"""

from __future__ import annotations

import contextlib
import time

import torch

from .errors import MhatrainError

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}  # train.precision → autocast dtype (fp32: none)
BF16_PROBE_SIZE = (
    512  # large enough to hit the blocked GEMM kernels (256 did not show the slow path), small enough to cost < 1 s
)
SLOW_BF16_RATIO = 2.0  # bf16 slower than fp32 by more than this: the CPU has no native bf16 matmul


def autocast(device, precision: str):
    """The context that training, validation, decoding, head analysis and the benches compute in:
    autocast to `precision`'s dtype (train.precision: bf16 or fp16) on `device`; nothing for fp32."""
    if precision in DTYPES:
        return torch.autocast(device_type=torch.device(device).type, dtype=DTYPES[precision])
    return contextlib.nullcontext()


def loss_scaler(device, precision: str) -> torch.amp.GradScaler:
    """A GradScaler for fp16; for other precisions a disabled one, whose calls change nothing."""
    return torch.amp.GradScaler(torch.device(device).type, enabled=precision == "fp16")


def set_threads(threads: int) -> None:
    """Use `threads` CPU threads for torch's operations (train.threads, --threads); 0 keeps torch's default."""
    if threads:
        torch.set_num_threads(threads)


def is_device_name(name: str, allow_auto: bool = False) -> bool:
    """Whether `name` is a device the options accept: cpu, cuda or cuda:N (and auto when `allow_auto`)."""
    if allow_auto and name == "auto":
        return True
    return name in ("cpu", "cuda") or (name.startswith("cuda:") and name[5:].isdigit())


def _matmul_seconds(dtype: torch.dtype, repeats: int = 3) -> float:
    # its own generator: the global one drives dropout, and a resumed run has just restored its state
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(BF16_PROBE_SIZE, BF16_PROBE_SIZE, generator=generator).to(dtype) for _ in range(2))
    a @ b  # warm-up: kernel selection, allocation
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return best


def check_gpu_bf16(device, precision: str) -> None:
    """Refuse bf16 on a GPU without native bf16 (before Ampere: V100, T4), which would emulate it slowly:
    one error line that names fp16, the precision such GPUs compute natively (with a loss scale)."""
    device = torch.device(device)
    if precision != "bf16" or device.type != "cuda" or torch.cuda.is_bf16_supported(including_emulation=False):
        return
    raise MhatrainError(
        f"train.precision=bf16, but {torch.cuda.get_device_name(device)} has no native bf16 (it would be "
        f"emulated, far slower): use fp16 (--set train.precision=fp16, with a loss scale) or fp32"
    )


def bf16_slowdown(device) -> float | None:
    """How many times slower bf16 matmuls run than fp32 ones on a CPU without native bf16 (beyond
    SLOW_BF16_RATIO); None on a GPU or where bf16 is not the slower mode."""
    if torch.device(device).type != "cpu":
        return None
    fp32, bf16 = _matmul_seconds(torch.float32), _matmul_seconds(torch.bfloat16)
    return bf16 / fp32 if bf16 > SLOW_BF16_RATIO * fp32 else None


def slow_bf16_warning(device: torch.device, precision: str) -> str | None:
    """A warning line when bf16 is asked for on a CPU whose bf16 matmuls are slower than its fp32 ones.

    CPUs without AVX-512 BF16 or AMX compute bf16 matmuls in a slow fallback (see docs/performance.md,
    "Design measurements"), so a bf16 config that is fast on one machine can stall on another.
    """
    if precision != "bf16" or (slowdown := bf16_slowdown(device)) is None:
        return None
    return (
        f"warning: bf16 matmuls run {slowdown:.0f}× slower than fp32 on this CPU ("
        f"{torch.backends.cpu.get_cpu_capability()}; no native bf16): training will be very slow; "
        f"--set train.precision=fp32 is faster here (but changes what a run computes)"
    )
