"""Several training runs that a rerun continues where it stopped.

`make compare` (nmt_study compare) trains its variants and seeds as one `train.py -m` through a Hydra launcher
(`sweep`): one run after another, several at once on this machine (hydra-joblib-launcher), or a SLURM job each
(submitit). Every job runs with `trainer.resume=auto`, so what a rerun does is the training command's own, under any
launcher: a run finished with the same settings is kept, an interrupted one continues, the rest start.
`make lab` (nmt_study lab) trains the same variants at the lab's sizes (size=lab) the same way. A kept run must have the
settings the overrides give today: after a default changes, a finished run from before would otherwise be reported
as if it had today's, beside seeds that do (`check_finished` refuses it, naming the options, before anything trains).
"""

from __future__ import annotations

import copy
import functools
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from nmt import Interrupted, UserError
from nmt.config import CONFIGS, register
from nmt.launch.multirun import STOP_SIGNALS
from nmt.runs.checkpoint import upgrade
from nmt.runs.folder import RunFolder
from nmt.runs.resume import another_run, listed

ROOT = Path(__file__).resolve().parents[1]
TRAIN = (sys.executable, "-m", "nmt.cli.train")  # train.py, installed or not
LAUNCHERS = ("basic", "joblib", "packed", "slurm")


def launcher_options(parser, launcher: str = "basic", jobs: int = 1) -> None:
    """--launcher and --jobs, as every script that trains a sweep takes them."""
    parser.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        default=launcher,
        help="Hydra's launcher: one run after another (basic), --jobs at once on this machine in processes of their "
        "own (joblib) or in one process (packed: hydra/launcher=packed), or a SLURM job each (slurm)",
    )
    parser.add_argument("--jobs", type=int, default=jobs, help="with --launcher joblib or packed: runs at once")


def chosen(option: str, given: str, known: list[str] | tuple[str, ...]) -> list[str]:
    """The comma-separated names of `given`, each one of `known`; refuses the others, naming `option`."""
    names = given.split(",")
    unknown = [name for name in names if name not in known]
    if unknown:
        raise UserError(f"{option}: {', '.join(unknown)} unknown; use any of {', '.join(known)}")
    return names


