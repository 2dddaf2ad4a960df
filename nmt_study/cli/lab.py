"""The alignment lab: every attention variant on the sample grammar, scored as alignment (AER) and by length.

python -m nmt_study lab [--output multirun/lab] [--flops F] [--seeds 1] [--variants bahdanau,luong_local_p,...]

The sample grammar knows the gold word alignment of each pair it writes, so attention can be scored as alignment
(AER, Och and Ney 2003), as Luong et al. (2015, Table 6) did on gold German-English alignments, and it writes
sentences of any length, so BLEU can be measured against sentence length, as Bahdanau et al. (2015, Figure 2) did.
Each variant trains for the same compute (--flops: where the valid loss of Bahdanau's lab model levels off; the same
updates on any machine) on sentences of 1 to 80 words, the length test set's range, its checkpoint chosen on valid
loss (`train.py experiment=lab variant=<name>`), once per seed, as one `train.py -m` through Hydra's launcher
(OUTPUT/runs/lab_<name>/seed<N>; --launcher joblib --jobs 2 runs two at once; --claim-seeds N: N seeds of the
variants the lab's claims compare, where seeds are the noise); then every model decodes a test set of length buckets
up to 80 words. The report (OUTPUT/report.md with its figures, OUTPUT/lab.json, and the
figures in TensorBoard under OUTPUT/tensorboard) holds the AER table beside the paper's figures, BLEU by length and
valid AER during training; OUTPUT/comparison/report.md compares the same runs as `make compare` does (seeds,
significance on the sample test split, the papers' claims, with the lab's AER and length figures).
Rerunning continues where it stopped: finished runs are kept, an interrupted one resumes. Each run, as it finishes, is
measured and recorded (--records, default OUTPUT/records: <variant>/seed<N>.lab.json and .record.json), and the
report is made from the records, so a lab spread over machines that are not kept needs only its records.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
from torch.utils.tensorboard import SummaryWriter

from nmt import UserError
from nmt.build import corpus_of
from nmt.decoding.plot import legend_beside, lines_figure
from nmt.paths import output_folder
from nmt.text.corpus import read_parallel
from nmt_study.claims import Claim, gap_grows_with_length, local_aligns_better
from nmt_study.lab_measure import length_test_set, measure_callback, measure_one, read_measured
from nmt_study.lab_plan import BUCKETS, contrasts, tables
from nmt_study.records import describe_runs, recorded_sweep
from nmt_study.report import REPORT_FILES, summarise
from nmt_study.significance import RESAMPLES, Evidence, check_resamples
from nmt_study.sweep import chosen, launcher_options, settings
from nmt_study.variants import LAB_CLAIM_VARIANTS, VARIANTS, Variant

# Where Bahdanau's lab model's valid loss levels off on training sentences of 1 to 80 words: in a trial at 2e13 with
# 10 validations (seed 1234, fp32, one thread) its valid loss was 0.117 at 0.8e13, 0.097 at 1.4e13 and 0.101-0.106
# after, valid BLEU 96 at the end; about 10 minutes a run on one core (the 20-word lab of before: 9e12)
FLOPS = 2e13
# The length test set's own seed, whatever --seed is: the runs of a later --seed (more seeds of some variants) are
# measured on the same sentences as the first ones (1235: what the first --seed's 1234 + 1 drew before it was fixed)
LONG_SET_SEED = 1235
PREFIX = "lab_"  # the lab's run folders and records: lab_<variant>/seed<N>, apart from the comparison's <variant>


def figures(results: list[dict], output: Path) -> None:
    labels = [f"{low}-{high}" for low, high in BUCKETS]
    length, axes = lines_figure(8.5, 4.0)
    for r in results:
        kept = [label for label in labels if label in r["by_length"]]
        axes.plot(kept, [r["by_length"][k]["bleu"] for k in kept], marker="o", markersize=4, label=r["name"])
    axes.set(xlabel="source sentence length (words)", ylabel="BLEU (greedy)", title="BLEU by sentence length")
    axes.grid(alpha=0.3)
    legend_beside(axes)
    length.savefig(output / "bleu_by_length.png")
    curves, axes = lines_figure(8.5, 4.0)
    for r in results:
        if r["valid_aer"]:
            steps, values = zip(*r["valid_aer"])
            axes.plot(steps, values, marker="o", markersize=3, label=r["name"])
    axes.set(xlabel="update", ylabel="valid AER (lower is better)", title="Attention learning to align")
    axes.grid(alpha=0.3)
    legend_beside(axes)
    curves.savefig(output / "valid_aer.png")
    with SummaryWriter(str(output / "tensorboard")) as writer:  # the pixels savefig drew, not drawn again
        for tag, figure in (("lab/bleu_by_length", length), ("lab/valid_aer", curves)):
            writer.add_image(tag, np.asarray(figure.canvas.buffer_rgba())[..., :3], dataformats="HWC")


def report(
    results: list[dict], output: Path, command: str, train_words: int, claims: list[Claim], differences: list[dict]
) -> str:
    claims = [asdict(c) for c in claims]
    lines = [
        *tables(results, claims, train_words, differences),
        "",
        "![BLEU by sentence length](bleu_by_length.png) ![valid AER during training](valid_aer.png)",
    ]
    intro = (
        f"`{command}`\n\nAER, precision and recall (Och and Ney 2003) of each target word's argmax attention "
        "against the grammar's gold links (sure and possible), force-decoding the reference, on the sample test "
        "split and on the length test set; for the Transformer, the encoder-decoder attention map that aligns best "
        "on the valid split. Support (the source words a target word gives weight to), entropy (nats) and "
        "diagonality (correlation of target position and attended source position) on the test split. The paper's "
        "figures are on the RWTH German-English gold set: different data, the same measure. BLEU: sacrebleu, greedy "
        "decoding of the best checkpoint. With several seeds, every "
        "figure is the mean over seeds (AER ± its standard deviation); valid AER is the first seed's curve."
    )
    text = "# The alignment lab\n\n" + intro + "\n\n" + "\n".join(lines) + "\n"
    (output / "report.md").write_text(text, encoding="utf-8")
    record = {
        "command": command,
        "results": results,
        "claims": claims,
        "contrasts": differences,
        "train_words": train_words,
    }
    (output / "lab.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
    return text


def lab_tests(
    measured: dict[str, list[dict]],
    variants: dict[str, Variant],
    long_set: tuple[Path, Path, Path],
    max_words: int,
    resamples: int,
) -> tuple[list[Claim], list[dict]]:
    """The two claims the lab answers, with intervals over seeds and sentences: the gap by length on the length test
    set, local against global AER on the sample test split; and the AER differences of `contrasts` on that split.
    `variants`: each variant's key (its `--variants` name: its key)."""
    names = {key: variant.name for key, variant in variants.items()}
    keys = {variant.name: variant for variant in variants.values()}
    pairs = read_parallel(long_set[0], long_set[1])
    hypotheses = {names[key]: {r["seed"]: r["long_hypotheses"] for r in runs} for key, runs in measured.items()}
    by_length = Evidence(hypotheses, [t for _, t in pairs], [len(s.split()) for s, _ in pairs], resamples=resamples)
    counts = {
        names[key]: {r["seed"]: r["test_alignment"]["counts"] for r in runs}
        for key, runs in measured.items()
        if all("test_alignment" in r for r in runs)
    }
    sentences = len(next(iter(next(iter(counts.values())).values()))) if counts else 1
    alignment = Evidence({}, [""] * sentences, alignments=counts, resamples=resamples)
    note = f"; the models trained on sentences of at most {max_words} words" if max_words else ""
    claims = [gap_grows_with_length(by_length, keys, note), local_aligns_better(alignment, keys)]
    return claims, contrasts(alignment, names)  # the pairs whose variants were both measured


