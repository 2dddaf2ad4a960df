"""Train a model: nmt-train model=bahdanau data=multi30k trainer.max_minutes=30 ... (python train.py in a checkout)"""

import logging
import signal
import sys
import traceback

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from nmt import Interrupted, UserError
from nmt.cli import check_appended, lean_hydra, said
from nmt.config import CONFIGS, check_options, register
from nmt.multirun import SweepStop, hydra_folder, job_skipped
from nmt.paths import folder_option
from nmt.run_folder import RunFolder

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

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        try:
            folder_option(hydra_folder(config, "hydra.run.dir"), "hydra.run.dir")
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
    # The toolkit loads when a run starts, not at import: a sweep's own process (its jobs in joblib workers) and a
    # refused command never wait for torch
    from nmt import distributed
    from nmt.experiment import train

    try:
        if sweep:  # a single run's were checked before its folder was made (OptionsFirst)
            check_appended(cfg, list(HydraConfig.get().overrides.task), CONFIGS)
        results = train(cfg, output_dir)
    except (UserError, OmegaConfBaseException) as error:
        if sweep:  # the sweep's other jobs go on; FailedJobs names this one at the end and exits non-zero
            log.error("%s", said(error))
            return failed_job(output_dir, said(error))
        logged(logging.ERROR, said(error))
        sys.exit(f"error: {said(error)}")
    except Interrupted as stop:
        if sweep:  # returns, so a joblib worker lives and its siblings save too (nmt.multirun.SweepStop)
            log.warning("%s", stop)
            SweepStop.signal_number = stop.signal_number
            return failed_job(output_dir, str(stop))
        logged(logging.WARNING, str(stop))
        print(f"stopped: {stop}", file=sys.stderr)
        sys.exit(128 + stop.signal_number)
    except KeyboardInterrupt:  # a second Ctrl-C, or one outside the training loop
        print("stopped by Ctrl-C; the checkpoints written so far are kept", file=sys.stderr)
        sys.exit(130)
    except Exception as error:
        if not sweep:
            raise
        return crashed(output_dir, error)
    finally:
        distributed.teardown()
    RunFolder(output_dir).failed.unlink(missing_ok=True)  # a job that failed before and finishes now
    return results.get("valid/best_bleu", 0.0)  # what a Hydra sweeper (e.g. Optuna) maximises


def crashed(output_dir: str, error: Exception) -> float:
    """A bug or a failure of a library in one job of a sweep: the job's log keeps the traceback, and the sweep names
    the job with the others that failed instead of losing the summary to one traceback."""
    log_file = RunFolder(output_dir).log_file
    reason = f"failed with {type(error).__name__}: {error} (the traceback is in {log_file})"
    with open(log_file, "a", encoding="utf-8") as handle:
        handle.write(traceback.format_exc())
    log.error("%s", reason)
    return failed_job(output_dir, reason)


def failed_job(output_dir: str, reason: str) -> float:
    """A sweep's job that did not finish: its reason in its folder's failed.txt (FailedJobs lists them at the end)."""
    RunFolder(output_dir).write_failure(reason)
    return float("nan")  # what a sweeper that optimises (Optuna) counts as a failed trial


if __name__ == "__main__":
    main()
