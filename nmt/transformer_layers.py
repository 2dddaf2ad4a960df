"""The Transformer's layers (Vaswani et al. 2017, section 3): the embedding with its positions (3.4, 3.5), the
position-wise feed-forward network (3.3), and the encoder and decoder layers, each sublayer inside a residual
connection with layer normalisation (3.1), before it (pre-norm) or after it (the paper's post-norm). The model that
stacks them, and decodes with them, is `nmt.transformer.Transformer`.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from nmt.attention import MultiHeadAttention
from nmt.dropout import Dropout
from nmt.flops import linear


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
