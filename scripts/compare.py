"""Compare the model families and attention variants: train them with several seeds, then a report with
significance, equal-time and equal-update views, and the papers' claims checked.

python scripts/compare.py --train [--output multirun/compare] [--seeds 3] [--minutes 8] [--variants a,b,...]
                          [--lab multirun/lab/lab.json] [--extra data.dir=...]
python scripts/compare.py DIR [DIR ...] [--output REPORT_DIR] [--lab LAB_JSON]

With --train, each variant trains for the same wall-clock budget once per seed (OUTPUT/runs/<variant>/seed<N>),
validating every --valid-every updates so every curve has points at the same updates; a rerun keeps finished runs
and resumes an interrupted one. Without it, the DIRs are run directories (best.pt, last.pt, best.test.hyp) or
folders of them. Runs whose configs differ only in the seed are seeds of one variant. The report (`nmt/comparison.py`:
report.md and its figures, compare.json with every figure, the same in TensorBoard under OUTPUT/tensorboard) goes to
--output.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nmt import UserError  # noqa: E402
from nmt.comparison import describe_runs, find_runs, summarise  # noqa: E402
from nmt.paths import output_folder  # noqa: E402
from nmt.sweep import check_finished, train_run  # noqa: E402

# The variants of `--train`: train.py overrides on top of each model's defaults.
VARIANTS = {
    "sutskever": ["model=sutskever"],
    "bahdanau": ["model=bahdanau"],
    "luong": ["model=luong"],  # bidirectional encoder, no input feeding (configs/model/luong.yaml)
    "luong_feeding": ["model=luong", "model.input_feeding=true"],
    "luong_paper": ["model=luong", "model.bidirectional=false", "model.input_feeding=true"],  # the paper's model
    "luong_dot": ["model=luong", "model/attention=dot"],
    "luong_concat": ["model=luong", "model/attention=concat"],
    "luong_location": ["model=luong", "model/attention=location"],
    "luong_local_m": ["model=luong", "model.alignment=local_m"],
    "luong_local_p": ["model=luong", "model.alignment=local_p"],
    "transformer": ["model=transformer"],
    # the rest of the attention family (docs/attention.md): sparse and hard attention in Bahdanau's model, the window
    "bahdanau_sparsemax": ["model=bahdanau", "model.attention.normalizer=sparsemax"],
    "bahdanau_entmax15": ["model=bahdanau", "model.attention.normalizer=entmax15"],
    "bahdanau_reinforce": ["model=bahdanau", "model.attention.hard=reinforce"],
    "bahdanau_gumbel": ["model=bahdanau", "model.attention.hard=gumbel"],
    "transformer_window": ["model=transformer", "model.window=4"],
}
# Validation every 30 updates gives each 8-minute curve 9-30 points at the same updates; the plateau schedule then
# waits 6 validations (about one epoch of the RNNs, as the default recipe does with its validation per epoch) before
# it cuts the rate, and the budget alone stops a run.
RECIPE = ["trainer.plateau_patience=6", "trainer.patience=0", "trainer.progress=false"]


def train(args: argparse.Namespace) -> list[Path]:
    """Every variant of --variants with every seed, one after another; finished runs are kept."""
    keys = args.variants.split(",")
    unknown = [k for k in keys if k not in VARIANTS]
    if unknown:
        raise UserError(f"--variants: {', '.join(unknown)} unknown; use any of {', '.join(VARIANTS)}")
    budget = [f"trainer.max_minutes={args.minutes}", f"trainer.valid_every={args.valid_every}", *RECIPE, *args.extra]
    seeds = range(args.seed, args.seed + args.seeds)
    folder = args.output / "runs"
    runs = [(f"{key} seed {seed}", [*VARIANTS[key], *budget, f"seed={seed}"], folder / key / f"seed{seed}")
            for seed in seeds for key in keys]  # fmt: skip
    check_finished(runs)
    for name, overrides, run_dir in runs:  # seed by seed: a stopped comparison is complete so far
        train_run(name, overrides, run_dir)
    return [run_dir for _, _, run_dir in runs]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path, help="finished runs to report on (without --train)")
    parser.add_argument("--train", action="store_true", help="train the variants first, into OUTPUT/runs")
    parser.add_argument("--output", type=Path, default=None, help="default: multirun/compare, or the first folder")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"with --train: any of {', '.join(VARIANTS)}")
    parser.add_argument("--seeds", type=int, default=1, help="with --train: seeds per variant")
    parser.add_argument("--seed", type=int, default=1234, help="with --train: the first seed")
    parser.add_argument("--minutes", type=float, default=8.0, help="with --train: training minutes per run")
    parser.add_argument("--valid-every", type=int, default=30, help="with --train: updates between validations")
    parser.add_argument("--extra", nargs="*", default=[], help="with --train: more train.py overrides for every run")
    parser.add_argument("--beam", type=int, default=5, help="beam size of the headline test BLEU; 1: greedy")
    parser.add_argument("--lab", type=Path, default=None, help="the lab's lab.json, for the claims it supports")
    parser.add_argument("--samples", type=int, default=1000, help="paired bootstrap resamples")
    parser.add_argument("--trials", type=int, default=10000, help="approximate randomization trials")
    args = parser.parse_args(argv)
    if args.train == bool(args.folders):
        raise UserError("give either --train or the folders of finished runs to compare")
    if args.seeds < 1 or args.minutes <= 0 or args.valid_every < 1:
        raise UserError("--seeds and --valid-every must be at least 1 and --minutes above 0")
    if args.lab is not None and not args.lab.is_file():
        raise UserError(f"--lab {args.lab}: no such file; `make lab` writes multirun/lab/lab.json")
    args.output = output_folder(args.output or (args.folders[0] if args.folders else Path("multirun/compare")),
                                "--output").resolve()  # fmt: skip
    run_dirs = train(args) if args.train else find_runs(args.folders)
    runs, pairs = describe_runs(run_dirs, args.beam)
    lab = json.loads(args.lab.read_text(encoding="utf-8")) if args.lab else None
    command = "python scripts/compare.py " + " ".join(argv if argv is not None else sys.argv[1:])
    print(summarise(runs, pairs, args.output, args.beam, command.strip(), lab, args.samples, args.trials))


if __name__ == "__main__":
    try:
        main()
    except UserError as error:
        sys.exit(f"error: {error}")
