"""Train a model: nmt-train model=bahdanau data=multi30k trainer.max_minutes=30 ... (python train.py in a checkout)"""

import logging
import shutil
import signal
import sys
import traceback
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from nmt import Interrupted, SweepStop, UserError, paths
from nmt.cli import check_appended, imports_whole, lean_hydra, said
from nmt.config import CONFIGS, check_options, register
from nmt.launch.multirun import hydra_folder, job_skipped
from nmt.paths import folder_option
from nmt.runs.folder import RunFolder

log = logging.getLogger("nmt")
register()  # the dataclasses of nmt/config.py, which configs/*.yaml fill in
lean_hydra()


def logged(level: int, message: str) -> None:
    """`message` into the run's train.log only: the console gets it once, from the command's own last line."""
    record = log.makeRecord(log.name, level, __file__, 0, message, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


class OptionsFirst(Callback):
    """A Hydra callback (configs/train.yaml): a single run's options are checked before Hydra makes its folder, so a
    refused run leaves none behind. A sweep's jobs are checked as they start (FailedJobs names those refused)."""

    made: Path | None = None  # the run's folder where this invocation makes it (absent before): see leave_no_folder

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        try:
            folder = hydra_folder(config, "hydra.run.dir")
            folder_option(folder, "hydra.run.dir")
            OptionsFirst.made = None if folder.exists() else folder.resolve()
            check_appended(config, list(config.hydra.overrides.task), CONFIGS)
            options = OmegaConf.to_object(OmegaConf.masked_copy(config, ["trainer", "seed"]))
            check_options(options["trainer"], options["seed"])
        except (UserError, OmegaConfBaseException) as error:
            sys.exit(f"error: {said(error)}")

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        try:
            if config.hydra.launcher.get("n_jobs") == 0:  # joblib: -1 means every core, 0 nothing
                raise UserError("hydra.launcher.n_jobs=0: runs no job; give 1 or more (or -1 for one per core)")
            folder_option(hydra_folder(config, "hydra.sweep.dir"), "hydra.sweep.dir")
        except UserError as error:
            sys.exit(f"error: {error}")


@hydra.main(config_path=str(CONFIGS), config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> float:
    output_dir = HydraConfig.get().runtime.output_dir
    sweep = HydraConfig.get().mode == RunMode.MULTIRUN
    if sweep and SweepStop.signal_number:  # the sweep was stopped: no job starts after that
        stopped_by = signal.Signals(SweepStop.signal_number).name
        return failed_job(output_dir, f"not started: the sweep was stopped by {stopped_by}")
    if sweep and (reason := job_skipped()):  # a callback of the sweep's config said so (the study: recorded already)
        log.info("%s: %s; not trained again", output_dir, reason)
        return float("nan")
    with imports_whole():
        from nmt import distributed  # when a run starts: a sweep's own process and a refusal never wait for torch
        from nmt.launch.experiment import train  # the same

    try:
        if sweep:  # a single run's were checked before its folder was made (OptionsFirst)
            check_appended(cfg, list(HydraConfig.get().overrides.task), CONFIGS)
        results = train(cfg, output_dir)
    except KeyboardInterrupt:  # a second Ctrl-C, or one outside the training loop
        print("stopped by Ctrl-C; the checkpoints written so far are kept", file=sys.stderr)
        sys.exit(130)
    except Exception as error:
        if sweep:  # the sweep's other jobs go on; FailedJobs names this one at the end and exits non-zero
            return job_outcome(output_dir, error)
        if isinstance(error, Interrupted):
            logged(logging.WARNING, str(error))
            print(f"stopped: {error}", file=sys.stderr)
            sys.exit(128 + error.signal_number)
        if not isinstance(error, UserError | OmegaConfBaseException):
            raise
        logged(logging.ERROR, said(error))
        leave_no_folder(Path(output_dir))
        sys.exit(f"error: {said(error)}")
    finally:
        distributed.teardown()
    return job_outcome(output_dir, results)


def leave_no_folder(folder: Path) -> None:
    """A run refused before it wrote anything of its own leaves no folder behind, as one refused before Hydra made it
    does (OptionsFirst): the folder this invocation made, holding only its log of the refusal, its lock and Hydra's
    record of this invocation, is removed; a folder that was there before, or holds anything else, is left as is."""
    if OptionsFirst.made is None or folder.resolve() != OptionsFirst.made or not folder.is_dir():
        return
    records = list((folder / ".hydra").iterdir()) if (folder / ".hydra").is_dir() else []
    if {path.name for path in folder.iterdir()} <= {paths.LOG, paths.LOCK, ".hydra"} and len(records) <= 1:
        shutil.rmtree(folder, ignore_errors=True)


def job_outcome(output_dir: str, outcome: dict | Exception) -> float:
    """What a job of a sweep returns to Hydra, said once for train.py's jobs and the packed launcher's: its best
    valid BLEU (what a sweeper such as Optuna maximises) where it finished, a failed.txt of an earlier try removed;
    where it did not, NaN and its reason in failed.txt (FailedJobs lists them at the sweep's end): a refusal as the
    one line train.py prints, a stop signal's note (no job starts after it: SweepStop; the job returns, so that a
    joblib worker lives and its siblings save too), or a bug's one line with its traceback in the job's log."""
    folder = RunFolder(output_dir)
    if isinstance(outcome, dict):
        folder.failed.unlink(missing_ok=True)
        return outcome.get("valid/best_bleu", 0.0)
    if isinstance(outcome, Interrupted):
        log.warning("%s", outcome)
        SweepStop.signal_number = outcome.signal_number
        reason = str(outcome)
    elif isinstance(outcome, UserError | OmegaConfBaseException):
        reason = said(outcome)
        log.error("%s", reason)
    else:  # a bug or a library's failure: the sweep names the job with the others instead of one traceback
        reason = f"failed with {type(outcome).__name__}: {outcome} (the traceback is in {folder.log_file})"
        with open(folder.log_file, "a", encoding="utf-8") as handle:
            handle.write("".join(traceback.format_exception(outcome)))
        log.error("%s", reason)
    return failed_job(output_dir, reason)


def failed_job(output_dir: str, reason: str) -> float:
    """A sweep's job that did not finish: its reason in its folder's failed.txt (FailedJobs lists them at the end)."""
    RunFolder(output_dir).write_failure(reason)
    return float("nan")  # what a sweeper that optimises (Optuna) counts as a failed trial


if __name__ == "__main__":
    main()
