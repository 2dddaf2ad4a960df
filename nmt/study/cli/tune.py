"""python -m nmt.study tune: each family's recipe tuned with equal effort on valid BLEU (nmt/study/tune.py): its
defaults as trial 0, then --trials trials of Optuna's TPE through Hydra's sweeper, one seed, under the final runs'
protocol (a compute cap, patience on valid). Rerun to continue: trials recorded in --records are not run again.

  python -m nmt.study tune --families transformer --trials 8        # about 9 runs of up to 2e15 FLOPs
  python -m nmt.study tune --report                                  # docs/tuning.md's tables from the records
  python -m nmt.study tune --report --apply                          # and the choices as the families' defaults
"""

from __future__ import annotations

import argparse
from pathlib import Path

from omegaconf import OmegaConf

from nmt import UserError
from nmt.config import flatten
from nmt.paths import write_text
from nmt.study import tune
from nmt.study.sweep import ROOT, TRAIN, chosen, launcher_options, launcher_overrides, waited
from nmt.study.variants import FAMILIES

RECORDS = ROOT / "results" / "runs" / "tune"
TUNED = ROOT / "configs" / "tuned"  # train.yaml composes tuned/<data>_<model>.yaml after the model, where there is one
DOCUMENT = ROOT / "docs" / "tuning.md"
MARKERS = ("<!-- tune:trials -->", "<!-- /tune:trials -->")


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m nmt.study tune", description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", default=",".join(FAMILIES), help="any of " + ", ".join(FAMILIES))
    parser.add_argument("--trials", type=int, default=tune.TRIALS, help="trials per family beside its defaults")
    parser.add_argument("--flops", type=float, default=tune.CAP, help="each trial's compute cap")
    parser.add_argument("--records", type=Path, default=RECORDS, help="where each trial's record goes")
    parser.add_argument("--runs", type=Path, default=ROOT / "multirun" / "tune", help="where the runs go")
    parser.add_argument("--extra", nargs="*", default=[], help="more train.py overrides (data.dir=...)")
    parser.add_argument("--report", action="store_true", help="no training: docs/tuning.md's tables from the records")
    choice = "each family's choice as its defaults on Multi30k (configs/tuned/multi30k_<family>.yaml)"
    parser.add_argument("--apply", action="store_true", help=choice)
    parser.add_argument("--tuned", type=Path, default=TUNED, help="where --apply writes the families' tuned defaults")
    launcher_options(parser)
    args = parser.parse_args(argv)
    if args.trials < 1:
        raise UserError(f"--trials {args.trials}: at least 1 (the issue's equal effort: 8 a family)")
    if args.flops <= 0:
        raise UserError(f"--flops {args.flops:g}: a positive compute cap per trial")
    return args


def command(family: str, args: argparse.Namespace, first: int, optuna: int) -> list[str]:
    """The `train.py -m` of a family's trials from number `first`: its defaults alone (optuna 0), or `optuna` trials
    that the sampler proposes over the family's space."""
    folder = (args.runs / family).resolve()
    space = [f"{key}={value}" for key, value in tune.SPACE[family].items()] if optuna else []
    sweeper = [
        "hydra/sweeper=optuna",
        "hydra.sweeper.direction=maximize",
        f"hydra.sweeper.study_name=tune_{family}",
        f"hydra.sweeper.n_trials={optuna}",
        "hydra.sweeper.n_jobs=" + str(max(1, args.jobs if args.launcher == "joblib" else 1)),
        "hydra.sweeper.sampler.seed=0",
    ]
    callback = [
        "+hydra.callbacks.trial._target_=nmt.study.tune.RecordTrial",
        f"+hydra.callbacks.trial.records={args.records.resolve()}",
        f"+hydra.callbacks.trial.family={family}",
        f"+hydra.callbacks.trial.first={first}",
        f"+hydra.callbacks.trial.cap={args.flops:g}",
        f"+hydra.callbacks.trial.tuned='{','.join(tune.SPACE[family]) if optuna else ''}'",
    ]
    return [
        *TRAIN,
        "-m",
        f"model={family}",
        f"seed={tune.SEED}",
        f"trainer.max_flops={args.flops:g}",
        *tune.PROTOCOL,
        *args.extra,
        "trainer.progress=false",
        *(sweeper if optuna else []),
        *space,
        *callback,
        f"hydra.sweep.dir={folder}/" + "${now:%Y-%m-%d_%H-%M-%S}",
        "hydra.sweep.subdir=${hydra.job.num}",
        *launcher_overrides(args.launcher, args.jobs, args.extra),
    ]


def tune_family(family: str, args: argparse.Namespace) -> None:
    """Trial 0 (the defaults) where it has no record, then the proposed trials still to run."""
    done = {t["number"] for t in tune.trials_of(args.records, family)}
    if 0 not in done:
        run(command(family, args, 0, 0), family)
    proposed = len(done - {0})
    if proposed < args.trials:
        run(command(family, args, max(done | {0}) + 1, args.trials - proposed), family)
    else:
        print(f"{family}: {proposed} proposed trials recorded in {args.records}; none to run", flush=True)


def run(line: list[str], family: str) -> None:
    print("train.py " + " ".join(line[len(TRAIN) :]), flush=True)
    if (status := waited(line)) != 0:
        raise UserError(f"tuning {family}: train.py -m stopped with status {status}; rerun to continue")


def report(args: argparse.Namespace) -> None:
    """docs/tuning.md's block between its markers, rendered from the records."""
    text = DOCUMENT.read_text(encoding="utf-8")
    start, end = text.index(MARKERS[0]) + len(MARKERS[0]), text.index(MARKERS[1])
    DOCUMENT.write_text(text[:start] + "\n" + tune.table(args.records) + text[end:], encoding="utf-8")
    print(f"updated {DOCUMENT}", flush=True)


def apply(families: list[str], args: argparse.Namespace) -> None:
    """Each tuned family's choice written as its defaults (`tune.tuned_config`), over the tuned file its trial 0 ran
    with; a family whose choice is the schema's own defaults has no file."""
    for family in families:
        trials = tune.trials_of(args.records, family)
        if not trials:
            print(f"{family}: no trials recorded in {args.records}; its defaults stay", flush=True)
            continue
        path = args.tuned / f"multi30k_{family}.yaml"  # train.yaml: tuned/${data}_${model}
        current = (
            {k: str(v) for k, v in flatten(OmegaConf.to_container(OmegaConf.load(path))).items()}
            if path.is_file()
            else {}
        )
        text = tune.tuned_config(trials, family, current)
        if text is None:
            path.unlink(missing_ok=True)
            print(f"{family}: the schema's defaults chosen; no {path}", flush=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text(path, text)
            print(f"{family}: its choice written to {path}", flush=True)


def main(argv: list[str] | None = None) -> None:
    args = arguments(argv)
    families = chosen("--families", args.families, FAMILIES)
    if not args.report:
        for family in families:
            tune_family(family, args)
    if args.records.resolve() == RECORDS.resolve():
        report(args)
    else:
        print(tune.table(args.records))
    if args.apply:
        apply(families, args)
