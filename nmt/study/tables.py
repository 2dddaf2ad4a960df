"""The tables README.md and docs/ show, rendered from results/*.json alone (nmt/study/published.py reads and writes
those files).

A table in a Markdown file sits between `<!-- results:NAME -->` and `<!-- /results:NAME -->`; `render(NAME)` gives its
text, `update_file` rewrites every marked block of a file, and tests/test_results.py fails when a committed file's
block differs from what the committed JSON renders. Nothing in a marked block is typed.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from functools import partial
from pathlib import Path

from nmt import UserError
from nmt.paths import read_json
from nmt.study.comparison import stops
from nmt.study.parts import lab_train_words, parts_table
from nmt.study.published import (
    FIGURE_FILES,
    FIGURES,
    MEASUREMENTS,
    RESULTS,
    load,
    spread,
)
from nmt.study.significance import MIN_SEEDS, NOT_MEASURED, p_value

MARKER = re.compile(r"<!-- results:(?P<name>[a-z0-9_]+) -->\n(?P<body>.*?)<!-- /results:(?P=name) -->", re.DOTALL)


def trained(provenances: list[dict]) -> str:
    """When, at which commits, on which machines and with which torch runs were trained (from the first start to the
    last end, where the runs recorded when they ended), from their provenance; a machine named before runs recorded
    their precision says so. The torch that analysed them is the report's own (runs_line)."""
    from nmt.device import PRECISIONS  # read_provenance names a machine "<name> (<precision>)"

    recorded = tuple(f"({name})" for name in PRECISIONS)
    # a commit shortened, keeping the mark of a run started with uncommitted changes (nmt.experiment)
    commits = sorted({c[:7] + "+changes" * c.endswith("+changes") for p in provenances for c in p["commits"]})
    dates = sorted(d for p in provenances for d in [*p["dates"], p.get("finished")] if d)
    machines = sorted(
        {m if m.endswith(recorded) else f"{m} (precision not recorded)" for p in provenances for m in p["machines"]}
    )
    torches = sorted({t for p in provenances for t in p.get("torch", [])})
    kernels = sorted({k for p in provenances for k in p.get("kernels", [])})  # recorded since 2026-11-27
    first, last = (d[:16].replace("T", " ") for d in (dates[0], dates[-1])) if dates else ("", "")
    span = f"{first} to {last} UTC" if dates else "at dates not recorded"
    return (
        f"trained {span} at commit{'s' * (len(commits) != 1)} "
        f"{', '.join(commits) or 'not recorded'} "
        f"on {'; '.join(machines) or 'a machine not recorded'}"
        + (f", ATen {', '.join(kernels)}" if kernels else "")
        + (" (where recorded)" if kernels and not all(p.get("kernels") for p in provenances) else "")
        + (f" with torch {', '.join(torches)}" if torches else "")
        + (" (not recorded by some)" if torches and not all(p.get("torch") for p in provenances) else "")
    )


def runs_line(record: dict) -> str:
    """Where the figures come from: the command, the runs' commits and dates, the machine; the variants whose seeds
    were trained on machines, CPU kernels or precisions of different kinds, named (their seeds are pooled all the
    same)."""
    runs = [r for v in record["variants"].values() for r in v["runs"]]
    when = trained([r["provenance"] for r in runs])
    mixed = []
    for name, variant in record["variants"].items():
        machines = sorted({m for r in variant["runs"] for m in r["provenance"]["machines"]})
        kernels = sorted({k for r in variant["runs"] for k in r["provenance"].get("kernels", [])})  # AVX2 or AVX512
        if len(machines) > 1 or len(kernels) > 1:  # each rounds fp32 sums its own way: other bits from one seed
            mixed.append(f"{name} ({'; '.join(machines + [f'ATen {k}' for k in kernels])})")
    pooled = f" Seeds pooled across machine kinds, CPU kernels or precisions: {', '.join(mixed)}." if mixed else ""
    analysis = record.get("analysis", {})
    changes = "+changes" if analysis.get("uncommitted_changes") else ""
    code = f" Analysed at commit {analysis['commit'][:7]}{changes}." if analysis.get("commit") else ""
    return (
        f"{len(runs)} run{'s' * (len(runs) != 1)}, `{record['command']}`, {when}, "
        f"analysed with torch {record['torch']}, sacreBLEU `{record['signatures'].get('BLEU', '')}`.{pooled}{code}"
    )


