"""The papers' claims as README.md and docs/results.md show them: one label per claim, from the claims part's report
(the converged runs: the claims' own and the main table's), the earlier protocol's where it could not measure one
(published.EARLIER), the lab's where neither could; each with what its primary test detects and how its two arms'
runs stopped."""

from __future__ import annotations

from pathlib import Path

from nmt_study import power
from nmt_study.claims import UNTESTABLE
from nmt_study.comparison import stops
from nmt_study.parts import lab_train_words
from nmt_study.published import EARLIER, RESULTS, load
from nmt_study.significance import MIN_SEEDS, NOT_MEASURED, p_value
from nmt_study.sources import missing, runs_line, trained


def brief(claim: dict) -> str:
    """A claim's differences with their intervals, without the variants' names (docs/results.md has those); of more
    than two, their range and the range their intervals span."""
    if not claim.get("comparisons"):
        return claim["evidence"]
    if claim.get("from") in ("lab", "5e14"):
        where = "the lab" if claim["from"] == "lab" else "5e14 runs"
        return f"{where}: " + brief({k: v for k, v in claim.items() if k != "from"})
    unit = claim.get("unit") or ("AER" if "AER" in claim["claim"] else "BLEU")
    comparisons = claim["comparisons"]
    primary = next((c for c in comparisons if c.get("role") == "primary"), None)
    if primary is not None:  # the primary comparison in full, the secondary ones in a word
        text = (
            f"{primary['label']}: {primary['delta']:+.2f} {unit} [{primary['low']:+.2f}, {primary['high']:+.2f}], "
            f"p {p_value(primary['p'])}" + (f", Holm {p_value(primary['p_claims'])}" if "p_claims" in primary else "")
        )
        secondary = [c["verdict"] for c in comparisons if c.get("role") == "secondary"]
        counts = ", ".join(f"{secondary.count(v)} {v}" for v in sorted(set(secondary)))
        return text + (f"; secondary: {counts}" if secondary else "")
    count = len(comparisons)
    if count > 2:
        deltas = sorted(c["delta"] for c in comparisons)
        lows, highs = [c["low"] for c in comparisons], [c["high"] for c in comparisons]
        if min(lows) > 0:
            intervals = f"every 95% interval above 0 (the lowest bound {min(lows):+.2f})"
        elif max(highs) < 0:
            intervals = f"every 95% interval below 0 (the highest bound {max(highs):+.2f})"
        else:
            intervals = f"their 95% intervals within [{min(lows):+.2f}, {max(highs):+.2f}]"
        return f"{count} comparisons, {unit}: {deltas[0]:+.2f} to {deltas[-1]:+.2f}, {intervals}"
    differences = ", ".join(f"{c['delta']:+.2f} [{c['low']:+.2f}, {c['high']:+.2f}]" for c in comparisons)
    return f"{count} comparison{'s' * (count != 1)}, {unit}: {differences}"


def detects(claim: dict) -> str:
    """What a claim's primary test finds 80% of the time, in its unit (`power.of_claim`); `-` where not computed."""

    found = power.of_claim(claim)
    return f"{found:.2f} {claim.get('unit', 'BLEU')}" if found is not None else "-"


def with_lab(claims: list[dict], lab: dict | None) -> list[dict]:
    """The comparison's claims, each one it could not measure or test (the alignment claim: Multi30k has no gold
    links; the length claim: no sentences over 30 words) taken from the lab where the lab measured it: its verdict, or
    that it needs more seeds (marked "from": "lab")."""

    found = {c["claim"]: c for c in (lab or {}).get("claims", []) if c["verdict"] != NOT_MEASURED}
    return [
        {**found[c["claim"]], "from": "lab"}
        if c["verdict"] in (NOT_MEASURED, UNTESTABLE) and c["claim"] in found
        else c
        for c in claims
    ]


def with_earlier(today: dict | None, earlier: dict | None) -> list[dict]:
    """The claims part's claims: today's report's, each it could not measure (its runs do not hold the variants: the
    converged study trains only the claims that need it, nmt_study/design.py) taken from the earlier protocol's
    report where that measured it (marked "from": "5e14"); the earlier report's alone until today's is made."""
    if today is None:
        return list((earlier or {}).get("claims", []))
    found = {c["claim"]: c for c in (earlier or {}).get("claims", []) if c["verdict"] != NOT_MEASURED}
    return [
        {**found[c["claim"]], "from": "5e14"} if c["verdict"] == NOT_MEASURED and c["claim"] in found else c
        for c in today["claims"]
    ]


