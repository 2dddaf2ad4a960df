"""README's table of `make results`' parts: which are complete, which are still to run, and whether the lab's tables
are today's protocol's (rendered by nmt_study.tables as the `parts` block)."""

from __future__ import annotations

from pathlib import Path

from nmt.config import CONFIGS
from nmt_study.design import CLAIM_RUNS, FINAL_RUNS, SEEDS
from nmt_study.lab_plan import CLAIM_SEEDS
from nmt_study.published import CAP, EARLIER, RESULTS, UNFINISHED, finished, load
from nmt_study.significance import MIN_SEEDS
from nmt_study.variants import FAMILIES, LAB_CLAIM_VARIANTS, VARIANTS


def part_state(wanted: list[str], seeds: dict[str, int], more: dict[str, int] | None = None) -> str:
    """How far a part is: its runs finished (`seeds` per variant) out of the seeds it trains for each of `wanted`
    (MIN_SEEDS, or `more`'s for the variants it names)."""
    if not seeds:
        return "no runs yet"
    targets = seed_targets(wanted, more)
    runs, total = sum(min(seeds.get(v, 0), n) for v, n in targets.items()), sum(targets.values())
    return f"**complete**: {runs} runs" if runs == total else f"{runs} of {total} runs"


def seed_targets(wanted: list[str], more: dict[str, int] | None = None) -> dict[str, int]:
    """The seeds a part trains of each of `wanted`: MIN_SEEDS, or `more`'s for the variants it names."""
    return {v: max(MIN_SEEDS, (more or {}).get(v, 0)) for v in wanted}


def lab_targets() -> dict[str, int]:
    """The lab's variants (their run folders' names) that make results trains more seeds of: its claims'."""

    return {f"lab_{variant}": CLAIM_SEEDS for variant in LAB_CLAIM_VARIANTS}


def parts_table(folder: Path = RESULTS) -> str:
    """Which of make results' parts the committed results hold, and which are still to run."""

    def seeds(part: str) -> dict[str, int]:  # each variant's runs: recorded (results/runs/<part>) or reported
        found = {variant: len(s) for variant, s in (load(part, folder) or {}).get("finished", {}).items()}
        for variant, s in finished(folder / "runs" / part).items():
            found[variant] = max(found.get(variant, 0), len(s))
        return found

    lab = load("lab", folder)
    lab_variants = [f"lab_{variant}" for variant in VARIANTS]
    shown = sorted({len(r["seeds"]) for r in (lab or {}).get("results", [])})  # what results/lab.json covers
    if lab and lab.get("train_words", 20) != lab_train_words():  # results/lab.json is an earlier protocol's
        recorded = {variant: len(s) for variant, s in finished(folder / "runs" / "lab").items()}
        earlier = f"at most {lab.get('train_words', 20)} words, {sum(len(r['seeds']) for r in lab['results'])} runs"
        lab_row = (
            f"{part_state(lab_variants, recorded, lab_targets())} of today's protocol; its tables are still the "
            f"earlier one's (trained on {earlier})"
        )
    else:
        lab_row = lab_state(lab_variants, seeds("lab"), shown)
    rows = [
        (
            "main",
            f"{', '.join(FINAL_RUNS['main'])} tuned and converged; the other {len(FAMILIES) - 1} families' 5e14 runs",
            final_state("main", list(FINAL_RUNS["main"]), seeds, folder),
        ),
        ("claims", f"{', '.join(CLAIM_RUNS)}, beside main's runs", final_state("claims", CLAIM_RUNS, seeds, folder)),
        ("lab", "the attention variants on the sample grammar", lab_row),
        (
            "others",
            f"the comparison: {len(VARIANTS)} variants at 1e14 FLOPs (early training)",
            part_state(VARIANTS, seeds("compare")),
        ),
    ]
    lines = ["| part of `make results` | what | state |", "|---|---|---|"]
    lines += [f"| {part} | {what} | {state} |" for part, what, state in rows]

    note = (
        f"claims and main: the design's {SEEDS} seeds each, up to {CAP:g} FLOPs, stopped earlier by patience on valid "
        f"BLEU; the others {MIN_SEEDS} seeds each (the lab's claims: {CLAIM_SEEDS})."
    )
    return "\n".join([*lines, "", note, ""])


def final_state(part: str, wanted: list[str], seeds, folder: Path) -> str:
    """How far the claims' or the main part is (its runs are all of today's protocol, `published.PROTOCOL`); where
    it has no report yet, the earlier protocol's that its tables show instead (`published.EARLIER`)."""
    state = part_state(wanted, seeds(part), dict.fromkeys(wanted, SEEDS))
    earlier = load(EARLIER[part], folder) if load(part, folder) is None else None
    if earlier is None:
        return state
    runs = [r for v in earlier.get("variants", {}).values() for r in v.get("runs", [])]
    then = ", ".join(sorted({r.get("budget", "?") for r in runs}))
    return f"{state} under today's protocol; tables: {len(runs)} earlier runs at {then}"


def lab_train_words() -> int:
    """The longest training sentence of today's lab (configs/experiment/lab.yaml)."""
    from omegaconf import OmegaConf

    return int(OmegaConf.load(CONFIGS / "experiment" / "lab.yaml").data.grammar.max_words)


def lab_state(variants: list[str], recorded: dict[str, int], shown: list[int]) -> str:
    """The lab's runs recorded so far (results/runs/lab), and the seeds its tables show (results/lab.json, made from
    the seeds every variant has: `python -m nmt_study results --parts lab --record`)."""
    more = lab_targets()
    state = part_state(variants, recorded, more)
    if shown == sorted(set(seed_targets(variants, more).values())) and state.startswith("**complete**"):
        return state
    if not shown:
        return f"{state}; {UNFINISHED}"
    seeds = "/".join(map(str, shown))
    return f"{state}; its tables show the {seeds} seed{'s' * (shown != [1])} every variant has so far"
