"""A recurrent encoder over padded batches without packing, for an update captured as a CUDA graph
(nmt.training.update).

Packing (`pack_padded_sequence`) gives a tensor whose size is the batch's number of real tokens, which a graph would
fix at the size of the batch it was captured on. Here every layer and direction runs over the whole padded length
instead, and what packing gave is taken back exactly:

- the forward direction reads the real tokens first, so its outputs at real positions are those of the packed run;
  the backward direction reads each row reversed within its length (`reverse_padded`), so it too starts at the
  row's last real token;
- a final hidden state is the output at the row's last real position (for the backward direction: the first);
- an LSTM's final cell state is not among the outputs. With the gates recomputed from the layer's input and its
  outputs one step back (i, f, g from x_t and h_{t-1}: one batched product), the cell recurrence
  c_t = f_t c_{t-1} + i_t g_t from c = 0 has the closed form

      c_L = sum_{k <= L} exp(F_L - F_k) i_k g_k,    F_k = sum_{j <= k} log f_j,

  a cumulative sum over time instead of a loop of steps. Its gradient reaches the parameters through the gates and
  through the outputs h_{t-1}, which is the LSTM's own dependence, so value and gradient are the packed run's (to
  rounding).

Dropout between layers is the module's own rate, drawn here; outputs at padding are zero, as `pad_packed_sequence`
leaves them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def reverse_padded(sequence: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Reverse the real positions of each row, leaving the padding at the end: (B, S, ...) -> (B, S, ...). Its own
    inverse, so it also brings annotations of a reversed sentence back to the original order."""
    lengths = mask.sum(1, keepdim=True)  # (B, 1)
    positions = torch.arange(sequence.shape[1], device=sequence.device)[None, :]  # (1, S)
    reversed_positions = torch.where(positions < lengths, lengths - 1 - positions, positions)  # (B, S)
    index = reversed_positions.view(*reversed_positions.shape, *[1] * (sequence.dim() - 2)).expand_as(sequence)
    return sequence.gather(1, index)


def unpacked_rnn(
    rnn: nn.LSTM | nn.GRU, inputs: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | tuple[torch.Tensor, torch.Tensor]]:
    """What `rnn(pack_padded_sequence(inputs, lengths))` then `pad_packed_sequence` give, with every shape fixed by
    the padded batch: outputs (B, S, directions * H) and the final states (layers * directions, B, H) (for nn.LSTM a
    pair). inputs (B, S, I) batch-first, mask (B, S) True on the real positions (each row's real positions first)."""
    if not rnn.batch_first or getattr(rnn, "proj_size", 0):
        raise ValueError("unpacked_rnn takes a batch-first RNN without projections")
    lstm = isinstance(rnn, nn.LSTM)
    directions = 2 if rnn.bidirectional else 1
    per = 4 if rnn.bias else 2
    last = (mask.sum(1) - 1).clamp(min=0)  # (B,) each row's last real position
    rows = torch.arange(inputs.shape[0], device=inputs.device)
    keep = mask.unsqueeze(-1)  # (B, S, 1)
    x, hidden, cells = inputs, [], []
    for layer in range(rnn.num_layers):
        outputs = []
        for direction in range(directions):
            first = (layer * directions + direction) * per
            weights = rnn._flat_weights[first : first + per]
            seen = x if direction == 0 else reverse_padded(x, mask)  # each row from its own first token to read
            out = one_layer(rnn, seen, weights, lstm)  # (B, S, H), exact at the real positions
            hidden.append(out[rows, last])
            if lstm:
                cells.append(final_cell(seen, out, weights, mask, last, rnn.bias))
            outputs.append(out if direction == 0 else reverse_padded(out, mask))
        x = torch.cat(outputs, dim=-1) * keep
        if layer < rnn.num_layers - 1 and rnn.dropout:
            x = F.dropout(x, rnn.dropout, rnn.training)
    final = torch.stack(hidden)
    return x, ((final, torch.stack(cells)) if lstm else final)


def one_layer(rnn: nn.Module, x: torch.Tensor, weights: list[torch.Tensor], lstm: bool) -> torch.Tensor:
    """One layer and direction of `rnn`'s kind over the padded x (B, S, I): its outputs (B, S, H)."""
    zeros = x.new_zeros(1, x.shape[0], rnn.hidden_size)
    if lstm:
        out, _, _ = torch._VF.lstm(x, (zeros, zeros), weights, rnn.bias, 1, 0.0, rnn.training, False, True)
    else:
        out, _ = torch._VF.gru(x, zeros, weights, rnn.bias, 1, 0.0, rnn.training, False, True)
    return out


def final_cell(
    x: torch.Tensor, h: torch.Tensor, weights: list[torch.Tensor], mask: torch.Tensor, last: torch.Tensor, bias: bool
) -> torch.Tensor:
    """An LSTM layer's cell state after each row's last real position (B, H), from its input x (B, S, I) and its
    outputs h (B, S, H): the gates recomputed, the recurrence in closed form (the module's docstring)."""
    previous = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], dim=1)  # h_{t-1}, zero before the first
    gates = F.linear(x, weights[0], weights[2] if bias else None) + F.linear(previous, weights[1])
    if bias:
        gates = gates + weights[3]
    gates = gates.to(torch.promote_types(gates.dtype, torch.float32))  # bf16 products, the recurrence in fp32
    i, f, g, _ = gates.chunk(4, dim=-1)  # PyTorch's order: input, forget, cell, output
    forget = F.logsigmoid(f).cumsum(dim=1)  # F_k (B, S, H)
    to_last = forget.gather(1, last.view(-1, 1, 1).expand(-1, 1, forget.shape[-1])) - forget  # F_L - F_k
    upto = (torch.arange(mask.shape[1], device=mask.device)[None, :] <= last[:, None]).unsqueeze(-1)
    decay = torch.exp(torch.where(upto, to_last, torch.full_like(to_last, -1e4)))  # 0 past the last position
    return (decay * torch.sigmoid(i) * torch.tanh(g)).sum(dim=1).to(h.dtype)
