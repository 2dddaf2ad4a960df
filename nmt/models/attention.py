"""Attention: one interface, a score function per class.

Every module maps (query, keys, values, mask) to (context, weights):
    query   (B, T, Q)   T query positions (T = 1 for one decoding step)
    keys    (B, S, K)   the prepared keys (see `prepare`)
    values  (B, S, V)   what the context averages: the encoder annotations
    mask    (B, S)      bool, True on real source tokens; padded positions get exactly zero weight
    context (B, T, V), weights (B, T, S)
`prepare(memory)` does the source-only work once per sentence (Bahdanau's U h_i, Luong's W_a h_s) so that no decoding
step repeats it. A new score function is one subclass with `score` (and `prepare` when it has source-side work).
Every score takes a `normalizer`: softmax, or sparsemax or 1.5-entmax, whose weights are exactly zero outside a few
source positions; and `hard`: the context is the weighted average of the annotations (none), or one annotation chosen
by the weights, trained by REINFORCE or by the straight-through Gumbel-softmax (see `attend`).
"""

from __future__ import annotations

import math

import entmax
import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from nmt.models.dropout import Dropout
from nmt.models.flops import attention_products, linear

NORMALIZERS = ("softmax", "sparsemax", "entmax15")
HARD = ("none", "reinforce", "gumbel")
BASELINE_DECAY = 0.9  # Xu et al. 2015, section 4.1: b_k = 0.9 b_{k-1} + 0.1 log p(y | s_k, a)
MASKED_SCORE = -1e6  # what sparsemax and entmax see on padding: far below any real score, yet finite


def normalize(scores: torch.Tensor, allowed: torch.Tensor, normalizer: str) -> torch.Tensor:
    """Attention weights (B, T, S) from fp32 scores (B, T, S), zero where `allowed` (bool, broadcastable) is False.

    softmax: exp(e_s) / sum exp(e). sparsemax (Martins and Astudillo 2016) is the Euclidean projection of the scores
    onto the probability simplex, and 1.5-entmax (Peters et al. 2019) lies between the two: both give exactly zero
    weight to scores far enough below the largest. Those two come from the `entmax` package. They sort the scores, so
    padding gets a large finite score instead of -inf, which would turn their cumulative sums into NaN.
    """
    if normalizer == "softmax":
        return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    function = entmax.sparsemax if normalizer == "sparsemax" else entmax.entmax15
    return function(scores.masked_fill(~allowed, MASKED_SCORE), dim=-1) * allowed


