"""Alignment error rate, gold links of the sample grammar, and links read from attention."""

import numpy as np
import pytest
import torch

from nmt import UserError
from nmt.decoding.alignment import (
    argmax_links,
    attention_report,
    choose_map,
    diagonality,
    entropy,
    links_of,
    piece_words,
    shifted_links,
    support,
    word_attention,
    word_weights,
)
from nmt.text.aer import Gold, alignment_error, format_links, parse_links, read_gold
from nmt.text.sample import (
    GrammarOptions,
    complex_sentence,
    english,
    fronted,
    generate_aligned,
    links,
    main_clause,
    make_clause,
    render,
    separable_verb,
    words,
)

# --- AER, worked by hand from Och and Ney's definitions -------------------------------------------------------------


def test_a_perfect_alignment_scores_zero():
    gold = Gold.of({(0, 0), (1, 2), (2, 1)})
    scores = alignment_error([{(0, 0), (1, 2), (2, 1)}], [gold])
    assert (scores.aer, scores.precision, scores.recall) == (0, 1, 1)


def test_sure_links_only():
    # A hits one of two sure links and adds a wrong one: precision 1/2, recall 1/2, AER 1 - (1 + 1) / (2 + 2)
    scores = alignment_error([{(0, 0), (1, 0)}], [Gold.of({(0, 0), (1, 1)})])
    assert (scores.precision, scores.recall, scores.aer) == (0.5, 0.5, 0.5)


def test_a_possible_link_costs_nothing_and_counts_for_precision():
    # S = {0-0}, P = {0-0, 1-0}: A = P is perfect, AER 1 - (1 + 2) / (2 + 1) = 0
    scores = alignment_error([{(0, 0), (1, 0)}], [Gold.of({(0, 0)}, {(1, 0)})])
    assert (scores.precision, scores.recall, scores.aer) == (1, 1, 0)
    # leaving the possible link out costs nothing either
    assert alignment_error([{(0, 0)}], [Gold.of({(0, 0)}, {(1, 0)})]).aer == 0
    # only possible gold links: nothing to recall; one predicted link on a possible one keeps AER at 0
    assert alignment_error([{(1, 0)}], [Gold.of((), {(1, 0)})]).aer == 0


def test_mixed_sure_and_possible_links():
    gold = Gold.of({(0, 0), (1, 1), (2, 2)}, {(2, 1)})
    scores = alignment_error([{(0, 0), (2, 1), (1, 2)}], [gold])  # 1 sure hit, 2 possible hits, 3 links, 3 sure
    assert scores.precision == pytest.approx(2 / 3) and scores.recall == pytest.approx(1 / 3)
    assert scores.aer == pytest.approx(1 - (1 + 2) / (3 + 3))


def test_aer_sums_over_the_corpus_before_dividing():
    gold = [Gold.of({(0, 0)}), Gold.of({(0, 0), (1, 1), (2, 2)})]
    scores = alignment_error([{(0, 1)}, {(0, 0), (1, 1), (2, 2)}], gold)
    assert scores.aer == pytest.approx(1 - (3 + 3) / (4 + 4))  # not the mean of 1 and 0


def test_pharaoh_format_round_trips_and_bad_links_name_the_place(tmp_path):
    gold = parse_links("0-0 2?1 1p2 3-3")
    assert gold.sure == {(0, 0), (3, 3)} and gold.possible == {(0, 0), (3, 3), (2, 1), (1, 2)}
    assert parse_links(format_links(gold.sure, gold.possible)) == gold
    with pytest.raises(UserError, match="gold.txt:2: '1:2' is not a link"):
        parse_links("1:2", "gold.txt:2")
    path = tmp_path / "test.align"
    path.write_text("0-0 1-1\n0-0 2-1\n", encoding="utf-8")
    pairs = [("a b.", "a b."), ("a b c.", "x y.")]
    assert len(read_gold(path, pairs)) == 2
    with pytest.raises(UserError, match=r"test.align:2: link 2-1 is past the sentence"):
        read_gold(path, pairs[:1] + [("a b.", "x y.")])
    with pytest.raises(UserError, match="2 lines of links, 3 sentence pairs"):
        read_gold(path, pairs + pairs[:1])


# --- the grammar's gold links, phenomenon by phenomenon --------------------------------------------------------------


def separable_main_clause(subject, verb, object):
    """A main clause with a separable verb (particle, stem, English) between two noun phrases (German, English)."""
    stem, particle, joined = separable_verb(*verb)
    parts = make_clause(words(*subject), stem, words(*object), particle=particle, joined=joined)
    return render(main_clause(parts), english(parts), links(parts))


