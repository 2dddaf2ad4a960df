"""Every model's FLOP formula against torch.utils.flop_counter on real training steps of a few batch shapes."""

from __future__ import annotations

import pytest
import torch
from conftest import compose_config

from nmt import build
from nmt.models.flops import counted
from nmt.text.data import ParallelDataset, collate
from nmt.training.loss import batch_loss

# Every family, and each option that changes what is computed, at the lab's widths (size=lab: its layers and
# options, narrower; the formula has no term that only the default widths reach, and matches there as well)
VARIANTS = {
    "sutskever": ["model=sutskever"],
    "bahdanau": ["model=bahdanau"],
    "bahdanau_lstm_two_layers": ["model=bahdanau", "model.cell=lstm", "model.encoder_layers=2"],
    "bahdanau_reinforce": ["model=bahdanau", "model.attention.hard=reinforce"],
    "luong": ["model=luong"],
    "luong_paper": ["model=luong", "model.bidirectional=false", "model.input_feeding=true"],
    "luong_dot_local_m": ["model=luong", "model/attention=dot", "model.alignment=local_m"],
    "luong_concat_local_p": ["model=luong", "model/attention=concat", "model.alignment=local_p"],
    "luong_location": ["model=luong", "model/attention=location", "model.input_feeding=true"],
    "transformer": ["model=transformer"],
    "transformer_window_post_norm_tied": [
        "model=transformer",
        "model.window=4",
        "model.pre_norm=false",
        "model.tie_output=true",
        "model.share_embeddings=true",
    ],
}
SHAPES = [[8, 20, 33], [6], [12, 12, 12, 7, 40, 25, 9, 30]]  # sentences per batch, and their source lengths


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_flop_formula_of_every_model_matches_the_counter_within_two_percent(
    variant, sample_splits, sample_vocabulary
):
    torch.manual_seed(0)
    model = build.model(compose_config("data=sample", *VARIANTS[variant], "size=lab").model, sample_vocabulary)
    model.train()
    pairs = sample_splits.train
    dataset = ParallelDataset(pairs, sample_vocabulary)
    for lengths in SHAPES:
        indices: list[int] = []
        for n in lengths:  # a pair of that source length (its target is as long as it is), each pair once
            order = abs(dataset.source_lengths - n).argsort(kind="stable")
            indices.append(int(next(i for i in order if i not in indices)))
        batch = collate([dataset[i] for i in indices])
        assert sorted(batch.shape.source) == sorted(lengths) and batch.shape.target_max != batch.shape.source_max

        def step(batch=batch):
            batch_loss(model, model.features, batch, 0.1, torch.device("cpu"), torch.float32).backward()

        measured, formula = counted(step), model.training_flops(batch.shape)
        assert formula == pytest.approx(measured, rel=0.02), (lengths, formula / measured)
