"""The alignment lab's tables (nmt_study lab writes its report with them, nmt_study/published.py renders them from
results/lab.json): AER of each attention against the sample grammar's gold links, and BLEU by sentence length.

A lab result is one variant over its seeds, as nmt_study lab's `aggregate` makes it: {"name", "variant" (its key,
nmt_study/variants.py), "test_bleu",
"by_length": {"1-10": {"bleu", "sentences"}, ...}, and for a model with attention "alignment_map", "test_alignment"
and "long_alignment": {"aer", "precision", "recall", "entropy", "diagonality", "support"[, "aer_sd"]}}.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from nmt.paths import read_json
from nmt_study.significance import CONTRADICTED, INCONCLUSIVE, SUPPORTED, Evidence, Interval, holm
from nmt_study.sources import trained

# Each variant against the one it changes (the lab's table of AER differences, Holm over the table): Bahdanau's
# normalisers and hard attention against his softmax, the window against the global Transformer, Luong's other scores
# and input feeding against his default (general, global); the paper's model differs from that default in its
# encoder (unidirectional, source reversed) and feeding. Local against global attention is a claim (claims.py).
CONTRASTS = [
    ("bahdanau_sparsemax", "bahdanau"),
    ("bahdanau_entmax15", "bahdanau"),
    ("bahdanau_reinforce", "bahdanau"),
    ("bahdanau_gumbel", "bahdanau"),
    ("transformer_window", "transformer"),
    ("luong_dot", "luong"),
    ("luong_concat", "luong"),
    ("luong_location", "luong"),
    ("luong_feeding", "luong"),
    ("luong_paper", "luong"),
]
# The seeds make results trains of the variants the lab's claims compare (nmt_study.variants.LAB_CLAIM_VARIANTS):
# runs are cheap there and seeds, not sentences, are the noise of an AER difference (issue 47: at least 8)
CLAIM_SEEDS = 8
BUCKETS = [(1, 10), (11, 20), (21, 30), (31, 40), (41, 60), (61, 80)]  # source words of the length test set
# Luong et al. 2015, Table 6: AER on the RWTH German-English gold alignments (different data, same measure), by score
# and alignment (the paper's model; ours may differ in encoder and feeding, which the name says).
PAPER_AER = {("location", "global"): 0.39, ("general", "local_m"): 0.34, ("general", "local_p"): 0.36}


def paper_aer(result: dict) -> str:
    """The paper's AER for a lab result's score and alignment (its key, `variant`), or "-"."""
    variant = result.get("variant") or {}
    key = (variant.get("score"), variant.get("alignment"))
    return f"{PAPER_AER[key]:.2f}" if variant.get("family") == "luong" and key in PAPER_AER else "-"


def alignment_table(results: list[dict]) -> list[str]:
    """Rows in order of test AER (the models without attention last)."""
    lines = [
        "| model | map | test AER | precision | recall | long-set AER | support (words) | entropy | "
        "diagonality | paper's AER (Table 6) | test BLEU |",
        "|" + "---|" * 11,
    ]
    for r in sorted(results, key=lambda r: r.get("test_alignment", {}).get("aer", 2)):
        if "test_alignment" not in r:
            lines.append(
                f"| {r['name']} | no attention | - | - | - | - | - | - | - | {paper_aer(r)} | {r['test_bleu']:.2f} |"
            )
            continue
        t, long = r["test_alignment"], r["long_alignment"]
        aer = f"{t['aer']:.3f}" + (f" ± {t['aer_sd']:.3f}" if "aer_sd" in t else "")
        support = f"{t['support']:.1f}" if "support" in t else "-"
        lines.append(
            f"| {r['name']} | {r['alignment_map']} | {aer} | {t['precision']:.3f} | {t['recall']:.3f} | "
            f"{long['aer']:.3f} | {support} | {t['entropy']:.2f} | {t['diagonality']:.2f} | "
            f"{paper_aer(r)} | {r['test_bleu']:.2f} |"
        )
    return lines


def length_table(results: list[dict]) -> list[str]:
    """BLEU by source length, one row per variant, with the sentences of each bucket in the header."""
    labels = [f"{low}-{high}" for low, high in BUCKETS]
    counts = {
        label: next((r["by_length"][label]["sentences"] for r in results if label in r["by_length"]), 0)
        for label in labels
    }
    lines = [
        "| model: test BLEU by source words (sentences) | "
        + " | ".join(f"{label} ({counts[label]})" for label in labels)
        + " |",
        "|---|" + "---|" * len(labels),
    ]
    for r in results:
        cells = [f"{r['by_length'][label]['bleu']:.1f}" if label in r["by_length"] else "-" for label in labels]
        lines.append(f"| {r['name']} | " + " | ".join(cells) + " |")
    return lines


def contrasts(alignment: Evidence, names: dict[str, str]) -> list[dict]:
    """Test AER of each CONTRASTS variant minus its baseline's (`names`: variant key to name, as `alignment` holds
    their link counts), intervals over seeds and sentences, Holm over all of them: {"variant", "baseline",
    **Interval}; the pairs whose two sides are both measured."""
    measured = set(alignment.alignments)
    pairs = [(names[a], names[b]) for a, b in CONTRASTS if {names.get(a), names.get(b)} <= measured]
    intervals = holm([alignment.compare(a, b, "AER") for a, b in pairs])
    return [{"variant": a, "baseline": b, **asdict(i)} for (a, b), i in zip(pairs, intervals)]


# What a difference of AER says, from its verdict with lower AER as the direction looked for
AER_VERDICT = {SUPPORTED: "**lower AER**", CONTRADICTED: "**higher AER**", INCONCLUSIVE: "inconclusive"}


def contrasts_table(found: list[dict]) -> list[str]:
    lines = ["| variant | against | test AER, variant minus against [95% interval] | these runs |", "|---|---|---|---|"]
    for c in found:
        interval = Interval(**{k: v for k, v in c.items() if k not in ("variant", "baseline")})
        verdict = interval.verdict(direction=-1)
        lines.append(
            f"| {c['variant']} | {c['baseline']} | {interval.text('AER')} | {AER_VERDICT.get(verdict, verdict)} |"
        )
    return lines


def contrasts_lines(found: list[dict]) -> list[str]:
    """The table of AER differences with its line before it; nothing for a lab.json made before it had one."""
    if not found:
        return []
    return [
        "Each variant's test AER minus that of the variant it changes (intervals over seeds and sentences, Holm "
        "over all of the lab's differences; nmt_study/lab_plan.py):",
        "",
        *contrasts_table(found),
        "",
    ]


def claims_table(claims: list[dict]) -> list[str]:
    return [
        "| claim | paper | these runs | evidence |",
        "|---|---|---|---|",
        *[f"| {c['claim']} | {c['source']} | **{c['verdict']}** | {c['evidence']} |" for c in claims],
    ]


def seeds_line(results: list[dict]) -> str:
    """The line before the lab's tables: how many seeds their figures average."""
    seeds = sorted({len(r.get("seeds", [None])) for r in results})
    counts = "/".join(map(str, seeds))
    return f"Mean over {counts} seed{'s' * (seeds != [1])} (AER ± its standard deviation over seeds):"


def tables(results: list[dict], claims: list[dict], train_words: int, found: list[dict] = ()) -> list[str]:
    """The lab's tables (AER, BLEU by length, the AER differences `found` by `contrasts`, the claims) with a line
    before each."""
    return [
        seeds_line(results),
        "",
        *alignment_table(results),
        "",
        f"BLEU (greedy) by source length, words; trained on sentences of at most {train_words} words (sentences per "
        "bucket in brackets):",
        "",
        *length_table(results),
        "",
        *contrasts_lines(found),
        "The two claims the lab answers (intervals over seeds and sentences, Holm within a claim; "
        "nmt_study/claims.py):",
        "",
        *claims_table(claims),
    ]


def window_table(folder: Path) -> str:
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
