"""hydra/launcher=packed: the jobs of a `train.py -m` sweep trained together in this one process, each exactly as it
would train alone (`nmt.launch.pack.train_packed`): `python train.py -m seed=1,2,3 hydra/launcher=packed`, every job at
once or `hydra.launcher.slots=N` at a time.

Each job gets what train.py gives it under the basic launcher: its folder (the sweep's dir and subdir) with Hydra's
records of its config, the sweep's callbacks before and after it (a study's records, the failed jobs' summary), its
failed.txt where it fails, its train.log (written while it has its turn; the sweep's log has every job's lines), and
its results as the sweep's return value. Hydra discovers the launcher in the hydra_plugins namespace: from a
checkout, or from the installed package.
"""

import copy
import logging
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus, _save_config, configure_log, filter_overrides, setup_globals
from hydra.plugins.launcher import Launcher
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

log = logging.getLogger(__name__)


@dataclass
class PackedLauncherConf:
    _target_: str = "hydra_plugins.nmt_packed_launcher.packed.PackedLauncher"
    slots: int = 0  # jobs training at once (0: all); a job that ends gives its slot to the next (hydra.launcher.slots)


ConfigStore.instance().store(group="hydra/launcher", name="packed", node=PackedLauncherConf, provider="nmt")


class PackedLauncher(Launcher):
    def __init__(self, slots: int = 0) -> None:
        if slots < 0:
            raise ValueError(f"hydra.launcher.slots={slots}: 0 (every job at once) or more")
        self.slots = slots

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        self.hydra_context, self.task_function, self.config = hydra_context, task_function, config

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """Every job's config and folder made as run_job makes them, the jobs trained together, each one's end
        reported to the callbacks as its own."""
        # the toolkit loads when the launcher runs, not when Hydra imports every plugin to list them
        from nmt import UserError
        from nmt.launch.pack import train_packed

        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        log.info(f"Launching {len(job_overrides)} jobs packed in one process")
        jobs = [self.job(number, overrides) for number, overrides in enumerate(job_overrides, initial_job_idx)]
        trained = [job for job in jobs if job.return_value is None]  # the others: skipped or stopped before
        try:
            outcomes = train_packed([(job.cfg, job.working_dir) for job in trained], self.slots)
        except UserError as error:  # what a pack cannot give its jobs, refused before any job trains
            sys.exit(f"error: {error}")
        for job, outcome in zip(trained, outcomes, strict=True):
            job.return_value = self.ended(job, outcome)
        for job in jobs:
            HydraConfig.instance().set_config(job.hydra_cfg)
            self.hydra_context.callbacks.on_job_end(config=job.hydra_cfg, job_return=job)
        folders = ", ".join(Path(job.working_dir).name for job in jobs)
        print(f"the pack's runs: {Path(str(self.config.hydra.sweep.dir)).absolute()}/ {folders}", file=sys.stderr)
        return jobs

    def job(self, number: int, overrides: Sequence[str]) -> JobReturn:
        """A job's config and folder, with Hydra's records of them, its start told to the callbacks; its return value
        already set where it is not to train (a callback skipped it, or the sweep was stopped)."""
        # the toolkit loads when the launcher runs, not when Hydra imports every plugin to list them
        from nmt import SweepStop, UserError
        from nmt.cli import check_appended
        from nmt.cli.train import failed_job, job_outcome
        from nmt.config import CONFIGS
        from nmt.launch.multirun import job_skipped

        log.info(f"\t#{number} : {' '.join(filter_overrides(overrides))}")
        config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        with open_dict(config):
            config.hydra.job.id = config.hydra.job.num = number
        HydraConfig.instance().set_config(config)
        folder = os.path.abspath(os.path.join(str(config.hydra.sweep.dir), str(config.hydra.sweep.subdir)))
        with read_write(config.hydra.runtime), open_dict(config.hydra.runtime):
            config.hydra.runtime.output_dir = folder
        HydraConfig.instance().set_config(config)
        task = copy.deepcopy(config)
        with read_write(task), open_dict(task):
            del task["hydra"]
        Path(folder).mkdir(parents=True, exist_ok=True)
        records = Path(folder) / str(config.hydra.output_subdir)
        _save_config(task, "config.yaml", records)
        _save_config(config, "hydra.yaml", records)
        _save_config(OmegaConf.create(list(config.hydra.overrides.task)), "overrides.yaml", records)
        job = JobReturn(overrides=list(config.hydra.overrides.task), cfg=task, hydra_cfg=config, working_dir=folder)
        job.status = JobStatus.COMPLETED
        self.hydra_context.callbacks.on_job_start(config=config, task_function=self.task_function)
        if SweepStop.signal_number:
            stopped_by = signal.Signals(SweepStop.signal_number).name  # as train.py's jobs say it
            job.return_value = failed_job(folder, f"not started: the sweep was stopped by {stopped_by}")
        elif reason := job_skipped():  # a callback of the sweep's config said so (the study: recorded already)
            log.info("%s: %s; not trained again", folder, reason)
            job.return_value = float("nan")
        else:  # the options train.py checks in its jobs, refused with the same line (nmt.cli.train.job_outcome)
            try:
                check_appended(task, list(config.hydra.overrides.task), CONFIGS)
            except UserError as error:
                job.return_value = job_outcome(folder, error)
        return job

    def ended(self, job: JobReturn, outcome) -> float:
        """What train.py returns for the job (its best valid BLEU), and what it leaves where the job failed: its
        failed.txt, which the sweep's summary lists."""
        # the toolkit loads when the launcher runs, not when Hydra imports every plugin to list them
        from nmt.cli.train import job_outcome

        HydraConfig.instance().set_config(job.hydra_cfg)
        return job_outcome(job.working_dir, outcome)
