"""Beam search over every model: beam 1 is greedy, wider beams score at least as well, batching changes nothing."""

import pytest
import torch
from conftest import MODELS, compose_config, tiny_model_overrides

from nmt import build
from nmt.decoding.search import SOURCE_SIDE, beam_search, greedy, length_penalty, max_output_length
from nmt.text.data import BOS_ID, EOS_ID, PAD_ID


def model_with_likely_eos(sample_vocabulary, name):
    cfg = compose_config(*tiny_model_overrides(name))
    torch.manual_seed(0)
    model = build.model(cfg.model, sample_vocabulary).eval()
    with torch.no_grad():  # an untrained model rarely ends; make eos likely so hypotheses finish at varied lengths
        model.output.bias[EOS_ID] += 3.0
    return model


def sources():
    generator = torch.Generator().manual_seed(3)
    lengths = torch.tensor([6, 3, 5, 1])
    tokens = torch.randint(4, 100, (4, 6), generator=generator)
    mask = torch.arange(6)[None, :] < lengths[:, None]
    return tokens.masked_fill(~mask, PAD_ID), mask


@pytest.mark.parametrize("name", MODELS)
def test_beam_one_equals_greedy(sample_vocabulary, name):
    model = model_with_likely_eos(sample_vocabulary, name)
    source, mask = sources()
    greedy_hypotheses = greedy(model, source, mask)
    beam_hypotheses = [h[0] for h in beam_search(model, source, mask, beam_size=1, alpha=0.0)]
    for g, b in zip(greedy_hypotheses, beam_hypotheses):
        assert g.tokens == b.tokens
        assert g.score == pytest.approx(b.score, abs=1e-4)
        if g.attention is not None:
            torch.testing.assert_close(g.attention, b.attention)


@pytest.mark.parametrize("name", MODELS)
def test_wider_beam_never_scores_worse_under_the_model(sample_vocabulary, name):
    model = model_with_likely_eos(sample_vocabulary, name)
    source, mask = sources()
    narrow = [h[0].score for h in beam_search(model, source, mask, beam_size=1, alpha=0.0)]
    wide = [h[0].score for h in beam_search(model, source, mask, beam_size=5, alpha=0.0)]
    assert all(w >= n - 1e-4 for w, n in zip(wide, narrow))


@pytest.mark.parametrize("name", MODELS)
def test_batched_and_one_by_one_agree(sample_vocabulary, name):
    model = model_with_likely_eos(sample_vocabulary, name)
    source, mask = sources()
    batched = beam_search(model, source, mask, beam_size=4, n_best=2)
    for row in range(source.shape[0]):
        length = int(mask[row].sum())
        alone = beam_search(model, source[row : row + 1, :length], mask[row : row + 1, :length], beam_size=4, n_best=2)
        assert [h.tokens for h in alone[0]] == [h.tokens for h in batched[row]]


def test_finished_hypotheses_stop_growing_and_n_best_is_sorted(sample_vocabulary):
    model = model_with_likely_eos(sample_vocabulary, "bahdanau")
    source, mask = sources()
    results = beam_search(model, source, mask, beam_size=5, alpha=0.0, n_best=5, ratio=3.0)
    for hypotheses in results:
        assert len(hypotheses) == 5
        assert all(EOS_ID not in h.tokens for h in hypotheses)
        scores = [h.score for h in hypotheses]
        assert scores == sorted(scores, reverse=True)
        for h in hypotheses:
            assert h.attention.shape[0] in (len(h.tokens), len(h.tokens) + 1)
    lengths = {len(h.tokens) for hs in results for h in hs}
    assert len(lengths) > 1  # hypotheses ended at different steps and kept their length


@pytest.mark.parametrize("name", MODELS)
def test_state_that_beam_search_does_not_reorder_is_never_changed_by_a_step(sample_vocabulary, name):
    model = model_with_likely_eos(sample_vocabulary, name)
    source, mask = sources()
    with torch.no_grad():
        state = model.encode(source, mask)
        _, stepped, _ = model.decode_step(torch.full((4,), EOS_ID), state)
    source_side = [key for key in state if key.startswith(SOURCE_SIDE)]
    assert source_side or name == "sutskever"  # every attention model has some
    for key in source_side:
        assert stepped[key] is state[key], key


