"""The fused output layer + label-smoothed cross-entropy against PyTorch's own, in value and gradient."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from nmt.training import loss
from nmt.training.loss import linear_cross_entropy


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_equals_linear_then_cross_entropy_in_value_and_gradient(monkeypatch, bias, smoothing):
    monkeypatch.setitem(loss.CHUNK_ELEMENTS, "cpu", 120)  # 4 rows of 30 classes per chunk: 13 chunks, the last short
    torch.manual_seed(0)
    features = torch.randn(50, 8, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(30, 8, dtype=torch.float64, requires_grad=True)
    b = torch.randn(30, dtype=torch.float64, requires_grad=True) if bias else None
    target = torch.randint(0, 30, (50,))
    inputs = [features, weight] + ([b] if bias else [])
    expected = F.cross_entropy(F.linear(features, weight, b), target, reduction="sum", label_smoothing=smoothing)
    expected_grads = torch.autograd.grad(2.5 * expected, inputs)
    ours = linear_cross_entropy(features, weight, b, target, smoothing)
    grads = torch.autograd.grad(2.5 * ours, inputs)
    torch.testing.assert_close(ours.double(), expected, rtol=1e-6, atol=1e-4)  # the sum is kept in fp32
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_row_weights_give_the_weighted_sum_of_pytorchs_per_row_losses(monkeypatch, bias, smoothing):
    """The static shapes of a captured update keep padding rows and give them weight 0 (nmt.training.update): the
    weighted loss is PyTorch's per-row losses times the weights, in value and gradient, and a 0 row adds nothing."""
    monkeypatch.setitem(loss.CHUNK_ELEMENTS, "cpu", 120)
    torch.manual_seed(2)
    features = torch.randn(50, 8, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(30, 8, dtype=torch.float64, requires_grad=True)
    b = torch.randn(30, dtype=torch.float64, requires_grad=True) if bias else None
    target = torch.randint(0, 30, (50,))
    row_weights = (torch.rand(50) > 0.3).float() * torch.rand(50).add(0.5)  # zeros (padding) and other weights
    inputs = [features, weight] + ([b] if bias else [])
    rows = F.cross_entropy(F.linear(features, weight, b), target, reduction="none", label_smoothing=smoothing)
    expected = rows @ row_weights.double()
    expected_grads = torch.autograd.grad(expected, inputs)
    ours = linear_cross_entropy(features, weight, b, target, smoothing, row_weights=row_weights)
    grads = torch.autograd.grad(ours, inputs)
    torch.testing.assert_close(ours.double(), expected, rtol=1e-6, atol=1e-4)
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert grads[0][row_weights == 0].abs().max() == 0


def test_bf16_products_stay_close_to_fp32():
    torch.manual_seed(1)
    features = torch.randn(300, 32, requires_grad=True)
    weight = (0.1 * torch.randn(500, 32)).requires_grad_()
    target = torch.randint(0, 500, (300,))
    expected = F.cross_entropy(F.linear(features, weight), target, reduction="sum", label_smoothing=0.1)
    expected_grads = torch.autograd.grad(expected, [features, weight])
    ours = linear_cross_entropy(features, weight, None, target, 0.1, dtype=torch.bfloat16)
    grads = torch.autograd.grad(ours, [features, weight])
    torch.testing.assert_close(ours, expected, rtol=1e-2, atol=0)
    for got, want in zip(grads, expected_grads):
        assert got.dtype == torch.float32  # gradients come back in the parameters' dtype
        assert (got - want).norm() < 0.02 * want.norm()


def test_without_gradients_only_the_loss_is_computed():
    """Under no_grad (validation) the products of the gradient are skipped, though the weights require it."""
    features, weight = torch.randn(10, 4), torch.randn(6, 4, requires_grad=True)
    target = torch.randint(0, 6, (10,))
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        value = linear_cross_entropy(features, weight, None, target)
    torch.testing.assert_close(value, F.cross_entropy(features @ weight.t(), target, reduction="sum"))
    assert counter.get_total_flops() == 2 * 10 * 6 * 4  # the logits' product alone


def test_a_tied_weight_gets_the_gradient_of_both_uses():
    torch.manual_seed(2)
    embedding = torch.nn.Embedding(12, 6)
    tokens, target = torch.randint(0, 12, (9,)), torch.randint(0, 12, (9,))
    linear_cross_entropy(embedding(tokens), embedding.weight, None, target, 0.1).backward()
    ours = embedding.weight.grad.clone()
    embedding.weight.grad = None
    F.cross_entropy(embedding(tokens) @ embedding.weight.t(), target, reduction="sum", label_smoothing=0.1).backward()
    torch.testing.assert_close(ours, embedding.weight.grad, rtol=1e-5, atol=1e-6)


def test_smoothing_outside_zero_to_one_is_refused():
    with pytest.raises(ValueError, match="label smoothing"):
        linear_cross_entropy(torch.randn(2, 3), torch.randn(4, 3), None, torch.tensor([0, 1]), 1.0)


def test_per_token_losses_are_each_rows_negative_log_likelihood_without_smoothing(monkeypatch):
    monkeypatch.setitem(loss.CHUNK_ELEMENTS, "cpu", 120)
    torch.manual_seed(1)
    features, weight, target = torch.randn(50, 8), torch.randn(30, 8), torch.randint(0, 30, (50,))
    total, per_token = linear_cross_entropy(features, weight, None, target, 0.1, per_token=True)
    expected = F.cross_entropy(features @ weight.t(), target, reduction="none")
    torch.testing.assert_close(per_token, expected)
    torch.testing.assert_close(total, linear_cross_entropy(features, weight, None, target, 0.1))
    assert not per_token.requires_grad


@pytest.mark.parametrize("hard", ["none", "reinforce"])
def test_hard_attention_trains_its_score_through_the_attention_loss_alone(sample_vocabulary, hard):
    """Under REINFORCE no gradient passes the draw: the score's weights W_a learn only from the model's
    `attention_loss`, which leaves the loss's value as it is. Soft attention needs no such term."""
    from conftest import compose_config, tiny_model_overrides

    from nmt import build
    from nmt.text.data import ParallelDataset, collate

    overrides = [*tiny_model_overrides("luong"), f"model.attention.hard={hard}", "model.dropout=0"]
    torch.manual_seed(0)
    model = build.model(compose_config(*overrides).model, sample_vocabulary).train()
    model.attention.expected_context = 0.0  # every step a draw: no gradient reaches the score but the term's
    dataset = ParallelDataset([("ein kleiner hund", "a small dog"), ("zwei katzen", "two cats")], sample_vocabulary)
    batch = collate([dataset[0], dataset[1]])
    score = model.attention.key_projection.weight  # W_a of the general score

    def gradient_and_value(with_term: bool):
        model.zero_grad()
        if not with_term:
            model.attention_loss = lambda *arguments: None
        torch.manual_seed(1)  # the same draws both times
        value = loss.batch_loss(model, model.features, batch, 0.0, torch.device("cpu"), torch.float32)
        value.backward()
        vars(model).pop("attention_loss", None)
        return (torch.zeros_like(score) if score.grad is None else score.grad.clone()), value.item()

    with_term, value = gradient_and_value(True)
    without_term, plain_value = gradient_and_value(False)
    assert value == pytest.approx(plain_value) and with_term.abs().sum() > 0
    if hard == "reinforce":
        assert without_term.abs().sum() == 0
    else:
        torch.testing.assert_close(with_term, without_term)
