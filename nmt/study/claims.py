"""The papers' qualitative claims, each checked against a comparison's own runs with intervals over seeds and
sentences (`nmt.study.significance`).

Each claim's comparisons are fixed here, like for like, before any run: a variant against the one that differs from
it only in what the claim is about. A comparison is supported when its p-value (Holm-adjusted when the claim rests on
several) is below 0.05 with the difference in the claim's direction, contradicted when it is below the other way, and
inconclusive otherwise; a claim is supported when all of its comparisons are, contradicted when any is, inconclusive
otherwise, "needs 3 seeds" when a variant behind it has fewer (figures, no verdict), and "not measured" when the runs
lack the variants it needs. The verdicts report what these runs show, not what the papers found.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from nmt.evaluate import LENGTH_BUCKETS
from nmt.study.significance import NOT_MEASURED, Evidence, Interval, holm, overall

# The names `scripts/compare.py` gives the variants (from their checkpoints' configs, `variant_name`): Luong's are
# `luong (score, alignment[, no feeding][, bidirectional]...)`, so a claim about Luong's variants pairs names that
# differ only in what the claim is about, on whatever encoder and feeding the runs had.
BASELINE = "sutskever"
NO_FEEDING = ", no feeding"
TRANSFORMER = "transformer"
MIN_BUCKET = 10  # the length claim uses the shortest and the longest bucket with at least this many test sentences
# The two claims that the alignment lab answers best (gold links; sentences up to 80 words)
FROM_LAB = ("The gap grows with sentence length", "Local attention aligns better than global (lower AER)")


@dataclass
class Claim:
    claim: str
    source: str
    verdict: str
    evidence: str
    comparisons: list[dict] = field(default_factory=list)  # label, direction, the interval and its verdict


def family(name: str) -> str:
    return name.split(" ", 1)[0]


def luong_details(name: str) -> list[str] | None:
    """["general", "local_p", "no feeding", ...] from a Luong variant's name; None for another family."""
    return name[len("luong (") : -1].split(", ") if name.startswith("luong (") and name.endswith(")") else None


def with_alignment(name: str, alignment: str) -> str:
    """The same Luong variant with another alignment (global, local_m, local_p)."""
    score, _, *rest = luong_details(name)
    return f"luong ({', '.join([score, alignment, *rest])})"


def judged(claim: str, source: str, items: list[tuple[str, Interval, int]], unit: str = "BLEU",
           note: str = "") -> Claim:  # fmt: skip
    """A claim from its comparisons (label, interval, direction: +1 when the claim says the difference is positive),
    with Holm's correction over them."""
    adjusted = holm([interval for _, interval, _ in items])
    verdicts = [interval.verdict(direction) for interval, (_, _, direction) in zip(adjusted, items)]
    parts = [f"{label}: {interval.text(unit)} {verdict}"
             for (label, _, _), interval, verdict in zip(items, adjusted, verdicts)]  # fmt: skip
    comparisons = [{"label": label, "direction": direction, **asdict(interval), "verdict": verdict}
                   for (label, _, direction), interval, verdict in zip(items, adjusted, verdicts)]  # fmt: skip
    return Claim(claim, source, overall(verdicts), note + "; ".join(parts), comparisons)


def attention_beats_fixed_vector(evidence: Evidence) -> Claim:
    """Every attention variant against the fixed-vector model."""
    claim, source = "Attention beats the fixed-vector encoder-decoder", "Bahdanau et al. 2015; Luong et al. 2015"
    attention = [n for n in evidence.names if family(n) != BASELINE]
    if BASELINE not in evidence.names or not attention:
        return Claim(claim, source, NOT_MEASURED, f"needs `{BASELINE}` and an attention model")
    return judged(claim, source, [(f"{n} minus {BASELINE}", evidence.compare(n, BASELINE), 1) for n in attention])


def gap_grows_with_length(evidence: Evidence, note: str = "", buckets: list[tuple[int, int]] = LENGTH_BUCKETS) -> Claim:
    """Every attention variant's lead over the fixed-vector model: in the longest length bucket minus in the shortest
    (the buckets of Bahdanau et al.'s Figure 2 that hold at least MIN_BUCKET test sentences)."""
    claim, source = "The gap grows with sentence length", "Bahdanau et al. 2015, Figure 2"
    buckets = [b for b in buckets if len(evidence.bucket(*b)) >= MIN_BUCKET]
    attention = [n for n in evidence.names if family(n) != BASELINE]
    if BASELINE not in evidence.names or not attention or len(buckets) < 2:
        return Claim(claim, source, NOT_MEASURED, f"needs `{BASELINE}`, an attention model and two length buckets of "
                     f"{MIN_BUCKET} test sentences")  # fmt: skip
    first, last = buckets[0], buckets[-1]
    words = f"{last[0]}{'+' if last[1] >= 1000 else f'-{last[1]}'} words"
    items = [(f"{n}", evidence.growth(n, BASELINE, first, last), 1) for n in attention]
    return judged(claim, source, items, note=f"lead over {BASELINE} on {words} minus on {first[0]}-{first[1]} words "
                  f"({len(evidence.bucket(*last))} and {len(evidence.bucket(*first))} sentences){note}: ")  # fmt: skip


