"""The Transformer of Vaswani et al. 2017, with attention from `nmt.attention.MultiHeadAttention`.

Speaks the one model interface (forward / encode / decode_step). Incremental decoding keeps, for every decoder layer,
the projected keys and values of the tokens generated so far (self-attention) and of the source (cross-attention) in
the state dict, so each step costs one position instead of the whole prefix. The source's keys and values are named
`source_keys_<layer>` / `source_values_<layer>`: `source_*` entries never change during decoding (nmt.model).
"""

from __future__ import annotations

import torch
from torch import nn

from nmt.flops import Shape, attention_products, linear, output_and_loss
from nmt.model import Seq2Seq, State
from nmt.transformer_layers import DecoderLayer, Embedding, EncoderLayer


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
