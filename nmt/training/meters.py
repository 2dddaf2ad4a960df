"""What the training loop measures and listens to while it runs: training time, the loss since the last log, the
progress bar, and requests to stop (Ctrl-C, a scheduler's SIGTERM)."""

from __future__ import annotations

import contextlib
import signal
import threading
import time

import torch
from tqdm import tqdm

from nmt import SweepStop
from nmt.config import TrainerConfig
from nmt.training.state import Progress


class StopRequests:
    """While training, a stop request (Ctrl-C, or the SIGTERM or SIGUSR1 a cluster scheduler sends before it preempts
    a job) only sets `requested` to the signal's number, which the loop checks between updates, so it never lands
    inside a checkpoint write nor gets lost inside a library call; a second Ctrl-C stops at once."""

    SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGUSR1") if hasattr(signal, name))

    def __init__(self):
        self.requested = SweepStop.signal_number  # a sweep stopped while this job was setting up
        self.default_handlers: dict = {}

    def request(self, signum, frame) -> None:
        self.requested = signum
        signal.signal(signal.SIGINT, self.default_handlers[signal.SIGINT])

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():  # signals reach the main thread only
            for number in self.SIGNALS:
                self.default_handlers[number] = signal.getsignal(number)
                signal.signal(number, self.request)
        return self

    def __exit__(self, *exception) -> None:
        for number, handler in self.default_handlers.items():
            signal.signal(number, handler)


class Clock:
    """Training time: `progress.train_seconds` plus the time since the clock last started; validation is paused."""

    def __init__(self, progress: Progress):
        self.progress, self.started = progress, time.perf_counter()

    def seconds(self) -> float:
        return self.progress.train_seconds + time.perf_counter() - self.started

    def stop(self) -> None:
        self.progress.train_seconds += time.perf_counter() - self.started
        self.started = time.perf_counter()

    @contextlib.contextmanager
    def paused(self):
        self.stop()
        yield
        self.started = time.perf_counter()


class Window:
    """The training loss and token count since the last log, kept on the device (no sync until it is read)."""

    def __init__(self, device: torch.device):
        self.loss, self.tokens, self.started = torch.zeros((), device=device), 0, time.perf_counter()

    def add(self, loss_sum: torch.Tensor, tokens: int) -> None:
        self.loss += loss_sum
        self.tokens += tokens

    def take(self) -> tuple[float, float]:
        """(mean loss per token, tokens per second) of the window, which starts again."""
        loss = self.loss.item() / max(self.tokens, 1)
        speed = self.tokens / max(time.perf_counter() - self.started, 1e-9)
        self.restart()
        return loss, speed

    def restart(self) -> None:
        self.loss.zero_()
        self.tokens, self.started = 0, time.perf_counter()


class ProgressBar:
    """tqdm over the fraction of the budget done (the nearest of max_steps, max_epochs, max_minutes and max_flops),
    so that it shows where the run ends and when; with no limit but patience, a plain count of steps."""

    def __init__(self, config: TrainerConfig, progress: Progress, enabled: bool):
        self.config, self.progress = config, progress
        self.limited = bool(config.max_steps or config.max_epochs or config.max_minutes or config.max_flops)
        self.loss = self.speed = self.lr = self.valid_bleu = None
        bar_format = "{l_bar}{bar}| {elapsed}<{remaining}{postfix}" if self.limited else None
        self.bar = tqdm(
            total=1000 if self.limited else None,
            initial=0 if self.limited else progress.step,
            disable=not enabled,
            unit="step",
            dynamic_ncols=True,
            bar_format=bar_format,
        )

    def fraction(self, batches_in_epoch: int, clock: Clock) -> float:
        c, p = self.config, self.progress
        done = [
            p.step / c.max_steps if c.max_steps else 0.0,
            c.max_minutes and clock.seconds() / (60 * c.max_minutes),
            c.max_flops and p.flops / c.max_flops,
        ]
        if c.max_epochs:
            done.append((p.epoch + p.batch_in_epoch / max(batches_in_epoch, 1)) / c.max_epochs)
        return min(1.0, max(done))

    def show(self, batches_in_epoch: int, clock: Clock) -> None:
        if self.bar.disable:
            return
        postfix = {"step": self.progress.step, "epoch": self.progress.epoch + 1}
        if self.loss is not None:
            postfix.update(loss=f"{self.loss:.3f}", tok_s=f"{self.speed:,.0f}", lr=f"{self.lr:.2g}")
        if self.valid_bleu is not None:
            postfix["valid_bleu"] = f"{self.valid_bleu:.2f}"
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.update(int(1000 * self.fraction(batches_in_epoch, clock)) - self.bar.n if self.limited else 1)

    def close(self) -> None:
        self.bar.close()


def stop_reason(config: TrainerConfig, progress: Progress, clock: Clock) -> str | None:
    """Why training stops now, or None."""
    c, p = config, progress
    if c.max_steps and p.step >= c.max_steps:
        return f"reached trainer.max_steps={c.max_steps}"
    if c.max_epochs and p.epoch >= c.max_epochs:
        return f"reached trainer.max_epochs={c.max_epochs}"
    if c.max_minutes and clock.seconds() >= c.max_minutes * 60:
        return f"reached trainer.max_minutes={c.max_minutes:g}"
    if c.max_flops and p.flops >= c.max_flops:
        return f"reached trainer.max_flops={c.max_flops:g} ({p.flops:.4g} FLOPs)"
    if c.patience and p.bad_validations >= c.patience:
        return f"valid {c.select} did not improve in {c.patience} validations (trainer.patience)"
    return None


def validation_due(config: TrainerConfig, progress: Progress, flops_before: int, batches_in_epoch: int) -> bool:
    """After an update that began at `flops_before`: at the end of each epoch, every valid_every updates, or as the
    compute passes each 1/validations of max_flops (the same fractions of the budget for every model)."""
    c, p = config, progress
    if c.validations:
        return int(p.flops * c.validations // c.max_flops) > int(flops_before * c.validations // c.max_flops)
    if c.valid_every:
        return p.step % c.valid_every == 0
    return p.batch_in_epoch == batches_in_epoch  # the end of an epoch