def input_feeding_helps(evidence: Evidence) -> Claim:
    """Every Luong variant with input feeding against the same variant without."""
    claim, source = "Input feeding helps", "Luong et al. 2015, Table 1"
    pairs = [(n.replace(NO_FEEDING, ""), n) for n in evidence.names if luong_details(n) and NO_FEEDING in n]
    pairs = [(fed, unfed) for fed, unfed in pairs if fed in evidence.names]
    if not pairs:
        return Claim(claim, source, NOT_MEASURED, "needs two Luong variants that differ only in input feeding")
    return judged(claim, source, [(f"{fed} minus without feeding", evidence.compare(fed, unfed), 1)
                                  for fed, unfed in pairs])  # fmt: skip


def local_p_general_is_best(evidence: Evidence) -> Claim:
    """Local-p with the general score against global and local-m with the same score, encoder and feeding."""
    claim, source = "Local-p attention with the general score is the best Luong variant", "Luong et al. 2015, Table 4"
    local_p = [n for n in evidence.names if (luong_details(n) or [])[:2] == ["general", "local_p"]]
    twins = [(n, with_alignment(n, other)) for n in local_p for other in ("global", "local_m")]
    items = [(f"{n} minus {twin}", evidence.compare(n, twin), 1) for n, twin in twins if twin in evidence.names]
    if not items:
        return Claim(claim, source, NOT_MEASURED, "needs Luong's local-p with the general score and its global or "
                     "local-m twin")  # fmt: skip
    return judged(claim, source, items)


def local_aligns_better(evidence: Evidence) -> Claim:
    """AER of local-m and local-p against global attention, same score, encoder and feeding (runs with gold links)."""
    claim, source = "Local attention aligns better than global (lower AER)", "Luong et al. 2015, Table 6"
    local = [n for n in evidence.alignments if (luong_details(n) or [""])[:2] in (["general", "local_m"],
                                                                                ["general", "local_p"])]  # fmt: skip
    items = [(f"{n} minus {with_alignment(n, 'global')}", evidence.compare(n, with_alignment(n, "global"), "AER"), -1)
             for n in local if with_alignment(n, "global") in evidence.alignments]  # fmt: skip
    if not items:
        return Claim(claim, source, NOT_MEASURED, "needs gold alignments and Luong's local and global variants "
                     "(the lab: `make lab`, then `--lab multirun/lab/lab.json`)")  # fmt: skip
    return judged(claim, source, items, unit="AER")


def transformer_beats_recurrent(evidence: Evidence, valid: dict[str, float]) -> Claim:
    """The Transformer against each recurrent family, represented by its variant with the best valid BLEU."""
    claim, source = "The Transformer beats the recurrent models", "Vaswani et al. 2017"
    families: dict[str, str] = {}
    for name in evidence.names:
        kind = family(name)
        if kind != TRANSFORMER and (kind not in families or valid[name] > valid[families[kind]]):
            families[kind] = name
    if TRANSFORMER not in evidence.names or not families:
        return Claim(claim, source, NOT_MEASURED, f"needs `{TRANSFORMER}` and a recurrent model")
    items = [(f"{TRANSFORMER} minus {name}", evidence.compare(TRANSFORMER, name), 1) for name in families.values()]
    return judged(claim, source, items, note="each recurrent family by its variant with the best valid BLEU: ")


def from_lab(lab: dict | None, claim: Claim) -> Claim:
    """The lab's own verdict on a claim it answers better (longer sentences, gold links), when it has one."""
    found = next((c for c in (lab or {}).get("claims", []) if c["claim"] == claim.claim), None)
    if found is None or found["verdict"] == NOT_MEASURED:
        return claim
    return Claim(found["claim"], found["source"], found["verdict"], "the lab: " + found["evidence"],
                 found.get("comparisons", []))  # fmt: skip


def check_claims(evidence: Evidence, valid: dict[str, float], lab: dict | None = None,
                 length_note: str = "") -> list[Claim]:  # fmt: skip
    """Every claim, from the runs' evidence on their test set, each variant's mean valid BLEU (to choose a family's
    representative) and the lab's lab.json (optional: its verdicts on the length and alignment claims)."""
    claims = [
        attention_beats_fixed_vector(evidence),
        gap_grows_with_length(evidence, length_note),
        input_feeding_helps(evidence),
        local_p_general_is_best(evidence),
        local_aligns_better(evidence),
        transformer_beats_recurrent(evidence, valid),
    ]
    return [from_lab(lab, c) if c.claim in FROM_LAB else c for c in claims]
