"""Properties every model must have, parametrized over the model configs (a new model is tested automatically)."""

import itertools

import pytest
import torch
from conftest import ATTENTIONS, MODELS, compose_config, tiny_model_overrides

from nmt import UserError, build
from nmt.models.rnn import reverse_padded
from nmt.text.data import BOS_ID, PAD_ID

LUONG_SCORES = [a for a in ATTENTIONS if a not in ("additive", "none")]  # dot, general, concat, location
FIXED = ["bahdanau", "model/attention=none"]  # RNNencdec: Bahdanau's model with a fixed context
VARIANTS = (
    [[m] for m in MODELS]
    + [
        ["luong", f"model/attention={a}", f"model.alignment={k}", f"model.input_feeding={f}"]
        for a, k, f in itertools.product(LUONG_SCORES, ["global", "local_m", "local_p"], [True, False])
    ]
    + [["luong", f"model.reverse_source={r}", "model.alignment=local_m"] for r in [True, False]]
    + [["luong", "model/attention=dot", "model.attention.scaled=true"]]
    + [["bahdanau", "model.cell=lstm"], ["sutskever", "model.reverse_source=false"]]
    + [FIXED, [*FIXED, "model.cell=lstm"], [*FIXED, "model.encoder_layers=2"]]
    + [["bahdanau", f"model.attention.normalizer={n}"] for n in ("sparsemax", "entmax15")]
    + [["transformer", "model.window=1"], ["transformer", "model.window=2", "model.pre_norm=false"]]
    + [
        ["luong", f"model.attention.normalizer={n}", f"model.alignment={k}"]
        for n, k in itertools.product(("sparsemax", "entmax15"), ["global", "local_p"])
    ]
    + [["bahdanau", f"model.attention.hard={h}"] for h in ("reinforce", "gumbel")]
    + [
        ["luong", f"model.attention.hard={h}", f"model.alignment={k}", "model.input_feeding=false"]
        for h, k in itertools.product(("reinforce", "gumbel"), ["global", "local_m", "local_p"])
    ]
    + [["luong", "model.attention.hard=reinforce"]]
    + [
        ["luong", "model.bidirectional=true", f"model.alignment={k}", f"model.input_feeding={f}"]
        for k, f in [("global", True), ("global", False), ("local_m", True), ("local_p", False)]
    ]
)


def make_model(sample_vocabulary, variant):
    cfg = compose_config(*tiny_model_overrides(*variant))
    torch.manual_seed(0)
    return build.model(cfg.model, sample_vocabulary).eval()


def batch(vocabulary_size, lengths=(7, 5, 2), target_length=6):
    generator = torch.Generator().manual_seed(1)
    source = torch.randint(4, vocabulary_size, (len(lengths), max(lengths)), generator=generator)
    mask = torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]
    source = source.masked_fill(~mask, PAD_ID)
    target = torch.randint(4, vocabulary_size, (len(lengths), target_length), generator=generator)
    target[:, 0] = BOS_ID
    return source, mask, target


@pytest.mark.parametrize("variant", VARIANTS, ids=" ".join)
def test_shapes_and_step_by_step_decoding_equals_teacher_forcing(sample_vocabulary, variant):
    model = make_model(sample_vocabulary, variant)
    source, mask, target = batch(sample_vocabulary.source_size)
    with torch.no_grad():
        logits, attention = model(source, mask, target)
        state = model.encode(source, mask)
        steps, step_attention = [], []
        for t in range(target.shape[1]):
            step_logits, state, weights = model.decode_step(target[:, t], state)
            steps.append(step_logits)
            step_attention.append(weights)
    assert logits.shape == (3, 6, sample_vocabulary.target_size)
    torch.testing.assert_close(torch.stack(steps, 1), logits, atol=1e-5, rtol=1e-4)
    if attention is None:
        assert all(w is None for w in step_attention)
        return
    assert attention.shape == (3, 6, source.shape[1])
    torch.testing.assert_close(torch.stack(step_attention, 1), attention, atol=1e-5, rtol=1e-4)
    assert (attention.masked_select(~mask[:, None, :].expand_as(attention)) == 0).all()


