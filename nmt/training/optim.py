"""The optimiser and the learning-rate schedule a `TrainerConfig` names."""

from __future__ import annotations

import math

import torch

from nmt import UserError
from nmt.config import TrainerConfig

OPTIMIZERS = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}


# How an optimiser runs, not what it computes: the running one's, whatever a restored state says
IMPLEMENTATION = ("foreach", "fused", "capturable", "differentiable")


def make_optimizer(model: torch.nn.Module, config: TrainerConfig, captured: bool = False) -> torch.optim.Optimizer:
    """The optimiser `config` names; `captured`: fused and capturable, its step count on the GPU, for an update
    captured as a CUDA graph (nmt.training.update; the learning rate becomes a device tensor there)."""
    if config.optimizer not in OPTIMIZERS:
        raise UserError(f"trainer.optimizer={config.optimizer!r}: use {' or '.join(OPTIMIZERS)}")
    graph = {"fused": True, "capturable": True} if captured else {}
    return OPTIMIZERS[config.optimizer](
        model.parameters(), lr=config.lr, betas=tuple(config.betas), weight_decay=config.weight_decay, **graph
    )


def load_optimizer(optimizer: torch.optim.Optimizer, state: dict) -> None:
    """A saved optimiser state into `optimizer`, which keeps its own implementation: a run saved with captured
    updates on a GPU continues eagerly on a CPU and the other way round (the step counts moved to where that
    implementation keeps them, the learning rate a float until nmt.training.update makes it a device tensor again)."""
    kinds = [{key: group[key] for key in IMPLEMENTATION if key in group} for group in optimizer.param_groups]
    optimizer.load_state_dict(state)
    for group, kind in zip(optimizer.param_groups, kinds, strict=True):
        group.update(kind)
        group["lr"] = float(group["lr"])
        on_device = bool(kind.get("capturable") or kind.get("fused"))
        for parameter in group["params"]:
            held = optimizer.state.get(parameter, {})
            if isinstance(held.get("step"), torch.Tensor):
                device = parameter.device if on_device else torch.device("cpu")
                held["step"] = held["step"].to(device, torch.float32)


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
            value = lr
        else:
            value = lr * float(group["lr"]) / group["initial_lr"] if group.get("initial_lr") else lr
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(value)  # in place: a captured update reads this tensor
        else:
            group["lr"] = value
        group["initial_lr"] = lr
    if not steps_on_validation(schedule):
        schedule.base_lrs = [lr for _ in optimizer.param_groups]