def missing(part: str) -> str:
    return f"Not run yet: `make results` writes results/{part}.json, then this table.\n"


def main_table(folder: Path = RESULTS, short: bool = False) -> str:
    """The four families at README's budget: BLEU greedy and beam 5, chrF, over seeds; `short`: for README, where
    the runs come from in a link (docs/results.md says it in full)."""
    record = load("main", folder)
    if record is None:
        return missing("main")
    stopped = "" if short else " stopped by |"  # README's table stays short; docs/results.md says it
    lines = [
        "| model | seeds | parameters | valid BLEU | test BLEU greedy | test BLEU beam 5 | chrF (beam 5) | "
        "Δ best [95%] p | epochs | updates | PFLOP trained |" + stopped,
        "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if stopped else ""),
    ]
    ranked = sorted(record["variants"].items(), key=lambda item: -item[1]["mean_valid_bleu"])
    for name, variant in ranked:
        runs = variant["runs"]
        epochs = [r["compute_curve"][-1][1] for r in runs if r["compute_curve"]]
        lines.append(
            f"| {name} | {len(runs)} | {runs[0]['parameters']:,} | {spread([r['valid_bleu'] for r in runs])} | "
            f"{spread([r['test_bleu'] for r in runs])} | {spread([r['test_bleu_beam'] for r in runs])} | "
            f"{spread([r['test_chrf'] for r in runs])} | {interval(record, 'best', name)} | "
            f"{spread(epochs, 1) if epochs else '-'} | "
            f"{statistics.mean(r['updates'] for r in runs):,.0f} | {spread([r['petaflops'] for r in runs])} |"
            + (f" {stops(runs)} |" if stopped else "")
        )
    every = [r for v in record["variants"].values() for r in v["runs"]]
    budget = sorted({r["budget"] for r in every})
    patience = sorted({r["config"]["trainer"]["patience"] for r in every})
    early = (
        (f", or less where valid BLEU stalled for {' or '.join(map(str, patience))} validations (`trainer.patience`)")
        if any(patience)
        else ""
    )
    where = "[The runs and their machines](docs/results.md)." if short else runs_line(record)
    return "\n".join(
        [
            *lines,
            "",
            f"Budget: {'; '.join(budget)} each{early}; rows in order of valid BLEU; mean ± sd over "
            "seeds; Δ best: test BLEU (beam 5) minus that of the best on valid "
            f"({record['best']}), 95% interval over seeds and sentences, p-value. {where}",
            "",
        ]
    )


