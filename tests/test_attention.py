"""Every score function against a NumPy reference written from the papers' equations."""

import entmax
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
    normalize,
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


def sparsemax_reference(z):
    """Martins and Astudillo 2016, eq. 3-4, one row at a time: sort, k(z) = max{k : 1 + k z_(k) > sum_{j<=k} z_(j)},
    tau = (sum_{j<=k(z)} z_(j) - 1) / k(z), p = [z - tau]_+."""
    out = np.zeros_like(z)
    for index in np.ndindex(z.shape[:-1]):
        row = z[index]
        real = row[np.isfinite(row)]
        ordered = np.sort(real)[::-1]
        k = max(k for k in range(1, len(ordered) + 1) if 1 + k * ordered[k - 1] > ordered[:k].sum())
        tau = (ordered[:k].sum() - 1) / k
        out[index] = np.where(np.isfinite(row), np.maximum(row - tau, 0), 0)
    return out


def entmax15_reference(z):
    """Peters et al. 2019, eq. 10 with alpha = 1.5: p = [z / 2 - tau]_+^2, tau found by bisection so that p sums to
    one (a different algorithm from the package's sort-based one)."""
    out = np.zeros_like(z)
    for index in np.ndindex(z.shape[:-1]):
        row = z[index] / 2
        real = np.isfinite(row)
        low, high = row[real].max() - 1, row[real].max()  # the sum is >= 1 at low and 0 at high
        for _ in range(200):
            tau = (low + high) / 2
            total = (np.maximum(row[real] - tau, 0) ** 2).sum()
            low, high = (tau, high) if total > 1 else (low, tau)
        out[index] = np.where(real, np.maximum(row - tau, 0) ** 2, 0)
    return out


SPARSE = {"sparsemax": (sparsemax_reference, entmax.sparsemax), "entmax15": (entmax15_reference, entmax.entmax15)}


@pytest.mark.parametrize("normalizer", SPARSE)
@pytest.mark.parametrize("name", MODULES)
def test_sparse_weights_match_the_formula_and_the_package_with_zeros_on_padding(name, normalizer, inputs):
    torch.manual_seed(1)
    module = MODULES[name]()
    module.normalizer = normalizer
    query, memory, mask = inputs
    query = query * 3  # scores spread wide enough that some real positions get exactly zero
    context, weights = module(query, module.prepare(memory), memory, mask)
    scores = np.where(mask.numpy()[:, None, :], reference_scores(module, query, memory), -np.inf)
    reference, package = SPARSE[normalizer]
    np.testing.assert_allclose(numpy(weights), reference(scores), atol=1e-5)
    real = torch.tensor(scores).float().masked_fill(~mask[:, None, :], -1e6)
    torch.testing.assert_close(weights, package(real, dim=-1) * mask[:, None, :], atol=1e-6, rtol=1e-5)
    np.testing.assert_allclose(numpy(context), numpy(weights) @ numpy(memory), atol=1e-5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, T))
    assert (weights.masked_select(~mask[:, None, :].expand_as(weights)) == 0).all()


@pytest.mark.parametrize("normalizer", SPARSE)
def test_sparse_normalizers_give_exact_zeros_to_low_scores_where_softmax_does_not(normalizer):
    scores = torch.tensor([[[4.0, 3.5, 0.0, -2.0, 1.0]]])
    allowed = torch.tensor([[[True, True, True, True, False]]])
    weights = normalize(scores, allowed, normalizer)
    assert weights[0, 0, :2].gt(0).all() and (weights[0, 0, 2:] == 0).all()  # the last one is padding
    assert normalize(scores, allowed, "softmax")[0, 0, :4].gt(0).all()


@pytest.mark.parametrize("normalizer", SPARSE)
def test_sparse_normalizers_give_finite_gradients_through_padding(normalizer, inputs):
    query, memory, mask = inputs
    module = GeneralAttention(query_size=H, key_size=H, normalizer=normalizer)
    query.requires_grad_(True)
    context, _ = module(query, module.prepare(memory), memory, mask)
    context.sum().backward()
    assert torch.isfinite(query.grad).all() and query.grad.abs().sum() > 0


def test_local_attention_with_sparsemax_stays_inside_the_window():
    torch.manual_seed(0)
    score = GeneralAttention(query_size=H, key_size=H, normalizer="sparsemax")
    module = LocalAttention(score, H, window=1, predictive=False)
    query, memory = torch.randn(2, 5, H) * 3, torch.randn(2, 9, H)
    mask = torch.ones(2, 9, dtype=torch.bool)
    _, weights = module(query, module.prepare(memory), memory, mask, torch.arange(5)[None, :])
    for t in range(5):
        outside = [s for s in range(9) if abs(s - t) > 1]
        assert (weights[:, t, outside] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 5))


def test_an_unknown_normalizer_is_refused_naming_the_option():
    with pytest.raises(ValueError, match="model.attention.normalizer='hardmax'"):
        DotAttention(query_size=H, key_size=H, normalizer="hardmax")
    scores, allowed = torch.zeros(1, 1, 3), torch.tensor([[[True, True, False]]])
    torch.testing.assert_close(normalize(scores, allowed, "softmax"), torch.tensor([[[0.5, 0.5, 0.0]]]))
