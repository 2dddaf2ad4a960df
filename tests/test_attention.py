"""Every score function against a NumPy reference written from the papers' equations."""

import numpy as np
import pytest
import torch

from nmt.attention import (
    AdditiveAttention,
    ConcatAttention,
    DotAttention,
    GeneralAttention,
    LocalAttention,
    LocationAttention,
)

B, T, S, H = 3, 4, 6, 8


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def numpy(t):
    return t.detach().double().numpy()


def reference_scores(module, query, memory):
    """Scores (B, T, S) straight from Bahdanau eq. 6 and Luong eq. 8, one (t, s) pair at a time."""
    q, h = numpy(query), numpy(memory)
    scores = np.zeros((q.shape[0], q.shape[1], h.shape[1]))
    for b in range(q.shape[0]):
        for t in range(q.shape[1]):
            for s in range(h.shape[1]):
                if isinstance(module, AdditiveAttention):  # v^T tanh(W q + U h + bias), concat is the same form
                    W, U = numpy(module.query_projection.weight), numpy(module.key_projection.weight)
                    v, bias = numpy(module.energy.weight)[0], numpy(module.key_projection.bias)
                    scores[b, t, s] = v @ np.tanh(W @ q[b, t] + U @ h[b, s] + bias)
                elif isinstance(module, LocationAttention):  # (W_a h_t)_s, the source words themselves unused
                    scores[b, t, s] = (numpy(module.position_scores.weight) @ q[b, t])[s]
                elif isinstance(module, GeneralAttention):  # h_t^T W_a h_s
                    scores[b, t, s] = q[b, t] @ numpy(module.key_projection.weight) @ h[b, s]
                else:  # dot: h_t^T h_s, or h_t^T h_s / sqrt(H) when scaled
                    scores[b, t, s] = q[b, t] @ h[b, s] / (np.sqrt(h.shape[-1]) if module.scale != 1 else 1)
    return scores


MODULES = {
    "additive": lambda: AdditiveAttention(query_size=H, key_size=H, attention_size=5),
    "concat": lambda: ConcatAttention(query_size=H, key_size=H),
    "dot": lambda: DotAttention(query_size=H, key_size=H),
    "dot_scaled": lambda: DotAttention(query_size=H, key_size=H, scaled=True),
    "general": lambda: GeneralAttention(query_size=H, key_size=H),
    "location": lambda: LocationAttention(query_size=H, key_size=H, max_positions=S + 2),
}


@pytest.fixture
def inputs():
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(B, T, H, generator=generator)
    memory = torch.randn(B, S, H, generator=generator)
    lengths = torch.tensor([6, 4, 1])
    mask = torch.arange(S)[None, :] < lengths[:, None]
    return query, memory, mask


@pytest.mark.parametrize("name", MODULES)
def test_scores_context_and_weights_match_the_equations(name, inputs):
    torch.manual_seed(1)
    module = MODULES[name]()
    query, memory, mask = inputs
    context, weights = module(query, module.prepare(memory), memory, mask)
    scores = reference_scores(module, query, memory)
    scores = np.where(mask.numpy()[:, None, :], scores, -np.inf)
    expected_weights = softmax(scores)
    np.testing.assert_allclose(numpy(weights), expected_weights, atol=1e-5)
    np.testing.assert_allclose(numpy(context), expected_weights @ numpy(memory), atol=1e-5)


@pytest.mark.parametrize("name", MODULES)
def test_weights_sum_to_one_and_padding_gets_exactly_zero(name, inputs):
    module = MODULES[name]()
    query, memory, mask = inputs
    _, weights = module(query, module.prepare(memory), memory, mask)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, T))
    assert (weights.masked_select(~mask[:, None, :].expand_as(weights)) == 0).all()


def test_padding_content_does_not_change_the_context(inputs):
    module = MODULES["general"]()
    query, memory, mask = inputs
    noisy = memory.masked_fill(~mask[:, :, None], 1e4)
    first, _ = module(query, module.prepare(memory), memory, mask)
    second, _ = module(query, module.prepare(noisy), noisy, mask)
    torch.testing.assert_close(first, second)


@pytest.mark.parametrize("predictive", [False, True])
def test_local_attention_only_weights_inside_the_window(predictive):
    torch.manual_seed(2)
    window, source_length = 2, 12
    module = LocalAttention(GeneralAttention(H, H), H, window=window, predictive=predictive)
    query, memory = torch.randn(2, 9, H), torch.randn(2, source_length, H)
    mask = torch.arange(source_length)[None, :] < torch.tensor([[12], [7]])
    positions = torch.arange(9)[None, :]
    _, weights = module(query, module.prepare(memory), memory, mask, positions)
    centres = module.centres(query, mask, positions)  # (B, T)
    distance = (torch.arange(source_length)[None, None, :] - centres[:, :, None]).abs()
    assert (weights[distance > window + 0.5] == 0).all()
    assert (weights.masked_select(~mask[:, None, :].expand_as(weights)) == 0).all()
    sums = weights.sum(-1)
    if predictive:  # softmax in the window times a Gaussian (Luong eq. 10): at most one
        assert (sums <= 1 + 1e-6).all() and (sums > 0).all()
        assert ((centres >= 0) & (centres <= mask.sum(1, keepdim=True) - 1)).all()  # on the real words
    else:  # local-m: p_t = t, a plain softmax over the window
        torch.testing.assert_close(sums, torch.ones_like(sums))
        assert torch.equal(centres[0], torch.arange(9.0))
        assert centres[1].max() == 6  # kept inside the 7-token sentence


def test_local_p_matches_the_formula():
    torch.manual_seed(3)
    window = 3
    module = LocalAttention(DotAttention(H, H), H, window=window, predictive=True)
    query, memory = torch.randn(1, 1, H), torch.randn(1, 10, H)
    mask = torch.ones(1, 10, dtype=torch.bool)
    _, weights = module(query, memory, memory, mask)
    W, v = numpy(module.position[0].weight), numpy(module.position[2].weight)[0]
    p = (10 - 1) / (1 + np.exp(-(v @ np.tanh(W @ numpy(query)[0, 0]))))  # eq. 9, 0-based positions
    scores = numpy(query)[0, 0] @ numpy(memory)[0].T
    inside = np.abs(np.arange(10) - p) <= window
    expected = softmax(np.where(inside, scores, -np.inf)) * np.exp(
        -((np.arange(10) - p) ** 2) / (2 * (window / 2) ** 2)
    )
    np.testing.assert_allclose(numpy(weights)[0, 0], expected, atol=1e-5)


def test_location_attention_never_attends_past_its_positions():
    torch.manual_seed(5)
    module = LocationAttention(query_size=H, key_size=H, max_positions=3)
    query, memory = torch.randn(2, 4, H), torch.randn(2, 5, H)
    mask = torch.ones(2, 5, dtype=torch.bool)
    _, weights = module(query, memory, memory, mask)
    assert (weights[..., 3:] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4))


def test_local_p_centres_span_exactly_the_real_words():
    torch.manual_seed(4)
    module = LocalAttention(DotAttention(H, H), H, window=2, predictive=True)
    with torch.no_grad():
        module.position[2].weight.fill_(1e4)  # sigmoid saturates at 0 or 1 depending on the sign of tanh(...)
    query = torch.randn(1, 50, H)
    mask = torch.arange(8)[None, :] < torch.tensor([[6]])
    centres = module.centres(query, mask, None)
    assert centres.min() == 0 and centres.max() == 5  # the first and the last of 6 words