def aggregate(variant: Variant, runs: list[dict]) -> dict:
    """One variant over its seeds: mean BLEU by length and mean AER (each seed's figures kept under "seeds"), with
    its name and key."""
    first = runs[0]
    runs = [{k: v for k, v in r.items() if k != "long_hypotheses"} for r in runs]  # the claims have read them
    for run in runs:
        for split in ("test_alignment", "long_alignment"):
            run.get(split, {}).pop("counts", None)
    result = {
        "name": variant.name,
        "variant": variant.as_record(),
        "seeds": runs,
        "test_bleu": statistics.mean(r["test_bleu"] for r in runs),
        "valid_aer": first["valid_aer"],  # the curve of the first seed
        "by_length": {
            label: {
                "bleu": statistics.mean(r["by_length"][label]["bleu"] for r in runs),
                "sentences": first["by_length"][label]["sentences"],
            }
            for label in first["by_length"]
            if all(label in r["by_length"] for r in runs)
        },
    }
    if "test_alignment" in first:
        result["alignment_map"] = first["alignment_map"]
        for split in ("test_alignment", "long_alignment"):
            result[split] = {k: statistics.mean(r[split][k] for r in runs) for k in first[split] if k != "counts"}
        if len(runs) > 1:
            result["test_alignment"]["aer_sd"] = statistics.stdev(r["test_alignment"]["aer"] for r in runs)
    return result


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m nmt_study lab", description=" ".join(__doc__.split("\n\n")[0].split())
    )
    parser.add_argument("--output", type=Path, default=Path("multirun/lab"))
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"any of {', '.join(VARIANTS)}")
    parser.add_argument("--flops", type=float, default=FLOPS, help="training compute per variant")
    parser.add_argument("--validations", type=int, default=10, help="validations, at each 1/N of the compute")
    parser.add_argument(
        "--minutes", type=float, default=0.0, help="a wall-clock budget instead of --flops (not reproducible)"
    )
    parser.add_argument("--steps", type=int, default=0, help="or a number of updates per variant")
    parser.add_argument("--per-bucket", type=int, default=100, help="length test sentences per bucket")
    parser.add_argument("--seed", type=int, default=1234, help="the first seed")
    parser.add_argument("--seeds", type=int, default=1, help="seeds per variant (the report gives their mean)")
    parser.add_argument(
        "--claim-seeds",
        type=int,
        default=0,
        help=f"seeds of the variants the lab's claims compare ({', '.join(LAB_CLAIM_VARIANTS)}), if more than --seeds",
    )
    parser.add_argument("--extra", nargs="*", default=[], help="more train.py overrides for every variant")
    parser.add_argument(
        "--records",
        type=Path,
        default=None,
        help="where each finished run's records go "
        "(default: OUTPUT/records); runs with records are not trained again; the report reads them",
    )
    launcher_options(parser)
    parser.add_argument("--samples", type=int, default=RESAMPLES, help="bootstrap resamples (claims, comparison)")
    parser.add_argument("--trials", type=int, default=10000, help="approximate randomization trials (the comparison)")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.jobs < 1 or args.claim_seeds < 0:
        raise UserError("--seeds and --jobs must be at least 1, --claim-seeds at least 0")
    if (
        args.validations < 1
        or not 0 < args.flops < math.inf
        or not 0 <= args.minutes < math.inf
        or args.steps < 0
        or args.per_bucket < 1
    ):
        raise UserError(
            "--validations and --per-bucket must be at least 1, --flops a finite number above 0, "
            "--minutes a finite number and --steps at least 0"
        )
    check_resamples(args.samples, args.trials)
    return args