def reference_beam_search(model, source, mask, beam_size, alpha, limit):
    """Beam search for one sentence, written plainly: every hypothesis x every token of the vocabulary."""
    state = model.encode(source, mask, limit)
    beams = [([], 0.0, False, state)]  # tokens (eos included once ended), log-probability, ended, state
    for _ in range(limit):
        candidates = []
        for tokens, score, ended, state in beams:
            if ended:
                candidates.append((tokens, score, True, state))
                continue
            previous = torch.tensor([tokens[-1] if tokens else BOS_ID])
            logits, new_state, _ = model.decode_step(previous, state)
            log_probs = torch.log_softmax(logits[0].float(), -1)
            for token, log_prob in enumerate(log_probs.tolist()):
                candidates.append((tokens + [token], score + log_prob, token == EOS_ID, new_state))
        beams = sorted(candidates, key=lambda c: -c[1])[:beam_size]
        if all(ended for _, _, ended, _ in beams):
            break

    def normalised(beam):
        return beam[1] / length_penalty(torch.tensor(len(beam[0])), alpha).item()

    return [
        (tokens[:-1] if ended else tokens, score)
        for tokens, score, ended, _ in sorted(beams, key=normalised, reverse=True)
    ]


@pytest.mark.parametrize("name", MODELS)
def test_beam_search_finds_what_the_plain_search_over_the_whole_vocabulary_finds(sample_vocabulary, name):
    # The batched search scores only each hypothesis's best tokens and drops sentences once they have all ended.
    model = model_with_likely_eos(sample_vocabulary, name)
    source, mask = sources()
    with torch.no_grad():
        batched = beam_search(model, source, mask, beam_size=3, alpha=0.6, n_best=3)
        limit = max_output_length(mask, 1.5, 10)  # one length limit for the batch, from its longest source
        for row in range(source.shape[0]):
            length = int(mask[row].sum())
            expected = reference_beam_search(
                model, source[row : row + 1, :length], mask[row : row + 1, :length], 3, 0.6, limit
            )
            assert [h.tokens for h in batched[row]] == [tokens for tokens, _ in expected]
            assert [h.score for h in batched[row]] == pytest.approx([score for _, score in expected], abs=1e-4)


@pytest.mark.parametrize("name", MODELS)
def test_beam_hypotheses_carry_their_own_tokens_scores_and_attention(sample_vocabulary, name):
    """Each of the n best hypotheses, read back through the back-pointers, has the log-probability and the attention
    that teacher forcing gives its own tokens."""
    model = model_with_likely_eos(sample_vocabulary, name)
    source, mask = sources()
    found = beam_search(model, source, mask, beam_size=4, alpha=0.0, n_best=3)
    for row, n_best in enumerate(found):
        for hypothesis in n_best:
            target = torch.tensor([[BOS_ID, *hypothesis.tokens]])
            with torch.no_grad():
                logits, attention = model(
                    source[row : row + 1, : int(mask[row].sum())], mask[row : row + 1, : int(mask[row].sum())], target
                )
            log_probabilities = logits[0].float().log_softmax(-1)
            ended = len(hypothesis.tokens) < max_output_length(mask, 1.5, 10)
            chosen = [*hypothesis.tokens, EOS_ID] if ended else hypothesis.tokens
            expected = sum(log_probabilities[i, token] for i, token in enumerate(chosen))
            assert hypothesis.score == pytest.approx(float(expected), abs=1e-3)
            if attention is not None:
                torch.testing.assert_close(
                    hypothesis.attention, attention[0, : hypothesis.attention.shape[0]], atol=1e-5, rtol=1e-4
                )


@pytest.mark.parametrize("name", MODELS)
def test_checking_for_ended_sentences_every_few_steps_changes_no_output(sample_vocabulary, name):
    """On a GPU the searches look for ended sentences every few steps (each look waits for the device); an ended
    sentence only takes eos at no cost meanwhile, so tokens, scores and attention are those of checking every step."""
    model = model_with_likely_eos(sample_vocabulary, name)
    source, mask = sources()
    every_step = greedy(model, source, mask, every=1)
    for every in (3, 8):
        for a, b in zip(every_step, greedy(model, source, mask, every=every)):
            assert a.tokens == b.tokens and a.score == pytest.approx(b.score, abs=1e-5)
            if a.attention is not None:
                torch.testing.assert_close(a.attention, b.attention)
    every_step = beam_search(model, source, mask, beam_size=4, n_best=2, every=1)
    for every in (3, 8):
        checked = beam_search(model, source, mask, beam_size=4, n_best=2, every=every)
        for a_best, b_best in zip(every_step, checked):
            assert [h.tokens for h in a_best] == [h.tokens for h in b_best]
            assert [h.score for h in a_best] == pytest.approx([h.score for h in b_best], abs=1e-5)
            for a, b in zip(a_best, b_best):
                if a.attention is not None:
                    torch.testing.assert_close(a.attention, b.attention)
