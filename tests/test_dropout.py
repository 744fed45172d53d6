"""Dropout: the CPU's byte dropout and the fused F.dropout (the GPU path) are the same inverted dropout."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mhatrain.dropout import Dropout, byte_dropout, dropout


def check_inverted_dropout(x: torch.Tensor, out: torch.Tensor, grad: torch.Tensor, p: float) -> None:
    """Each element is dropped (0) or kept and scaled by 1 / (1 - p); about a fraction p is dropped;
    the gradient is the same mask and scale; the mean is kept."""
    kept = out != 0
    torch.testing.assert_close(out[kept], x[kept] / (1 - p))
    torch.testing.assert_close(grad, kept.to(x.dtype) / (1 - p))
    assert abs((~kept).float().mean().item() - p) < 0.01
    assert abs(out.mean().item() - x.mean().item()) < 0.02


@pytest.mark.parametrize("kernel", [byte_dropout, F.dropout], ids=["byte (CPU)", "F.dropout (GPU path)"])
@pytest.mark.parametrize("p", [0.25, 0.5])  # multiples of 1/256: byte dropout keeps p exactly
def test_both_kernels_are_the_same_inverted_dropout(kernel, p):
    torch.manual_seed(0)
    x = (torch.rand(200_000) + 0.5).requires_grad_()
    out = kernel(x, p, True)
    (grad,) = torch.autograd.grad(out.sum(), x)
    check_inverted_dropout(x.detach(), out.detach(), grad, p)


def test_byte_dropout_rounds_p_to_a_multiple_of_1_256():
    torch.manual_seed(0)
    x = torch.ones(400_000)
    out = byte_dropout(x, 0.1, True)
    p_rounded = round(0.1 * 256) / 256
    assert torch.equal(out.unique(), torch.tensor([0.0, 1 / (1 - p_rounded)]))
    assert abs((out == 0).float().mean().item() - p_rounded) < 0.005


def test_dropout_is_the_identity_when_not_training_or_p_is_0():
    x = torch.randn(5, 7)
    assert dropout(x, 0.3, False) is x and dropout(x, 0.0, True) is x
    module = Dropout(0.3).eval()
    assert module(x) is x


def test_other_devices_take_the_fused_kernel(monkeypatch):
    """A tensor not on the CPU goes to F.dropout (here a meta tensor, which has no data)."""
    calls = []
    monkeypatch.setattr(F, "dropout", lambda x, p, training: calls.append(x.device.type) or x)
    dropout(torch.empty(3, device="meta"), 0.1, True)
    dropout(torch.ones(3), 0.1, True)
    assert calls == ["meta"]