def claim_stops(claim: dict, records: dict[str, dict | None]) -> str:
    """How the runs of a claim's primary comparison stopped, each arm's ("cap 3 / patience 3"), from the report its
    figures come from (`records`: by a claim's "from", today's under ""); `-` for the lab's and where not recorded."""
    record = records.get(claim.get("from", ""))
    arms = claim.get("arms") or []
    if record is None or not arms or any(arm not in record["variants"] for arm in arms):
        return "-"
    return " / ".join(stops(record["variants"][arm]["runs"]) for arm in arms)


def claims_table(folder: Path = RESULTS, short: bool = False) -> str:
    """The papers' claims with their verdicts over seeds: the claims part's report (the converged runs: the claims'
    own and the main table's), the earlier protocol's where it could not measure one, the lab's where neither could;
    `short`: each claim's differences and intervals alone, for README."""
    today, earlier = load("claims", folder), load(EARLIER["claims"], folder)
    if today is None and earlier is None:
        return missing("claims")
    lab = load("lab", folder)
    claims = with_lab(with_earlier(today, earlier), lab)
    sources = {"": today or earlier, "5e14": earlier}
    lines = ["| claim | paper | verdict | evidence | detects | stopped by |", "|---|---|---|---|---|---|"]
    for c in claims:
        row = f"| {c['claim']} | {c['source']} | **{c['verdict']}** | {brief(c) if short else evidence(c)} |"
        lines.append(f"{row} {detects(c)} | {claim_stops(c, sources)} |")
    # the reports the rows come from: today's, and the earlier one's where some row is its (or where it is alone)
    shown = [today] if today else []
    if earlier and (today is None or any(c.get("from") == "5e14" for c in claims)):
        shown.append(earlier)
    lab_runs = lab_line(lab, short) if any(c.get("from") == "lab" for c in claims) else ""
    if short:  # README: what and where; docs/results.md has the commands, commits and dates
        counted = "; ".join(runs_count(r, r is earlier and today is not None) for r in shown)
        return "\n".join(
            [
                *lines,
                "",
                "Detects: the true difference the primary test would find 80% of the time, estimated from these seeds' "
                f"spread. {counted}{lab_runs} "
                "([their provenance](docs/results.md)).",
                "",
            ]
        )
    told = [f"{r['power']}{few_seeds(r)} {runs_line(r)}" for r in shown[:1]]
    told += [f"The claims marked *5e14 runs*: {runs_line(r)}" for r in shown[1:]]
    return "\n".join([*lines, "", " ".join(told) + lab_runs, ""])


def few_seeds(record: dict) -> str:
    """What a report's claims say while some variant has fewer than MIN_SEEDS seeds."""
    seeds = min(len(v["runs"]) for v in record["variants"].values())
    if seeds >= MIN_SEEDS:
        return ""
    return (
        f' Some variants have {seeds} seed{"s" * (seeds != 1)} so far: their claims read "needs {MIN_SEEDS} seeds" '
        "until `make results` ends."
    )


def runs_count(record: dict, earlier: bool) -> str:
    """README's word on a report's runs: how many, on which machines (`earlier`: of the 5e14 protocol)."""
    machines = sorted({m for v in record["variants"].values() for r in v["runs"] for m in r["provenance"]["machines"]})
    runs = sum(len(v["runs"]) for v in record["variants"].values())
    return f"{runs} runs{' at 5e14 FLOPs' * earlier} on {'; '.join(machines)}"


def lab_line(lab: dict, short: bool) -> str:
    """Where the claims taken from the lab come from: its runs (told in full in docs/alignment.md)."""
    words = lab.get("train_words", 20)  # a lab.json of the protocol before today's names it
    earlier = words != lab_train_words()
    if short:
        return f"; the lab's claims, its {len(runs_of(lab))} runs{' of the earlier protocol' * earlier}"
    runs = [run["provenance"] for result in lab["results"] for run in result["seeds"] if "provenance" in run]
    where = f" of the earlier protocol (at most {words} words; " if earlier else " ("
    return f" The lab's claims: its {len(runs)} runs{where}`results/lab.json`), {trained(runs)}."


def evidence(claim: dict) -> str:
    """A claim's evidence in full, marked where it comes from the earlier protocol's runs."""
    return ("*5e14 runs*: " if claim.get("from") == "5e14" else "") + claim["evidence"]


def runs_of(lab: dict) -> list[dict]:
    return [run for result in lab["results"] for run in result["seeds"]]
