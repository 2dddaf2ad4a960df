"""The papers' qualitative claims, each checked against a comparison's own figures and significance tests.

A claim is "supported" when the run shows it with every difference behind it significant (`nmt.significance`),
"partly supported" when some of those differences are, "not significant" when every difference points the paper's
way and none is significant, "not supported" otherwise, and "not measured" when the run lacks the variants or the
lab figures it needs. The verdicts report what the
run shows, not what the papers found.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nmt.significance import Difference, p_value

SUPPORTED, PARTLY, NOT_SIGNIFICANT = "supported", "partly supported", "not significant"
NOT_SUPPORTED, NOT_MEASURED = "not supported", "not measured"

# The names `scripts/compare.py` gives the variants (from their checkpoints' configs, `nmt.comparison.variant_name`):
# Luong's are `luong (score, alignment[, no feeding][, bidirectional]...)`, so a claim about Luong's variants pairs
# names that differ only in what the claim is about, on whatever encoder and feeding the runs had.
BASELINE = "sutskever"
NO_FEEDING = ", no feeding"
TRANSFORMER = "transformer"


def luong_details(name: str) -> list[str] | None:
    """["general", "local_p", "no feeding", ...] from a Luong variant's name; None for another family."""
    return name[len("luong (") : -1].split(", ") if name.startswith("luong (") and name.endswith(")") else None


def with_alignment(name: str, alignment: str) -> str:
    """The same Luong variant with another alignment (global, local_m, local_p)."""
    score, _, *rest = luong_details(name)
    return f"luong ({', '.join([score, alignment, *rest])})"


@dataclass
class Claim:
    claim: str
    source: str
    verdict: str
    evidence: str


# (a, b) -> the Difference of a against b on BLEU over the seeds both ran
Tester = Callable[[str, str], Difference]


def _signed(difference: Difference) -> str:
    seeds = f"{difference.seeds} seed" + "s" * (difference.seeds > 1)
    return (f"{difference.delta:+.2f} BLEU{difference.mark()} (p {p_value(difference.p_bootstrap)} bootstrap, "
            f"{p_value(difference.p_randomization)} randomization, {seeds})")  # fmt: skip


def _verdict(differences: list[Difference]) -> str:
    """The verdict on differences that the claim says are positive (see the module docstring)."""
    above = sum(d.delta > 0 and d.significant() for d in differences)
    if above == len(differences):
        return SUPPORTED
    if above:
        return PARTLY
    return NOT_SIGNIFICANT if all(d.delta > 0 for d in differences) else NOT_SUPPORTED


def attention_beats_fixed_vector(bleu: dict[str, float], attention: list[str], test: Tester) -> Claim:
    claim, source = "Attention beats the fixed-vector encoder-decoder", "Bahdanau et al. 2015; Luong et al. 2015"
    if BASELINE not in bleu or not attention:
        return Claim(claim, source, NOT_MEASURED, f"needs `{BASELINE}` and an attention model")
    differences = {name: test(name, BASELINE) for name in attention}
    significant = [name for name, d in differences.items() if d.significant() and d.delta > 0]
    low, high = min(differences.values(), key=lambda d: d.delta), max(differences.values(), key=lambda d: d.delta)
    evidence = (f"{len(significant)} of {len(attention)} attention models significantly above {BASELINE} "
                f"({bleu[BASELINE]:.2f}); smallest gap {_signed(low)}, largest {high.delta:+.2f}")  # fmt: skip
    return Claim(claim, source, _verdict(list(differences.values())), evidence)


def gap_grows_with_length(lab: dict | None) -> Claim:
    """From the lab's BLEU by length: the best attention model's lead over the fixed vector, in the shortest and the
    longest bucket."""
    claim, source = "The gap grows with sentence length", "Bahdanau et al. 2015, Figure 2"
    rows = {r["name"]: r["by_length"] for r in (lab or {}).get("results", [])}
    if BASELINE not in rows or len(rows) < 2:
        return Claim(claim, source, NOT_MEASURED, "needs the lab (`make lab`, then `--lab multirun/lab/lab.json`)")
    buckets = list(rows[BASELINE])
    first, last = buckets[0] if buckets else None, buckets[-1] if buckets else None
    others = [n for n in rows if n != BASELINE and first in rows[n] and last in rows[n]]
    if len(buckets) < 2 or not others:
        return Claim(claim, source, NOT_MEASURED, "the lab's length buckets do not overlap")
    best = max(others, key=lambda n: rows[n][last]["bleu"])
    gaps = [rows[best][b]["bleu"] - rows[BASELINE][b]["bleu"] for b in (first, last)]
    evidence = (f"{best} minus {BASELINE}: {gaps[0]:+.1f} BLEU on {first} words, {gaps[1]:+.1f} on {last} words "
                f"(lab, greedy; no significance test: bucket sizes differ)")  # fmt: skip
    return Claim(claim, source, SUPPORTED if gaps[1] > gaps[0] else NOT_SUPPORTED, evidence)


