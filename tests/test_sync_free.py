"""An update never waits for the device: inside `Trainer.update` nothing reads a tensor back to the host.

On a GPU each such read (`.item()`, `.cpu()`, `.tolist()`, a tensor in an `if`) stalls the host until the device has
caught up, and an update that reads one cannot be captured as one CUDA graph. On the CPU these reads cost nothing, so
they are made to raise here while an update runs, for every family and attention variant the trainer trains. Reads of
host data are let through: torch's packing of an RNN's input reads the batch's lengths, which the batch keeps on the
CPU (`Batch.source_lengths`), and the RNN modules read the packed batch sizes made from them; the optimizer reads its
step counter, which lives on the host unless the optimizer is capturable (what CUDA graphs will need).
"""

import contextlib
import os
import sys

import pytest
import torch
from test_train import make_trainer

READS = ("item", "cpu", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__")
READ = {name: getattr(torch.Tensor, name) for name in READS}


@contextlib.contextmanager
def reads_raise(monkeypatch):
    """Every read of a tensor's value on the host raises, naming it, until the block ends."""
    with monkeypatch.context() as patched:
        for name in READS:

            def refuse(tensor, *args, _name=name, _read=READ[name], **kwargs):
                if reads_host_data():
                    return _read(tensor, *args, **kwargs)
                raise AssertionError(f"Tensor.{_name} inside an update: the host would wait for the device")

            patched.setattr(torch.Tensor, name, refuse)
        yield


HOST_DATA = (  # torch's code that reads host data only: packing by CPU lengths, the optimizer's step counter
    os.path.join("torch", "nn", "utils", "rnn.py"),
    os.path.join("torch", "nn", "modules", "rnn.py"),
    os.path.join("torch", "optim", ""),
)


def reads_host_data() -> bool:
    """Whether the read comes from torch code that reads host data (HOST_DATA)."""
    frame = sys._getframe(2)
    while frame is not None:
        if any(part in frame.f_code.co_filename for part in HOST_DATA):
            return True
        frame = frame.f_back
    return False


VARIANTS = [
    ("sutskever", ()),
    ("bahdanau", ()),
    ("bahdanau", ("model/attention=none",)),
    ("bahdanau", ("model.attention.normalizer=sparsemax",)),
    ("bahdanau", ("model.attention.hard=reinforce",)),
    ("bahdanau", ("model.attention.hard=gumbel",)),
    ("luong", ()),
    ("luong", ("model.input_feeding=true",)),
    ("luong", ("model.alignment=local_m",)),
    ("luong", ("model.alignment=local_p",)),
    ("luong", ("model/attention=location",)),
    ("luong", ("model/attention=concat",)),
    ("transformer", ()),
    ("transformer", ("model.window=2",)),
]


@pytest.mark.parametrize("name, overrides", VARIANTS, ids=[f"{n}{''.join(o)}" for n, o in VARIANTS])
def test_an_update_reads_nothing_back_from_the_device(tmp_path, sample_vocabulary, sample_splits, monkeypatch, name,
                                                      overrides):  # fmt: skip
    trainer = make_trainer(tmp_path, sample_vocabulary, sample_splits.train[:64], name, 0.1, overrides, max_steps=3)
    updates = trainer.updates()
    batches, tokens, *_ = next(updates)
    trainer.update(batches, tokens)  # the first: lazy initialisations may look at values once
    batches, tokens, *_ = next(updates)
    with reads_raise(monkeypatch):
        loss, norm = trainer.update(batches, tokens)
    assert torch.isfinite(loss) and torch.isfinite(norm)
