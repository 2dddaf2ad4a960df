"""The bookkeeping of a `train.py -m` sweep, whatever launches it (basic, joblib, SLURM) and whoever asked for it:
which jobs failed and why (`failed.txt`, `FailedJobs`), stop signals that reach every job (`nmt.SweepStop`), and jobs a
callback of the sweep's config says not to run (`skip_job`: a study that has a record of the run already).

The toolkit's own module: `train.py` imports it, and the study configures what it needs through Hydra's callback
config (nmt_study.records.RecordRun), so neither imports the other's internals.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from nmt import SweepStop, UserError, paths
from nmt.runs.folder import RunFolder


def failures_written(sweep_dir: Path) -> dict[Path, tuple[int, int]]:
    """Each failed.txt under `sweep_dir`, with what tells one writing of it from another (written by replacement:
    a new inode each time, whatever the file system's clock resolution)."""
    written = {}
    for path in sweep_dir.rglob(paths.FAILED):
        with contextlib.suppress(OSError):
            status = path.stat()
            written[path] = (status.st_ino, status.st_mtime_ns)
    return written


def hydra_folder(config: DictConfig, key: str) -> Path:
    """The folder a Hydra option names (hydra.run.dir, hydra.sweep.dir), resolved as Hydra resolves it when the job
    starts. Hydra sets its HydraConfig, which every `${hydra:...}` value reads (the default run folder's
    `${hydra:runtime.choices.model}`), only then, after the callbacks' on_run_start and on_multirun_start: here it is
    given one made of this same config for the time of the resolution. `${now:...}` is cached on `config` itself, so
    the folder checked is the one Hydra makes. A value Hydra could not resolve either is refused naming `key`."""
    from hydra.core.hydra_config import HydraConfig

    holder = HydraConfig.instance()
    before = holder.cfg
    try:
        try:
            value = OmegaConf.select(config, key, throw_on_missing=True)
        except OmegaConfBaseException:
            if before is not None:
                raise
            holder.set_config(config.copy())  # a copy: set_config makes the node it keeps read-only
            value = OmegaConf.select(config, key, throw_on_missing=True)
    except (OmegaConfBaseException, AssertionError) as error:
        raise UserError(
            f"{key}: cannot be resolved ({str(error).splitlines()[0]}); give a plain folder, e.g. {key}=runs/r1"
        ) from None
    finally:
        holder.cfg = before
    if value is None or not str(value).strip():
        raise UserError(f"{key}={value or ''}: empty; give the folder to write into (made if it does not exist)")
    return Path(str(value))


def sweep_folder(config: DictConfig) -> Path:
    """hydra.sweep.dir as Hydra makes it; one it cannot resolve, or an empty one, is refused in one line."""
    try:
        return hydra_folder(config, "hydra.sweep.dir")
    except UserError as error:
        sys.exit(f"error: {error}")


class FailedJobs(Callback):
    """A Hydra callback (configs/train.yaml) that ends a `train.py -m` sweep by naming each job that failed in it, with
    the reason its `failed.txt` keeps, and exits non-zero; a failed job returns to Hydra instead of raising, so the
    other jobs run and no traceback is printed. Only jobs failed in this sweep count (a failed.txt written since it
    started, not one a sweep into the same folder left a moment before).

    A stop signal (Ctrl-C, a scheduler's SIGTERM) to the sweep's process group stops the sweep: each running job saves
    its run at its current update and returns, no job starts after it (`SweepStop`), and the sweep exits with 128 +
    the signal's number, saying how to continue. The sweep's own process only notes the signal, so that a joblib
    launcher waits for its workers to save instead of killing them; a second Ctrl-C stops at once."""

    sweep_pid = 0  # the sweep's own process: a job in another one runs in a joblib worker

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        self.sweep_pid = os.getpid()
        self.before = failures_written(sweep_folder(config))  # a sweep's earlier failures are not this one's
        SweepStop.signal_number, self.handlers = 0, {}
        if threading.current_thread() is threading.main_thread():  # signals reach the main thread only
            self.handlers = {number: signal.signal(number, self.stop) for number in STOP_SIGNALS}
        hold_signals_in_workers()

    def stop(self, signal_number: int, frame) -> None:
        SweepStop.signal_number = signal_number
        signal.signal(signal.SIGINT, self.handlers[signal.SIGINT])
        if signal_number == signal.SIGTERM:  # sent to this process alone (kill, timeout, a supervisor): Ctrl-C
            for worker in descendants(os.getpid()):  # reaches the whole process group, SIGTERM only this process
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(worker, signal.SIGTERM)
        print(
            f"{signal.Signals(signal_number).name}: the running jobs save their runs and stop, no other job starts "
            "(Ctrl-C again stops at once)",
            file=sys.stderr,
            flush=True,
        )

    def on_job_start(self, config: DictConfig, **kwargs) -> None:
        """In a joblib worker, a stop signal is only noted, from its first job on: a worker that waits for work while
        its sibling trains would otherwise die of Ctrl-C, and loky would kill the sibling before it saves its run
        (loky kills with SIGKILL). A job that starts after it does not train, one in its setup stops at its first
        update (`StopRequests`). The sweep's own process stops at the second Ctrl-C."""
        if self.sweep_pid not in (0, os.getpid()) and threading.current_thread() is threading.main_thread():
            for number in STOP_SIGNALS:
                signal.signal(number, SweepStop.note)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # one held since the worker started: noted now

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        for number, handler in self.handlers.items():
            signal.signal(number, handler)
        written = failures_written(sweep_folder(config))
        failed = sorted(path for path, stamp in written.items() if self.before.get(path) != stamp)
        reasons = "".join(f"  {path.parent}: {RunFolder(path.parent).failure()}\n" for path in failed)
        rerun = rerun_advice(OmegaConf.select(config, "trainer.resume"))  # the sweep's own resume option
        if SweepStop.signal_number:
            print(
                f"stopped by {signal.Signals(SweepStop.signal_number).name}: the jobs that were running saved their "
                f"runs, the others did not start:\n{reasons}To continue, {rerun}: "
                "finished jobs are kept, interrupted ones continue.",
                file=sys.stderr,
            )
            raise SystemExit(128 + SweepStop.signal_number)
        if not failed:
            return
        jobs = "1 job" if len(failed) == 1 else f"{len(failed)} jobs"
        raise SystemExit(
            f"error: {jobs} of this sweep failed (the reason stays in each folder's {paths.FAILED}):\n{reasons}"
            f"Fix the cause, then {rerun}: finished jobs are kept, the others train."
        )


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def hold_signals_in_workers() -> None:
    """Joblib's workers (loky) start with the stop signals blocked, until their first job notes them
    (`FailedJobs.on_job_start` unblocks them): a Ctrl-C while a worker still starts would otherwise kill it, and loky
    would then kill its busy siblings (SIGKILL, maybe inside a checkpoint's write) and end the sweep in a traceback.
    A signal held so is not lost: the job sees it at its start and does not train. Blocked signals pass through
    fork and exec; loky starts each worker with its `fork_exec`, wrapped here once (nothing without joblib)."""
    try:
        from joblib.externals.loky.backend import fork_exec as module  # optional: the joblib launcher's
    except ImportError:
        return
    if getattr(module.fork_exec, "holds_signals", False):
        return
    start = module.fork_exec

    def held(*args, **kwargs):
        before = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            return start(*args, **kwargs)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)

    held.holds_signals = True
    module.fork_exec = held


