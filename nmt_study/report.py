"""A comparison's report on finished runs: intervals over seeds and sentences, sacrebleu's paired tests, the claims,
figures (attention side by side, BLEU by length, by time, updates, compute and epochs), report.md, compare.json and
TensorBoard (`summarise`)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import sacrebleu
from torch.utils.tensorboard import SummaryWriter

from nmt.config import DecodeOptions
from nmt.decoding.evaluate import LENGTH_BUCKETS
from nmt.decoding.plot import legend_beside, lines_figure, panels_figure
from nmt.paths import write_text
from nmt_study.claims import BASELINE, IMPROVING_GAIN, check_claims, last_third_gain, mean_gain, power_line
from nmt_study.comparison import (
    equal_compute,
    equal_updates,
    group,
    headline,
    intervals,
    mean_compute_curve,
    mean_curve,
    power_text,
    significance,
    spread,
)
from nmt_study.significance import Evidence, p_value
from nmt_study.variants import Variant

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def heatmaps(groups: dict[str, list[dict]]) -> Figure | None:
    """One sentence (`shown_pair`), each attention model's word alignment (first seed) side by side, force-decoding
    the reference (`attention_panel`)."""
    panels, titles, pair = [], [], None
    for name, runs in groups.items():
        if runs[0]["alignment_map"] is None:
            continue
        panel = runs[0]["panel"]
        pair = pair or (" ".join(panel["source"]), " ".join(panel["target"]))
        panels.append(np.asarray(panel["weights"]))
        titles.append(name)
    if not panels:
        return None
    return panels_figure(panels, titles, pair[0].split(), pair[1].split(), "attention of each model, one sentence")


def line_figure(lines: dict[str, tuple[list, list]], xlabel: str, ylabel: str, title: str, path: Path):
    """One line per variant: {name: (x values, y values)}."""
    figure, axes = lines_figure()
    for name, (x, y) in lines.items():
        axes.plot(x, y, marker="o", markersize=3, label=name)
    axes.set(xlabel=xlabel, ylabel=ylabel, title=title)
    axes.grid(alpha=0.3)
    legend_beside(axes)
    figure.savefig(path)
    return figure


# The learning curves' figures, valid BLEU (greedy) at equal...: (name, curves or compute, the x of a curve's point,
# x label, title); those of compute are drawn where the runs recorded it
CURVE_FIGURES = (
    (
        "bleu_by_time",
        "curves",
        0,
        "wall-clock minutes (training and validation)",
        "Equal time: valid BLEU against minutes",
    ),
    ("bleu_by_updates", "curves", 1, "updates", "Equal updates: valid BLEU against updates"),
    ("bleu_by_compute", "compute", 0, "training compute (petaFLOPs)", "Equal compute: valid BLEU against FLOPs"),
    ("bleu_by_epochs", "compute", 1, "epochs", "Equal epochs: valid BLEU against epochs"),
)


def figures(groups: dict[str, list[dict]], curves: dict, compute: dict, pairs: list, output: Path) -> dict:
    labels = [f"{low}-{high}" for low, high in LENGTH_BUCKETS]
    by_length = {}
    for name, runs in groups.items():
        kept = [label for label in labels if all(label in r["by_length"] for r in runs)]
        by_length[name] = (
            [k.replace("-1000", "+") for k in kept],
            [statistics.mean(r["by_length"][k][0] for r in runs) for k in kept],
        )
    made = {
        "bleu_by_length": line_figure(
            by_length,
            "source sentence length (words)",
            "test BLEU (headline output)",
            "BLEU by source length",
            output / "bleu_by_length.png",
        )
    }
    series = {"curves": curves, "compute": compute}
    for name, source, x, xlabel, title in CURVE_FIGURES:
        if source == "compute" and not any(compute.values()):
            continue
        points = {n: ([p[x] for p in c], [p[2] for p in c]) for n, c in series[source].items() if c}
        made[name] = line_figure(points, xlabel, "valid BLEU (greedy)", title, output / f"{name}.png")
    attention = heatmaps(groups)
    if attention is not None:
        attention.savefig(output / "attention.png")
        made["attention"] = attention
    return made


def interval_cell(interval) -> str:
    if interval is None:
        return "-"
    return f"{interval.delta:+.2f} [{interval.low:+.2f}, {interval.high:+.2f}] p {p_value(interval.p)}"


def seeds_cell(difference) -> str:
    """Each seed's paired tests against the best: the largest p over seeds of bootstrap and randomization."""
    if difference is None:
        return "-"
    return f"{p_value(difference.p_bootstrap)}, {p_value(difference.p_randomization)}"


