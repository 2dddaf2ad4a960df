"""A target's tuning driven on Optuna itself (ask, run `train.py`, tell), its study kept in a journal file that
outlives a GPU window, its trials pruned by successive halving at the validations (nmt_study/design.py).

Each trial is a `train.py` run in a folder of its own (RUNS/<target>/trial<N>) with `trainer.resume=auto`; while it
trains, its validations.jsonl is read as it grows and each validation's best valid BLEU so far is reported to the
trial at its validation's number. Before the last validation, the pruner may stop it: the run gets SIGTERM (it saves
last.pt and stops) and the trial is told PRUNED and recorded with its rung. A trial found RUNNING when a tuning starts
is one an earlier tuning left when it was stopped (the window ended): it continues with its own options, from its
folder where that is still there, from the start where not (the same seed gives the same run), reporting only
validations it had not reported. One tuning writes a study at a time (a lock on the journal file); a journal of
another study, family, space or protocol is refused by name.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import subprocess
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from nmt import Interrupted, UserError, paths
from nmt.config import CONFIGS, register
from nmt.runs.folder import RunFolder
from nmt_study import design, tune
from nmt_study.sweep import ROOT, TRAIN

PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent ends
POLL_SECONDS = 0.5  # how often a running trial's validations are read
# --extra options that say where files are, not what a trial trains: outside the journal's identity
LOCATIONS = ("data.dir", "data.spm_cache", "data.cache", "data.url", "trainer.progress")
# What the protocol sets for every trial (its cap, validations, stopping rules, seed, precision and threads, its
# folder): an --extra option may not set them
PROTOCOL_KEYS = (
    "seed", "model", "variant", "hydra.run.dir", "trainer.max_flops", "trainer.validations", "trainer.patience",
    "trainer.select", "trainer.test_at_end", "trainer.precision", "trainer.threads", "trainer.resume",
)  # fmt: skip


def check_extra(extra: list[str]) -> None:
    """Refuse an --extra option that sets what the protocol sets for every trial, naming it."""
    for option in extra:
        key = option.split("=", 1)[0].lstrip("+~")
        if key in PROTOCOL_KEYS or key.startswith(("hydra.", "tuned")):
            raise UserError(f"--extra {option}: {key} is the tuning's protocol, the same for every trial; leave it out")


def regular_file(path: Path, what: str) -> None:
    """Refuse a path that exists as something other than a regular file (a link, a FIFO, a folder), and a folder
    above it that is a file, naming it: Optuna would follow a link and truncate its target, or hang on a FIFO."""
    for folder in path.parents:
        if folder.exists() and not folder.is_dir():
            raise UserError(f"{folder}: is a file, not a folder; give {what} a folder")
    if path.is_symlink() or (path.exists() and not path.is_file()):
        kind = "a link" if path.is_symlink() else "a folder" if path.is_dir() else "not a regular file"
        raise UserError(f"{path}: is {kind}; {what} must be a regular file (move it away, or give another --records)")


optuna.logging.set_verbosity(optuna.logging.WARNING)  # each trial is said once, by run_trial


@dataclass
class Settings:
    """What a tuning runs: the compute cap and validations of each trial, its extra train.py options, where its runs
    and records go."""

    cap: float
    validations: int
    records: Path
    runs: Path
    extra: list[str] = field(default_factory=list)
    threads: int = design.THREADS  # each trial's torch threads (the design's; a test's tiny trials take one)

    @property
    def pinned(self) -> list[str]:
        """The precision and threads every trial trains with (design.PINNED, at this tuning's thread count)."""
        return list(design.pinned(self.threads))

    @property
    def rung(self) -> int:
        """Successive halving's rung 0, in validations: the same third of the cap at any number of validations."""
        return max(1, self.validations * design.RUNG // design.VALIDATIONS)

    def identity(self, target: str) -> dict[str, str]:
        """What a study's journal must hold to be this tuning's: its target, space and protocol, with everything its
        options change of a trial (the design's pinned precision and threads, and the --extra options other than
        where files are)."""
        space = {name: repr(distribution) for name, distribution in sorted(tune.SPACE[target].items())}
        protocol = f"cap {self.cap:g}, {self.validations} validations, rung {self.rung}, seed {tune.SEED}"
        changing = [option for option in self.extra if option.split("=", 1)[0].lstrip("+") not in LOCATIONS]
        options = " ".join([*self.pinned, *sorted(changing)])
        return {"target": target, "space": repr(space), "protocol": f"{protocol}, {options}"}


def journal(records: Path, target: str) -> Path:
    return records / f"{target}.journal"


def locked(path: Path):
    """The journal file opened and locked for this tuning alone; refused while another tuning holds it."""
    regular_file(path, "the study's journal")
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 (held until the tuning ends)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise UserError(f"{path}: another tuning is writing this study; wait for it to end or stop it") from None
    return handle


def mend(path: Path) -> None:
    """A journal whose last record a write left cut short (a tuning killed mid-append): the partial line, which
    Optuna would skip without a word, removed and said; the trial it was recording stays RUNNING and continues from
    its run (`next_trial`). Called with the journal locked."""
    data = path.read_bytes() if path.is_file() else b""
    if not data or data.endswith(b"\n"):
        return
    kept = data[: data.rfind(b"\n") + 1]
    os.truncate(path, len(kept))  # in place: the lock is on this file
    cut = f"{path}: its last {len(data) - len(kept)} bytes were a record cut short (a write stopped midway)"
    print(f"{cut}: removed; the trial it recorded continues from its run", flush=True)


def open_study(target: str, settings: Settings) -> optuna.Study:
    """The target's study in its journal file, made with its defaults as trial 0 where new; refused where the file
    holds another study or this one under another space or protocol."""
    path = journal(settings.records, target)
    name, wanted = f"tune_{target}", settings.identity(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    mend(path)
    damaged = f"{path}: not a readable Optuna journal ({{}}); restore it from git, or remove it to tune afresh"
    try:
        storage = JournalStorage(JournalFileBackend(str(path)))
        names = [summary.study_name for summary in optuna.get_all_study_summaries(storage)]
    except Exception as error:  # a damaged journal: Optuna's own error, named
        raise UserError(damaged.format(error)) from None
    if not names and path.stat().st_size:  # lines that hold no study: not a journal Optuna wrote
        raise UserError(damaged.format("it holds no study"))
    if names and names != [name]:
        raise UserError(f"{path}: holds the study {', '.join(names)}, not {name}; give this tuning its own --records")
    with warnings.catch_warnings():  # QMCSampler has been "experimental" since Optuna 3.0
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.QMCSampler(
            qmc_type="sobol", scramble=True, seed=tune.sampler_seed(target), warn_independent_sampling=False
        )
    pruner = optuna.pruners.SuccessiveHalvingPruner(
        min_resource=settings.rung, reduction_factor=design.REDUCTION, min_early_stopping_rate=0
    )
    study = optuna.create_study(
        study_name=name, storage=storage, sampler=sampler, pruner=pruner, direction="maximize", load_if_exists=True
    )
    if not names:
        for key, value in wanted.items():
            study.set_user_attr(key, value)
        study.enqueue_trial(defaults(target), skip_if_exists=True)
    say_missing(study, target, settings.records, path)
    ask_failed_again(study, target)
    held = {key: study.user_attrs.get(key) for key in wanted}
    if held != wanted:
        other = ", ".join(
            f"{key} {held[key]!r} (this tuning: {wanted[key]!r})" for key in wanted if held[key] != wanted[key]
        )
        raise UserError(f"{path}: a study of another {other}; give this tuning its own --records or remove the file")
    return study


def say_missing(study: optuna.Study, target: str, records: Path, path: Path) -> None:
    """Trials the records hold and the journal lacks (an older copy of it), said: they are asked again at the same
    points (the sampler's), and their finished runs are kept, not trained again."""
    missing = sorted({t["number"] for t in tune.trials_of(records, target)} - {t.number for t in study.trials})
    lacks = f"{path}: lacks trials {', '.join(map(str, missing))}, which {records / target} records"
    again = "they are asked again at the same points (the sampler's), and their finished runs are kept, not trained"
    if missing:
        print(f"{lacks}; {again} again", flush=True)


def ask_failed_again(study: optuna.Study, target: str) -> None:
    """Each failed trial's point asked again, once per tuning, where no other trial holds it: a failure (no corpus, a
    full disk) never uses up a place of the design's trials."""
    trials = study.get_trials(deepcopy=False)
    held = [t.params for t in trials if t.state != TrialState.FAIL]
    for failed in (t for t in trials if t.state == TrialState.FAIL):
        if failed.params and failed.params not in held:
            study.enqueue_trial(failed.params, skip_if_exists=False)
            held.append(failed.params)
            print(f"{target} trial {failed.number} failed before: its point is asked again", flush=True)


def counted(study: optuna.Study) -> int:
    """The trials that hold a place of the design's: finished, pruned or running (not one waiting to be asked, nor a
    failed one, whose point is asked again)."""
    kept = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
    return len(study.get_trials(deepcopy=False, states=kept))


def defaults(target: str) -> dict[str, float | int]:
    """The target's values of its space's knobs as train.py composes them today (its tuned file's, if any)."""
    from hydra import compose, initialize_config_dir

    register()
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        config = compose("train", overrides=[tune.selects(target)])
    values = {}
    for key, distribution in tune.SPACE[target].items():
        value = config
        for part in key.split("."):
            value = value[part]
        values[key] = int(value) if isinstance(distribution, optuna.distributions.IntDistribution) else float(value)
    return values


class Stopping:
    """Ctrl-C or SIGTERM to the tuning: passed on to the trials' runs (each saves last.pt), whose trials stay RUNNING
    for the next tuning to continue."""

    def __init__(self):
        self.requested, self.processes, self.signal_number = False, set(), signal.SIGINT

    def __enter__(self):
        self.previous = {number: signal.signal(number, self.stop) for number in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *_):
        for number, handler in self.previous.items():
            signal.signal(number, handler)

    def stop(self, number, _frame) -> None:
        self.requested, self.signal_number = True, number
        for process in list(self.processes):
            process.send_signal(signal.SIGTERM)


def command(target: str, params: dict, run_dir: Path, settings: Settings) -> list[str]:
    options = [f"{key}={tune.option(value)}" for key, value in sorted(params.items())]
    return [
        *TRAIN,
        tune.selects(target),
        f"seed={tune.SEED}",
        f"trainer.max_flops={settings.cap:g}",
        *tune.PROTOCOL,
        f"trainer.validations={settings.validations}",
        *settings.pinned,
        *settings.extra,
        *options,
        "trainer.progress=false",
        "trainer.resume=auto",
        f"hydra.run.dir={run_dir}",
    ]


def follow(trial: optuna.Trial, process: subprocess.Popen, run_dir: Path, settings: Settings) -> int | None:
    """Report each new validation's best valid BLEU so far to `trial` while `process` trains; the validation at which
    the pruner stopped it (after SIGTERM and its end), or None where it ran to its own end."""
    reported = set(trial.storage.get_trial(trial._trial_id).intermediate_values)
    seen = 0
    while True:
        ended = process.poll() is not None
        validations = RunFolder(run_dir).validations()
        for number in range(seen + 1, len(validations) + 1):
            best = max(v["bleu"] for v in validations[:number])
            if number not in reported:
                trial.report(best, number)
            if number < settings.validations and trial.should_prune():
                process.send_signal(signal.SIGTERM)
                process.wait()
                return number
        seen = len(validations)
        if ended:
            return None
        time.sleep(POLL_SECONDS)


def run_trial(
    study: optuna.Study, trial: optuna.Trial, target: str, settings: Settings, stopping: Stopping
) -> str | None:
    """Train one trial to its end (or its rung), tell the study and record it; a trial stopped by the tuning's own
    stopping stays RUNNING. Why it failed, where it did (its point is asked again by the next tuning)."""
    params = trial.params
    run_dir = (settings.runs / target / f"trial{trial.number:03d}").resolve()
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    print(f"{target} trial {trial.number}: " + " ".join(f"{k}={tune.option(v)}" for k, v in params.items()), flush=True)
    wait_for_holder(run_dir, stopping)
    with open(run_dir.parent / f"trial{trial.number:03d}.log", "a", encoding="utf-8") as log:
        process = subprocess.Popen(
            command(target, params, run_dir, settings), cwd=ROOT, stdout=log, stderr=log, preexec_fn=ends_with_parent
        )
        stopping.processes.add(process)
        try:
            rung = follow(trial, process, run_dir, settings)
        finally:
            stopping.processes.discard(process)
    if stopping.requested and rung is None and process.returncode != 0:
        return None  # stopped with the tuning: continued by the next one
    failure = None
    options = {key: tune.option(value) for key, value in params.items()}
    record = tune.Trial.of(run_dir, target, trial.number, options, settings.cap)
    if rung is not None:
        record.stopped_by, record.rung = "pruned", rung
        record.valid_bleu = max([point["bleu"] for point in record.curve[:rung]], default=0.0)
        study.tell(trial, state=TrialState.PRUNED)
    elif process.returncode != 0:
        record.stopped_by = "failed"
        failure = f"{target} trial {trial.number} failed: {reason(run_dir, Path(log.name))}"
        print(failure, flush=True)
        study.tell(trial, state=TrialState.FAIL)
    else:
        kept = RunFolder(run_dir).step_files()
        record.averaging = tune.averaged_valid_bleu(run_dir, tune.AVERAGES) if kept else {}
        study.tell(trial, record.valid_bleu)
    tune.record(record, settings.records)
    return failure


def ends_with_parent() -> None:
    """In a trial's process, before it runs: SIGTERM when the tuning's process ends however it ends (`kill -9`
    included), so that no trial trains on as an orphan; the run saves last.pt and stops, and the next tuning
    continues it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def wait_for_holder(run_dir: Path, stopping: Stopping) -> None:
    """A trial's folder still held by a run (a trial of a killed tuning saving its last update): waited for, so
    that the trial continues from what it saves instead of failing on the folder's lock."""
    said = False
    while (run_dir / paths.LOCK).is_file() and RunFolder(run_dir).held() and not stopping.requested:
        if not said:
            print(f"{run_dir}: still held by an earlier run of this trial; waiting for it to end", flush=True)
            said = True
        time.sleep(POLL_SECONDS)


def reason(run_dir: Path, log: Path) -> str:
    """Why a trial's run failed: its error line (train.py's last words), else where its log is."""
    said = [
        line for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.startswith("error:")
    ]
    return RunFolder(run_dir).failure() or (said[-1].removeprefix("error: ") if said else f"see {log}")


def next_trial(
    study: optuna.Study, target: str, trials: int, taken: set[int], failures: list[str]
) -> optuna.Trial | None:
    """A trial an earlier tuning left RUNNING (not one this tuning runs now), else a new one while the study holds
    fewer than `trials`, else None; none once a trial has failed in this tuning (its point is asked again by the
    next, not in a loop here)."""
    if failures:
        return None
    for frozen in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if frozen.number not in taken and frozen.params:
            return optuna.Trial(study, frozen._trial_id)
    if counted(study) >= trials:
        return None
    return study.ask(tune.SPACE[target])


def tune_target(target: str, trials: int, jobs: int, settings: Settings) -> tuple[int, list[str]]:
    """Run the target's trials still to run, `jobs` at once: the trials that hold a place at the end (finished,
    pruned or running), and why each trial that failed in this tuning failed. A stop signal raises Interrupted once
    the running trials have saved (they stay RUNNING, continued by the next tuning); an error in a worker is raised
    once the others have ended."""
    path = journal(settings.records, target)
    with locked(path), Stopping() as stopping:
        study = open_study(target, settings)
        taken: set[int] = set()
        failures: list[str] = []
        errors: list[BaseException] = []
        guard = threading.Lock()

        def worker() -> None:
            try:
                while not stopping.requested and not errors:
                    with guard:
                        trial = next_trial(study, target, trials, taken, failures)
                        if trial is None:
                            return
                        taken.add(trial.number)
                    if failure := run_trial(study, trial, target, settings, stopping):
                        failures.append(failure)
            except BaseException as error:  # raised in the main thread, after the other workers end
                errors.append(error)
                stopping.stop(signal.SIGTERM, None)

        threads = [threading.Thread(target=worker) for _ in range(max(1, jobs))]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)  # the main thread stays free to take signals
        if errors:
            raise errors[0]
        if stopping.requested:
            raise Interrupted(
                f"tuning {target} stopped by {signal.Signals(stopping.signal_number).name}; its running trials saved "
                f"their runs: rerun the same command to continue it ({path})",
                stopping.signal_number,
            )
        return counted(study), failures
