"""The CPU dropout: keep rate, unbiased scaling, its gradient, and determinism under a seed."""

import pytest
import torch

from nmt.models.dropout import LEVELS, Dropout, keep_mask


@pytest.mark.parametrize("p", [0.1, 0.3, 0.6])
def test_every_lane_of_the_random_words_keeps_at_the_configured_rate(p):
    torch.manual_seed(0)
    dropped_levels = round(p * LEVELS)
    keep = keep_mask(torch.Size([400_000]), dropped_levels).view(-1, 4).float()  # column j: lane j of each 64-bit word
    expected = 1 - dropped_levels / LEVELS
    tolerance = 5 * (expected * (1 - expected) / 100_000) ** 0.5
    assert torch.allclose(keep.mean(0), torch.full((4,), expected), atol=tolerance)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dropout_zeroes_or_scales_each_element_and_keeps_the_mean(dtype):
    torch.manual_seed(0)
    dropout = Dropout(0.25).train()
    x = torch.rand(500, 400).add(1).to(dtype)
    y = dropout(x)
    assert y.dtype == dtype and y.shape == x.shape
    kept = y != 0
    torch.testing.assert_close(y[kept], x[kept] * (4 / 3))
    assert abs(kept.float().mean().item() - 0.75) < 0.005
    assert abs(y.float().mean().item() / x.float().mean().item() - 1) < 0.01


def test_the_gradient_is_the_mask_times_the_scale():
    torch.manual_seed(0)
    x = torch.rand(300, 70).add(1).requires_grad_()
    upstream = torch.randn(300, 70)
    y = Dropout(0.4).train()(x)
    y.backward(upstream)
    scale = LEVELS / (LEVELS - round(0.4 * LEVELS))
    torch.testing.assert_close(x.grad, torch.where(y != 0, upstream * scale, 0))


def test_dropout_draws_the_same_masks_under_the_same_seed_and_new_ones_after():
    dropout = Dropout(0.5).train()
    x = torch.ones(64, 64)
    torch.manual_seed(7)
    first, second = dropout(x), dropout(x)
    torch.manual_seed(7)
    assert torch.equal(dropout(x), first)
    assert not torch.equal(first, second)


def test_dropout_is_the_identity_in_eval_and_at_zero():
    x = torch.randn(10, 10)
    assert torch.equal(Dropout(0.3).eval()(x), x)
    assert torch.equal(Dropout(0.0).train()(x), x)
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        Dropout(1.0)
