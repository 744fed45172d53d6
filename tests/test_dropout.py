"""Dropout: the CPU's byte dropout and the fused F.dropout (the GPU path) are the same inverted dropout;
keep rate and scale, eval mode, reproducibility, bf16, and p at the byte grid's ends."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mhatrain.model.dropout import Dropout, byte_dropout, dropout

N = 200_000


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("p", [0.1, 0.2, 0.5])
def test_keep_rate_and_scale(p, dtype):
    torch.manual_seed(0)
    x = torch.ones(N, dtype=dtype)
    y = byte_dropout(x, p, training=True)
    assert y.dtype == dtype
    p_used = round(p * 256) / 256
    kept = y != 0
    assert float(kept.float().mean()) == pytest.approx(1 - p_used, abs=4e-3)  # ~4 sd of the binomial
    torch.testing.assert_close(
        y[kept].float(),
        torch.full_like(y[kept].float(), 1 / (1 - p_used)),
        rtol=1e-2 if dtype == torch.bfloat16 else 1e-6,
        atol=0,
    )
    assert float(y.float().mean()) == pytest.approx(1.0, abs=1e-2)  # the expectation is unchanged


def test_eval_mode_and_p_zero_return_the_input():
    x = torch.randn(10, 7)
    layer = Dropout(0.3).eval()
    assert layer(x) is x
    assert byte_dropout(x, 0.0, training=True) is x


def test_reproducible_from_the_seed():
    x = torch.randn(1000)
    torch.manual_seed(5)
    a = byte_dropout(x, 0.3, training=True)
    torch.manual_seed(5)
    b = byte_dropout(x, 0.3, training=True)
    torch.manual_seed(6)
    c = byte_dropout(x, 0.3, training=True)
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize("p", [0.001, 0.999])
def test_p_off_the_byte_grid_still_drops_at_rate_p(p):
    """p < 1/512 used to drop nothing and p ≥ 511/512 to divide by zero."""
    torch.manual_seed(0)
    y = byte_dropout(torch.ones(N), p, training=True)
    assert torch.isfinite(y).all()
    assert float((y == 0).float().mean()) == pytest.approx(p, abs=5e-4)
    assert float(y.mean()) == pytest.approx(1.0, abs=0.1 if p > 0.5 else 1e-2)


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
