"""Compare finished training runs: a markdown report with a table and figures.

python scripts/compare.py DIR [DIR ...] [--output REPORT_DIR]

Each DIR is a run directory (holding best.pt, last.pt and best.test.hyp) or a folder of them, such as a Hydra
multirun folder. The report (`report.md`, `bleu_by_length.png`, `bleu_by_time.png`) goes to --output (default: the
first DIR). BLEU by source length is the figure Bahdanau et al. (2015, fig. 2) used to show that a fixed-size
encoding loses long sentences.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import sacrebleu
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.tensorboard import SummaryWriter

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from omegaconf import OmegaConf  # noqa: E402

from nmt import UserError, build, checkpoint  # noqa: E402
from nmt.alignment import attention_report, choose_map  # noqa: E402
from nmt.decoding import Translator  # noqa: E402
from nmt.evaluate import LENGTH_BUCKETS, bleu_by_length  # noqa: E402
from nmt.paths import output_folder  # noqa: E402
from nmt.plot import plt  # noqa: E402


def find_runs(folders: list[Path]) -> list[Path]:
    runs = []
    for folder in folders:
        if not folder.is_dir():
            raise UserError(f"{folder}: not a folder")
        runs += sorted(p.parent for p in folder.rglob("best.pt") if (p.parent / "best.test.hyp").is_file())
    if not runs:
        raise UserError(f"no finished runs (best.pt with best.test.hyp) under {', '.join(map(str, folders))}")
    return runs


def beam_hypotheses(run: Path, sources: list[str], beam: int) -> list[str]:
    """The best checkpoint's beam-search test output: `best.test.beam<N>.hyp` (what evaluate.py writes), decoded
    here once when it is not there yet."""
    path = run / f"best.test.beam{beam}.hyp"
    if not path.is_file():
        translator = Translator.load(run / "best.pt", beam=beam)
        path.write_text("".join(h + "\n" for h in translator.translate(sources)), encoding="utf-8")
    return path.read_text(encoding="utf-8").split("\n")[: len(sources)]


def attention_shape(run: Path, pairs: list[tuple[str, str]]) -> dict | None:
    """Entropy and diagonality (`nmt.alignment`) of the best checkpoint's attention, force-decoding the test
    references: the RNNs' one attention, the Transformer's last layer; None without attention."""
    translator = Translator.load(run / "best.pt")
    report = attention_report(translator.model, translator.vocabulary, pairs, translator.device, translator.dtype)
    return report[choose_map(list(report), None)] if report else None


def describe(run: Path, test_cache: dict, beam: int) -> dict:
    best, last = checkpoint.load(run / "best.pt"), checkpoint.load(run / "last.pt")
    config = best["config"]
    data = OmegaConf.create(config["data"])
    key = OmegaConf.to_yaml(data)
    if key not in test_cache:
        test_cache[key] = build.load_corpus(data).test
    pairs = test_cache[key]
    hypotheses = (run / "best.test.hyp").read_text(encoding="utf-8").split("\n")[: len(pairs)]
    references = [t for _, t in pairs]
    progress = last["progress"]
    model = config["model"]
    name = model["_target_"].rsplit(".", 1)[-1].replace("Seq2Seq", "").lower()
    if "attention" in model:
        name += f" ({model['attention']['_target_'].rsplit('.', 1)[-1].replace('Attention', '').lower()}"
        name += f", {model['alignment']})" if "alignment" in model else ")"
    if model.get("attention", {}).get("scaled"):
        name = name.replace("(dot", "(scaled dot")
    if model.get("input_feeding") is False:
        name = name[:-1] + ", no feeding)"
    sources = [s for s, _ in pairs]
    beam_bleu = sacrebleu.corpus_bleu(beam_hypotheses(run, sources, beam), [references]).score if beam > 1 else None
    by_length = bleu_by_length([s for s, _ in pairs], hypotheses, references)
    return {
        "run": run,
        "name": name,
        "parameters": sum({t.data_ptr(): t.numel() for t in best["model"].values()}.values()),  # tied ones once
        "best_step": best["progress"]["step"],
        "minutes": progress["train_seconds"] / 60,
        "tokens_per_second": progress["tokens_trained"] / max(progress["train_seconds"], 1e-9),
        "valid_bleu": best["progress"]["best_bleu"],
        "test_bleu": sacrebleu.corpus_bleu(hypotheses, [references]).score,
        "test_chrf": sacrebleu.corpus_chrf(hypotheses, [references]).score,
        "test_bleu_beam": beam_bleu,
        "seed": config.get("seed"),
        "by_length": by_length,
        "curve": valid_curve(run),
        "attention": attention_shape(run, pairs),
    }


def valid_curve(run: Path) -> list[tuple[float, float]]:
    """(minutes since the run's first event, valid BLEU) at each validation."""
    events = EventAccumulator(str(run))
    events.Reload()
    if "valid/bleu" not in events.Tags()["scalars"]:
        return []
    scalars = events.Scalars("valid/bleu")
    start = min(e.wall_time for e in events.Scalars("train/loss")) if "train/loss" in events.Tags()["scalars"] else 0
    return [((s.wall_time - start) / 60, s.value) for s in scalars]


def line_figure(lines: dict[str, tuple[list, list]], xlabel: str, ylabel: str, title: str, path: Path):
    """One line per model: {name: (x values, y values)}."""
    figure, axes = plt.subplots(figsize=(6.5, 4), dpi=110)
    for name, (x, y) in lines.items():
        axes.plot(x, y, marker="o", markersize=4, label=name)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path)
    return figure


