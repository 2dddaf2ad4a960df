"""Compare the model families and attention variants: train them with several seeds, then a report with
significance, equal-compute, equal-update and equal-epoch views, and the papers' claims checked.

python -m nmt_study compare --train [--output multirun/compare] [--seeds 3] [--flops 1e14] [--variants a,b,...]
                          [--lab multirun/lab/lab.json] [--records DIR] [--extra data.dir=...]
python -m nmt_study compare DIR [DIR ...] [--output REPORT_DIR] [--lab LAB_JSON]

With --train, each variant trains for the same compute once per seed (OUTPUT/runs/<variant>/seed<N>): --flops
floating-point operations of matrix products (nmt/models/flops.py), which stop a run at the same update on any machine,
idle or busy; it validates as each 1/--validations of the budget is passed, so every curve has points at the same
compute. --minutes gives a wall-clock budget instead (validating every --valid-every updates), which no other
machine reproduces, and the report says so. A rerun keeps finished runs (refusing one trained with other settings or
budget than asked for today) and resumes an interrupted one. With --records DIR, each finished run is recorded in
DIR (`nmt_study.records.save_record`: what the report needs of it, without its checkpoints), a run with a record
is not trained again (a record with other settings is refused), and the report reads the records: a folder of
records can be kept where checkpoints cannot. Without --train, the DIRs are run directories (best.pt, last.pt,
best.test.hyp), records (*.record.json), or folders of them. Runs whose configs differ only in the seed are seeds
of one variant. The report (`nmt_study/report.py`: report.md and its figures, compare.json with every figure,
the same in TensorBoard under OUTPUT/tensorboard) goes to --output.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from nmt import UserError
from nmt.paths import folder_option, output_folder, read_json
from nmt_study.records import describe_runs, find_runs, recorded_sweep
from nmt_study.report import REPORT_FILES, summarise
from nmt_study.significance import RESAMPLES, check_resamples
from nmt_study.sweep import chosen, launcher_options, sweep
from nmt_study.variants import VARIANTS

# 1e14 FLOPs is what Bahdanau's model trained in 8 minutes alone on a 2-core CPU with native bf16 (427 updates of
# 2.3e11, 2.5 epochs of Multi30k); 12 validations, one about every 36 of its updates. The plateau schedule waits 6
# validations (about one epoch of the RNNs, as the default recipe does with its validation per epoch) before it cuts
# the rate, and the budget alone stops a run.
FLOPS = 1e14
RECIPE = ["trainer.plateau_patience=6", "trainer.patience=0", "trainer.progress=false"]


def train(args: argparse.Namespace) -> list[Path]:
    """Every variant of --variants with every seed, as one `train.py -m` through Hydra's --launcher; finished runs
    are kept, interrupted ones continue."""
    keys = chosen("--variants", args.variants, VARIANTS)
    if args.minutes:
        budget = [
            f"trainer.max_minutes={args.minutes}",
            f"trainer.valid_every={args.valid_every}",
            "trainer.max_flops=0",
            "trainer.validations=0",
        ]
    else:
        budget = [
            f"trainer.max_flops={args.flops:g}",
            f"trainer.validations={args.validations}",
            "trainer.max_minutes=0",
            "trainer.valid_every=0",
        ]
    seeds = list(range(args.seed, args.seed + args.seeds))
    overrides, folder = [*budget, *RECIPE, *args.extra], args.output / "runs"
    if args.records is None:
        return sweep(keys, seeds, overrides, folder, args.launcher, args.jobs)
    return recorded_sweep(keys, seeds, overrides, folder, args.records, args.beam, args.launcher, args.jobs)


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m nmt_study compare", description=" ".join(__doc__.split("\n\n")[0].split())
    )
    parser.add_argument("folders", nargs="*", type=Path, help="finished runs to report on (without --train)")
    parser.add_argument("--train", action="store_true", help="train the variants first, into OUTPUT/runs")
    parser.add_argument(
        "--no-report",
        action="store_true",
        help="with --train: train only (make results reports on the whole folder afterwards)",
    )
    parser.add_argument("--output", type=Path, default=None, help="default: multirun/compare, or the first folder")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"with --train: any of {', '.join(VARIANTS)}")
    parser.add_argument("--seeds", type=int, default=1, help="with --train: seeds per variant")
    parser.add_argument("--seed", type=int, default=1234, help="with --train: the first seed")
    parser.add_argument("--flops", type=float, default=FLOPS, help="with --train: training compute per run")
    parser.add_argument("--validations", type=int, default=12, help="with --train: at each 1/N of the compute")
    parser.add_argument(
        "--minutes",
        type=float,
        default=0.0,
        help="with --train: a wall-clock budget instead of --flops (not reproducible)",
    )
    parser.add_argument("--valid-every", type=int, default=30, help="with --minutes: updates between validations")
    parser.add_argument("--extra", nargs="*", default=[], help="with --train: more train.py overrides for every run")
    parser.add_argument(
        "--records",
        type=Path,
        default=None,
        help="with --train: record each finished run there (<variant>/seed<N>.record.json, what "
        "the report needs), train only the runs without a record, report from the records",
    )
    launcher_options(parser)  # with --train
    parser.add_argument("--beam", type=int, default=5, help="beam size of the headline test BLEU; 1: greedy")
    parser.add_argument("--lab", type=Path, default=None, help="the lab's lab.json, for the claims it supports")
    parser.add_argument(
        "--samples", type=int, default=RESAMPLES, help="bootstrap resamples (over seeds and sentences, and per seed)"
    )
    parser.add_argument("--trials", type=int, default=10000, help="approximate randomization trials")
    return checked(parser.parse_args(argv))


def checked(args: argparse.Namespace) -> argparse.Namespace:
    """`args`, refused before any work where an option makes no sense, naming it."""
    if args.train == bool(args.folders):
        raise UserError("give either --train or the folders of finished runs to compare")
    if args.seeds < 1 or args.valid_every < 1 or args.validations < 1 or args.jobs < 1:
        raise UserError("--seeds, --validations, --valid-every and --jobs must be at least 1")
    if not 0 <= args.minutes < math.inf or not 0 < args.flops < math.inf:
        raise UserError(
            "--flops must be a finite number above 0, and --minutes (a wall-clock budget instead) a "
            "finite number of at least 0"
        )
    check_resamples(args.samples, args.trials)
    if args.beam < 1:
        raise UserError(f"--beam {args.beam}: the beam size must be 1 (greedy) or more")
    for folder in args.folders:  # read, never made: a mistyped folder is named, not created empty
        if not folder.is_dir():
            what = "is a file, not a folder of runs" if folder.exists() else "no such folder"
            raise UserError(f"{folder}: {what}; give the folders of finished runs (each holding <variant>/seed<N>)")
    for option, folder in (("--records", args.records), ("--output", args.output)):
        if folder is not None:
            folder_option(folder, option)
    if args.lab is not None and not args.lab.is_file():
        raise UserError(f"--lab {args.lab}: no such file; `make lab` writes multirun/lab/lab.json")
    return args


def main(argv: list[str] | None = None) -> None:
    args = arguments(argv)
    output = args.output or (args.folders[0] if args.folders else Path("multirun/compare"))
    # made_by: a folder that `python scripts/compare.py` wrote before the manifest (and before nmt_study's entry)
    args.output = output_folder(output, "--output", REPORT_FILES, ("compare.json", "python scripts/compare.py"))
    args.output = args.output.resolve()
    run_dirs = train(args) if args.train else find_runs(args.folders)
    if args.no_report:
        return
    runs, pairs = describe_runs(run_dirs, args.beam)
    lab = read_json(args.lab, "make it again with `make lab`", {"results": list}) if args.lab else None
    command = "python -m nmt_study compare " + " ".join(argv if argv is not None else sys.argv[1:])
    print(summarise(runs, pairs, args.output, args.beam, command.strip(), lab, args.samples, args.trials))
