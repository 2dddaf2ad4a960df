"""The recurrent encoder without packing (nmt/models/unpacked.py) against PyTorch's packed run: outputs, final states
and gradients, for LSTM and GRU, one and two directions, one and three layers, rows of every length."""

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from nmt.models.unpacked import unpacked_rnn


def packed_run(rnn, inputs, mask):
    packed = pack_padded_sequence(inputs, mask.sum(1), batch_first=True, enforce_sorted=False)
    outputs, final = rnn(packed)
    return pad_packed_sequence(outputs, batch_first=True, total_length=inputs.shape[1])[0], final


@pytest.mark.parametrize("cell", [nn.LSTM, nn.GRU])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("layers", [1, 3])
def test_unpacked_equals_packed_in_value_and_gradient(cell, bidirectional, layers):
    torch.manual_seed(3)
    rnn = cell(5, 7, layers, batch_first=True, bidirectional=bidirectional).double()
    lengths = torch.tensor([9, 1, 4, 9, 6])  # the longest, a single token, and the lengths between
    mask = torch.arange(9)[None, :] < lengths[:, None]
    inputs = (torch.randn(5, 9, 5, dtype=torch.float64) * mask.unsqueeze(-1)).requires_grad_()
    runs = [packed_run(rnn, inputs, mask), unpacked_rnn(rnn, inputs, mask)]
    finals = [final if isinstance(final, tuple) else (final,) for _, final in runs]
    torch.testing.assert_close(runs[1][0], runs[0][0])
    for got, want in zip(finals[1], finals[0], strict=True):
        torch.testing.assert_close(got, want)
    # a loss that reads the outputs and every final state: the same gradients for the weights and the inputs
    probe = [torch.randn_like(runs[0][0]), *(torch.randn_like(f) for f in finals[0])]
    gradients = []
    for (outputs, _), states in zip(runs, finals):
        loss = (outputs * probe[0]).sum() + sum((s * p).sum() for s, p in zip(states, probe[1:]))
        gradients.append(torch.autograd.grad(loss, [inputs, *rnn.parameters()]))
    for got, want in zip(gradients[1], gradients[0], strict=True):
        torch.testing.assert_close(got, want)


def test_dropout_between_layers_is_drawn_in_training_only():
    torch.manual_seed(4)
    rnn = nn.LSTM(4, 6, 2, batch_first=True, dropout=0.5).double()
    mask = torch.ones(3, 5, dtype=torch.bool)
    inputs = torch.randn(3, 5, 4, dtype=torch.float64)
    rnn.eval()
    torch.testing.assert_close(unpacked_rnn(rnn, inputs, mask)[0], packed_run(rnn, inputs, mask)[0])
    rnn.train()
    assert not torch.allclose(unpacked_rnn(rnn, inputs, mask)[0], unpacked_rnn(rnn, inputs, mask)[0])


def test_refuses_what_it_does_not_reproduce():
    with pytest.raises(ValueError, match="batch-first"):
        unpacked_rnn(nn.GRU(4, 6), torch.zeros(2, 3, 4), torch.ones(2, 3, dtype=torch.bool))
