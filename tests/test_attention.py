"""Every score function against a NumPy reference written from the papers' equations."""

import entmax
import numpy as np
import pytest
import torch

from nmt.models.attention import (
    AdditiveAttention,
    ConcatAttention,
    DotAttention,
    GeneralAttention,
    LocalAttention,
    LocationAttention,
    attend,
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


# --- hard attention -------------------------------------------------------------------------------------------------

HARD_MODES = ["reinforce", "gumbel"]


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("hard", HARD_MODES)
@pytest.mark.parametrize("name", MODULES)
def test_hard_context_is_exactly_the_chosen_real_annotation(name, hard, training, inputs):
    torch.manual_seed(3)
    module = MODULES[name]()
    query, memory, mask = inputs
    _, soft = module(query, module.prepare(memory), memory, mask)
    module.hard, module.expected_context = hard, 0.0  # every step a draw (the expected context: the next test)
    context, weights = module.train(training)(query, module.prepare(memory), memory, mask)
    chosen = weights.argmax(-1)  # (B, T)
    assert torch.equal(weights.detach(), torch.nn.functional.one_hot(chosen, S).float())  # one cell per step
    assert torch.equal(context, memory[torch.arange(B)[:, None], chosen])  # h_{s_t} itself, not an average
    assert mask.gather(1, chosen).all()  # never a padded position
    if not training:  # decoding takes the most likely position
        assert torch.equal(chosen, soft.argmax(-1))


def test_reinforce_takes_the_expected_context_at_about_half_the_steps():
    """Xu et al. 2015, section 4.1: with probability 0.5 a training step uses sum_s a_t(s) h_s instead of a draw;
    its reported weights are the distribution, whose sum carries no REINFORCE gradient."""
    torch.manual_seed(8)
    module = GeneralAttention(query_size=H, key_size=H, hard="reinforce").train()
    query, memory = torch.randn(40, 5, H), torch.randn(40, 7, H)
    mask = torch.ones(40, 7, dtype=torch.bool)
    context, weights = module(query, module.prepare(memory), memory, mask)
    module.hard = "none"
    soft_context, soft = module(query, module.prepare(memory), memory, mask)
    drawn = (weights.detach() == 1).any(-1)  # (B, T): one-hot rows
    assert 0.4 < drawn.float().mean() < 0.6
    torch.testing.assert_close(context[~drawn], soft_context[~drawn])
    torch.testing.assert_close(weights.detach()[~drawn], soft[~drawn])
    chosen = weights.detach().argmax(-1)
    assert torch.equal(context[drawn], memory[torch.arange(40)[:, None].expand(40, 5), chosen][drawn])
    assert module.policy_loss(weights, torch.ones(40, 5, dtype=torch.bool), torch.ones(40, 5)) is None  # hard=none
    module.hard = "reinforce"
    term = module.policy_loss(weights, torch.ones(40, 5, dtype=torch.bool), torch.rand(40, 5))
    (gradient,) = torch.autograd.grad(term, module.key_projection.weight)
    assert gradient.abs().sum() > 0


@pytest.mark.parametrize("hard", HARD_MODES)
def test_hard_draws_follow_the_attention_weights(hard):
    """Over many draws each position is chosen as often as its weight says: multinomial for REINFORCE, Gumbel-max
    for the straight-through estimator; a padded position never."""
    torch.manual_seed(4)
    weights = torch.tensor([0.6, 0.3, 0.1, 0.0]).expand(20000, 1, 4).contiguous()  # the last position is padding
    values = torch.eye(4).expand(20000, 4, 4)
    _, chosen = attend(weights, values, hard, 1.0, training=True)
    frequencies = chosen.detach()[:, 0].mean(0)
    torch.testing.assert_close(frequencies, torch.tensor([0.6, 0.3, 0.1, 0.0]), atol=0.015, rtol=0)


def reinforce_alone(size: int):
    """Dot attention trained by REINFORCE alone (no expected-context steps), its baseline at 1, over two source
    positions: (module, memory (1, 2, size), mask)."""
    module = DotAttention(query_size=size, key_size=size, hard="reinforce").train()
    module.reward_baseline.fill_(1.0)
    module.expected_context = 0.0
    memory = torch.tensor([[[1.0, 0.0, 2.0], [0.0, -1.0, 0.5]]])
    return module, memory, torch.ones(1, 2, dtype=torch.bool)


def drawn(module, queries, memory, mask, draws: int):
    """The module's (context, weights) for `draws` copies of one example (batch 1): a hard attention's samples."""
    copies = (queries, memory, memory, mask)
    return module(*(tensor.expand(draws, *tensor.shape[1:]) for tensor in copies))


def test_reinforce_gradient_matches_the_exact_expectation_on_two_positions():
    """Xu et al. 2015, section 4.1: E_s[(f(s) - b) grad log p(s)] = grad E_s[f(s)] = sum_s f(s) grad a(s). The
    estimate from 100,000 draws against the exact gradient of the expectation over the two positions."""
    torch.manual_seed(5)
    draws, size = 100000, 3
    module, memory, mask = reinforce_alone(size)
    direction = torch.tensor([1.0, 1.0, -1.0])  # f = 1.5 at the first position, 2.75 at the second

    def reward(context):  # f(h_s), any function of the chosen annotation
        return (context @ direction) ** 2 + 0.5

    query = torch.tensor([[[0.3, -0.2, 0.4]]], requires_grad=True)
    exact_weights = module.__class__(size, size)(query, memory, memory, mask)[1]  # the soft a, (1, 1, 2)
    (exact_weights[0, 0] * reward(memory[0])).sum().backward()
    exact, query.grad = query.grad.clone(), None

    context, weights = drawn(module, query, memory, mask, draws)
    losses = reward(context[:, 0]).detach()  # (draws,)
    policy = module.policy_loss(weights, torch.ones(draws, 1, dtype=torch.bool), losses[:, None])
    assert policy.item() == 0  # the term adds a gradient, not a value
    policy.backward()
    estimate = query.grad / draws
    torch.testing.assert_close(estimate, exact, atol=0.015, rtol=0.05)  # about 5 standard errors
    assert exact.abs().max() > 0.1  # a gradient worth estimating


def test_reinforce_estimates_the_gradient_of_the_expected_summed_loss_over_several_words():
    """Three target words, each with its own draw and its own loss L_t(s): n times the term's gradient (n the batch's
    mean length, 3) estimates grad E[sum_t L_t] = sum_t sum_s L_t(h_s) grad a_t(s), with each draw rewarded by the
    loss from its word on (later words' losses, which its draw does not change, add variance but no bias) against
    the baseline. From 200,000 draws, against the exact gradient."""
    torch.manual_seed(6)
    draws, size = 200000, 3
    module, memory, mask = reinforce_alone(size)
    directions = torch.tensor([[1.0, 1.0, -1.0], [0.5, -1.0, 0.0], [-1.0, 0.0, 1.0]])  # each word's own loss

    def losses(contexts):  # (..., 3 words, size) -> (..., 3): L_t of the annotation drawn for word t
        return ((contexts * directions).sum(-1)) ** 2 + 0.5

    queries = torch.tensor([[[0.3, -0.2, 0.4], [-0.5, 0.1, 0.2], [0.2, 0.6, -0.3]]], requires_grad=True)
    exact_weights = module.__class__(size, size)(queries, memory, memory, mask)[1]  # (1, 3, 2)
    at_each = losses(memory[0][:, None, :].expand(2, 3, size))  # (positions, words)
    (exact_weights[0] * at_each.T).sum().backward()
    exact, queries.grad = queries.grad.clone(), None
    context, weights = drawn(module, queries, memory, mask, draws)
    module.policy_loss(weights, torch.ones(draws, 3, dtype=torch.bool), losses(context).detach()).backward()
    estimate = queries.grad / draws * 3  # the term divides by the mean length
    torch.testing.assert_close(estimate, exact, atol=0.03, rtol=0.05)
    assert exact.abs().max() > 0.1


def test_reinforce_rewards_each_draw_with_the_summed_loss_from_its_word_on_against_a_moving_average():
    module = GeneralAttention(query_size=H, key_size=H, hard="reinforce").train()
    module.expected_context = 0.0
    assert module.reward_baseline.isnan()  # nothing seen yet
    query, memory = torch.randn(2, 3, H, requires_grad=True), torch.randn(2, 4, H)
    mask = torch.ones(2, 4, dtype=torch.bool)
    target_mask = torch.tensor([[True, True, True], [True, False, False]])
    token_loss = torch.tensor([[1.0, 2.0, 3.0], [2.0, 0.0, 0.0]])
    _, weights = module(query, module.prepare(memory), memory, mask)
    module.policy_loss(weights, target_mask, token_loss).backward(retain_graph=True)
    torch.testing.assert_close(module.reward_baseline, torch.tensor(2.0))  # the first batch's 8 / 4 words
    # the summed losses from each word on, (6, 5, 3) and (2), against 2.0 per word to go, (6, 4, 2) and (2), divided
    # once by the batch's mean sentence length, 4 words / 2 sentences
    gradient = query.grad.clone()
    query.grad = None
    advantages = torch.tensor([[0.0, 0.5, 0.5], [0.0, 0.0, 0.0]])
    (advantages * (weights - weights.detach()).sum(-1)).sum().backward()
    torch.testing.assert_close(gradient, query.grad)
    module.policy_loss(weights, target_mask, 2 * token_loss)
    torch.testing.assert_close(module.reward_baseline, torch.tensor(0.9 * 2.0 + 0.1 * 4.0))
    assert "reward_baseline" in module.state_dict()  # saved with the model, so a resumed run goes on with it


def test_gumbel_straight_through_passes_the_gradient_of_the_relaxed_weights(inputs):
    torch.manual_seed(6)
    query, memory, mask = inputs
    module = GeneralAttention(query_size=H, key_size=H, hard="gumbel", temperature=0.5).train()
    query = query.clone().requires_grad_(True)
    context, weights = module(query, module.prepare(memory), memory, mask)
    assert module.policy_loss(weights, torch.ones(B, T, dtype=torch.bool), torch.ones(B)) is None
    context.square().sum().backward()
    assert torch.isfinite(query.grad).all() and query.grad.abs().sum() > 0
    assert torch.isfinite(module.key_projection.weight.grad).all() and module.key_projection.weight.grad.any()


@pytest.mark.parametrize("predictive", [False, True])
@pytest.mark.parametrize("hard", HARD_MODES)
def test_hard_local_attention_chooses_inside_the_window(hard, predictive):
    torch.manual_seed(7)
    module = LocalAttention(GeneralAttention(query_size=H, key_size=H, hard=hard), H, window=1, predictive=predictive)
    module.inner.expected_context = 0.0
    query, memory = torch.randn(50, 5, H), torch.randn(50, 9, H)
    arguments = (query, module.prepare(memory), memory, torch.ones(50, 9, dtype=torch.bool), torch.arange(5)[None, :])
    module.inner.hard = "none"
    _, soft = module(*arguments)
    module.inner.hard = hard
    _, weights = module.train()(*arguments)
    assert (weights.detach() * (soft == 0)).sum() == 0  # nothing chosen where the window gives no weight
    assert torch.equal(weights.detach().sum(-1), torch.ones(50, 5))


def test_an_unknown_hard_mode_or_a_zero_temperature_is_refused_naming_the_option():
    with pytest.raises(ValueError, match="model.attention.hard='soft'"):
        DotAttention(query_size=H, key_size=H, hard="soft")
    with pytest.raises(ValueError, match="model.attention.temperature=0"):
        DotAttention(query_size=H, key_size=H, hard="gumbel", temperature=0)