def attend(
    weights: torch.Tensor,
    values: torch.Tensor,
    hard: str,
    temperature: float,
    training: bool,
    expected_context: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The context (B, T, V) from the weights (B, T, S) over `values` (B, S, V), and the weights to report (B, T, S).

    none: c_t = sum_s a_t(s) h_s, the soft attention of Bahdanau and Luong.
    Hard attention (Xu et al. 2015, section 4.1) takes one annotation, c_t = h_{s_t}: the position s_t with the largest
    weight when decoding; in training one drawn from the weights (renormalised, as local-p's do not sum to one):
    - reinforce: s_t ~ a_t. No gradient passes the draw; the weights learn from the score-function term of
      `Attention.policy_loss`, which the reported weights carry: they equal the one-hot of s_t in value, and their
      gradient is that of log p(s_t) (DiCE's magic box, Foerster et al. 2018: p(s_t) / p(s_t), value 1). With
      probability `expected_context` a step takes the expected context sum_s a_t(s) h_s instead of a draw (Xu et
      al.'s third device, section 4.1), and reports its renormalised weights, whose sum has no gradient.
    - gumbel: `gumbel_straight_through`.
    Either way the context is the chosen annotation exactly, and the reported weights are one-hot.
    """
    if hard == "none":
        return torch.bmm(weights.to(values.dtype), values), weights
    if hard == "gumbel" and training:
        return gumbel_straight_through(weights, values, temperature)
    probabilities = weights / weights.sum(-1, keepdim=True)  # (B, T, S)
    if training:
        # s_t ~ a_t by the exponential race: argmax_s a_t(s) / E_s with E_s ~ Exp(1) picks s with probability
        # a_t(s), exactly (the Gumbel-max trick without logarithms), in one kernel with no host sync
        race = probabilities.detach() / torch.empty_like(probabilities).exponential_()
        index = race.argmax(-1, keepdim=True)  # (B, T, 1)
    else:
        index = weights.argmax(-1, keepdim=True)
    context = values.gather(1, index.expand(-1, -1, values.shape[-1]))  # h_{s_t}, (B, T, V)
    one_hot = torch.zeros_like(weights).scatter_(-1, index, 1.0)
    if training:
        chosen = probabilities.gather(-1, index)  # p(s_t), (B, T, 1), above zero since it was drawn
        one_hot = one_hot * (chosen / chosen.detach())  # the magic box: value one-hot, gradient of log p(s_t)
        if expected_context:
            expected = torch.rand(*weights.shape[:2], 1, device=weights.device) < expected_context  # (B, T, 1)
            context = torch.where(expected, torch.bmm(weights.to(values.dtype), values), context)
            one_hot = torch.where(expected, probabilities, one_hot)
    return context, one_hot


def gumbel_straight_through(
    weights: torch.Tensor, values: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hard attention in training by the Gumbel-max trick: s_t = argmax_s (log a_t(s) + g_s), g ~ Gumbel(0, 1), which
    draws from a_t (Jang et al. 2017; Maddison et al. 2017); straight-through: the forward pass uses the one-hot, the
    backward pass the gradient of softmax((log a_t + g) / temperature). The context (B, T, V) and the one-hot."""
    log_weights = torch.where(weights > 0, weights.clamp_min(1e-30).log(), float("-inf"))  # -inf: never chosen
    perturbed = log_weights - torch.empty_like(weights).exponential_().log()  # + Gumbel(0, 1) noise
    relaxed = torch.softmax(perturbed / temperature, dim=-1)  # (B, T, S)
    one_hot = torch.zeros_like(weights).scatter_(-1, perturbed.argmax(-1, keepdim=True), 1.0)
    chosen = one_hot + (relaxed - relaxed.detach())  # exactly the one-hot in value, the relaxed weights' gradient
    return torch.bmm(chosen.to(values.dtype), values), chosen


class Attention(nn.Module):
    """Attention over the source; subclasses supply `score` and, optionally, `prepare`."""

    # hard=reinforce: the share of training steps that take the expected context instead of a draw. Xu et al. (2015,
    # section 4.1) use 0.5; without it the draws collapse onto one source position within a few hundred updates
    # (docs/attention.md). Tests set 0 to check REINFORCE alone.
    expected_context = 0.5

    def __init__(self, normalizer: str = "softmax", hard: str = "none", temperature: float = 1.0):
        super().__init__()
        if normalizer not in NORMALIZERS:
            raise ValueError(f"model.attention.normalizer={normalizer!r}: use one of {', '.join(NORMALIZERS)}")
        if hard not in HARD:
            raise ValueError(f"model.attention.hard={hard!r}: use one of {', '.join(HARD)}")
        if not temperature > 0:
            raise ValueError(f"model.attention.temperature={temperature}: must be above 0")
        self.normalizer, self.hard, self.temperature = normalizer, hard, temperature
        if hard == "reinforce":  # the moving average of the loss per target word; NaN until the first batch
            self.register_buffer("reward_baseline", torch.tensor(float("nan")))

    def policy_loss(
        self, weights: torch.Tensor, target_mask: torch.Tensor, token_loss: torch.Tensor
    ) -> torch.Tensor | None:
        """The REINFORCE term of hard attention (Xu et al. 2015, section 4.1), None for any other attention.

        weights (B, T, S) as `attend` reports them in training, target_mask (B, T) the real target words, token_loss
        (B, T) each word's -log p(y_t) under the positions drawn (zero on padding). The term's value is zero; its
        gradient is sum_t (L_t - b_t) grad log p(s_t) / n, where L_t is the summed loss of the words from t on (the
        draw at step t cannot change the words before it, so leaving them out of its reward keeps the estimate
        unbiased and lowers its variance), b_t a moving average of the loss per target word times the number of words
        from t on (it depends on the sentence's length, never on the draw, so it leaves the estimate unbiased), and n
        the batch's mean sentence length. The objective it estimates: E[sum_t L_t] / n, the expected summed loss of
        the batch's words, each batch's weighted by 1/n (a constant within a batch, so the estimate of that batch's
        gradient is unbiased; over batches of other lengths it re-weights them), which scales it to the
        cross-entropy's own per-word gradient, so that clipping the gradient norm does not let it crowd out the
        rest. L_t is the unsmoothed -log p(y_t): the draws are rewarded for the reference's likelihood even where the
        cross-entropy trained beside them is label-smoothed. The baseline is updated after use. Draws followed by
        worse words get less likely.
        """
        if self.hard != "reinforce" or not weights.requires_grad:
            return None
        with torch.no_grad():
            mask = target_mask.to(token_loss.dtype)  # (B, T)
            words = mask.sum().clamp_min(1)
            per_word = token_loss.sum() / words
            baseline = torch.where(self.reward_baseline.isnan(), per_word, self.reward_baseline)
            loss_to_go = (token_loss * mask).flip(1).cumsum(1).flip(1)  # (B, T)
            words_to_go = mask.flip(1).cumsum(1).flip(1)
            advantage = (loss_to_go - baseline * words_to_go) * mask / (words / mask.shape[0])  # (L_t - b_t) / n
            self.reward_baseline.copy_(BASELINE_DECAY * baseline + (1 - BASELINE_DECAY) * per_word)
        log_probability = (weights - weights.detach()).sum(-1)  # (B, T): value 0, gradient grad log p(s_t)
        return (advantage * log_probability).sum()

    def prepare(self, memory: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Keys from the encoder annotations (B, S, K) and their mask (B, S); computed once per sentence."""
        return memory

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """Alignment scores (B, T, S)."""
        raise NotImplementedError

    def flops(self, batch: int, queries: int, positions: int) -> int:
        """Products of `prepare` and `score` in one trained call over `batch` sentences of `positions` source
        positions, with `queries` queries each (nmt/models/flops.py); the context's product is `context_flops`."""
        raise NotImplementedError

    def context_flops(self, queries: int, positions: int, size: int) -> int:
        """The context's product c_t = sum_i a_ti h_i for `queries` queries over `positions` annotations of `size`."""
        return attention_products(queries, positions, size)

    def forward(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor,
        query_positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        scores = self.score(query, keys).float()  # (B, T, S); normalised in fp32 under autocast
        weights = normalize(scores, mask[:, None, :], self.normalizer)  # (B, T, S)
        return attend(weights, values, self.hard, self.temperature, self.training, self.expected_context)


class AdditiveAttention(Attention):
    """Bahdanau et al. 2015, eq. 6 (appendix A.1.2): e_ti = v^T tanh(W s_{t-1} + U h_i)."""

    def __init__(
        self,
        query_size: int,
        key_size: int,
        attention_size: int,
        normalizer: str = "softmax",
        hard: str = "none",
        temperature: float = 1.0,
    ):
        super().__init__(normalizer, hard, temperature)
        self.query_projection = nn.Linear(query_size, attention_size, bias=False)  # W
        self.key_projection = nn.Linear(key_size, attention_size)  # U (its bias stands for the sum's bias)
        self.energy = nn.Linear(attention_size, 1, bias=False)  # v

    def prepare(self, memory: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.key_projection(memory)  # U h_i, (B, S, A)

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(self.query_projection(query)[:, :, None, :] + keys[:, None, :, :])  # (B, T, S, A)
        return self.energy(hidden).squeeze(-1)  # (B, T, S)

    def flops(self, batch: int, queries: int, positions: int) -> int:
        size = self.energy.in_features  # A
        return (
            linear(batch * positions, self.key_projection.in_features, size)  # U h_i
            + linear(batch * queries, self.query_projection.in_features, size)  # W s
            + linear(batch * queries * positions, size, 1)
        )  # v^T tanh(.)


class ConcatAttention(AdditiveAttention):
    """Luong et al. 2015, eq. 8 'concat': v_a^T tanh(W_a [h_t; h_s]).

    W_a [h_t; h_s] = W_1 h_t + W_2 h_s, so this is the additive form with the query being the current state h_t;
    the source half W_2 h_s is prepared once per sentence.
    """

    def __init__(
        self,
        query_size: int,
        key_size: int,
        attention_size: int | None = None,
        normalizer: str = "softmax",
        hard: str = "none",
        temperature: float = 1.0,
    ):
        super().__init__(query_size, key_size, attention_size or query_size, normalizer, hard, temperature)


class DotAttention(Attention):
    """Luong et al. 2015, eq. 8 'dot': h_t^T h_s; with `scaled`, h_t^T h_s / sqrt(H), as Vaswani et al. 2017 scale it
    (section 3.2.1) so that the softmax does not saturate while the states grow."""

    def __init__(
        self,
        query_size: int,
        key_size: int,
        scaled: bool = False,
        normalizer: str = "softmax",
        hard: str = "none",
        temperature: float = 1.0,
    ):
        super().__init__(normalizer, hard, temperature)
        if query_size != key_size:
            raise ValueError(f"dot attention needs equal query and key sizes, got {query_size} and {key_size}")
        self.scale = 1 / math.sqrt(key_size) if scaled else 1.0
        self.size = key_size

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        scores = torch.bmm(query, keys.transpose(1, 2))  # (B, T, S)
        return scores * self.scale if self.scale != 1.0 else scores

    def flops(self, batch: int, queries: int, positions: int) -> int:
        return attention_products(batch * queries, positions, self.size)


class GeneralAttention(DotAttention):
    """Luong et al. 2015, eq. 8 'general': h_t^T W_a h_s, with W_a h_s prepared once per sentence."""

    def __init__(
        self, query_size: int, key_size: int, normalizer: str = "softmax", hard: str = "none", temperature: float = 1.0
    ):
        Attention.__init__(self, normalizer, hard, temperature)
        self.scale, self.size = 1.0, query_size
        self.key_projection = nn.Linear(key_size, query_size, bias=False)  # W_a

    def prepare(self, memory: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.key_projection(memory)  # (B, S, Q)

    def flops(self, batch: int, queries: int, positions: int) -> int:
        prepare = linear(batch * positions, self.key_projection.in_features, self.size)
        return prepare + super().flops(batch, queries, positions)


class LocationAttention(Attention):
    """Luong et al. 2015, eq. 8 'location': a_t = softmax(W_a h_t), scores from the target state alone, one per
    source position. W_a has a row for each of the first `max_positions` positions; later ones are never attended."""

    def __init__(
        self,
        query_size: int,
        key_size: int,
        max_positions: int,
        normalizer: str = "softmax",
        hard: str = "none",
        temperature: float = 1.0,
    ):
        super().__init__(normalizer, hard, temperature)
        self.position_scores = nn.Linear(query_size, max_positions, bias=False)  # W_a

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        scores = self.position_scores(query)  # (B, T, max_positions)
        source_length = keys.shape[1]
        if source_length <= scores.shape[-1]:
            return scores[..., :source_length]  # (B, T, S)
        beyond = scores.new_full((*scores.shape[:-1], source_length - scores.shape[-1]), float("-inf"))
        return torch.cat([scores, beyond], -1)

    def flops(self, batch: int, queries: int, positions: int) -> int:
        return linear(batch * queries, self.position_scores.in_features, self.position_scores.out_features)


class FixedContext(Attention):
    """No attention (`model/attention=none`): RNNencdec's fixed context, the baseline Bahdanau et al. 2015 compare
    RNNsearch with (section 4.2; Cho et al. 2014, eq. 5-6). Every step reads the same vector c, the encoder's summary
    of the whole sentence: for a bidirectional encoder's annotations h_i = [forward h_i; backward h_i], c = [forward
    h_S; backward h_1], each direction's final state. The model around it is unchanged (encoder, s_0, decoder,
    readout), so it differs from the attention model in the context alone: a like-for-like baseline. No weights
    (None): nothing to plot or align."""

    NAME = "none"  # the option's name (configs/model/attention/none.yaml), not derived from the class's

    def __init__(self, query_size: int, key_size: int):
        super().__init__()
        if key_size % 2:
            raise ValueError(f"model/attention=none reads a bidirectional encoder's annotations; size {key_size}")

    def flops(self, batch: int, queries: int, positions: int) -> int:
        return 0  # no score: the summary is two gathers

    def context_flops(self, queries: int, positions: int, size: int) -> int:
        return 0

    def prepare(self, memory: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """c, once per sentence: (B, 1, 2H) from the annotations (B, S, 2H) and the mask (B, S)."""
        half = memory.shape[-1] // 2
        last = (mask.sum(1) - 1).clamp_min(0)  # (B,) each sentence's last real position, read on the device
        rows = torch.arange(memory.shape[0], device=memory.device)
        return torch.cat([memory[rows, last, :half], memory[:, 0, half:]], dim=-1)[:, None, :]

    def forward(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor,
        query_positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, None]:
        return keys.expand(-1, query.shape[1], -1), None  # the prepared c at every query: (B, T, 2H)


class LocalAttention(nn.Module):
    """Luong et al. 2015, section 3.2: attend only to the window [p_t - D, p_t + D] of the source.

    local-m (monotonic): p_t = t, the target position, kept inside the sentence.
    local-p (predictive): p_t = (S - 1) sigmoid(v_p^T tanh(W_p h_t)) (eq. 9 on 0-based positions), and the weights are
    multiplied by a Gaussian exp(-(s - p_t)^2 / (2 sigma^2)) with sigma = D / 2 (eq. 10). As in the paper, local-p
    weights then sum to less than one; local-m weights are the softmax over the window (eq. 7).
    """

    def __init__(self, score: Attention, query_size: int, window: int, predictive: bool):
        super().__init__()
        self.inner, self.window, self.predictive = score, window, predictive
        if predictive:
            self.position = nn.Sequential(
                nn.Linear(query_size, query_size, bias=False), nn.Tanh(), nn.Linear(query_size, 1, bias=False)
            )  # W_p, v_p

    def prepare(self, memory: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.inner.prepare(memory, mask)

    def flops(self, batch: int, queries: int, positions: int) -> int:
        """The inner score over every position (the window is a mask), and local-p's p_t (eq. 9)."""
        total = self.inner.flops(batch, queries, positions)
        if self.predictive:
            size = self.position[0].in_features
            total += linear(batch * queries, size, size) + linear(batch * queries, size, 1)
        return total

    def centres(self, query: torch.Tensor, mask: torch.Tensor, query_positions: torch.Tensor | None) -> torch.Tensor:
        """p_t for every query (B, T), in source positions."""
        lengths = mask.sum(1, keepdim=True).to(torch.float32)  # (B, 1)
        if self.predictive:
            # eq. 9, p_t = S sigmoid(v_p^T tanh(W_p h_t)), with S - 1 for 0-based positions: p_t spans the first to
            # the last word, not half a position past it
            return (lengths - 1) * torch.sigmoid(self.position(query).squeeze(-1).float())  # (B, T)
        if query_positions is None:
            raise ValueError("local-m attention needs the target positions of its queries")
        positions = query_positions.to(torch.float32).expand(query.shape[0], query.shape[1])  # (B, T)
        return torch.minimum(positions, lengths - 1)

    def forward(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor,
        query_positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        centres = self.centres(query, mask, query_positions)[:, :, None]  # (B, T, 1)
        source_positions = torch.arange(keys.shape[1], device=keys.device, dtype=torch.float32)  # (S,)
        distance = source_positions - centres  # (B, T, S)
        # The window always holds the source position nearest p_t, so no row is left without a real token.
        nearest = distance.abs() <= distance.abs().masked_fill(~mask[:, None, :], float("inf")).amin(-1, True)
        inside = ((distance.abs() <= self.window) | nearest) & mask[:, None, :]
        scores = self.inner.score(query, keys).float()  # (B, T, S)
        weights = normalize(scores, inside, self.inner.normalizer)  # eq. 7 within the window, (B, T, S)
        if self.predictive:
            sigma = self.window / 2
            weights = weights * torch.exp(-(distance**2) / (2 * sigma**2))  # eq. 10
        inner = self.inner
        return attend(weights, values, inner.hard, inner.temperature, self.training, inner.expected_context)

    def policy_loss(self, weights: torch.Tensor, target_mask: torch.Tensor, token_loss: torch.Tensor):
        return self.inner.policy_loss(weights, target_mask, token_loss)


# The fused kernels SDPA may choose from: all but cuDNN's. cuDNN's attention builds an execution plan for every new
# shape, and a batch of sentences has a shape of its own nearly every update: on an H100 each call spent 2.4 ms on the
# host building one, and the Transformer trained at 6,500 target tokens/s with it, 39,600 without (bf16,
# nmt_study measure speed --models transformer --device cuda, docs/speed.md).
FUSED_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


class MultiHeadAttention(nn.Module):
    """Vaswani et al. 2017, section 3.2: MultiHead(Q, K, V) = Concat(head_1..head_h) W^O,
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V), Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V (eq. 1).

    `mask` is bool and broadcasts to (B, heads, T, S), True where a query may attend. On a GPU, when the weights are
    not asked for, the fused `scaled_dot_product_attention` computes the same thing faster. On a CPU the explicit
    product is faster for sentence-length sequences (forward and backward of a Multi30k batch: 9 ms explicit, 19 ms
    for SDPA's math kernel, 42 ms for its flash kernel), so it is used there.
    """

    fused_on_cpu = False  # tests turn it on to check the fused path against the explicit one

    def __init__(self, model_size: int, heads: int, dropout: float = 0.0):
        super().__init__()
        if model_size % heads:
            raise ValueError(f"model size {model_size} is not divisible by {heads} heads")
        self.heads, self.head_size, self.dropout = heads, model_size // heads, dropout
        self.weight_dropout = Dropout(dropout)  # the explicit path's; the fused one takes dropout_p
        self.query_projection = nn.Linear(model_size, model_size)  # W^Q for all heads
        self.key_projection = nn.Linear(model_size, model_size)  # W^K
        self.value_projection = nn.Linear(model_size, model_size)  # W^V
        self.output_projection = nn.Linear(model_size, model_size)  # W^O

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(-1, (self.heads, self.head_size)).transpose(1, 2)  # (B, L, D) -> (B, h, L, d_k)

    def project_keys_values(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K W^K and V W^V split into heads, (B, h, S, d_k) each: cached once per sentence for cross-attention."""
        return self.split_heads(self.key_projection(keys)), self.split_heads(self.value_projection(values))

    def attend(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor | None,
        need_weights: bool = False,
        causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attention of raw queries (B, T, D) over projected keys/values (B, h, S, d_k): (B, T, D), weights.
        `causal` (with no mask): query i sees keys 0..i, which the fused kernel takes without a mask tensor (on a
        GPU that lets it run its flash kernel)."""
        q = self.split_heads(self.query_projection(query))  # (B, h, T, d_k)
        dropout = self.dropout if self.training else 0.0
        if causal and mask is not None:
            raise ValueError("give causal attention as causal=True or as a mask, not both")
        if need_weights or (q.device.type == "cpu" and not self.fused_on_cpu):
            scores = q @ keys.transpose(-2, -1) / math.sqrt(self.head_size)  # (B, h, T, S)
            if causal:
                mask = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).tril()
            if mask is not None:
                scores = scores.float().masked_fill(~mask, float("-inf"))
            weights = torch.softmax(scores.float(), dim=-1)
            heads = self.weight_dropout(weights).to(values.dtype) @ values
            weights = weights if need_weights else None
        else:
            weights = None
            with sdpa_kernel(FUSED_BACKENDS):
                heads = nn.functional.scaled_dot_product_attention(
                    q, keys, values, attn_mask=mask, dropout_p=dropout, is_causal=causal
                )
        output = self.output_projection(heads.transpose(1, 2).flatten(2))  # (B, T, D)
        return output, weights

    def forward(self, query, keys, values, mask=None, need_weights=False, causal=False):
        projected_keys, projected_values = self.project_keys_values(keys, values)
        return self.attend(query, projected_keys, projected_values, mask, need_weights, causal)
