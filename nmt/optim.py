"""The optimiser and the learning-rate schedule a `TrainerConfig` names."""

from __future__ import annotations

import math

import torch

from nmt import UserError
from nmt.config import TrainerConfig

OPTIMIZERS = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}


def make_optimizer(model: torch.nn.Module, config: TrainerConfig) -> torch.optim.Optimizer:
    if config.optimizer not in OPTIMIZERS:
        raise UserError(f"trainer.optimizer={config.optimizer!r}: use {' or '.join(OPTIMIZERS)}")
    return OPTIMIZERS[config.optimizer](
        model.parameters(), lr=config.lr, betas=tuple(config.betas), weight_decay=config.weight_decay
    )


def make_schedule(optimizer: torch.optim.Optimizer, config: TrainerConfig):
    """constant; plateau (halve the rate when valid BLEU stops improving); inverse_sqrt (Vaswani et al. eq. 3 shape)."""
    if config.schedule == "constant":
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    if config.schedule == "plateau":
        return torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, mode="max", factor=config.plateau_factor, patience=config.plateau_patience, min_lr=config.min_lr
        )
    if config.schedule == "inverse_sqrt":
        warmup = max(1, config.warmup_steps)
        return torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: min((step + 1) / warmup, math.sqrt(warmup / (step + 1)))
        )
    raise UserError(f"trainer.schedule={config.schedule!r}: use constant, plateau or inverse_sqrt")


def steps_on_validation(schedule) -> bool:
    """Whether the schedule moves on valid BLEU (plateau) rather than at every update."""
    return isinstance(schedule, torch.optim.lr_scheduler.ReduceLROnPlateau)


def set_lr(optimizer: torch.optim.Optimizer, schedule, lr: float) -> None:
    """A new base learning rate for a restored run: the schedule's shape goes on from where it is, scaled to `lr`
    (a plateau schedule restarts from `lr` itself)."""
    for group in optimizer.param_groups:
        if steps_on_validation(schedule):
            group["lr"] = lr
        else:
            group["lr"] = lr * group["lr"] / group["initial_lr"] if group.get("initial_lr") else lr
        group["initial_lr"] = lr
    if not steps_on_validation(schedule):
        schedule.base_lrs = [lr for _ in optimizer.param_groups]
