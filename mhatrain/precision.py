"""train.precision: the autocast context that training, validation, decoding and head analysis share,
and the loss scaler that fp16 training needs.

bf16 has fp32's exponent range: gradients do not underflow, no scaling is needed. fp16 (for GPUs
without bf16) has a narrow range: the loss is multiplied by a dynamic scale before the backward pass,
the gradients are divided by it before clipping and the Adam step, and the scale is halved after an
update whose gradients overflowed (that update is skipped) and doubled after 2000 good ones.
"""

from __future__ import annotations

import contextlib

import torch

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(device, precision: str):
    """Autocast to train.precision's dtype on `device` (nothing for fp32)."""
    if precision in DTYPES:
        return torch.autocast(device_type=torch.device(device).type, dtype=DTYPES[precision])
    return contextlib.nullcontext()


def loss_scaler(device, precision: str) -> torch.amp.GradScaler:
    """A GradScaler for fp16; for other precisions a disabled one, whose calls change nothing."""
    return torch.amp.GradScaler(torch.device(device).type, enabled=precision == "fp16")
