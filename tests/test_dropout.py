"""The byte dropout: keep rate and scale, eval mode, reproducibility, bf16, and p at the byte grid's ends."""

from __future__ import annotations

import pytest
import torch

from mhatrain.dropout import Dropout, byte_dropout

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
    torch.testing.assert_close(y[kept].float(), torch.full_like(y[kept].float(), 1 / (1 - p_used)),
                               rtol=1e-2 if dtype == torch.bfloat16 else 1e-6, atol=0)
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