def composed(overrides: list[str]) -> DictConfig:
    """The config `train.py OVERRIDES` runs with, as Hydra composes it (Hydra's own `hydra.*` options left out)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    register()
    kept = [o for o in overrides if not o.startswith("hydra.")]
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        try:
            return compose("train", overrides=kept)
        except HydraException as error:  # an override the config has no place for, or one that does not parse
            raise UserError(f"train.py {' '.join(kept)}: {error}".replace("\n", " ")) from None


def settings(overrides: list[str]) -> dict:
    """The config `train.py OVERRIDES` would run with today, as plain containers (composed once per process: a
    study asks for the same variant's settings several times, and Hydra takes most of a second to compose)."""
    return copy.deepcopy(composed_settings(tuple(overrides)))


@functools.lru_cache(maxsize=256)
def composed_settings(overrides: tuple[str, ...]) -> dict:
    return OmegaConf.to_container(composed(list(overrides)), resolve=True)


def saved_settings(run_dir: Path) -> dict | None:
    """The config the run in `run_dir` was last started with (Hydra's record of its latest invocation), or None.
    A record that is not a train.py config (YAML of another shape, not text) is refused, naming it."""
    records = RunFolder(run_dir).hydra_configs()
    if not records:
        return None
    try:
        saved = OmegaConf.to_container(OmegaConf.load(records[-1]))
    except (OSError, ValueError, yaml.YAMLError, OmegaConfBaseException) as error:
        saved = error
    if not isinstance(saved, dict) or not all(isinstance(saved.get(key), dict) for key in ("model", "trainer")):
        raise UserError(
            f"{records[-1]}: not the config Hydra saved for a train.py run (a mapping with model, data and trainer); "
            "restore it, or delete it (the run's checkpoints keep their config)"
        )
    return upgrade(saved)


TEST_SHA256 = "test_sha256"  # a record's checksum of the test split it was scored on (nmt_study.records.portable)


def as_trained(config: dict) -> dict:
    """A record's config without what the record added to it (its test split's checksum): the options a run had."""
    data = config.get("data")
    if not isinstance(data, dict) or TEST_SHA256 not in data:
        return config
    return {**config, "data": {k: v for k, v in data.items() if k != TEST_SHA256}}


def stale(name: str, overrides: list[str], saved: dict | None, trained_in: str | None = None) -> str | None:
    """Why the finished run `name`, trained with the config `saved` (in the precision `trained_in`), is not the run
    `overrides` ask for today (`nmt.runs.resume.another_run`: the options that differ), or None when it is (or when
    there is no saved config)."""
    if saved is None:
        return None
    changed, other = another_run(as_trained(saved), settings(overrides), trained_in)
    return f"{name}: {listed(changed, other, 'then')}" if other else None


def precision_of(provenance: dict) -> str | None:
    """The one precision a record's provenance names its runs' machines with ("AMD EPYC (fp32)"), or None."""
    found = {m.rsplit("(", 1)[-1].rstrip(")") for m in provenance.get("machines", []) if m.endswith(")")}
    return found.pop() if len(found) == 1 else None


def refuse_stale(reasons: list[str], remedy: str) -> None:
    if reasons:
        raise UserError(
            "finished runs were trained with other settings than the ones asked for today (a default changed since?), "
            "and would be reported as if they had them:\n  " + "\n  ".join(reasons) + f"\n{remedy}"
        )


def check_finished(runs: list[tuple[str, list[str], Path]]) -> None:
    """Refuse, before anything trains, the finished runs among (name, overrides, run_dir) that were trained with other
    settings than their overrides give today, naming each run and option."""
    reasons = [
        stale(f"{name} ({run_dir})", overrides, saved_settings(run_dir), RunFolder(run_dir).trained_precision())
        for name, overrides, run_dir in runs
        if RunFolder(run_dir).finished()
    ]
    refuse_stale(
        [r for r in reasons if r],
        "Move these folders away (`python -m nmt_study compare DIR...` still reports on "
        "them) or delete them, and rerun to train them again",
    )


def sweep(
    variants: list[str],
    seeds: list[int],
    overrides: list[str],
    folder: Path,
    launcher: str = "basic",
    jobs: int = 1,
    done: set[tuple[str, int]] = frozenset(),
    hydra: list[str] = (),
    records: Path | None = None,
    prefix: str = "",
) -> list[Path]:
    """Train every variant (configs/variant/<name>.yaml) with every seed, seed by seed, as one `train.py -m` into
    folder/<variant>/seed<N>, through Hydra's `launcher`: `basic` (one after another), `joblib` (`jobs` at once, or
    as many as there are runs, each with cores / that many torch threads), `packed` (in one process) or `slurm`; the
    (variant, seed) runs of `done` (kept elsewhere: nmt_study.records.recorded) are not trained (`rectangles`);
    `hydra`: Hydra's own options (a callback); `prefix`: of the run folders (lab_<variant>). Returns the folders."""
    runs = [
        (
            f"{variant} seed {seed}",
            [f"variant={variant}", *overrides, f"seed={seed}"],
            run_folder(folder, prefix, variant, seed),
        )
        for seed in seeds
        for variant in variants
        if (variant, seed) not in done
    ]
    check_finished(runs)
    subdir = prefix + "${hydra:runtime.choices.variant}/seed${seed}"  # resolved by Hydra for each job
    around = launcher in ("joblib", "packed") and records is not None  # one rectangle: no core idles
    for needed, grid_seeds in rectangles(variants, seeds, done, around).items():
        command = [
            *TRAIN,
            "-m",
            f"seed={','.join(map(str, grid_seeds))}",
            f"variant={','.join(needed)}",
            *overrides,
            "trainer.resume=auto",
            "trainer.progress=false",
            f"hydra.sweep.dir={folder}",
            f"hydra.sweep.subdir={subdir}",
            *hydra,
            *launcher_overrides(launcher, min(jobs, len(needed) * len(grid_seeds)), overrides),
        ]
        print("train.py " + " ".join(command[len(TRAIN) :]), flush=True)
        if (status := waited(command)) != 0:
            raise ended(status, runs, folder)
    return [run_dir for _, _, run_dir in runs]


def rectangles(
    variants: list[str], seeds: list[int], done: set[tuple[str, int]], around: bool
) -> dict[tuple[str, ...], list[int]]:
    """The runs still to train, as rectangles of `train.py -m`: the variants each seed still needs -> those seeds.

    A `train.py -m` sweeps a rectangle (variants x seeds), and the runs still to train after some were recorded may
    not be one: each rectangle is then its own `train.py -m`, one after another. With the joblib launcher that would
    leave cores idle (a rectangle of one run trains alone), so when `done` are the runs recorded in a records folder
    (whose callback the sweep passes to Hydra: nmt_study.records.record_callback), `around` asks for one rectangle
    around every run to train, and the job of a run recorded already returns at once (nmt_study.records.RecordRun
    skips it)."""
    grid: dict[tuple[str, ...], list[int]] = {}
    for seed in seeds:
        if needed := tuple(v for v in variants if (v, seed) not in done):
            grid.setdefault(needed, []).append(seed)
    if around and len(grid) > 1:  # one rectangle: no core waits for another
        needed = tuple(v for v in variants if any(v in rectangle for rectangle in grid))
        grid = {needed: sorted(seed for rectangle_seeds in grid.values() for seed in rectangle_seeds)}
    return grid


# A sweep's exit status when Ctrl-C or SIGTERM stopped it: 128 + the signal's number, or minus it (killed by it)
STOPPED = {128 + number for number in STOP_SIGNALS} | {-number for number in STOP_SIGNALS}


def launcher_overrides(launcher: str, workers: int, overrides: list[str]) -> list[str]:
    """The options that put a `train.py -m` on Hydra's `launcher`: with joblib, `workers` runs at once (no more than
    it has runs, so that none idles from its start: FailedJobs), each with cores / workers torch threads unless the
    overrides pin them (the results' runs do)."""
    if launcher in ("slurm", "basic"):
        return ["hydra/launcher=slurm"] if launcher == "slurm" else []
    if launcher == "packed":  # one process: the runs take the cores in turn, each with torch's threads of one run
        return ["hydra/launcher=packed", f"hydra.launcher.slots={workers}"]
    return [
        "hydra/launcher=joblib",
        f"hydra.launcher.n_jobs={workers}",
        *shared_threads(workers, overrides),
        "hydra.launcher.batch_size=1",  # joblib's auto batching would queue runs behind skipped jobs
    ]


def shared_threads(workers: int, overrides: list[str]) -> list[str]:
    """cores / `workers` torch threads for each of `workers` runs at once, unless the overrides pin them."""
    if any(o.startswith("trainer.threads=") for o in overrides):
        return []
    return [f"trainer.threads={max(1, (os.cpu_count() or 1) // workers)}"]


def waited(command: list[str]) -> int:
    """Run `command` to its end and return its exit status. Ctrl-C reaches it and this process at once; this process
    waits for it to save and stop (`nmt.launch.multirun.FailedJobs`) instead of killing it, as `subprocess.run` would. A
    SIGTERM sent to this process alone (kill, timeout, a supervisor) is passed on to it, and waited for the same way."""
    process = subprocess.Popen(command, cwd=ROOT)
    main = threading.current_thread() is threading.main_thread()  # signals reach the main thread only
    previous = {}
    if main:  # not SIG_IGN: the child inherits that
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, lambda *_: None)
        previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, lambda *_: process.send_signal(signal.SIGTERM))
    try:
        return process.wait()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def from_root(path: Path | str) -> str:
    """`path` as a record keeps it: from the checkout's root where it lies under it (multirun/...), so that a record
    names no machine's folder and reads the same wherever it is re-derived; elsewhere, and a relative path (a
    record's), as given (not resolved: a runs folder may be a link)."""
    path = Path(path)
    if not path.is_absolute():
        return path.as_posix()
    path = Path(os.path.abspath(path))
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def run_folder(folder: Path, prefix: str, variant: str, seed: int) -> Path:
    """Where a sweep into `folder` trains `variant` with `seed` (<prefix><variant>/seed<N>), and how its record is
    named in a records folder."""
    return folder / f"{prefix}{variant}" / f"seed{seed}"