def equal_compute_table(compute: dict[str, list[tuple[float, float, float]]]) -> list[str]:
    at, table = equal_compute(compute) if compute and all(compute.values()) else ([], {})
    if not at:
        return []
    lines = [
        "## Equal compute and equal epochs\n",
        "Valid BLEU (greedy, mean over seeds) at the same training compute "
        "(the same fractions of the budget, petaFLOPs in the header); against epochs in the second figure.\n",
        "| variant | " + " | ".join(f"{p:.3g} PFLOP" for p in at) + " |",
        "|---|" + "---|" * len(at),
    ]
    for name in sorted(table, key=lambda n: -table[n][-1]):
        lines.append(f"| {name} | " + " | ".join(f"{b:.2f}" for b in table[name]) + " |")
    return [
        *lines,
        "",
        "![valid BLEU against compute](bleu_by_compute.png)",
        "![valid BLEU against epochs](bleu_by_epochs.png)",
        "",
    ]


def budget_section(groups: dict[str, list[dict]]) -> list[str]:
    """The headline table's title and what it holds equal, from the runs' budgets."""
    budgets = sorted({r["budget"] for runs in groups.values() for r in runs})
    if any("wall clock" in b for b in budgets):
        return [
            "## Equal time\n",
            f"Each run trains for {'; '.join(budgets)}. A wall-clock budget depends on the "
            "machine and on what else ran on it, so these runs are **not reproducible**: the same seed gives "
            "another model elsewhere (a compute budget, `--flops`, does not). ",
        ]
    if len(budgets) == 1 and budgets[0].endswith("FLOPs"):
        return [
            "## Equal compute\n",
            f"Each run trains for the same compute, {budgets[0]} of matrix products "
            "(nmt/models/flops.py): the same updates on any machine, idle or busy. ",
        ]
    return ["## Budgets\n", f"The runs' budgets: {'; '.join(budgets)}. "]


def report(groups, tests, claims, curves, compute, signatures, output: Path, beam: int, command: str, best: str) -> str:
    """report.md: the claims, then the tables behind them; figures beside it."""
    ranked = sorted(groups, key=lambda n: -statistics.mean(r["valid_bleu"] for r in groups[n]))
    lines = [f"# Comparison\n\n`{command}`\n", *claims_section(groups, tests, claims), ""]
    lines += ["![attention of each model](attention.png)", "", *runs_table(groups, tests, ranked, beam, best)]
    lines += [
        "",
        "Minutes and tokens/s are measurements of the machine the runs shared, not what stopped them "
        "(unless the budget above is in minutes).",
        "",
        "![valid BLEU against time](bleu_by_time.png)",
        "",
    ]
    lines += [*equal_compute_table(compute), *equal_updates_section(curves)]
    lines += ["", "![valid BLEU against updates](bleu_by_updates.png)", "", *chrf_section(groups, tests, ranked)]
    lines += ["", *length_section(groups, ranked), "", "![BLEU by source length](bleu_by_length.png)", ""]
    lines += [
        "## Signatures\n",
        *[f"- {key}: `{value}`" for key, value in sorted(signatures.items())],
        "",
        "Entropy (nats; lower is sharper) and diagonality (1: target words attend in source order) of each "
        "best checkpoint's attention force-decoding the test references (the Transformer: its last layer "
        "averaged over heads). Runs: " + ", ".join(f"`{r['run']}`" for n in ranked for r in groups[n]),
    ]
    text = "\n".join(lines) + "\n"
    write_text(output / "report.md", text)
    return text


def claims_section(groups: dict[str, list[dict]], tests: dict, claims: list) -> list[str]:
    """The papers' claims: each one's verdict, evidence and what its primary test detects; the seeds' power."""
    resamples = next((i.resamples for t in tests["intervals"].values() for m in t.values() for i in m.values()), 0)
    lines = [
        "## The papers' claims\n",
        "Each claim's primary comparison is fixed in advance (nmt_study/claims.py): a difference, its 95% "
        "interval and p-value over seeds and test sentences together (a t interval from the seeds' variance "
        f"and the sentences', these from {resamples:,} shared resamples); supported or contradicted when p is "
        "below 0.05, mixed when significant comparisons point both ways, inconclusive otherwise; secondary "
        'comparisons with Holm\'s correction (the method: docs/comparison.md, "The statistics"). Detects: '
        "the true difference the primary test finds 80% of the time.\n",
        "| claim | paper | these runs | evidence | detects |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {c.claim} | {c.source} | **{c.verdict}** | {c.evidence} | {power_line(c) or '-'} |" for c in claims]
    return [*lines, "", power_text(groups)]


