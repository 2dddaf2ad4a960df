"""An update never waits for the device: inside `Trainer.update` nothing reads a tensor back to the host.

On a GPU each such read (`.item()`, `.cpu()`, `.tolist()`, a tensor in an `if`) stalls the host until the device has
caught up, and an update that reads one cannot be captured as one CUDA graph. On the CPU these reads cost nothing, so
they are made to raise here while an update runs, for every family and attention variant the trainer trains. Reads of
host data are let through: torch's packing of an RNN's input reads the batch's lengths, which the batch keeps on the
CPU (`Batch.source_lengths`), and the RNN modules read the packed batch sizes made from them; the optimizer reads its
step counter, which lives on the host unless the optimizer is capturable (what CUDA graphs will need).
"""

import pytest
import torch
from helpers import VARIANTS, make_trainer, reads_raise


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