def brief(claim: dict) -> str:
    """A claim's differences with their intervals, without the variants' names (docs/results.md has those); of more
    than two, their range and the range their intervals span."""
    if not claim.get("comparisons"):
        return claim["evidence"]
    if claim.get("from") == "lab":
        return "the lab: " + brief({k: v for k, v in claim.items() if k != "from"})
    unit = claim.get("unit") or ("AER" if "AER" in claim["claim"] else "BLEU")
    comparisons = claim["comparisons"]
    primary = next((c for c in comparisons if c.get("role") == "primary"), None)
    if primary is not None:  # the primary comparison in full, the secondary ones in a word
        text = (
            f"{primary['label']}: {primary['delta']:+.2f} {unit} [{primary['low']:+.2f}, {primary['high']:+.2f}], "
            f"p {p_value(primary['p'])}"
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
    from nmt.study import power

    found = power.of_claim(claim)
    return f"{found:.2f} {claim.get('unit', 'BLEU')}" if found is not None else "-"


def with_lab(claims: list[dict], lab: dict | None) -> list[dict]:
    """The comparison's claims, each one it could not measure or test (the alignment claim: Multi30k has no gold
    links; the length claim: no sentences over 30 words) taken from the lab where the lab measured it: its verdict, or
    that it needs more seeds (marked "from": "lab")."""
    from nmt.study.claims import UNTESTABLE

    found = {c["claim"]: c for c in (lab or {}).get("claims", []) if c["verdict"] != NOT_MEASURED}
    return [
        {**found[c["claim"]], "from": "lab"}
        if c["verdict"] in (NOT_MEASURED, UNTESTABLE) and c["claim"] in found
        else c
        for c in claims
    ]


def claims_table(folder: Path = RESULTS, short: bool = False, part: str = "claims") -> str:
    """The papers' claims with their verdicts over seeds: the claims part's (its variants at the main budget, with
    the lab's where it could not measure one), or another part's (main: the claims its four families can test;
    compare: the comparison's early-training runs); `short`: each claim's differences and intervals alone, for
    README."""
    record = load(part, folder)
    if record is None:
        return missing(part)
    seeds = min(len(v["runs"]) for v in record["variants"].values())
    claims = [c for c in record["claims"] if part == "claims" or c["verdict"] != NOT_MEASURED]
    lab = load("lab", folder) if part == "claims" else None
    claims = with_lab(claims, lab)
    lines = ["| claim | paper | verdict | evidence | detects |", "|---|---|---|---|---|"]
    lines += [
        f"| {c['claim']} | {c['source']} | **{c['verdict']}** | {brief(c) if short else c['evidence']} | {detects(c)} |"
        for c in claims
    ]
    note = ""
    if seeds < MIN_SEEDS:
        note = (
            f' Some variants have {seeds} seed{"s" * (seeds != 1)} so far: their claims read "needs {MIN_SEEDS} '
            'seeds" until `make results` ends.'
        )
    source = ""
    if any(c.get("from") == "lab" for c in claims):  # where its runs are told in full: docs/alignment.md
        runs = [run["provenance"] for result in lab["results"] for run in result["seeds"] if "provenance" in run]
        words = lab.get("train_words", 20)  # a lab.json of the protocol before today's names it
        where = f" of the earlier protocol (at most {words} words; " if words != lab_train_words() else " ("
        where += "`results/lab.json`)"
        source = f" The lab's claims: its {len(runs)} runs{where}, {trained(runs)}."
    if short:  # README: what and where; docs/results.md has the commands, commits and dates
        machines = sorted(
            {m for v in record["variants"].values() for r in v["runs"] for m in r["provenance"]["machines"]}
        )
        runs = sum(len(v["runs"]) for v in record["variants"].values())
        earlier = " of the earlier protocol" if source and lab.get("train_words", 20) != lab_train_words() else ""
        lab_runs = f"; the lab's claims, its {len(runs_of(lab))} runs{earlier}" if source else ""
        return "\n".join(
            [
                *lines,
                "",
                f"Detects: the true difference the primary test finds 80% of the time. {runs} "
                f"runs on {'; '.join(machines)}{lab_runs} ([their provenance](docs/results.md)).",
                "",
            ]
        )
    return "\n".join([*lines, "", f"{record['power']}{note} {runs_line(record)}{source}", ""])


def runs_of(lab: dict) -> list[dict]:
    return [run for result in lab["results"] for run in result["seeds"]]


def interval(record: dict, against: str, name: str) -> str:
    """A table cell: test BLEU of `name` minus that of the `against` variant (baseline or best) of a comparison's
    record, its 95% interval over seeds and sentences, and its p-value; `-` for the variant itself. Under 3 seeds it
    says how many: the interval then holds the sentences' variance alone, not the seeds', and no verdict rests on it."""
    found = record["intervals"].get(against, {}).get(name, {}).get("BLEU")
    if not found:
        return "-"
    seeds = found.get("seeds", MIN_SEEDS)
    few = f", {seeds} seed{'s' * (seeds != 1)}" if seeds < MIN_SEEDS else ""
    return f"{found['delta']:+.2f} [{found['low']:+.2f}, {found['high']:+.2f}] {p_value(found['p'])}{few}"


def compare_table(folder: Path = RESULTS) -> str:
    """Every variant of the comparison at equal compute, with intervals against the baseline and the best."""
    record = load("compare", folder)
    if record is None:
        return missing("compare")
    best = record["best"]
    lines = [
        "| variant | seeds | valid BLEU | test BLEU (beam 5) | chrF | Δ sutskever [95%] p | Δ best [95%] p | updates |",
        "|---|---|---|---|---|---|---|---|",
    ]
    cell = partial(interval, record)
    for name, variant in sorted(record["variants"].items(), key=lambda item: -item[1]["mean_valid_bleu"]):
        runs = variant["runs"]
        lines.append(
            f"| {name} | {len(runs)} | {spread([r['valid_bleu'] for r in runs])} | "
            f"{spread([r['test_bleu_beam'] for r in runs])} | {spread([r['test_chrf'] for r in runs])} | "
            f"{cell('baseline', name)} | {cell('best', name)} | {statistics.mean(r['updates'] for r in runs):,.0f} |"
        )
    budget = sorted({r["budget"] for v in record["variants"].values() for r in v["runs"]})
    return "\n".join([*lines, "", f"Budget: {'; '.join(budget)} each. Best on valid: {best}. {runs_line(record)}", ""])


def lab_source(record: dict, shown: list[dict] | None = None) -> str:
    """Where the lab's tables come from; `shown`: the results of a table that shows some of the variants."""
    runs = [run for result in (record["results"] if shown is None else shown) for run in result.get("seeds", [])]
    if not all("provenance" in run for run in runs):  # a lab.json from before the runs' provenance was kept
        return f"`{record['command']}`; commits {', '.join(record.get('commits', [])) or '-'}."
    return (
        f"{len(runs)} runs, `{record['command']}`, {trained([run['provenance'] for run in runs])}, "
        f"analysed with torch {record['torch']}."
    )


def lab_table(folder: Path = RESULTS) -> str:
    """The alignment lab: AER of each attention on the sample grammar's gold links, BLEU by length, its claims."""
    record = load("lab", folder)
    if record is None:
        return missing("lab")
    from nmt.study.lab_plan import tables

    lines = tables(record["results"], record["claims"], record.get("train_words", 20), record.get("contrasts", []))
    return "\n".join([*lines, "", lab_source(record), ""])


def lab_family_table(folder: Path = RESULTS) -> str:
    """The lab's figures of the attention family of docs/attention.md: Bahdanau's model with its sparse and hard
    normalizers, the Transformer with and without its window."""
    record = load("lab", folder)
    if record is None:
        return missing("lab")
    from nmt.study.lab_plan import alignment_table, contrasts_lines, length_table, seeds_line

    family = [r for r in record["results"] if r["name"].split()[0].rstrip(",") in ("bahdanau", "transformer")]
    names = {r["name"] for r in family}
    differences = [c for c in record.get("contrasts", []) if c["variant"] in names]
    return "\n".join(
        [
            seeds_line(family),
            "",
            *alignment_table(family),
            "",
            *length_table(family),
            "",
            *contrasts_lines(differences),
            lab_source(record, family),
            "",
        ]
    )


def lab_window_table(folder: Path = RESULTS) -> str:
    """How the lab's local window D was chosen: each local variant at each D tried (results/runs/lab_window/D<D>, and
    today's lab runs, results/runs/lab), beside global attention, one seed, each at its best checkpoint's validation."""
    runs = folder / "runs"
    tried = list((runs / "lab_window").glob("D*/lab_luong_local_p/*.record.json"))
    if not tried:
        return "No runs of the window's choice recorded (results/runs/lab_window).\n"
    seed = read_json(tried[0], "restore it from git")["seed"]
    rows: dict[tuple[str, int], tuple[dict, bool]] = {}
    variants = [f"lab_luong_{name}".rstrip("_") for name in ("local_p", "local_m", "", "location")]
    for variant in variants:
        for path, today in [
            *((p, False) for p in runs.glob(f"lab_window/D*/{variant}/seed{seed}.record.json")),
            (runs / "lab" / variant / f"seed{seed}.record.json", True),
        ]:
            if path.is_file():
                record = read_json(path, "restore it from git")
                model = record["config"]["model"]
                local = model["alignment"] != "global"
                rows[(variant, model["window"] if local else 0)] = (record, today)
    lines = [
        "| attention | D | best valid loss | its valid AER | its valid BLEU | its update |",
        "|---|---|---|---|---|---|",
    ]
    for (_, window), (record, today) in sorted(rows.items(), key=lambda item: (variants.index(item[0][0]), item[0][1])):
        best, model = record.get("best_validation", {}), record["config"]["model"]
        figures = [
            f"{best[k]:.{digits}f}" if k in best else "-" for k, digits in (("loss", 3), ("aer", 3), ("bleu", 1))
        ]
        score = model["attention"]["_target_"].rsplit(".", 1)[-1].removesuffix("Attention").lower()
        kind = f"{model['alignment'].replace('_', '-')}, {score}"
        size = f"{window} (the lab's)" if window and today else str(window or "-")
        lines.append(f"| {kind} | {size} | {' | '.join(figures)} | {record['best_step']} |")
    provenances = [record["provenance"] for record, _ in rows.values()]
    return "\n".join(
        [*lines, "", f"Luong's lab model, seed {seed}, the lab's budget; {len(rows)} runs, {trained(provenances)}.", ""]
    )


# Whose figures README shows: the main table's runs once they are made, the claims part's until then
FIGURE_PARTS = (("main", "the main table's runs"), ("compare", "the comparison's runs, 1e14 FLOPs each"))


def figures_block(folder: Path = RESULTS, figures: Path = FIGURES) -> str:
    """The figures of the first part in FIGURE_PARTS that `make results` has made, with whose runs they show."""
    for part, whose in FIGURE_PARTS:
        made = [(f"{part}_{name}", caption) for name, caption in FIGURE_FILES if (figures / f"{part}_{name}").is_file()]
        if made:
            images = " ".join(f"![{caption}](docs/figures/results/{name})" for name, caption in made)
            return f"{images}\n\nFrom {whose}: {', '.join(caption for _, caption in made)}.\n"
    return "The figures (valid BLEU against compute, BLEU by length, attention) follow when `make results` has run.\n"


def measured_table(name: str, folder: Path = RESULTS) -> str:
    record = load(f"measured/{name}", folder)
    if record is None:
        return f"Not measured yet: `{MEASUREMENTS[name]}` writes results/measured/{name}.json.\n"
    lines = ["| " + " | ".join(record["columns"]) + " |", "|" + "---|" * len(record["columns"])]
    lines += ["| " + " | ".join(row) + " |" for row in record["rows"]]
    return "\n".join([*lines, "", f"{record['note']} {provenance_line(record)}".strip(), ""])


def provenance_line(record: dict) -> str:
    """Where a measurement comes from: its command, when, the commit, the machine."""
    commit = (record["commit"] or "not recorded")[:7] + ("+changes" if record["uncommitted_changes"] else "")
    return (
        f"`{record['command']}`, {record['date'][:16].replace('T', ' ')} UTC at commit {commit} on "
        f"{record['machine']} ({record['threads']} threads), torch {record['torch']}."
    )


# Our model beside each of Joey NMT's (nmt/study/measures/joeynmt.py's names): its RNN with attention, its Transformer
PEER_PAIRS = {"rnn": "bahdanau", "transformer": "transformer"}


PEER_FIGURES = (  # (row, key, format)
    ("train target tok/s", "train_tokens_per_second", "{:,.0f}"),
    ("decoding test2016 greedy, sent/s", "decode_beam1_sentences_per_second", "{:,.1f}"),
    ("decoding test2016 beam 5, sent/s", "decode_beam5_sentences_per_second", "{:,.1f}"),
    ("peak RSS while training", "peak_rss_gib", "{:.2f} GiB"),
)


def versus_peer(ours_name: str, peer_name: str, folder: Path = RESULTS) -> str:
    """Our benchmark beside Joey NMT's, measured in one session: each figure and the ratio ours / theirs."""
    ours, peer = load(f"measured/{ours_name}", folder), load(f"measured/{peer_name}", folder)
    if ours is None or peer is None:
        missing_name = ours_name if ours is None else peer_name
        return f"Not measured yet: `{MEASUREMENTS[missing_name]}` writes results/measured/{missing_name}.json.\n"
    lines = ["| | ours | Joey NMT | ours / Joey NMT |", "|---|---|---|---|"]
    for peer_model, our_model in PEER_PAIRS.items():
        mine, theirs = ours["values"].get(our_model, {}), peer["values"].get(peer_model, {})
        for row, key, form in PEER_FIGURES:
            if mine.get(key) is None or theirs.get(key) is None:
                continue
            lines.append(
                f"| {our_model} / Joey's {peer_model}, {row} | {form.format(mine[key])} | "
                f"{form.format(theirs[key])} | {mine[key] / theirs[key]:.2f}x |"
            )
    return "\n".join(
        [
            *lines,
            "",
            f"Ours: {ours['note']} {provenance_line(ours)}",
            "",
            f"Joey NMT: {peer['note']} {provenance_line(peer)}",
            "",
        ]
    )


def claims_short(folder: Path = RESULTS) -> str:
    return claims_table(folder, short=True)


def main_short(folder: Path = RESULTS) -> str:
    return main_table(folder, short=True)


def main_claims(folder: Path = RESULTS) -> str:
    return claims_table(folder, part="main")


TABLES: dict[str, Callable[[Path], str]] = {
    "main": main_table,
    "main_short": main_short,
    "main_claims": main_claims,
    "claims": claims_table,
    "claims_short": claims_short,
    "compare": compare_table,
    "lab": lab_table,
    "lab_family": lab_family_table,
    "lab_window": lab_window_table,
    "figures": figures_block,
    "parts": parts_table,
}
# Our benchmark beside Joey NMT's of the same session: on a CPU with native bf16, held to AVX2, on a GPU
for ours, peer in (("benchmark", "joeynmt"), ("benchmark_fp32", "joeynmt_fp32"), ("benchmark_cuda", "joeynmt_cuda")):
    TABLES[f"versus_{peer}"] = partial(versus_peer, ours, peer)


def render(name: str, folder: Path = RESULTS) -> str:
    if name in MEASUREMENTS:
        return measured_table(name, folder)
    if name not in TABLES:
        raise UserError(f"results:{name}: no such table; the tables are {', '.join([*TABLES, *MEASUREMENTS])}")
    return TABLES[name](folder)


def blocks(text: str) -> list[tuple[str, str]]:
    """(name, body) of every marked block."""
    return [(m["name"], m["body"]) for m in MARKER.finditer(text)]


def rendered(text: str, folder: Path = RESULTS) -> str:
    """The text with every marked block replaced by its table rendered from `folder`."""

    def table(match: re.Match) -> str:
        name = match["name"]
        return f"<!-- results:{name} -->\n{render(name, folder)}<!-- /results:{name} -->"

    return MARKER.sub(table, text)


def update_file(path: Path, folder: Path = RESULTS) -> bool:
    """Rewrite the marked blocks of `path` from `folder`; True when the file changed."""
    text = path.read_text(encoding="utf-8")
    new = rendered(text, folder)
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text
