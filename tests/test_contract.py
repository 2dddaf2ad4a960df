"""Every config in configs/model/ builds a model that keeps the contract of nmt.models.model.Seq2Seq.

The configs are found by globbing, and small sizes come from conftest's rule for a model it does not know, so a new
model file is checked here without editing any test.
"""

import pytest
import torch
from conftest import MODELS, compose_config, tiny_model_overrides

from nmt import build
from nmt.decoding.search import SOURCE_SIDE
from nmt.models.model import Seq2Seq
from nmt.text.data import BOS_ID, PAD_ID


def make(sample_vocabulary, model_name):
    cfg = compose_config(*tiny_model_overrides(model_name))
    torch.manual_seed(0)
    return build.model(cfg.model, sample_vocabulary).eval()


def made(sample_vocabulary, model_name):
    """(model, source, mask, target) for a contract check."""
    return make(sample_vocabulary, model_name), *inputs(sample_vocabulary.source_size)


def inputs(vocabulary_size, lengths=(6, 3), target_length=5):
    generator = torch.Generator().manual_seed(2)
    source = torch.randint(4, vocabulary_size, (len(lengths), max(lengths)), generator=generator)
    mask = torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]
    target = torch.randint(4, vocabulary_size, (len(lengths), target_length), generator=generator)
    target[:, 0] = BOS_ID
    return source.masked_fill(~mask, PAD_ID), mask, target


@pytest.mark.parametrize("model_name", MODELS)
def test_model_declares_the_contract(sample_vocabulary, model_name):
    model = make(sample_vocabulary, model_name)
    assert Seq2Seq in type(model).__mro__, f"{type(model).__name__} must declare nmt.models.model.Seq2Seq as a base"
    assert isinstance(model, Seq2Seq) and isinstance(model.output, torch.nn.Linear)


@pytest.mark.parametrize("model_name", MODELS)
def test_forward_is_the_output_layer_over_features(sample_vocabulary, model_name):
    model, source, mask, target = made(sample_vocabulary, model_name)
    with torch.no_grad():
        logits, attention = model(source, mask, target)
        features, feature_attention = model.features(source, mask, target)
    assert logits.shape == (2, 5, sample_vocabulary.target_size)
    assert features.shape[:2] == (2, 5) and features.shape[-1] == model.output.in_features
    torch.testing.assert_close(model.output(features), logits)
    assert (attention is None) == (feature_attention is None)


@pytest.mark.parametrize("model_name", MODELS)
def test_decoding_state_follows_the_naming_rule(sample_vocabulary, model_name):
    model, source, mask, target = made(sample_vocabulary, model_name)
    with torch.no_grad():
        state = model.encode(source, mask)
        assert state and all(isinstance(v, torch.Tensor) and v.shape[0] == 2 for v in state.values())
        before = dict(state)
        logits, new_state, weights = model.decode_step(target[:, 0], state)
    assert new_state is not state  # a new dict; the state it was given is left as it was
    assert state.keys() == before.keys() and all(state[k] is before[k] for k in before)
    assert logits.shape == (2, sample_vocabulary.target_size)
    assert weights is None or weights.shape == (2, source.shape[1])
    for name, value in new_state.items():
        assert value.shape[0] == 2, name
        if name.startswith(SOURCE_SIDE):
            assert value is state[name], f"{name}: source_* entries pass through decode_step unchanged"


@pytest.mark.parametrize("model_name", MODELS)
def test_attention_maps_have_the_promised_shapes(sample_vocabulary, model_name):
    model, source, mask, target = made(sample_vocabulary, model_name)
    with torch.no_grad():
        _, attention = model(source, mask, target)
        maps = model.attention_maps(source, mask, target)
    assert isinstance(maps, dict) and (maps == {}) == (attention is None)
    for name, weights in maps.items():
        rows = source.shape[1] if name.startswith("encoder_self") else target.shape[1]
        assert weights.dim() == 4 and weights.shape[0] == 2 and weights.shape[2:] == (rows, source.shape[1]), name