def test_separable_verb_in_a_main_clause_links_the_particle_possibly_to_the_verb():
    de, en, gold = separable_main_clause(("der Mann", "the man"), ("an", "ruft", "calls"), ("die Frau", "the woman"))
    assert (de, en) == ("Der Mann ruft die Frau an.", "The man calls the woman.")
    assert gold.sure == {(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)}
    assert gold.possible - gold.sure == {(5, 2)}  # an (the particle) - calls


def test_two_word_english_verbs_get_their_particle_from_the_german_one():
    de, en, gold = separable_main_clause(("das Kind", "the child"), ("ab", "holt", "picks up"), ("den Hund", "the dog"))
    assert (de, en) == ("Das Kind holt den Hund ab.", "The child picks up the dog.")
    assert gold.sure == {(0, 0), (1, 1), (2, 2), (5, 3), (3, 4), (4, 5)}  # holt - picks, ab - up
    assert gold.possible - gold.sure == {(2, 3), (5, 2)}


def test_verb_final_subordinate_clause_with_a_joined_separable_verb():
    first = make_clause(words("das Kind", "the child"), words("lacht", "laughs"))
    verb, particle, joined = separable_verb("an", "ruft", "calls")
    second = make_clause(
        words("der Mann", "the man"), verb, words("die Frau", "the woman"), particle=particle, joined=joined
    )
    de, en, gold = complex_sentence(first, [(words("weil", "because"), second)])
    assert de == "Das Kind lacht, weil der Mann die Frau anruft."
    assert en == "The child laughs because the man calls the woman."
    # das-the kind-child lacht,-laughs weil-because der-the Mann-man die-the Frau-woman anruft-calls
    assert gold.sure == {(0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (8, 6), (6, 7), (7, 8)}
    assert gold.possible == gold.sure


def test_fronted_adverb_puts_the_verb_before_the_subject():
    parts = make_clause(words("der Hund", "the dog"), words("läuft", "runs"), place=None)
    de, en, gold = fronted(words("heute", "today"), parts)
    assert (de, en) == ("Heute läuft der Hund.", "Today the dog runs.")
    assert gold.sure == {(0, 0), (1, 3), (2, 1), (3, 2)}


def test_plural_with_a_number_and_a_contracted_place():
    from nmt.text.sample import Grammar

    class Scripted:  # the choices the grammar asks for, in order
        def __init__(self, values):
            self.values = list(values)

        def choice(self, options):
            wanted = self.values.pop(0)
            return next(o for o in options if wanted in (o if isinstance(o, tuple) else (o,)))

        def random(self):
            return self.values.pop(0)

    # noun phrase: Mann, plural (0.1 < 0.25), no adjective (0.9), a number (0.1 < 0.6), zwei; intransitive lachen,
    # a place (0.1 < 0.5): Park; then a plain main clause (0.1 < 0.35)
    rng = Scripted(["Mann", 0.1, 0.9, 0.1, "zwei", "intransitive", "lacht", 0.1, "Park", 0.1])
    de, en, gold = Grammar(rng).sentence()
    assert (de, en) == ("Zwei Männer lachen im Park.", "Two men laugh in the park.")
    assert gold.sure == {(0, 0), (1, 1), (2, 2), (3, 3), (4, 5)}
    assert gold.possible - gold.sure == {(3, 4)}  # im - the


def test_every_generated_link_points_inside_its_sentences_and_every_content_word_is_aligned():
    splits, gold = generate_aligned(300, 20, 20, seed=3)
    for pairs, links_ in ((splits.train, gold["train"]), (splits.test, gold["test"])):
        assert len(pairs) == len(links_)
        for (de, en), g in zip(pairs, links_):
            sizes = len(de.split()), len(en.split())
            assert all(i < sizes[0] and j < sizes[1] for i, j in g.possible)
            assert {j for _, j in g.possible} == set(range(sizes[1])), (de, en)  # every English word has a link
            assert {i for i, _ in g.possible} == set(range(sizes[0])), (de, en)  # and every German word
            sure_targets = [j for _, j in g.sure]
            assert len(sure_targets) == len(set(sure_targets))  # at most one sure link per English word


def test_long_sentence_options_give_sentences_in_the_asked_range():
    options = GrammarOptions(clauses=8, phrases=2, min_words=30, max_words=80)
    splits, gold = generate_aligned(0, 0, 30, seed=1, options=options)
    lengths = [len(de.split()) for de, _ in splits.test]
    assert len(lengths) == 30 and min(lengths) >= 30 and max(lengths) <= 80
    assert len(gold["test"]) == 30


def test_switching_reorderings_off_leaves_no_separable_or_subordinate_or_fronted_sentences():
    options = GrammarOptions(fronted=False, subordinate=False, separable=False)
    splits, _ = generate_aligned(200, 0, 0, seed=2, options=options)
    for de, _ in splits.train:
        assert "," not in de and not de.startswith(("Heute", "Morgen", "Jetzt", "Oft"))
        assert not de.endswith((" an.", " ab.", " auf."))


# --- from attention to links ----------------------------------------------------------------------------------------


def test_pieces_map_to_words_at_their_word_start_marks():
    assert piece_words(["\u2581Der", "\u2581Kinder", "garten", "\u2581lach", "t", "."]) == [0, 1, 1, 2, 2, 2]


def test_subword_weights_sum_over_source_pieces_and_average_over_target_pieces():
    weights = np.array([[0.1, 0.2, 0.7], [0.5, 0.5, 0.0], [0.3, 0.3, 0.4]])  # 3 target pieces x 3 source pieces
    result = word_weights(weights, source_words=[0, 0, 1], target_words=[0, 1, 1])
    np.testing.assert_allclose(result, [[0.3, 0.7], [0.8, 0.2]])
    assert argmax_links(result) == {(1, 0), (0, 1)}


class GoldAttention(torch.nn.Module):
    """A stand-in model whose attention is the gold alignment itself, spread over each word's pieces."""

    def __init__(self, vocabulary, pairs, gold):
        super().__init__()
        self.vocabulary, self.rows = vocabulary, {}
        for (source, target), links_ in zip(pairs, gold):
            source_pieces = vocabulary.source.encode(source)
            target_pieces = vocabulary.target.encode(target, out_type=str)
            source_words = piece_words(vocabulary.source.encode(source, out_type=str))
            matrix = torch.zeros(len(target_pieces) + 1, len(source_pieces))
            for t, j in enumerate(piece_words(target_pieces)):
                linked = sorted(i for i, k in links_.sure if k == j) or sorted(i for i, k in links_.possible if k == j)
                columns = [s for s, w in enumerate(source_words) if w == linked[0]]
                matrix[t, columns] = 1 / len(columns)
            matrix[-1, -1] = 1  # eos
            self.rows[tuple(source_pieces)] = matrix

    def attention_maps(self, source, source_mask, target_in):
        maps = torch.zeros(source.shape[0], 1, target_in.shape[1], source.shape[1])
        for row in range(source.shape[0]):
            ids = tuple(source[row][source_mask[row]].tolist())
            if ids in self.rows:
                matrix = self.rows[ids]
                maps[row, 0, : matrix.shape[0], : matrix.shape[1]] = matrix
        return {"alignment": maps}


def test_an_attention_that_is_the_gold_alignment_scores_aer_zero_through_the_whole_extraction(sample_vocabulary):
    splits, gold = generate_aligned(0, 0, 40, seed=7)
    model = GoldAttention(sample_vocabulary, splits.test, gold["test"])
    matrices = word_attention(
        model, sample_vocabulary, splits.test, torch.device("cpu"), torch.float32, ["alignment"], max_tokens=200
    )[("alignment", False)]
    predicted = links_of(matrices)
    assert all(len(p) == len(en.split()) for p, (_, en) in zip(predicted, splits.test))
    scores = alignment_error(predicted, gold["test"])
    assert (scores.aer, scores.precision, scores.recall) == (0, 1, 1)
    report = attention_report(model, sample_vocabulary, splits.test, torch.device("cpu"), torch.float32, gold["test"])
    assert report["alignment"]["aer"] == 0 and report["alignment"]["entropy"] < 1e-6
    assert report["alignment"]["diagonality"] > 0.8  # German and English order are close in the sample grammar


def test_word_attention_is_the_same_in_batches_of_any_size_and_comes_in_the_order_of_the_pairs(sample_vocabulary):
    """The force-decoded maps run in length-sorted batches of at most max_tokens pieces (few on a GPU, little padding
    on a CPU): one pair a batch and all in one give the same words' attention, each at its pair's place."""
    from conftest import compose_config, tiny_model_overrides

    from nmt import build
    from nmt.decoding.alignment import length_batches

    cfg = compose_config(*tiny_model_overrides("bahdanau"), "data=sample")
    torch.manual_seed(0)
    model = build.model(cfg.model, sample_vocabulary).eval()
    splits, _ = generate_aligned(0, 0, 30, seed=5)
    pairs = [*splits.test, ("", "The dog runs.")]  # an empty side gets no matrix, in its place
    cpu = torch.device("cpu")
    alone, together = (
        word_attention(model, sample_vocabulary, pairs, cpu, torch.float32, ["alignment"], max_tokens=n)
        for n in (1, 10**6)
    )
    alone, together = alone[("alignment", False)], together[("alignment", False)]
    assert together[-1] is None and alone[-1] is None
    for (source, target), a, b in zip(pairs[:-1], alone, together, strict=False):
        assert a.shape == (len(target.split()), len(source.split()))
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    batches = length_batches([3, 9, 4, 9, 2], [5, 12, 4, 11, 3], max_tokens=50)
    assert sorted(i for batch in batches for i in batch) == [0, 1, 2, 3, 4]
    assert batches == [[1, 3], [0, 2, 4]]  # longest first; 2 x (9 + 12) fits 50, 3 x (4 + 5) too
    assert length_batches([100], [100], max_tokens=10) == [[0]]  # one pair longer than the budget still runs


def test_entropy_and_diagonality_of_known_matrices():
    diagonal, uniform = np.eye(4), np.full((4, 4), 0.25)
    anti = np.eye(4)[::-1]
    assert entropy([diagonal]) == pytest.approx(0, abs=1e-9) and entropy([uniform]) == pytest.approx(np.log(4))
    assert diagonality([diagonal]) == pytest.approx(1) and diagonality([anti]) == pytest.approx(-1)
    assert diagonality([uniform, None]) == 0  # no variation of the attended position: no sentence to count
    sparse = np.array([[0.7, 0.3, 0.0], [0.0, 0.0, 1.0]])  # 2 source words, then 1, get weight
    assert support([uniform]) == 4 and support([sparse, None]) == 1.5


def test_shifted_links_move_every_link_and_stay_inside_the_sentence():
    diagonal = np.eye(3)  # target word j attends to source word j
    assert shifted_links([diagonal, None], 0) == [{(0, 0), (1, 1), (2, 2)}, set()]
    assert shifted_links([diagonal], 1) == [{(1, 0), (2, 1), (2, 2)}]  # the last one cannot leave the sentence
    assert shifted_links([diagonal], -1) == [{(0, 0), (0, 1), (1, 2)}]
    early = np.eye(4)[[0, 0, 1, 2]]  # attends one word early from the second word on, as Luong's model does
    gold = [Gold.of({(0, 0), (1, 1), (2, 2), (3, 3)})]
    assert alignment_error(shifted_links([early], 0), gold).aer == pytest.approx(0.75)
    assert alignment_error(shifted_links([early], 1), gold).aer == pytest.approx(0.25)


def test_the_transformer_offers_every_layer_and_its_shifted_reading_and_defaults_to_the_last(sample_vocabulary):
    from conftest import compose_config, tiny_model_overrides

    from nmt import build

    cfg = compose_config(*tiny_model_overrides("transformer"), "data=sample")
    torch.manual_seed(0)
    model = build.model(cfg.model, sample_vocabulary).eval()
    splits, gold = generate_aligned(0, 0, 12, seed=4)
    report = attention_report(model, sample_vocabulary, splits.test, torch.device("cpu"), torch.float32, gold["test"])
    assert set(report) == {"cross_layer_1", "cross_layer_2", "cross_layer_1_shifted", "cross_layer_2_shifted"}
    assert all(0 <= figures["aer"] <= 1 and figures["entropy"] >= 0 for figures in report.values())
    assert choose_map(list(report), None) == "cross_layer_2"
    best = choose_map(list(report), None, report)
    assert report[best]["aer"] == min(figures["aer"] for figures in report.values())
    with pytest.raises(UserError, match="alignment_map='alignment': this model has cross_layer_1"):
        choose_map(list(report), "alignment")


def test_a_model_without_attention_has_no_alignment(sample_vocabulary):
    from conftest import compose_config, tiny_model_overrides

    from nmt import build

    cfg = compose_config(*tiny_model_overrides("sutskever"), "data=sample")
    model = build.model(cfg.model, sample_vocabulary).eval()
    pairs = [("Der Hund läuft.", "The dog runs.")]
    assert attention_report(model, sample_vocabulary, pairs, torch.device("cpu"), torch.float32, None) == {}
