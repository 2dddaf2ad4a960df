"""The tables README.md and docs/ show, rendered from results/*.json alone (nmt_study/published.py reads and writes
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
from nmt_study.claims import OPPONENT, TRANSFORMER
from nmt_study.claims_table import claims_table, runs_count
from nmt_study.comparison import spread, stopped_by, stops
from nmt_study.lab_plan import alignment_table, contrasts_lines, length_table, seeds_line, window_table
from nmt_study.lab_plan import tables as lab_tables
from nmt_study.parts import parts_table
from nmt_study.progress import queue_table
from nmt_study.published import (
    EARLIER,
    FIGURE_FILES,
    FIGURES,
    MEASUREMENTS,
    RESULTS,
    complete,
    load,
    shown_report,
)
from nmt_study.significance import MIN_SEEDS, p_value
from nmt_study.sources import current_command, missing, provenance_line, runs_line, trained
from nmt_study.variants import FAMILIES, Variant

MARKER = re.compile(r"<!-- results:(?P<name>[a-z0-9_]+) -->\n(?P<body>.*?)<!-- /results:(?P=name) -->", re.DOTALL)


def main_table(folder: Path = RESULTS, short: bool = False) -> str:
    """The four families: BLEU greedy and beam 5, chrF, over seeds; `short`: for README, where the runs come from in a
    link (docs/results.md says it in full). Today's protocol's rows (results/main.json: the design's converged,
    tuned runs) and, for each family it has not trained, the earlier protocol's row (results/main_5e14.json: 5e14
    FLOPs, hand-set defaults), labelled as such and left out of the differences; the earlier table alone until
    today's exists."""
    record, name = shown_report("main", folder)
    if record is None:
        return missing("main")
    earlier = load(EARLIER["main"], folder) if name == "main" else None
    rows = [(n, v, record, trained_as(v, name != "main")) for n, v in ranked(record)]
    have = {family(v) for _, v, _, _ in rows}
    rows += [(n, v, earlier, trained_as(v, True)) for n, v in ranked(earlier or {}) if family(v) not in have]
    lines = []
    for label, variant, source, how in rows:
        cells = main_cells(label, variant["runs"], how, interval(source, "best", label) if source is record else "-")
        shown = [key for key in cells if not (short and key in LONG_ONLY)]  # README's table stays short
        lines += [] if lines else ["| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
        lines.append("| " + " | ".join(cells[key] for key in shown) + " |")
    every = [r for v in record["variants"].values() for r in v["runs"]]
    budget = sorted({r["budget"] for r in every})
    patience = sorted({r["config"]["trainer"]["patience"] for r in every})
    early = (
        (f", or less where valid BLEU stalled for {' or '.join(map(str, patience))} validations (`trainer.patience`)")
        if any(patience)
        else ""
    )
    beside = ""
    if earlier and any(source is earlier for _, _, source, _ in rows):
        beside = (
            " Rows at 5e14 FLOPs: the earlier protocol's, outside the differences."
            if short
            else f" Rows trained at {EARLIER_BUDGET}: the earlier protocol's runs ({runs_count(earlier, True)}), each "
            "family the converged study did not train again, its differences not computed against these."
        )
    where = "[The runs and their machines](docs/results.md)." if short else runs_line(record)
    order = "" if short else " rows in order of valid BLEU;"
    told = "" if short or not beside else f" The earlier rows: {runs_line(earlier)}"
    return "\n".join(
        [
            *lines,
            "",
            f"Budget: {'; '.join(budget)} each{early};{order} mean ± sd over seeds; Δ best: test BLEU (beam 5) minus "
            f"that of the best on valid ({record['best']}), 95% interval over seeds and sentences, "
            f"p-value.{beside} {where}{told}",
            "",
        ]
    )


def main_cells(label: str, runs: list[dict], how: str, delta: str) -> dict[str, str]:
    """A main table row's cells by column: a variant's `runs` over seeds, how they were trained, Δ best."""
    epochs = [r["compute_curve"][-1][1] for r in runs if r["compute_curve"]]
    return {
        "model": label,
        "trained": how,
        "seeds": str(len(runs)),
        "parameters": f"{runs[0]['parameters']:,}",
        "valid BLEU": spread([r["valid_bleu"] for r in runs]),
        "test BLEU greedy": spread([r["test_bleu"] for r in runs]),
        "test BLEU beam 5": spread([r["test_bleu_beam"] for r in runs]),
        "chrF (beam 5)": spread([r["test_chrf"] for r in runs]),
        "Δ best [95%] p": delta,
        "epochs": spread(epochs, 1) if epochs else "-",
        "updates": f"{statistics.mean(r['updates'] for r in runs):,.0f}",
        "PFLOP trained": spread([r["petaflops"] for r in runs]),
        "stopped by": stops(runs),
    }


# The main table's columns that only docs/results.md shows
LONG_ONLY = ("epochs", "updates", "stopped by")
# How the earlier protocol's runs were trained (published.EARLIER): what their rows say
EARLIER_BUDGET = "5e14 FLOPs with hand-set defaults"
# The variants the design tunes (nmt_study.design.TUNED: transformer, luong_feeding), by their keys
TUNED_KEYS = (TRANSFORMER, OPPONENT)


def ranked(record: dict) -> list[tuple[str, dict]]:
    """A report's variants, best valid BLEU first."""
    return sorted(record.get("variants", {}).items(), key=lambda item: -item[1]["mean_valid_bleu"])


def family(variant: dict) -> str:
    """The model family of a report's variant (sutskever, bahdanau, luong, transformer)."""
    return Variant.of(variant["runs"][0]["config"]["model"]).family


def trained_as(variant: dict, earlier: bool) -> str:
    """The `trained` cell: the earlier protocol's budget and recipe ("not converged" where its runs were still
    improving), or today's recipe (tuned: the design's arms, TUNED_KEYS) and how its runs stopped ("converged": each
    stopped by patience; else how many reached the cap)."""
    if earlier:
        return EARLIER_BUDGET.replace(" with", ",") + (", not converged" if variant.get("still_improving") else "")
    runs = variant["runs"]
    capped = sum(stopped_by(r) == "cap" for r in runs)
    recipe = "tuned" if Variant.of(runs[0]["config"]["model"]) in TUNED_KEYS else "hand-set defaults"
    return f"{recipe}, converged" if not capped else f"{recipe}, {capped} of {len(runs)} capped"


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
        return f"`{current_command(record['command'])}`; commits {', '.join(record.get('commits', [])) or '-'}."
    return (
        f"{len(runs)} runs, `{current_command(record['command'])}`, {trained([run['provenance'] for run in runs])}, "
        f"analysed with torch {record['torch']}."
    )


def lab_table(folder: Path = RESULTS) -> str:
    """The alignment lab: AER of each attention on the sample grammar's gold links, BLEU by length, its claims."""
    record = load("lab", folder)
    if record is None:
        return missing("lab")

    lines = lab_tables(record["results"], record["claims"], record.get("train_words", 20), record.get("contrasts", []))
    return "\n".join([*lines, "", lab_source(record), ""])


def lab_family_table(folder: Path = RESULTS) -> str:
    """The lab's figures of the attention family of docs/attention.md: Bahdanau's model with its sparse and hard
    normalizers, the Transformer with and without its window."""
    record = load("lab", folder)
    if record is None:
        return missing("lab")

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


# Whose figures README shows: the main table's runs once they are made, the claims part's until then
FIGURE_PARTS = (("main", "the main table's runs"), ("compare", "the comparison's runs, 1e14 FLOPs each"))
# Whose the main figures are until today's main part holds all the families (the design trains the Transformer alone)
MAIN_FIGURES_EARLIER = "the four families' 5e14 runs"


def figures_block(folder: Path = RESULTS, figures: Path = FIGURES) -> str:
    """The figures of the first part in FIGURE_PARTS that `make results` has made, with whose runs they show."""
    for part, whose in FIGURE_PARTS:
        if part == "main" and not complete((load("main", folder) or {}).get("finished", {}), FAMILIES):
            whose = MAIN_FIGURES_EARLIER  # published.copy_figures copies today's only once complete
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


# Our model beside each of Joey NMT's (nmt_study/measures/joeynmt.py's names): its RNN with attention, its Transformer
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


TABLES: dict[str, Callable[[Path], str]] = {
    "main": main_table,
    "main_short": main_short,
    "claims": claims_table,
    "claims_short": claims_short,
    "compare": compare_table,
    "lab": lab_table,
    "lab_family": lab_family_table,
    "lab_window": window_table,
    "figures": figures_block,
    "parts": parts_table,
    "queue": queue_table,
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