def descendants(pid: int) -> list[int]:
    """The processes below `pid` (a sweep's joblib workers and theirs), from /proc; none where there is no /proc."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after the command's name, which may hold spaces
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, stack = [], list(parents.get(pid, []))
    while stack:
        child = stack.pop()
        found.append(child)
        stack.extend(parents.get(child, []))
    return found


def rerun_advice(resume) -> str:
    """How to continue a sweep that was stopped or had jobs fail, the one advice each part of it gives (the job, the
    sweep's end): its command again, with trainer.resume=auto where it did not have it (finished jobs are then kept,
    interrupted ones continue, failed ones train again). `resume`: the sweep's trainer.resume."""
    return "rerun the sweep's command" + ("" if str(resume) == "auto" else " with trainer.resume=auto")


def in_sweep() -> bool:
    """Whether this run is a job of `train.py -m` (Hydra's multirun), whose folder the sweep's options name."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


class SkipJob:
    """Why the job this process runs next is not to train (None: it trains), set by a callback of the sweep's config
    in the job's `on_job_start` (`skip_job`), read and cleared by train.py (`job_skipped`)."""

    reason: str | None = None


def skip_job(reason: str) -> None:
    """From a callback's `on_job_start`: the job about to run does not train; train.py logs `reason` and returns."""
    SkipJob.reason = reason


def job_skipped() -> str | None:
    """Why this job is not to train (`skip_job`), or None; cleared, so the worker's next job is asked afresh."""
    reason, SkipJob.reason = SkipJob.reason, None
    return reason