def figures(runs: list[dict], output: Path) -> None:
    labels = [f"{low}-{high}" if high < 1000 else f"{low}+" for low, high in LENGTH_BUCKETS]
    by_length = {}
    for run in runs:
        kept = [i for i, bucket in enumerate(LENGTH_BUCKETS) if bucket in run["by_length"]]
        by_length[run["name"]] = ([labels[i] for i in kept], [run["by_length"][LENGTH_BUCKETS[i]][0] for i in kept])
    length_figure = line_figure(by_length, "source sentence length (words)", "test BLEU", "BLEU by source length",
                                output / "bleu_by_length.png")  # fmt: skip
    by_time = {run["name"]: tuple(zip(*run["curve"])) for run in runs if run["curve"]}
    time_figure = line_figure(by_time, "wall-clock minutes (training and validation)", "valid BLEU (greedy)",
                              "Valid BLEU against time", output / "bleu_by_time.png")  # fmt: skip
    with SummaryWriter(str(output / "tensorboard")) as writer:  # the same figures in TensorBoard's IMAGES tab
        writer.add_figure("compare/bleu_by_length", length_figure)
        writer.add_figure("compare/bleu_by_time", time_figure)


def seed_summary(runs: list[dict]) -> list[str]:
    """Mean and standard deviation over runs of the same model that differ in seed (none when each ran once)."""
    groups: dict[str, list[dict]] = {}
    for run in runs:
        groups.setdefault(run["name"], []).append(run)
    repeated = {name: group for name, group in groups.items() if len(group) > 1}
    if not repeated:
        return []
    lines = ["", "Over seeds (mean ± standard deviation):", "",
             "| model | runs | valid BLEU | test BLEU greedy | test BLEU beam |", "|---|---|---|---|---|"]  # fmt: skip
    for name, group in repeated.items():
        cells = []
        for key in ("valid_bleu", "test_bleu", "test_bleu_beam"):
            values = [r[key] for r in group if r[key] is not None]
            cells.append(f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}" if len(values) > 1 else "-")
        lines.append(f"| {name} | {len(group)} | " + " | ".join(cells) + " |")
    return lines


def report(runs: list[dict], output: Path, beam: int) -> str:
    lines = [
        f"| model | params | best step | train min | tok/s | valid BLEU | test BLEU | test BLEU beam {beam} | "
        "test chrF | attention entropy | diagonality | run |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(runs, key=lambda r: -(r["test_bleu_beam"] or r["test_bleu"])):
        beam_cell = f"{r['test_bleu_beam']:.2f}" if r["test_bleu_beam"] is not None else "-"
        shape = r.get("attention")
        attention = f"{shape['entropy']:.2f} | {shape['diagonality']:.2f}" if shape else "- | -"
        lines.append(
            f"| {r['name']} | {r['parameters']:,} | {r['best_step']} | {r['minutes']:.1f} | "
            f"{r['tokens_per_second']:,.0f} | {r['valid_bleu']:.2f} | {r['test_bleu']:.2f} | {beam_cell} | "
            f"{r['test_chrf']:.2f} | {attention} | `{r['run']}` |"
        )
    lines += seed_summary(runs)
    header = [f"{low}-{high}" if high < 1000 else f"{low}+" for low, high in LENGTH_BUCKETS]
    lines += ["", "Test BLEU by source length (words; sentences per bucket in brackets):", "",
              "| model | " + " | ".join(header) + " |", "|---|" + "---|" * len(header)]  # fmt: skip
    for r in runs:
        cells = [f"{r['by_length'][b][0]:.1f} ({r['by_length'][b][1]})" if b in r["by_length"] else "-"
                 for b in LENGTH_BUCKETS]  # fmt: skip
        lines.append(f"| {r['name']} | " + " | ".join(cells) + " |")
    lines += ["", "![BLEU by source length](bleu_by_length.png)", "", "![valid BLEU against time](bleu_by_time.png)"]
    intro = (f"Test BLEU and chrF: sacrebleu on detokenized output, best checkpoint; greedy unless marked beam "
             f"(beam {beam}, length penalty alpha 0.6). Minutes are training time, validation excluded. Attention "
             f"entropy (nats; lower is sharper) and diagonality (1: target words attend in source order; 0: no order) "
             f"of the best checkpoint force-decoding the test references (the Transformer: its last layer's "
             f"encoder-decoder attention averaged over heads).")  # fmt: skip
    text = f"# Comparison\n\n{intro}\n\n" + "\n".join(lines) + "\n"
    (output / "report.md").write_text(text, encoding="utf-8")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument("--beam", type=int, default=5, help="beam size of the second test BLEU column; 1 skips it")
    arguments = parser.parse_args()
    output = output_folder(arguments.output or arguments.folders[0], "--output")
    cache: dict = {}
    runs = [describe(run, cache, arguments.beam) for run in find_runs(arguments.folders)]
    figures(runs, output)
    print(report(runs, output, arguments.beam))


if __name__ == "__main__":
    try:
        main()
    except UserError as error:
        sys.exit(f"error: {error}")