def ended(status: int, runs: list[tuple[str, list[str], Path]], folder: Path) -> Exception:
    """What a sweep that exited with `status` raises: Interrupted where Ctrl-C or SIGTERM stopped it (it has said what
    its jobs saved), else a UserError naming each run that did not finish (`failures`)."""
    if status not in STOPPED:
        return UserError(failures(runs, folder, status))
    number = status - 128 if status > 0 else -status
    return Interrupted(
        f"the sweep was stopped by {signal.Signals(number).name}; rerun the same command to continue it (finished "
        f"runs in {folder} are kept, interrupted ones continue)",
        number,
    )


def failures(runs: list[tuple[str, list[str], Path]], folder: Path, status: int) -> str:
    """Every run of a sweep that did not finish, with its reason (the `failed.txt` train.py leaves in a failed job's
    folder), and what a rerun does; a sweep stopped (`status`: its exit status) after its last run finished says
    so."""
    unfinished = [(name, run_dir) for name, _, run_dir in runs if not RunFolder(run_dir).finished()]
    if not unfinished:
        signalled = f" ({signal.Signals(status - 128).name})" if 128 < status < 128 + signal.NSIG else ""
        return (
            f"the sweep stopped with exit status {status}{signalled} after all {len(runs)} of its runs had finished "
            f"(in {folder}): rerun to go on from them"
        )
    lines = []
    for name, run_dir in unfinished:
        lines.append(f"{name} ({run_dir}): {RunFolder(run_dir).failure() or 'did not finish (its log above)'}")
    return (
        f"{len(unfinished)} of {len(runs)} runs of the sweep did not finish:\n  "
        + "\n  ".join(lines)
        + f"\nThe other runs went on. Rerun to train only these: finished runs in {folder} are kept and interrupted "
        "ones continue"
    )
