"""Paired significance tests: sacrebleu's, wrapped; a system is never significantly different from itself."""

import pytest

from nmt.significance import paired_tests

REFERENCES = [f"the {a} {n} {v} in the {p} ." for a, n, v, p in [
    ("small", "dog", "runs", "park"), ("old", "man", "sleeps", "house"), ("red", "car", "waits", "street"),
    ("young", "girl", "sings", "garden"), ("tired", "cat", "lies", "kitchen"), ("blue", "bird", "sits", "tree"),
    ("big", "horse", "stands", "field"), ("fast", "boy", "plays", "yard")]] * 5  # fmt: skip


def degrade(sentence: str, every: int) -> str:
    words = sentence.split()
    return " ".join(w if i % every else "xx" for i, w in enumerate(words, 1))


@pytest.fixture(scope="module")
def tested():
    good = [degrade(r, 4) for r in REFERENCES]
    systems = {"baseline": good, "same": list(good), "bad": [degrade(r, 2) for r in REFERENCES]}
    return paired_tests(systems, REFERENCES, "baseline", samples=200, trials=500)


def test_a_system_compared_with_itself_is_not_significant(tested):
    comparisons, _ = tested
    for metric in ("BLEU", "chrF"):
        same = comparisons["same"][metric]
        assert same.score == comparisons["baseline"][metric].score and not same.significant()
        assert same.p_bootstrap > 0.5 and same.p_randomization > 0.5


def test_a_much_worse_system_is_significantly_worse_with_a_confidence_interval(tested):
    comparisons, signatures = tested
    bad, baseline = comparisons["bad"]["BLEU"], comparisons["baseline"]["BLEU"]
    assert bad.score < baseline.score and bad.significant()
    assert baseline.p_bootstrap is None and baseline.ci is not None and baseline.ci > 0
    assert {"bs BLEU", "ar BLEU", "bs chrF", "ar chrF"} <= set(signatures)
    assert "bs:200" in signatures["bs BLEU"] and "ar:500" in signatures["ar BLEU"]
