"""Budgets that count work: a compute budget stops at the same update on any machine and validates at the same
fractions of it; the same seed and budget gives bit-identical weights whether the machine is idle or busy."""

from __future__ import annotations

import os
import subprocess
import sys

import commands
import pytest
import torch
from conftest import ROOT
from helpers import make_trainer

from nmt import UserError
from nmt.config import TrainerConfig
from nmt.models.flops import Shape
from nmt.runs import checkpoint
from nmt.text.data import collate


def test_a_compute_budget_stops_at_the_update_that_reaches_it_and_validates_at_its_fractions(
    tmp_path, sample_splits, sample_vocabulary
):
    pairs = sample_splits.train[:120]
    probe = make_trainer(tmp_path / "probe", sample_vocabulary, pairs, "luong", max_steps=1)
    per_update = [flops for *_, flops in (next(u) for u in [probe.updates()] for _ in range(12))]
    budget = sum(per_update[:9]) - 1  # reached by the ninth update
    trainer = make_trainer(tmp_path / "run", sample_vocabulary, pairs, "luong", max_flops=budget, validations=3)
    assert trainer.train() == f"reached trainer.max_flops={budget:g} ({sum(per_update[:9]):.4g} FLOPs)"
    assert trainer.step == 9 and trainer.progress.flops == sum(per_update[:9])
    steps = [1 + next(i for i in range(12) if sum(per_update[: i + 1]) * 3 // budget >= k) for k in (1, 2, 3)]
    saved = sorted(int(p.stem[4:]) for p in (tmp_path / "run").glob("step*.pt"))
    assert saved == steps and steps[-1] == 9  # one validation as each third of the budget is passed
    assert checkpoint.load(tmp_path / "run" / "last.pt")["progress"]["flops"] == trainer.progress.flops


def test_the_update_counts_the_formula_of_every_batch_it_takes(tmp_path, sample_splits, sample_vocabulary):
    trainer = make_trainer(tmp_path, sample_vocabulary, sample_splits.train[:100], "transformer", accumulate=3)
    batches, _, _, count, flops = next(trainer.updates())
    shapes = [collate([trainer.dataset[i] for i in batch.indices.tolist()]).shape for batch in batches]
    assert count == 3 and flops == sum(trainer.model.training_flops(s) for s in shapes) > 0
    assert shapes[0] == Shape.of(batches[0].source_mask.sum(1).tolist(), (batches[0].target_out > 0).sum(1).tolist())


def test_validations_need_a_compute_budget():
    with pytest.raises(UserError, match="trainer.validations=10 divides the compute budget"):
        TrainerConfig(validations=10, max_flops=0).check()
    TrainerConfig(max_minutes=0, max_flops=1e12, validations=10).check()


def test_an_average_needs_the_checkpoints_it_averages():
    with pytest.raises(UserError, match="trainer.average_last=5 .* trainer.keep_checkpoints=3 keeps 3: set trainer"):
        TrainerConfig(average_last=5, keep_checkpoints=3).check()
    with pytest.raises(UserError, match="trainer.average_last=0: must be at least 1"):
        TrainerConfig(average_last=0).check()
    TrainerConfig(average_last=5, keep_checkpoints=5).check()


BURN = "while True:\n    pass\n"  # a core kept busy, from the first millisecond (no import to wait for)


@pytest.mark.slow
def test_the_same_seed_and_compute_budget_gives_bit_identical_weights_alone_and_beside_a_busy_process(tmp_path):
    """A compute budget stops where the work says, not the clock: the same run alone and beside a process that keeps
    both cores busy ends with the same weights and the same test translations."""
    command = [
        "train.py",
        "data=sample",
        "model=bahdanau",
        "data.sizes.train=300",
        "data.sizes.valid=10",
        "data.sizes.test=10",
        "model.embedding_size=32",
        "model.hidden_size=48",
        "model.readout_size=32",
        "model.attention.attention_size=32",
        "trainer.max_minutes=0",
        "trainer.max_flops=4e9",
        "trainer.validations=2",
        "trainer.progress=false",
        "trainer.num_plots=0",
        f"data.spm_cache={tmp_path / 'spm'}",
    ]
    environment = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    alone = commands.run([sys.executable, *command, f"hydra.run.dir={tmp_path / 'alone'}"], cwd=ROOT, env=environment)
    assert alone.returncode == 0, alone.stderr[-2000:].decode()
    burners = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(2)]  # both cores
    try:
        busy = commands.run([sys.executable, *command, f"hydra.run.dir={tmp_path / 'busy'}"], cwd=ROOT, env=environment)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert busy.returncode == 0, busy.stderr[-2000:].decode()
    a, b = (checkpoint.load(tmp_path / run / "last.pt") for run in ("alone", "busy"))
    assert a["progress"]["step"] == b["progress"]["step"] and a["progress"]["flops"] == b["progress"]["flops"]
    assert all(torch.equal(a["model"][name], b["model"][name]) for name in a["model"])
    hypotheses = [(tmp_path / run / "best.test.hyp").read_text() for run in ("alone", "busy")]
    assert hypotheses[0] == hypotheses[1]