@pytest.mark.parametrize("model_name", MODELS)
def test_state_is_batch_first_and_reorders_with_index_select(sample_vocabulary, model_name):
    model = make_model(sample_vocabulary, [model_name])
    source, mask, target = batch(sample_vocabulary.source_size)
    with torch.no_grad():
        state = model.encode(source, mask)
        assert all(v.shape[0] == 3 for v in state.values())
        order = torch.tensor([2, 0, 1])
        reordered = {k: v.index_select(0, order) for k, v in state.items()}
        logits, _, _ = model.decode_step(target[order, 0], reordered)
        expected, _, _ = model.decode_step(target[:, 0], state)
    torch.testing.assert_close(logits, expected[order], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("model_name", MODELS)
def test_padding_does_not_change_the_output(sample_vocabulary, model_name):
    model = make_model(sample_vocabulary, [model_name])
    source, mask, target = batch(sample_vocabulary.source_size, lengths=(4, 4))
    padded = torch.cat([source, torch.full((2, 3), PAD_ID)], 1)
    with torch.no_grad():
        short, _ = model(source, mask, target)
        long, _ = model(padded, padded != PAD_ID, target)
    torch.testing.assert_close(short, long, atol=1e-5, rtol=1e-4)


def test_reverse_padded_keeps_padding_at_the_end():
    tokens = torch.tensor([[5, 6, 7, 0], [8, 9, 0, 0]])
    assert reverse_padded(tokens, tokens != 0).tolist() == [[7, 6, 5, 0], [9, 8, 0, 0]]


@pytest.mark.parametrize("attention", [a for a in ATTENTIONS if a != "none"])
def test_every_attention_config_gives_distributions_over_the_real_source(sample_vocabulary, attention):
    host = "bahdanau" if attention == "additive" else "luong"
    model = make_model(sample_vocabulary, [host, f"model/attention={attention}"])
    source, mask, target = batch(sample_vocabulary.source_size)
    with torch.no_grad():
        _, weights = model(source, mask, target)  # (B, T, S)
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
    assert (weights.masked_select(~mask[:, None, :].expand_as(weights)) == 0).all()


@pytest.mark.parametrize("model_name", MODELS)
def test_attention_maps_are_distributions_over_the_real_source(sample_vocabulary, model_name):
    model = make_model(sample_vocabulary, [model_name])
    source, mask, target = batch(sample_vocabulary.source_size)
    maps = model.attention_maps(source, mask, target)
    if model_name == "sutskever":
        assert maps == {}
        return
    assert maps
    for name, weights in maps.items():
        assert weights.dim() == 4 and weights.shape[0] == 3 and weights.shape[-1] == source.shape[1], name
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
        assert (weights.masked_select(~mask[:, None, None, :].expand_as(weights)) == 0).all()


def test_luong_parameters_start_uniform_in_the_papers_range_with_zero_padding(sample_vocabulary):
    model = make_model(sample_vocabulary, ["luong", "model.init_range=0.1", "model.uniform_embeddings=true"])
    values = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert values.abs().max() <= 0.1 and values.abs().max() > 0.09  # uniform over the whole range, not a default
    assert not model.embedding.weight[PAD_ID].any() and not model.encoder.embedding.weight[PAD_ID].any()
    default = make_model(sample_vocabulary, ["luong", "model.init_range=0"])
    assert torch.cat([p.detach().flatten() for p in default.parameters()]).abs().max() > 0.5  # N(0, 1) embeddings
    normal = make_model(sample_vocabulary, ["luong", "model.init_range=0.1", "model.uniform_embeddings=false"])
    tables = [normal.embedding.weight, normal.encoder.embedding.weight]
    assert all(0.8 < table[PAD_ID + 1 :].std() < 1.2 and not table[PAD_ID].any() for table in tables)
    rest = [p for p in normal.parameters() if all(p is not table for table in tables)]
    assert torch.cat([p.detach().flatten() for p in rest]).abs().max() <= 0.1


@pytest.mark.parametrize("reverse", [False, True])
def test_luong_local_m_starts_at_the_first_source_words_even_with_a_reversed_source(sample_vocabulary, reverse):
    """p_t = t on the sentence as written: the first target word attends within [0, D], whatever the encoder's
    reading order (with a reversed source it used to attend to the last words)."""
    model = make_model(
        sample_vocabulary, ["luong", "model.alignment=local_m", "model.window=2", f"model.reverse_source={reverse}"]
    )
    source, mask, target = batch(sample_vocabulary.source_size, lengths=(7, 6, 5))
    with torch.no_grad():
        _, attention = model(source, mask, target)  # (B, T, S)
    assert attention[:, 0, 3:].abs().sum() == 0 and (attention[:, 0, :3].sum(-1) > 0.99).all()


def test_reversed_annotations_are_the_encoders_outputs_put_back_in_sentence_order(sample_vocabulary):
    model = make_model(sample_vocabulary, ["luong", "model.reverse_source=true"])
    source, mask, _ = batch(sample_vocabulary.source_size)
    with torch.no_grad():
        memory = model.encode(source, mask)["source_memory"]  # (B, S, H)
        backwards, _ = model.encoder(reverse_padded(source, mask), mask)
    for row, length in enumerate(mask.sum(1).tolist()):
        torch.testing.assert_close(memory[row, :length], backwards[row, :length].flip(0))


@pytest.mark.parametrize("reverse", [False, True])
def test_a_bidirectional_luong_encoder_gives_each_word_both_sides_and_starts_the_decoder_from_both(
    sample_vocabulary, reverse
):
    """Annotations of size H, H/2 per direction: the forward half of word j depends on words up to j only, the
    backward half on words from j on; each layer's two final states, side by side, are the decoder's start."""
    model = make_model(sample_vocabulary, ["luong", "model.bidirectional=true", f"model.reverse_source={reverse}"])
    hidden = model.encoder.rnn.hidden_size
    assert model.encoder.rnn.bidirectional and 2 * hidden == model.output.in_features
    source, mask, _ = batch(sample_vocabulary.source_size, lengths=(7, 7, 7))
    changed = source.clone()
    changed[:, 3] = (source[:, 3] - 4 + 1) % (sample_vocabulary.source_size - 4) + 4  # another real word at 3
    with torch.no_grad():
        before, after = model.encode(source, mask), model.encode(changed, mask)
    moved = (before["source_memory"] - after["source_memory"]).abs().amax(0)  # (S, H)
    forward, backward = moved[:, :hidden], moved[:, hidden:]  # the encoder's two directions ...
    if reverse:  # ... which read the reversed sentence, so its forward one reads the original right to left
        forward, backward = backward, forward
    assert forward[:3].max() == 0 and forward[3:].min() > 0  # left to right: words before 3 do not see it
    assert backward[4:].max() == 0 and backward[:4].min() > 0  # right to left: words after 3 do not see it
    with torch.no_grad():
        _, (final, _) = model.encoder(reverse_padded(source, mask) if reverse else source, mask)
    layers = model.decoder.num_layers
    assert before["hidden"].shape == (3, layers, 2 * hidden)
    for layer in range(layers):
        torch.testing.assert_close(before["hidden"][:, layer], torch.cat([final[2 * layer], final[2 * layer + 1]], -1))


def test_a_bidirectional_luong_encoder_needs_an_even_hidden_size(sample_vocabulary):
    with pytest.raises(UserError, match="model.hidden_size=15 between two directions"):
        make_model(sample_vocabulary, ["luong", "model.bidirectional=true", "model.hidden_size=15"])


@pytest.mark.parametrize("feed_dropout", [False, True])
def test_input_feeding_feeds_back_the_attentional_vector_before_dropout_unless_asked(sample_vocabulary, feed_dropout):
    """The output layer reads the dropped-out h~_t; the next step reads h~_t itself (model.feed_dropout=false), so no
    fresh dropout mask sits on the recurrent path, or the same dropped-out vector (true)."""
    model = make_model(
        sample_vocabulary,
        ["luong", "model.input_feeding=true", "model.dropout=0.5", f"model.feed_dropout={feed_dropout}"],
    ).train()
    source, mask, target = batch(sample_vocabulary.source_size)
    torch.manual_seed(3)
    with torch.no_grad():
        dropped, state, _ = model.step(target[:, 0], model.encode(source, mask))
    fed = state["attentional"]  # (B, H)
    assert (dropped == 0).any()
    if feed_dropout:
        torch.testing.assert_close(fed, dropped)
    else:
        assert (fed != 0).all()
        kept = dropped != 0
        torch.testing.assert_close(dropped[kept], fed[kept] * 2)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_the_fixed_context_is_each_directions_final_state_of_the_unpadded_sentence(sample_vocabulary, cell):
    """RNNencdec's c (Bahdanau et al. 2015, section 4.2): [forward h_S; backward h_1], from each sentence run alone
    through the encoder's RNN with no padding; every step reads it, whatever the decoder state, and the model has no
    attention to plot."""
    model = make_model(sample_vocabulary, [*FIXED, f"model.cell={cell}"])
    source, mask, target = batch(sample_vocabulary.source_size)
    hidden = model.encoder.rnn.hidden_size
    with torch.no_grad():
        state = model.encode(source, mask)
        for row, length in enumerate(mask.sum(1).tolist()):
            alone, _ = model.encoder.rnn(model.encoder.embedding(source[row : row + 1, :length]))  # (1, S, 2H)
            expected = torch.cat([alone[0, -1, :hidden], alone[0, 0, hidden:]])
            query = torch.randn(1, 3, hidden)  # any query, any number of steps: the same context
            context, weights = model.attention(
                query, state["source_keys"][row : row + 1], state["source_memory"][row : row + 1], mask[row : row + 1]
            )
            assert weights is None
            torch.testing.assert_close(context, expected.expand(1, 3, -1), atol=1e-5, rtol=1e-4)
        assert model.attention_maps(source, mask, target) == {}
        _, attention = model(source, mask, target)
    assert attention is None


def test_the_fixed_context_baseline_is_bahdanaus_model_but_for_the_context(sample_vocabulary):
    """Like for like: the same parameters as RNNsearch but the attention's own (W, U, v), and the same FLOPs but the
    attention's score and context products."""
    from nmt.models.flops import Shape

    search, fixed = make_model(sample_vocabulary, ["bahdanau"]), make_model(sample_vocabulary, FIXED)
    own = {name for name in dict(search.named_parameters()) if name.startswith("attention.")}
    assert own and set(dict(fixed.named_parameters())) == set(dict(search.named_parameters())) - own
    shape = Shape.of([5, 3], [4, 6])
    assert 0 < fixed.training_flops(shape) < search.training_flops(shape)
