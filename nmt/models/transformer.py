"""The Transformer of Vaswani et al. 2017, with attention from `nmt.models.attention.MultiHeadAttention`.

Speaks the one model interface (forward / encode / decode_step). Incremental decoding keeps, for every decoder layer,
the projected keys and values of the tokens generated so far (self-attention) and of the source (cross-attention) in
the state dict, so each step costs one position instead of the whole prefix. The source's keys and values are named
`source_keys_<layer>` / `source_values_<layer>`: `source_*` entries never change during decoding (nmt.models.model).

Its layers come first: the embedding with its positions (sections 3.4, 3.5), the position-wise feed-forward network
(3.3), and the encoder and decoder layers, each sublayer inside a residual connection with layer normalisation (3.1),
before it (pre-norm) or after it (the paper's post-norm).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from nmt.models.attention import MultiHeadAttention
from nmt.models.dropout import Dropout
from nmt.models.flops import Shape, attention_products, linear, output_and_loss
from nmt.models.model import Seq2Seq, State


def sinusoids(length: int, size: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) (section 3.5): (length, size)."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    frequency = torch.exp(torch.arange(0, size, 2, dtype=torch.float32) * (-math.log(10000.0) / size))
    table = torch.zeros(length, size)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency)
    return table


class Embedding(nn.Module):
    """Token embedding scaled by sqrt(d_model) (section 3.4) plus positions, then dropout."""

    def __init__(self, vocab_size: int, model_size: int, pad_id: int, dropout: float, positions: str, max_len: int):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, model_size, padding_idx=pad_id)
        nn.init.normal_(self.tokens.weight, std=model_size**-0.5)
        self.scale = math.sqrt(model_size)
        if positions == "sinusoidal":
            self.register_buffer("table", sinusoids(max_len, model_size), persistent=False)
            self.learned = None
        elif positions == "learned":
            self.learned = nn.Embedding(max_len, model_size)
        else:
            raise ValueError(f"model.positions={positions!r}: use sinusoidal or learned")
        self.dropout = Dropout(dropout)

    def position_vectors(self, positions: torch.Tensor, length: int) -> torch.Tensor:
        """Vectors of `positions`, all below `length` (known from shapes, so no host sync). Sinusoids extend to any
        length; learned positions past the last one trained reuse it, so a sentence longer than `max_len` subwords
        still translates (if poorly) rather than failing."""
        if self.learned is not None:
            return self.learned(positions.clamp(max=self.learned.num_embeddings - 1))
        if length > len(self.table):
            self.table = sinusoids(2 * length, self.table.shape[1]).to(self.table.device)
        return self.table[positions]

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, length: int) -> torch.Tensor:
        return self.dropout(self.tokens(tokens) * self.scale + self.position_vectors(positions, length))


class FeedForward(nn.Sequential):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 (eq. 2)."""

    def __init__(self, model_size: int, hidden_size: int, dropout: float):
        # Dropout on the hidden activation is not in the paper (fairseq's `activation_dropout`); off by default.
        super().__init__(
            nn.Linear(model_size, hidden_size),
            nn.ReLU(),
            Dropout(dropout) if dropout else nn.Identity(),
            nn.Linear(hidden_size, model_size),
        )

    def flops(self, rows: int) -> int:
        return linear(rows, self[0].in_features, self[0].out_features) + linear(
            rows, self[-1].in_features, self[-1].out_features
        )


