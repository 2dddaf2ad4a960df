"""A training run's state: where it stands (`Progress`), everything a checkpoint holds to continue exactly there
(`training_state`), and how a process restores it, its random state included (`restore_training`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import torch

from nmt.training.optim import load_optimizer


@dataclass
class Progress:
    """Where a run stands: every counter the trainer keeps, saved in each checkpoint and restored on resume."""

    step: int = 0  # updates done
    epoch: int = 0  # epochs finished
    batch_in_epoch: int = 0  # batches of the current epoch already used
    best_bleu: float = -1.0  # valid BLEU of the best validation so far (by trainer.select)
    best_score: float | None = None  # its trainer.select score (None: from before the option, when BLEU chose)
    bad_validations: int = 0  # validations since the best (early stopping)
    train_seconds: float = 0.0  # wall-clock training time, validation excluded
    tokens_trained: int = 0  # target tokens of every update (all processes)
    flops: int = 0  # training compute so far: the FLOPs of every update's products (nmt/models/flops.py)
    static_batches: bool = False  # the epochs cut in static shapes (nmt.text.batches.StaticShapes: a captured run's)

    def counted(self, batches: int, tokens: int, flops: int) -> None:
        """One update more, of `batches` batches, `tokens` target tokens and `flops` FLOPs (every process's)."""
        self.step += 1
        self.batch_in_epoch += batches
        self.tokens_trained += tokens
        self.flops += flops

    def batches_of(self, static: bool) -> bool:
        """Continue with batches static or not: an epoch saved part-way with the other kind (a captured run resumed
        eagerly, or the other way round) ends there, since its position means nothing in the new batches. Whether
        it did."""
        cut = self.static_batches != static and self.batch_in_epoch > 0
        if cut:
            self.epoch, self.batch_in_epoch = self.epoch + 1, 0
        self.static_batches = static
        return cut

    @classmethod
    def of(cls, saved: dict) -> Progress:
        """From a checkpoint's `progress` entry (averaged checkpoints carry extra keys, which are left out)."""
        return cls(**{f.name: saved[f.name] for f in fields(cls) if f.name in saved})


def rng_state(device: torch.device) -> dict:
    """This process's random state: the CPU generator's and, on a GPU, its own device's."""
    return {"torch": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None}


def set_rng_state(rng: dict, device: torch.device) -> None:
    """This process's random state set to `rng` (`rng_state`'s): the CPU generator's and its own GPU's."""
    torch.set_rng_state(rng["torch"])
    if device.type == "cuda" and rng.get("cuda") is not None:
        torch.cuda.set_rng_state(rng["cuda"], device)


def restore_rng(rng: dict, rank: int, device: torch.device, seed: int, step: int) -> None:
    """This process's random state from a checkpoint's `rng`: under data parallelism each rank's own (`ranks`, one
    entry per process of the saving job), so that a resumed run's ranks go on drawing different dropout masks; a rank
    the saving job did not have starts from its seed, rank and step. A single process restores the CPU state and the
    states of the GPUs it sees (a checkpoint may list more than it sees)."""
    ranks = rng.get("ranks")
    if not ranks:
        torch.set_rng_state(rng["torch"])
        if torch.cuda.is_available():
            for index, state in enumerate(rng.get("cuda", [])[: torch.cuda.device_count()]):
                torch.cuda.set_rng_state(state, index)
        return
    if rank >= len(ranks):
        torch.manual_seed(seed + 1_000_003 * rank + step)  # CPU and every GPU
        return
    set_rng_state(ranks[rank], device)


def training_state(
    model,
    optimizer,
    schedule,
    scaler,
    progress: Progress,
    metrics: dict,
    config: dict,
    vocabulary,
    ranks: list[dict] | None = None,
) -> dict:
    """Everything a run needs to continue exactly where it is: weights, optimizer, schedule, gradient scaler,
    counters, the last validation's metrics, the random state (and each process's, `ranks`, under data
    parallelism), the resolved config and the sentencepiece models."""
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "schedule": schedule.state_dict(),
        "scaler": scaler.state_dict(),
        "progress": asdict(progress),
        "metrics": dict(metrics),
        "rng": {
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "ranks": ranks or [],
        },
        "config": config,
        "vocabulary": {"source": vocabulary.source_model, "target": vocabulary.target_model},
    }


WEIGHTS_ONLY = ("model", "progress", "config", "vocabulary")  # what step<N>.pt keeps: enough to decode or average


CPU = torch.device("cpu")


def restore_training(
    payload: dict, model, optimizer, schedule, scaler, rank: int = 0, device: torch.device = CPU, seed: int = 0
) -> tuple[Progress, dict]:
    """Load a `training_state` into the given objects and this process's random state (`restore_rng`); returns its
    progress and metrics."""
    model.load_state_dict(payload["model"])
    load_optimizer(optimizer, payload["optimizer"])
    schedule.load_state_dict(payload["schedule"])
    if payload["scaler"] and scaler.is_enabled():  # precision=auto may pick fp16 (a scaler) on one machine, not another
        scaler.load_state_dict(payload["scaler"])
    progress = Progress.of(payload["progress"])
    restore_rng(payload["rng"], rank, device, seed, progress.step)
    return progress, dict(payload.get("metrics", {}))
