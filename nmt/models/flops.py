"""Floating-point operations of one training update, from each model's formula for a batch's sentence lengths.

The convention is `torch.utils.flop_counter`'s: matrix products alone, 2 m n k for an (m, k) x (k, n) product, and in
backward the same again for each factor that needs a gradient; elementwise work (activations, softmax, norms) is not
counted. A model's count depends on the batch's lengths alone, not on kernels, precision or the machine, so a budget
in FLOPs (`trainer.max_flops`) stops a run at the same update everywhere, and curves of different models can be read
at equal compute. `tests/test_flops.py` holds every family's formula against the counter.

Padding is counted where the model computes it: the RNN encoders read packed sequences (real tokens only); decoders,
attention and the Transformer run over the padded (B, T) and (B, S) blocks; the fused output layer and loss
(`nmt/training/loss.py`) over the real target tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode

TRAINING = 3  # a product with both factors trained: forward, and a product of the same size for each gradient


@dataclass(frozen=True)
class Shape:
    """The lengths of a batch's sentences as the model sees them: source with eos, target_in with bos."""

    source: tuple[int, ...]
    target: tuple[int, ...]

    @classmethod
    def of(cls, source_lengths: Sequence[int], target_lengths: Sequence[int]) -> Shape:
        return cls(tuple(int(n) for n in source_lengths), tuple(int(n) for n in target_lengths))

    @property
    def batch(self) -> int:
        return len(self.source)

    @property
    def source_max(self) -> int:  # S, the padded source length
        return max(self.source)

    @property
    def target_max(self) -> int:  # T
        return max(self.target)

    @property
    def target_tokens(self) -> int:
        return sum(self.target)


def linear(rows: int, inputs: int, outputs: int) -> int:
    """A linear layer over `rows` vectors, trained (its input needs a gradient too)."""
    return TRAINING * 2 * rows * inputs * outputs


def output_and_loss(shape: Shape, features: int, vocabulary: int) -> int:
    """The fused output layer and loss over the real target tokens: logits, their gradient to the features and to
    the weight (nmt/training/loss.py forms all three in its forward pass)."""
    return linear(shape.target_tokens, features, vocabulary)


def packed_rnn(
    lengths: Sequence[int], input_size: int, hidden_size: int, gates: int, layers: int, bidirectional: bool
) -> int:
    """A packed (B, lengths) RNN encoder: per layer and direction, the gate products of every real token
    (gates = 4 for an LSTM, 3 for a GRU). A sentence's first step reads a zero state, whose gradient is not formed:
    B of them in the forward direction, and in the backward direction those of the longest sentences, which start the
    packed sequence together (the others join later, beside states that need a gradient)."""
    tokens, directions = sum(lengths), 1 + bidirectional
    first_steps = len(lengths) + (sum(n == max(lengths) for n in lengths) if bidirectional else 0)
    total = 0
    for layer in range(layers):
        size = input_size if layer == 0 else directions * hidden_size
        total += directions * linear(tokens, size + hidden_size, gates * hidden_size)
        total -= 2 * first_steps * hidden_size * gates * hidden_size
    return total


def padded_rnn(rows: int, input_size: int, hidden_size: int, gates: int, layers: int) -> int:
    """An RNN run over `rows` = B x T positions, padding included (nn.LSTM over a padded batch, or an RNN cell step
    by step): every product of every position, with its gradients."""
    return sum(
        linear(rows, (input_size if layer == 0 else hidden_size) + hidden_size, gates * hidden_size)
        for layer in range(layers)
    )


def attention_products(queries: int, positions: int, size: int) -> int:
    """Scores q.k (or weights times values) of `queries` query vectors against `positions` vectors each, of `size`."""
    return TRAINING * 2 * queries * positions * size


def _lstm_layer(input_shape, weight_ih_shape, weight_hh_shape, *args, **kwargs) -> int:
    """nn.LSTM over a padded batch on a CPU runs each layer as one oneDNN operator, which the flop counter does not
    know: 2 x time x batch x 4H x (input + H), padding included."""
    return 2 * input_shape[0] * input_shape[1] * weight_ih_shape[0] * (weight_ih_shape[1] + weight_hh_shape[1])


def _lstm_layer_backward(*args, **kwargs) -> int:
    return 2 * _lstm_layer(*args, **kwargs)  # the gradients of the inputs and of the weights


COUNTER_FORMULAS = {
    torch.ops.aten.mkldnn_rnn_layer: _lstm_layer,
    torch.ops.aten.mkldnn_rnn_layer_backward: _lstm_layer_backward,
}


def counted(step: Callable[[], object]) -> int:
    """The products `step()` runs, forward and backward, as `torch.utils.flop_counter` counts them (with the CPU's
    oneDNN LSTM layers added): what the models' formulas are tested against. On a GPU the counter misses cuDNN's RNN
    kernels; the formulas do not depend on the device."""
    with FlopCounterMode(display=False, custom_mapping=COUNTER_FORMULAS) as counter:
        step()
    return counter.get_total_flops()
