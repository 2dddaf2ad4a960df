"""Paired significance tests: sacrebleu's, per seed; a system is never significantly different from itself."""

import pytest

from nmt.significance import paired_tests, seeded_tests

SCENES = [("small", "dog", "runs", "park"), ("old", "man", "sleeps", "house"), ("red", "car", "waits", "street"),
          ("young", "girl", "sings", "garden"), ("tired", "cat", "lies", "kitchen"), ("blue", "bird", "sits", "tree"),
          ("big", "horse", "stands", "field"), ("fast", "boy", "plays", "yard")]  # fmt: skip
REFERENCES = [f"the {a} {n} {v} in the {p} ." for a, n, v, p in SCENES] * 5


def degrade(sentence: str, every: int, offset: int = 0) -> str:
    """Every `every`-th word (from `offset`) replaced by a wrong one."""
    words = sentence.split()
    return " ".join("xx" if (i + offset) % every == 0 else w for i, w in enumerate(words, 1))


@pytest.fixture(scope="module")
def one_seed():
    good = [degrade(r, 3 + i % 3, i) for i, r in enumerate(REFERENCES)]  # sentences differ in how many words fail
    bad = [degrade(r, 2 + i % 2, i) for i, r in enumerate(REFERENCES)]
    systems = {"baseline": good, "same": list(good), "bad": bad}
    return paired_tests(systems, REFERENCES, "baseline", samples=200, trials=500)


def test_a_system_compared_with_itself_is_not_significant(one_seed):
    results, _ = one_seed
    for metric in ("BLEU", "chrF"):
        same = results["same"][metric]
        assert same["score"] == results["baseline"][metric]["score"]
        assert same["p_bootstrap"] == 1.0 and same["p_randomization"] == 1.0


def test_a_much_worse_system_is_significantly_worse_with_a_confidence_interval(one_seed):
    results, signatures = one_seed
    bad, baseline = results["bad"]["BLEU"], results["baseline"]["BLEU"]
    assert bad["score"] < baseline["score"] and bad["p_bootstrap"] < 0.05 and bad["p_randomization"] < 0.05
    assert "p_bootstrap" not in baseline and baseline["ci"] > 0 and bad["ci"] > 0
    assert {"bs BLEU", "ar BLEU", "bs chrF", "ar chrF"} <= set(signatures)
    assert "bs:200" in signatures["bs BLEU"] and "ar:500" in signatures["ar BLEU"]


def test_seeds_combine_conservatively():
    """Significant only when every seed's pair is, in the same direction; delta is the mean over seeds."""
    good = {seed: [degrade(r, 4, seed) for r in REFERENCES] for seed in (1, 2)}
    hypotheses = {
        "baseline": good,
        "itself": {seed: list(h) for seed, h in good.items()},
        "worse": {seed: [degrade(r, 2, seed) for r in REFERENCES] for seed in (1, 2)},
        # worse with seed 1, identical with seed 2: not a consistent difference
        "mixed": {1: [degrade(r, 2, 1) for r in REFERENCES], 2: list(good[2])},
        "one seed": {1: [degrade(r, 2, 1) for r in REFERENCES]},
    }
    differences, _ = seeded_tests(hypotheses, REFERENCES, "baseline", samples=200, trials=300)
    assert "baseline" not in differences
    for metric in ("BLEU", "chrF"):
        assert not differences["itself"][metric].significant() and differences["itself"][metric].delta == 0
        assert differences["worse"][metric].significant() and differences["worse"][metric].delta < 0
        assert differences["worse"][metric].seeds == 2 and differences["worse"][metric].mark() == "*"
        mixed = differences["mixed"][metric]
        assert not mixed.significant() and mixed.p_bootstrap == 1.0 and mixed.mark() == ""
        assert differences["one seed"][metric].seeds == 1 and differences["one seed"][metric].significant()
    single, _ = paired_tests({n: h[1] for n, h in hypotheses.items()}, REFERENCES, "baseline", 200, 300)
    worse_by_seed = [seeded_tests({"b": {1: good[s]}, "w": {1: hypotheses["worse"][s]}}, REFERENCES, "b", 200, 300)
                     for s in (1, 2)]  # fmt: skip
    deltas = [w[0]["w"]["BLEU"].delta for w in worse_by_seed]
    assert differences["worse"]["BLEU"].delta == pytest.approx(sum(deltas) / 2)
    assert single["worse"]["BLEU"]["score"] - single["baseline"]["BLEU"]["score"] == pytest.approx(deltas[0])


def test_mismatched_lengths_and_unknown_reference_system_are_refused():
    with pytest.raises(ValueError, match="differ in number"):
        paired_tests({"a": REFERENCES[:3], "b": REFERENCES}, REFERENCES, "b")
    with pytest.raises(ValueError, match="not among"):
        paired_tests({"a": REFERENCES}, REFERENCES, "b")