def runs_table(groups: dict[str, list[dict]], tests: dict, ranked: list[str], beam: int, best: str) -> list[str]:
    """The budget, then each variant's scores over seeds, differences against the baseline and the best, cost and
    attention shape, in order of valid BLEU."""
    title, budget_text = budget_section(groups)
    lines = [
        title,
        budget_text
        + "Test BLEU of the best checkpoint by valid BLEU ("
        + (f"beam {beam}, length penalty {DecodeOptions.alpha}" if beam > 1 else "greedy")
        + "), mean ± standard deviation over seeds with each seed's figure; rows in order of valid BLEU "
        f"(greedy, the best checkpoint's), which also chooses the best variant ({best}). Δ: the difference in "
        "test BLEU against the baseline and against the best, with its 95% interval and p-value over seeds and "
        "sentences; per seed: the largest p over seeds of sacrebleu's paired bootstrap and approximate "
        "randomization against the best (how far another test set would move it, not another training run).\n",
        f"| variant | seeds | valid BLEU | test BLEU | each seed | chrF | Δ {BASELINE} | Δ best | "
        "per seed (p bs, p ar) | updates | PFLOP | minutes | tok/s | entropy | diagonality |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in ranked:
        runs = groups[name]
        shape = [r["attention"] for r in runs if r["attention"]]
        attention = "- | -"
        if shape:
            entropy, diagonality = (statistics.mean(s[key] for s in shape) for key in ("entropy", "diagonality"))
            attention = f"{entropy:.2f} | {diagonality:.2f}"
        against = {k: tests["intervals"][k].get(name, {}).get("BLEU") for k in ("baseline", "best")}
        lines.append(
            f"| {name} | {len(runs)} | {spread([r['valid_bleu'] for r in runs])} | "
            f"{spread([headline(r) for r in runs])} | "
            f"{', '.join(f'{headline(r):.2f}' for r in runs)} | {spread([r['test_chrf'] for r in runs])} | "
            f"{interval_cell(against['baseline'])} | {interval_cell(against['best'])} | "
            f"{seeds_cell(tests['best'].get(name, {}).get('BLEU'))} | "
            f"{statistics.mean(r['updates'] for r in runs):.0f} | "
            f"{statistics.mean(r['petaflops'] for r in runs):.3g} | "
            f"{statistics.mean(r['minutes'] for r in runs):.1f} | "
            f"{statistics.mean(r['tokens_per_second'] for r in runs):,.0f} | {attention} |"
        )
    return lines


def equal_updates_section(curves: dict[str, list[tuple[float, int, float]]]) -> list[str]:
    steps, at_steps = equal_updates(curves)
    lines = [
        "## Equal updates\n",
        "Valid BLEU (greedy, mean over seeds) after the same number of updates, whatever each took in time.\n",
    ]
    if not steps:
        return [*lines, "No update count that every variant validated at (use `--train`, or one trainer.valid_every)."]
    lines += ["| variant | " + " | ".join(f"{s} updates" for s in steps) + " |", "|---|" + "---|" * len(steps)]
    for name in sorted(at_steps, key=lambda n: -at_steps[n][-1]):
        lines.append(f"| {name} | " + " | ".join(f"{b:.2f}" for b in at_steps[name]) + " |")
    return lines


def chrf_section(groups: dict[str, list[dict]], tests: dict, ranked: list[str]) -> list[str]:
    lines = [
        "## chrF\n",
        "chrF of the same output as the BLEU above, with its intervals over seeds and sentences.\n",
        f"| variant | chrF | Δ chrF {BASELINE} | Δ chrF best |",
        "|---|---|---|---|",
    ]
    for name in ranked:
        lines.append(
            f"| {name} | {spread([r['test_chrf'] for r in groups[name]])} | "
            f"{interval_cell(tests['intervals']['baseline'].get(name, {}).get('chrF'))} | "
            f"{interval_cell(tests['intervals']['best'].get(name, {}).get('chrF'))} |"
        )
    return lines


def length_section(groups: dict[str, list[dict]], ranked: list[str]) -> list[str]:
    header = [f"{low}-{high}" for low, high in LENGTH_BUCKETS]
    labels = " | ".join(h.replace("-1000", "+") for h in header)
    lines = [
        "## BLEU by source length\n",
        "Test BLEU (the headline's output, mean over seeds) by source length in words, sentences per bucket in "
        "brackets; the figure Bahdanau et al. (2015, Figure 2) drew.\n",
        f"| variant | {labels} |",
        "|---|" + "---|" * len(header),
    ]
    for name in ranked:
        runs = groups[name]
        cells = [
            f"{statistics.mean(r['by_length'][h][0] for r in runs):.1f} ({runs[0]['by_length'][h][1]})"
            if all(h in r["by_length"] for r in runs)
            else "-"
            for h in header
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


# What a comparison's report writes into its folder (nmt_study compare --output refuses a folder where a user's
# files have these names)
REPORT_FILES = (
    "report.md",
    "compare.json",
    "tensorboard",
    "attention.png",
    "bleu_by_length.png",
    "bleu_by_time.png",
    "bleu_by_updates.png",
    "bleu_by_compute.png",
    "bleu_by_epochs.png",
)


HELD_APART = ("scored", "alignment_counts", "panel")  # what compare.json leaves out of a run (its record has it)


def summarise(
    runs: list[dict],
    pairs: list,
    output: Path,
    beam: int,
    command: str,
    lab: dict | None,
    samples: int,
    trials: int,
    length_note: str = "",
) -> str:
    """The report of finished runs on the test `pairs`: intervals over seeds and sentences, sacrebleu's paired tests
    per seed, claims, figures, report.md, compare.json and TensorBoard. The best variant is the one with the best
    mean valid BLEU; the test split only reports."""
    groups = group(runs)
    references = [t for _, t in pairs]
    valid = {name: statistics.mean(r["valid_bleu"] for r in g) for name, g in groups.items()}
    best = max(valid, key=valid.get)
    alignments = {
        name: {r["seed"]: r["alignment_counts"] for r in g}
        for name, g in groups.items()
        if all(r.get("alignment_counts") is not None for r in g)
    }
    scored = {name: {r["seed"]: r["scored"] for r in g} for name, g in groups.items()}
    evidence = Evidence(scored, references, [len(s.split()) for s, _ in pairs], alignments, samples)
    against = {
        "baseline": intervals(evidence, BASELINE) if BASELINE in groups else {},
        "best": intervals(evidence, best),
    }
    tests = {"intervals": against}
    tests["best"], signatures = significance(groups, references, best, samples, trials)
    signatures |= metric_signatures(references)
    gains = {name: mean_gain(g) for name, g in groups.items()}
    improving = {name for name, gain in gains.items() if gain >= IMPROVING_GAIN}
    variants = {name: Variant.of(g[0]["config"]["model"]) for name, g in groups.items()}
    claims = check_claims(evidence, variants, valid, lab, length_note, gains)
    curves = {name: mean_curve(g) for name, g in groups.items()}
    compute = {name: mean_compute_curve(g) for name, g in groups.items()}
    made = figures(groups, curves, compute, pairs, output)
    text = report(groups, tests, claims, curves, compute, signatures, output, beam, command, best)
    record = comparison_record(
        groups, tests, claims, improving, best, {"command": command, "signatures": signatures, "resamples": samples}
    )
    write_text(output / "compare.json", json.dumps(record, indent=1, default=float))
    with SummaryWriter(str(output / "tensorboard")) as writer:  # the same figures and text in TensorBoard
        for key, figure in made.items():  # the pixels savefig drew, not drawn again
            writer.add_image(f"compare/{key}", np.asarray(figure.canvas.buffer_rgba())[..., :3], dataformats="HWC")
        writer.add_text("compare/report", text)
    return text


def metric_signatures(references: list[str]) -> dict[str, str]:
    """The scores' own sacrebleu signatures, BLEU's and chrF's (a signature describes the metric, not the output)."""
    signatures = {}
    for name, metric in (("BLEU", sacrebleu.BLEU()), ("chrF", sacrebleu.CHRF())):
        metric.corpus_score(references, [references])
        signatures[name] = str(metric.get_signature())
    return signatures


def comparison_record(
    groups: dict[str, list[dict]], tests: dict, claims: list, improving: set[str], best: str, head: dict
) -> dict:
    """compare.json: `head` (the command, the scores' signatures, the resamples), power, claims, variants, intervals
    against the baseline and the best variant, the per-seed tests against the best, and which it is."""
    return {
        **head,
        "power": power_text(groups),
        "claims": [vars(c) for c in claims],
        "variants": variants_record(groups, improving),
        "intervals": {
            against: {name: {m: vars(i) for m, i in by_metric.items()} for name, by_metric in t.items()}
            for against, t in tests["intervals"].items()
        },
        "per_seed_tests": {
            name: {m: vars(d) for m, d in by_metric.items()} for name, by_metric in tests["best"].items()
        },
        "best": best,
    }


def variants_record(groups: dict[str, list[dict]], improving: set[str]) -> dict:
    """compare.json's variants: each one's mean test and valid BLEU, whether it was still improving, and its runs
    (without what their records hold apart: HELD_APART)."""
    return {
        name: {
            "mean_bleu": statistics.mean(headline(r) for r in runs),
            "mean_valid_bleu": statistics.mean(r["valid_bleu"] for r in runs),
            "still_improving": name in improving,
            "runs": [
                {
                    **{k: v for k, v in r.items() if k not in HELD_APART},
                    "last_third_gain": last_third_gain(r.get("curve") or []),
                }
                for r in runs
            ],
        }
        for name, runs in groups.items()
    }
