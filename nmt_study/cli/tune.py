"""python -m nmt_study tune: each family's recipe tuned with equal effort on valid BLEU (nmt_study/tune.py, driven on
Optuna by nmt_study/tuning.py): its defaults as trial 0, then Sobol points, pruned by successive halving, one seed,
under the final runs' protocol (a compute cap, patience on valid). Rerun to continue: the study's journal file
(results/runs/tune/<target>.journal) holds its trials and its sampler's place.

  python -m nmt_study tune --families transformer                   # 6 trials of up to 6e14 FLOPs, some pruned
  python -m nmt_study tune --report                                  # docs/tuning.md's tables from the records
  python -m nmt_study tune --report --apply                          # and the choices as the families' defaults
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from omegaconf import OmegaConf

from nmt import Interrupted, UserError
from nmt.config import flatten
from nmt.paths import write_text
from nmt_study import design, tables, tune, tuning
from nmt_study.progress import ended_trials
from nmt_study.sweep import ROOT, chosen

RECORDS = ROOT / "results" / "runs" / "tune"
TUNED = ROOT / "configs" / "tuned"  # train.yaml composes tuned/<data>_<model>.yaml after the model, where there is one
DOCUMENT = ROOT / "docs" / "tuning.md"
MARKERS = ("<!-- tune:trials -->", "<!-- /tune:trials -->")


def counted(name: str, least: int):
    """An argparse type: a whole number of at least `least`, refused by name before anything starts."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} {text!r}: a whole number") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"{name} {value}: at least {least}")
        return value

    return parse


def positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--flops {text!r}: a number of FLOPs (6e14)") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"--flops {text}: a positive compute cap per trial")
    return value


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m nmt_study tune", description=__doc__.split("\n\n")[0])
    targets = f"the design's {', '.join(design.TUNED)} by default; any of {', '.join(tune.SPACE)}"
    parser.add_argument("--families", default=",".join(design.TUNED), help=targets)
    trials = f"trials per target, its defaults included (equal effort: {design.TRIALS} each)"
    parser.add_argument("--trials", type=counted("--trials", 1), default=design.TRIALS, help=trials)
    parser.add_argument("--flops", type=positive, default=design.CAP, help="each trial's compute cap")
    validations = "validations over the cap (successive halving's rung 0 at a third of them)"
    parser.add_argument("--validations", type=counted("--validations", 3), default=design.VALIDATIONS, help=validations)
    parser.add_argument("--jobs", type=counted("--jobs", 1), default=1, help="trials at once on this machine")
    threads = f"each trial's torch threads (the design's: {design.THREADS}; the journal holds it)"
    parser.add_argument("--threads", type=counted("--threads", 1), default=design.THREADS, help=threads)
    parser.add_argument("--records", type=Path, default=RECORDS, help="where the studies' journals and records go")
    parser.add_argument("--runs", type=Path, default=ROOT / "multirun" / "tune", help="where the runs go")
    parser.add_argument("--extra", nargs="*", default=[], help="more train.py overrides (data.dir=...)")
    parser.add_argument("--report", action="store_true", help="no training: docs/tuning.md's tables from the records")
    choice = "each target's choice as its defaults on Multi30k (configs/tuned/)"
    parser.add_argument("--apply", action="store_true", help=choice)
    parser.add_argument("--tuned", type=Path, default=TUNED, help="where --apply writes the targets' tuned defaults")
    return parser.parse_args(argv)


def folders(args: argparse.Namespace) -> None:
    """Each folder option a folder, or not yet there (made then): a file in its place, or above it, refused by name."""
    for option, folder in (("--records", args.records), ("--runs", args.runs), ("--tuned", args.tuned)):
        for path in (folder, *folder.absolute().parents):
            if path.exists() and not path.is_dir():
                raise UserError(f"{option} {folder}: {path} is a file, not a folder; give a folder (made if absent)")


def settings(args: argparse.Namespace) -> tuning.Settings:
    """What the tuning runs, its --extra options checked first: none that sets the protocol (its cap, seed,
    precision, threads ...)."""
    tuning.check_extra(args.extra)
    return tuning.Settings(
        args.flops, args.validations, args.records.resolve(), args.runs.resolve(), args.extra, args.threads
    )


def rendered_report(text: str, records: Path = RECORDS) -> str:
    """docs/tuning.md's `text` with its generated blocks rendered again: the trials between MARKERS from `records`,
    and the results tables (the queue's, from every record in results/runs)."""
    start, end = text.index(MARKERS[0]) + len(MARKERS[0]), text.index(MARKERS[1])
    return tables.rendered(text[:start] + "\n" + tune.table(records) + "\n" + text[end:])


def report(args: argparse.Namespace) -> None:
    """docs/tuning.md's blocks between their markers, rendered from the records and the design."""
    DOCUMENT.write_text(rendered_report(DOCUMENT.read_text(encoding="utf-8"), args.records), encoding="utf-8")
    print(f"updated {DOCUMENT}", flush=True)


def apply(targets: list[str], args: argparse.Namespace) -> None:
    """Each tuned target's choice written as its defaults (`tune.tuned_config`), over the tuned file its trial 0 ran
    with; only once its --trials have ended (finished or pruned): a choice from part of a tuning is not its choice."""
    for target in targets:
        trials = tune.trials_of(args.records, target)
        ended = len(ended_trials(args.records, target))
        if ended < args.trials:
            print(
                f"{target}: {ended} of its {args.trials} trials ended; its choice is written once they all have "
                f"(`python -m nmt_study tune --families {target}` trains the rest); its defaults stay",
                flush=True,
            )
            continue
        if tune.chosen(trials) is None:
            print(f"{target}: no finished trials recorded in {args.records}; its defaults stay", flush=True)
            continue
        path = tune.tuned_path(args.tuned, target)
        current = (
            {k: str(v) for k, v in flatten(OmegaConf.to_container(OmegaConf.load(path))).items()}
            if path.is_file()
            else {}
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, tune.tuned_config(trials, target, current))
        print(f"{target}: its choice written to {path}", flush=True)


def main(argv: list[str] | None = None) -> None:
    args = arguments(argv)
    targets = chosen("--families", args.families, tuple(tune.SPACE))
    folders(args)  # --report reads them too
    failed: list[str] = []
    if not args.report:
        chosen_settings = settings(args)
        for target in targets:
            try:
                held, failures = tuning.tune_target(target, args.trials, args.jobs, chosen_settings)
            except Interrupted as stop:
                print(f"stopped: {stop}", file=sys.stderr, flush=True)
                sys.exit(128 + stop.signal_number)
            failed += failures
            print(f"{target}: {held} of {args.trials} trials in {tuning.journal(args.records, target)}", flush=True)
    if args.records.resolve() == RECORDS.resolve():
        report(args)
    else:
        print(tune.table(args.records))
    if args.apply:
        apply(targets, args)
    if failed:
        sys.exit(
            f"error: {len(failed)} trial{'s' * (len(failed) > 1)} failed (each named above; its run's log beside its "
            "folder): rerun the same command to ask its point again once the cause is mended"
        )