def budget_overrides(args: argparse.Namespace) -> list[str]:
    """What stops each run: --flops with --validations, or a budget of time or updates instead of compute; then
    --extra."""
    if args.minutes or args.steps:
        budget = [f"trainer.max_minutes={args.minutes}", f"trainer.max_steps={args.steps}", "trainer.max_flops=0"]
        return [*budget, "trainer.validations=0", *args.extra]
    budget = [f"trainer.max_flops={args.flops:g}", f"trainer.validations={args.validations}", "trainer.max_minutes=0"]
    return [*budget, "trainer.valid_every=0", *args.extra]


def main(argv: list[str] | None = None) -> None:
    args = arguments(argv)
    keys = chosen("--variants", args.variants, VARIANTS)
    fills = ("report.md", "lab.json", "bleu_by_length.png", "valid_aer.png", "comparison")
    # train.py runs from the repository root: the folder resolved. made_by: a folder written before the manifest
    output = output_folder(args.output, "--output", fills, ("lab.json", "python scripts/lab.py")).resolve()
    budget = budget_overrides(args)
    seeds = range(args.seed, args.seed + args.seeds)
    variants = {key: Variant.of(settings(["experiment=lab", f"variant={key}"])["model"]) for key in keys}
    names = {key: variant.name for key, variant in variants.items()}
    folders = {key: f"{PREFIX}{key}" for key in keys}  # OUTPUT/runs/lab_<name>/seed<N>, as the sweep names them
    config = settings(["experiment=lab", f"variant={keys[0]}", *budget])  # the corpus every variant reads
    train_pairs = corpus_of(config, None).train
    long_set = length_test_set(output / "data", args.per_bucket, {s for s, _ in train_pairs}, LONG_SET_SEED)
    records = (args.records or output / "records").resolve()
    hydra = measure_callback(records, long_set)
    overrides = ["experiment=lab", *budget]
    sweep = (output / "runs", records, 1, args.launcher, args.jobs, hydra, PREFIX)
    recorded = recorded_sweep(keys, list(seeds), overrides, *sweep)
    more = [key for key in keys if key in LAB_CLAIM_VARIANTS]
    if args.claim_seeds > args.seeds and more:  # measured with the others (measured_seeds); compared on --seeds
        recorded_sweep(more, list(range(seeds.stop, args.seed + args.claim_seeds)), overrides, *sweep)
    for run in sorted((output / "runs").glob("*/seed*/results.json")):  # what a job's callback did not measure
        measure_one(run.parent, records, long_set)
    measured = read_measured(records, {key: (folders[key], names[key]) for key in keys}, seeds, long_set, output)
    max_words = config["data"]["grammar"]["max_words"]
    claims, differences = lab_tests(measured, variants, long_set, max_words, args.samples)
    results = [aggregate(variants[key], measured[key]) for key in keys]
    figures(results, output)
    command = ("python -m nmt_study lab " + " ".join(argv if argv is not None else sys.argv[1:])).strip()
    print(report(results, output, command, max_words, claims, differences))
    # The same runs as a comparison on the sample test split: seeds, significance and the papers' claims.
    runs, pairs = describe_runs(recorded, beam=1)
    lab = json.loads((output / "lab.json").read_text(encoding="utf-8"))
    comparison = output_folder(output / "comparison", "--output", REPORT_FILES, ("compare.json", "python scripts/"))
    print(summarise(runs, pairs, comparison, 1, command, lab, args.samples, args.trials))
