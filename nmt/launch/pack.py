"""Several runs trained in one process, in turn, each exactly as it would train alone.

`train_packed(jobs)` starts each job as `train.py` would (`nmt.launch.experiment.start`: its options, seed, folder,
lock, corpus, trainer), then gives each running job one update in turn (`Started.updates`), until every one has stopped,
and reports each as `train.py` would (`nmt.launch.experiment.finish`). Each job's random state (what its checkpoints
keep: the CPU generator's and its GPU's, nmt.training.state.rng_state) is its own: set before its update and kept after
it, so that a job's dropout and draws are those of the job trained alone, and on a CPU in fp32 its weights are the same
bit for bit. A job that fails (a refused option, a NaN loss, a full disk) ends with its own error and record of it; the
others train on. Each job's log lines go to its own train.log while it has its turn. A signal (Ctrl-C, a
scheduler's SIGTERM) reaches every job through one set of stop requests: each saves last.pt at its next update, and
the same command with trainer.resume=auto continues all.

On a CPU this saves nothing but the start of N processes: the cores are shared either way. It is the step on which a
GPU overlaps runs (one process, many small models; the packing issue's launcher and streams build on it).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from nmt import Interrupted, UserError
from nmt.launch import experiment
from nmt.runs.folder import RunFolder
from nmt.training.meters import StopRequests
from nmt.training.state import rng_state, set_rng_state

log = logging.getLogger(__name__)


@dataclass
class Running:
    """A job between its updates: where it stands, its generator of updates, its random state and its log."""

    started: experiment.Started
    updates: Generator[None, None, str]
    state: dict  # nmt.training.state.rng_state
    log: logging.Handler


# Hydra's job log format: a packed job's train.log reads as the same job's would alone
FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"


def job_log(folder: RunFolder) -> logging.Handler:
    """The job's train.log, appended to (checked a file of the run's own as the run started: RunFolder.own_files)."""
    path = folder.log_file
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(FORMAT))
    return handler


@contextlib.contextmanager
def logging_to(handler: logging.Handler, job: str = ""):
    """The log lines of the job whose turn it is go to its train.log too (one thread: one job at a time), and on the
    console after the job's name (`job`: its folder's), so that the jobs' interleaved lines say whose they are."""
    root = logging.getLogger()
    consoles = [
        h for h in root.handlers if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
    ]
    formatters = [h.formatter for h in consoles]
    for console, formatter in zip(consoles, formatters):
        console.setFormatter(Named(job, formatter))
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
        for console, formatter in zip(consoles, formatters):
            console.setFormatter(formatter)


class Named(logging.Formatter):
    """A console's formatter with the job's name before each line: `[0_sutskever] ...`."""

    def __init__(self, job: str, inner: logging.Formatter | None):
        super().__init__()
        self.job, self.inner = job, inner or logging.Formatter()

    def format(self, record: logging.LogRecord) -> str:
        return f"[{self.job}] {self.inner.format(record)}" if self.job else self.inner.format(record)


def check_pack(jobs: list[tuple[DictConfig, str | Path]]) -> None:
    """What a pack cannot give each job as it gets alone, refused before any job starts: the process's torch threads
    (one setting for every job of one process: asked differently, each job would train with the last job's, unlike
    its run alone) and a run folder (two jobs writing one folder)."""
    threads = sorted({int(OmegaConf.select(config, "trainer.threads", default=0) or 0) for config, _ in jobs})
    if len(threads) > 1:
        raise UserError(
            f"these jobs ask for trainer.threads={', '.join(map(str, threads))}, and a pack trains its jobs in one "
            "process, which has one thread count: give them one value, or train them apart (hydra/launcher=basic)"
        )
    seen: dict[Path, int] = {}
    for number, (_, folder) in enumerate(jobs):
        where = Path(folder).resolve()
        if where in seen:
            raise UserError(
                f"jobs {seen[where]} and {number} of this pack both train in {where}: give each job its own folder "
                "(hydra.sweep.subdir=... with ${hydra:job.num})"
            )
        seen[where] = number


def train_packed(jobs: list[tuple[DictConfig, str | Path]], slots: int = 0) -> list[dict | BaseException]:
    """Train `jobs` ((composed config, run folder) each) in turn in this process, at most `slots` at once (0: all):
    a job that ends frees its slot for the next of the queue, in order. Returns each job's results (`train.py`'s:
    those it reports, or a finished run's, kept) or the error that ended it, in the order of `jobs`. An interrupted
    job's error is its `nmt.Interrupted`, which says how to continue it."""
    check_pack(jobs)
    outcomes: list[dict | BaseException | None] = [None] * len(jobs)
    running: dict[int, Running] = {}
    queue = list(enumerate(jobs))
    with contextlib.ExitStack() as held, StopRequests() as stop:  # each job's lock, held until the pack ends
        while queue or running:
            while queue and len(running) < (slots or len(jobs)):
                number, (config, folder) = queue.pop(0)
                started = start_one(config, folder, held, stop)
                if isinstance(started, Running):
                    running[number] = started
                else:
                    outcomes[number] = started  # its error, or a finished run's results (kept)
            for number, job in list(running.items()):
                set_rng_state(job.state, job.started.trainer.device)
                with logging_to(job.log, Path(jobs[number][1]).name):
                    outcome = turn(job, jobs[number][1])
                if outcome is not None:
                    del running[number]
                    outcomes[number] = outcome
                else:
                    job.state = rng_state(job.started.trainer.device)
    return outcomes


def start_one(config: DictConfig, folder: str | Path, held: contextlib.ExitStack, stop) -> Running | dict | Exception:
    """A job started (`start_job`) and ready for its turns; or the results of a run finished with these settings
    already, or the error that stopped its start."""
    try:
        started, handler = start_job(config, folder, held)
    except Exception as error:  # noqa: BLE001 (the job's own end; the others start and train)
        return failed(folder, error)
    if not isinstance(started, experiment.Started):
        return started
    return Running(started, started.updates(stop), rng_state(started.trainer.device), handler)


def start_job(
    config: DictConfig, folder: str | Path, held: contextlib.ExitStack
) -> tuple[experiment.Started | dict, logging.Handler]:
    """A job started as train.py starts it (`experiment.start`), its train.log opened once its folder is its own (its
    lock held) and closed when `held` closes."""
    opened: list[logging.Handler] = []

    def own_log(run: RunFolder) -> None:
        opened.append(held.enter_context(contextlib.closing(job_log(run))))
        logging.getLogger().addHandler(opened[0])

    try:
        started = experiment.start(config, folder, held, own_log)
    finally:
        for handler in opened:
            logging.getLogger().removeHandler(handler)
    return started, (opened[0] if opened else logging.NullHandler())


def turn(job: Running, folder: str | Path) -> dict | BaseException | None:
    """The job's next update; None while it trains on, else how it ended: its report (`experiment.finish`) or the
    error that ended it (an interrupted job's advice among them)."""
    try:
        next(job.updates)
        return None
    except StopIteration as end:
        reason = end.value
    except Exception as error:  # noqa: BLE001 (the job's own end; the others train on)
        return failed(folder, error)
    try:
        return experiment.finish(job.started, reason)
    except Exception as error:  # noqa: BLE001
        return failed(folder, error)


def failed(folder: str | Path, error: BaseException) -> BaseException:
    """A job's error, logged with its folder (an interrupted job: as a warning, with how to continue it)."""
    level = logging.WARNING if isinstance(error, Interrupted) else logging.ERROR
    log.log(level, "%s: %s", folder, error)
    return error