class ResidualLayer(nn.Module):
    """Residual connections with layer norm around each sublayer: post-norm LayerNorm(x + Sublayer(x)) as in the
    paper (section 5.4), or pre-norm x + Sublayer(LayerNorm(x)), which trains stably with a short warmup."""

    def __init__(self, model_size: int, sublayers: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(model_size) for _ in range(sublayers))
        self.dropout, self.pre_norm = Dropout(dropout), pre_norm

    def sublayer_input(self, index: int, x: torch.Tensor) -> torch.Tensor:
        return self.norms[index](x) if self.pre_norm else x

    def residual(self, index: int, x: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
        x = x + self.dropout(output)
        return x if self.pre_norm else self.norms[index](x)


class EncoderLayer(ResidualLayer):
    def __init__(
        self,
        model_size: int,
        heads: int,
        feedforward_size: int,
        dropout: float,
        pre_norm: bool,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
    ):
        super().__init__(model_size, 2, dropout, pre_norm)
        self.self_attention = MultiHeadAttention(model_size, heads, attention_dropout)
        self.feedforward = FeedForward(model_size, feedforward_size, activation_dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, need_weights: bool = False):
        """x (B, S, D), mask (B, 1, 1, S) -> x, self-attention weights (B, h, S, S) or None."""
        h = self.sublayer_input(0, x)
        output, weights = self.self_attention(h, h, h, mask, need_weights=need_weights)
        x = self.residual(0, x, output)
        return self.residual(1, x, self.feedforward(self.sublayer_input(1, x))), weights


class DecoderLayer(ResidualLayer):
    def __init__(
        self,
        model_size: int,
        heads: int,
        feedforward_size: int,
        dropout: float,
        pre_norm: bool,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
    ):
        super().__init__(model_size, 3, dropout, pre_norm)
        self.self_attention = MultiHeadAttention(model_size, heads, attention_dropout)
        self.cross_attention = MultiHeadAttention(model_size, heads, attention_dropout)
        self.feedforward = FeedForward(model_size, feedforward_size, activation_dropout)

    def forward(
        self,
        x: torch.Tensor,
        cross_keys: torch.Tensor,
        cross_values: torch.Tensor,
        source_mask: torch.Tensor,
        self_mask: torch.Tensor | None,
        cache: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
        need_weights: bool = False,
        causal: bool = False,
    ):
        """x (B, T, D); cross keys/values projected once per sentence (B, h, S, d_k); `self_mask` where a position
        may attend to itself and earlier ones (causal, and within the window if any; None: all of them); `causal`
        instead of a mask: causal self-attention, plain (no window). When decoding one position at a time, `cache` is
        (keys, values, slot): the projected self-attention keys/values of every step (B, h, C, d_k), allocated once
        for C steps, and the slot (1,) where this step's go; `self_mask` (B, 1, 1, C) then says which slots are
        filled. Returns x, the cross-attention weights (B, h, T, S) or None, and the new cache (keys, values)."""
        h = self.sublayer_input(0, x)
        keys, values = self.self_attention.project_keys_values(h, h)  # (B, h, T, d_k)
        if cache is not None:  # a new buffer of the same shape (a state is never changed in place; a fixed shape
            # lets the allocator reuse the last step's block and CPU kernels reuse the last step's plan)
            keys, values = cache[0].index_copy(2, cache[2], keys), cache[1].index_copy(2, cache[2], values)
        output, _ = self.self_attention.attend(h, keys, values, self_mask, causal=causal)
        x = self.residual(0, x, output)
        output, weights = self.cross_attention.attend(
            self.sublayer_input(1, x), cross_keys, cross_values, source_mask, need_weights=need_weights
        )
        x = self.residual(1, x, output)
        x = self.residual(2, x, self.feedforward(self.sublayer_input(2, x)))
        return x, weights, (keys, values)


def default_steps(source_length: int) -> int:
    """The decoding steps a cache is allocated for when the caller does not say: 2 S + 10 (the search stops at
    1.5 S + 10 by default)."""
    return 2 * source_length + 10


def band(queries: int, keys: int, window: int, causal: bool, device: torch.device) -> torch.Tensor | None:
    """Where query i may attend to key j, (queries, keys) bool, for the last `queries` of `keys` positions: within
    `window` positions of each other (sliding-window self-attention, as in Longformer and Mistral; 0: everywhere),
    and not ahead when `causal`. None when nothing is masked."""
    if not window and not causal:
        return None
    query_positions = torch.arange(keys - queries, keys, device=device)[:, None]  # (T, 1)
    distance = query_positions - torch.arange(keys, device=device)[None, :]  # (T, S): i - j
    allowed = torch.ones_like(distance, dtype=torch.bool)
    if window:
        allowed &= distance.abs() <= window
    if causal:
        allowed &= distance >= 0
    return allowed


class Transformer(nn.Module, Seq2Seq):
    """Encoder and decoder stacks (section 3.1). With a joint vocabulary, source and target embeddings can be one
    matrix, and the output layer can share it (section 3.4). With `window` W > 0 self-attention is a sliding window:
    each position attends to the positions at most W away (the decoder: the W before it and itself), while the
    encoder-decoder attention stays global."""

    def __init__(
        self,
        source_vocab_size: int,
        target_vocab_size: int,
        pad_id: int,
        *,
        d_model: int,
        heads: int,
        feedforward_size: int,
        encoder_layers: int,
        decoder_layers: int,
        dropout: float,
        attention_dropout: float,
        activation_dropout: float,
        pre_norm: bool,
        positions: str,
        share_embeddings: bool,
        tie_output: bool,
        window: int = 0,
        max_len: int = 1024,
    ):
        super().__init__()
        if window < 0:
            raise ValueError(f"model.window={window}: 0 (global self-attention) or a number of positions")
        self.pre_norm, self.max_len, self.window = pre_norm, max_len, window
        self.source_embedding = Embedding(source_vocab_size, d_model, pad_id, dropout, positions, max_len)
        self.target_embedding = Embedding(target_vocab_size, d_model, pad_id, dropout, positions, max_len)
        if share_embeddings:
            if source_vocab_size != target_vocab_size:
                raise ValueError("model.share_embeddings needs a joint vocabulary (data.joint_vocab=true)")
            self.target_embedding.tokens = self.source_embedding.tokens
        self.encoder = nn.ModuleList(
            EncoderLayer(d_model, heads, feedforward_size, dropout, pre_norm, attention_dropout, activation_dropout)
            for _ in range(encoder_layers)
        )
        self.decoder = nn.ModuleList(
            DecoderLayer(d_model, heads, feedforward_size, dropout, pre_norm, attention_dropout, activation_dropout)
            for _ in range(decoder_layers)
        )
        self.encoder_norm = nn.LayerNorm(d_model) if pre_norm else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d_model) if pre_norm else nn.Identity()
        self.output = nn.Linear(d_model, target_vocab_size)
        if tie_output:
            self.output.weight = self.target_embedding.tokens.weight

    def encode_memory(self, source: torch.Tensor, source_mask: torch.Tensor, need_weights: bool = False):
        """Encoder output (B, S, D) and the last layer's self-attention weights (B, h, S, S) when asked for."""
        positions = torch.arange(source.shape[1], device=source.device)[None, :]
        x = self.source_embedding(source, positions, source.shape[1])
        mask = source_mask[:, None, None, :]  # (B, 1, 1, S)
        window = band(source.shape[1], source.shape[1], self.window, False, source.device)
        if window is not None:  # a padded position far from every word still sees itself, so no row is all -inf
            mask = (mask & window) | torch.eye(source.shape[1], dtype=torch.bool, device=source.device)  # (B, 1, S, S)
        weights = None
        for i, layer in enumerate(self.encoder):
            x, weights = layer(x, mask, need_weights and i == len(self.encoder) - 1)
        return self.encoder_norm(x), weights

    def encode(
        self,
        source: torch.Tensor,
        source_mask: torch.Tensor,
        max_steps: int | None = None,
        source_lengths: torch.Tensor | None = None,
    ) -> State:
        memory, _ = self.encode_memory(source, source_mask)
        batch, heads = source.shape[0], self.decoder[0].self_attention.heads
        head_size = self.decoder[0].self_attention.head_size
        state = {"source_mask": source_mask, "position": torch.zeros(batch, dtype=torch.long, device=source.device)}
        # The self-attention cache, allocated once for every step: grown by one position a step, each step's
        # products had a shape of their own, and on a CPU oneDNN keeps a compiled plan per bf16 matmul shape (about
        # 1 MB each: a 1,000-subword line took 1.2 GB). Its dtype is the projections' (bf16 under autocast).
        capacity = max_steps if max_steps is not None else default_steps(source.shape[1])
        for i, layer in enumerate(self.decoder):
            keys, values = layer.cross_attention.project_keys_values(memory, memory)  # (B, h, S, d_k), once
            state[f"source_keys_{i}"], state[f"source_values_{i}"] = keys, values
            empty = keys.new_zeros(batch, heads, capacity, head_size)
            state[f"self_keys_{i}"], state[f"self_values_{i}"] = empty, empty
        return state

    def decode_step(self, previous: torch.Tensor, state: State) -> tuple[torch.Tensor, State, torch.Tensor]:
        position = state["position"]  # (B,), the same for every row; indexing keeps the host out of the loop
        capacity = state["self_keys_0"].shape[2]  # the steps the cache holds
        x = self.target_embedding(previous[:, None], position[:, None], capacity)  # (B, 1, D)
        mask = state["source_mask"][:, None, None, :]
        # The filled slots: this step's and the earlier ones (within the window, if any), (B, 1, 1, C)
        distance = position[:, None] - torch.arange(capacity, device=x.device)  # (B, C)
        visible = (distance >= 0) & (distance <= self.window) if self.window else distance >= 0
        self_mask = visible[:, None, None, :]
        new_state = {**state, "position": position + 1}
        cross = [(state[f"source_keys_{i}"], state[f"source_values_{i}"]) for i in range(len(self.decoder))]
        caches = [(state[f"self_keys_{i}"], state[f"self_values_{i}"], position[:1]) for i in range(len(self.decoder))]
        last = len(self.decoder) - 1
        x, weights, caches = self.decoder_stack(x, cross, mask, self_mask, (last,), caches)
        for i, (keys, values) in enumerate(caches):
            new_state[f"self_keys_{i}"], new_state[f"self_values_{i}"] = keys, values
        logits = self.output(self.decoder_norm(x))[:, 0]  # (B, V)
        return logits, new_state, weights[last].mean(1)[:, 0]  # last layer, heads averaged: (B, S)

    def forward(self, source: torch.Tensor, source_mask: torch.Tensor, target_in: torch.Tensor):
        features, weights = self.features(source, source_mask, target_in)
        return self.output(features), weights  # (B, T, V), (B, T, S) or None

    def features(
        self,
        source: torch.Tensor,
        source_mask: torch.Tensor,
        target_in: torch.Tensor,
        source_lengths: torch.Tensor | None = None,
    ):
        """Teacher forcing over the whole target at once. In eval mode the last layer's cross-attention weights
        (averaged over heads) come back too; in training the fused attention kernel runs and they do not."""
        memory, _ = self.encode_memory(source, source_mask)
        last = len(self.decoder) - 1
        x, weights = self.teacher_forced(memory, source_mask, target_in, () if self.training else (last,))
        return self.decoder_norm(x), (weights[last].mean(1) if weights else None)  # (B, T, D), (B, T, S)

    def teacher_forced(
        self, memory: torch.Tensor, source_mask: torch.Tensor, target_in: torch.Tensor, wanted: tuple[int, ...]
    ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """The decoder stack over the whole target (B, T) at once, on the encoder's `memory` (B, S, D): its output
        (B, T, D), before the final norm, and the cross-attention weights (B, h, T, S) of the layers `wanted`."""
        positions = torch.arange(target_in.shape[1], device=target_in.device)[None, :]
        x = self.target_embedding(target_in, positions, target_in.shape[1])  # (B, T, D)
        # (T, T) with a window; without one, causal=True and no mask tensor (the fused kernel's fastest path)
        self_mask = band(target_in.shape[1], target_in.shape[1], self.window, True, x.device) if self.window else None
        cross = [layer.cross_attention.project_keys_values(memory, memory) for layer in self.decoder]
        x, weights, _ = self.decoder_stack(x, cross, source_mask[:, None, None, :], self_mask, wanted)
        return x, weights

    def decoder_stack(
        self,
        x: torch.Tensor,
        cross: list[tuple[torch.Tensor, torch.Tensor]],
        mask: torch.Tensor,
        self_mask: torch.Tensor | None,
        wanted: tuple[int, ...],
        caches: list[tuple] | None = None,
    ) -> tuple[torch.Tensor, dict[int, torch.Tensor], list[tuple[torch.Tensor, torch.Tensor]]]:
        """x (B, T, D) through every decoder layer, the one loop over them: each layer's projected cross keys and
        values (`cross`), the source `mask` (B, 1, 1, S), `self_mask` (None: causal, by the fused kernel), and when
        decoding step by step each layer's self-attention cache (`caches`, DecoderLayer.forward). Returns x, the
        cross-attention weights (B, h, T, S) of the layers `wanted`, and each layer's self-attention keys/values."""
        found, kept = {}, []
        for i, (layer, (cross_keys, cross_values)) in enumerate(zip(self.decoder, cross)):
            cache = caches[i] if caches is not None else None
            causal = self_mask is None and cache is None
            x, weights, keys_values = layer(
                x, cross_keys, cross_values, mask, self_mask, cache, need_weights=i in wanted, causal=causal
            )
            kept.append(keys_values)
            if i in wanted:
                found[i] = weights
        return x, found, kept

    @torch.no_grad()
    def attention_maps(self, source: torch.Tensor, source_mask: torch.Tensor, target_in: torch.Tensor):
        """Weights to look at, each (B, heads or 1, rows, S): the encoder-decoder attention of every layer averaged
        over heads, every head of the last layer, and the last encoder layer's self-attention (rows = source)."""
        memory, encoder_weights = self.encode_memory(source, source_mask, need_weights=True)
        _, weights = self.teacher_forced(memory, source_mask, target_in, tuple(range(len(self.decoder))))
        maps = {f"cross_layer_{i + 1}": layer_weights.mean(1, keepdim=True) for i, layer_weights in weights.items()}
        maps["cross_heads_last_layer"] = weights[len(self.decoder) - 1]
        maps["encoder_self_last_layer"] = encoder_weights
        return maps

    def training_flops(self, shape: Shape) -> int:
        """Per layer: the four projections of each attention over the rows they read, the scores and the weighted
        values of every head over the padded block (a window is a mask: the products are the same), the FFN."""
        batch, source, target = shape.batch, shape.source_max, shape.target_max
        size = self.output.in_features  # d_model

        def projections(rows: int, count: int) -> int:
            return count * linear(rows, size, size)

        total = output_and_loss(shape, size, self.output.out_features)
        for layer in self.encoder:
            total += projections(batch * source, 4) + 2 * attention_products(batch * source, source, size)
            total += layer.feedforward.flops(batch * source)
        for layer in self.decoder:
            total += projections(batch * target, 4) + 2 * attention_products(batch * target, target, size)  # self
            total += projections(batch * target, 2) + projections(batch * source, 2)  # cross: W^Q, W^O; W^K, W^V
            total += 2 * attention_products(batch * target, source, size) + layer.feedforward.flops(batch * target)
        return total