def input_feeding_helps(bleu: dict[str, float], test: Tester) -> Claim:
    """Every pair of Luong variants that differ only in input feeding: the one with it against the one without."""
    claim, source = "Input feeding helps", "Luong et al. 2015, Table 1"
    pairs = [(n.replace(NO_FEEDING, ""), n) for n in bleu if luong_details(n) and NO_FEEDING in n]
    pairs = [(fed, unfed) for fed, unfed in pairs if fed in bleu]
    if not pairs:
        return Claim(claim, source, NOT_MEASURED, "needs two Luong variants that differ only in input feeding")
    differences = [test(fed, unfed) for fed, unfed in pairs]
    evidence = "; ".join(f"{fed} minus without feeding: {_signed(d)}" for (fed, _), d in zip(pairs, differences))
    return Claim(claim, source, _verdict(differences), evidence)


def local_p_general_is_best(bleu: dict[str, float], test: Tester) -> Claim:
    claim, source = "Local-p attention with the general score is the best Luong variant", "Luong et al. 2015, Table 4"
    luong = [name for name in bleu if luong_details(name)]
    local_p = [name for name in luong if luong_details(name)[:2] == ["general", "local_p"]]
    if not local_p or len(luong) < 2:
        return Claim(claim, source, NOT_MEASURED, "needs Luong's local-p with the general score and another variant")
    best_local_p = max(local_p, key=lambda n: bleu[n])
    best_other = max((n for n in luong if n != best_local_p), key=lambda n: bleu[n])
    difference = test(best_local_p, best_other)
    ranked = sorted(luong, key=lambda n: -bleu[n])
    evidence = (f"{best_local_p}: rank {ranked.index(best_local_p) + 1} of {len(luong)} Luong variants; against the "
                f"best other ({best_other}): {_signed(difference)}")  # fmt: skip
    return Claim(claim, source, _verdict([difference]), evidence)


def local_aligns_better(lab: dict | None) -> Claim:
    """From the lab's AER on the sample test split: local-m and local-p against global attention, same score, encoder
    and feeding."""
    claim, source = "Local attention aligns better than global (lower AER)", "Luong et al. 2015, Table 6"
    aer = {r["name"]: r["test_alignment"]["aer"] for r in (lab or {}).get("results", []) if "test_alignment" in r}
    pairs = [(n, with_alignment(n, "global")) for n in aer
             if (luong_details(n) or [""])[:2] in (["general", "local_m"], ["general", "local_p"])]  # fmt: skip
    pairs = [(local, global_) for local, global_ in pairs if global_ in aer]
    if not pairs:
        return Claim(claim, source, NOT_MEASURED, "needs the lab's Luong variants (`--lab multirun/lab/lab.json`)")
    evidence = "; ".join(f"{luong_details(local)[1]} {aer[local]:.3f} against global {aer[global_]:.3f}"
                         for local, global_ in pairs)  # fmt: skip
    better = [aer[local] < aer[global_] for local, global_ in pairs]
    verdict = SUPPORTED if all(better) else PARTLY if any(better) else NOT_SUPPORTED
    return Claim(claim, source, verdict, evidence + " (lab; no significance test for AER)")


def transformer_beats_recurrent(bleu: dict[str, float], test: Tester) -> Claim:
    claim, source = "The Transformer beats the recurrent models", "Vaswani et al. 2017"
    recurrent = [n for n in bleu if not n.startswith(TRANSFORMER)]  # not the Transformer's variants (a window)
    if TRANSFORMER not in bleu or not recurrent:
        return Claim(claim, source, NOT_MEASURED, f"needs `{TRANSFORMER}` and a recurrent model")
    best = max(recurrent, key=lambda n: bleu[n])
    difference = test(TRANSFORMER, best)
    return Claim(claim, source, _verdict([difference]), f"against the best recurrent model ({best}): "
                 f"{_signed(difference)}")  # fmt: skip


def check_claims(bleu: dict[str, float], test: Tester, lab: dict | None = None) -> list[Claim]:
    """Every claim, from {variant name: mean test BLEU}, a paired tester and the lab's lab.json (optional)."""
    attention = [n for n in bleu if n != BASELINE]
    return [
        attention_beats_fixed_vector(bleu, attention, test),
        gap_grows_with_length(lab),
        input_feeding_helps(bleu, test),
        local_p_general_is_best(bleu, test),
        local_aligns_better(lab),
        transformer_beats_recurrent(bleu, test),
    ]
