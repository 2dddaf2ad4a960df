"""The one training loop for every model: updates, validation with BLEU, checkpoints.

`Trainer` takes a model, a vocabulary, parallel text and a `TrainerConfig`, and needs no Hydra:

    trainer = Trainer(model, vocabulary, train_pairs, valid_pairs, "runs/a", TrainerConfig(max_steps=100))
    trainer.train()

What it writes to TensorBoard goes through `nmt.runlog`, decoding and BLEU through `nmt.decoding`, the checkpoint
payload through `nmt.checkpoint`; `nmt.experiment` builds everything from the command line's config.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import signal
from dataclasses import asdict
from functools import partial
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from nmt import UserError, checkpoint, distributed
from nmt.checkpoint import Progress
from nmt.config import DecodeOptions, TrainerConfig
from nmt.corpus import Pairs
from nmt.data import (
    Batch,
    EpochPlans,
    ParallelDataset,
    Shipping,
    StaticShapes,
    TokenBatchSampler,
    Vocabulary,
    check_splits,
    collate,
    loading,
)
from nmt.decoding import Search, check_input_lengths
from nmt.device import capability, exact_fp32, make_deterministic
from nmt.device import choose as choose_precision
from nmt.device import device as find_device
from nmt.flops import Shape
from nmt.graphs import GraphedUpdate, graph_refusal, graphed_update
from nmt.loss import batch_loss
from nmt.meters import Clock, ProgressBar, StopRequests, Window
from nmt.optim import make_optimizer, make_schedule, steps_on_validation
from nmt.runlog import RunLog
from nmt.validation import validate

log = logging.getLogger(__name__)
VALIDATIONS = "validations.jsonl"  # in a run directory: one JSON line per validation (`Trainer.record_validation`)
RECORDED = ("loss", "perplexity", "bleu", "chrf", "aer", "seconds")  # of a validation's metrics, what its line keeps


class NonFiniteLoss(Exception):
    pass


class Features(torch.nn.Module):
    """`model.features` as a module's forward, so that DistributedDataParallel can wrap it (the output layer and the
    loss run after it, fused, in nmt/loss.py; DDP's gradient hooks fire for the output weights all the same)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(
        self,
        source: torch.Tensor,
        source_mask: torch.Tensor,
        target_in: torch.Tensor,
        source_lengths: torch.Tensor | None = None,
    ):
        return self.model.features(source, source_mask, target_in, source_lengths)


class Trainer:
    """Trains `model` on `train_pairs`, validating on `valid_pairs` and writing checkpoints into `run_dir`.

    `progress` holds every counter (saved in each checkpoint); `last_metrics` the last validation's figures. Under
    torchrun each process trains its share of every update and rank 0 alone validates and writes.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        vocabulary: Vocabulary,
        train_pairs: Pairs,
        valid_pairs: Pairs,
        run_dir: str | Path,
        config: TrainerConfig | None = None,
        max_tokens: int = 4096,
        max_len: int = 100,
        seed: int = 1234,
        run_config: dict | None = None,
        valid_alignments: list | None = None,
    ):
        self.config = config = config or TrainerConfig()
        config.check()
        self.vocabulary, self.valid_pairs, self.run_dir, self.seed = vocabulary, valid_pairs, Path(run_dir), seed
        self.valid_alignments = valid_alignments  # gold links of the valid pairs, for valid AER
        if config.select == "aer" and valid_alignments is None:
            raise UserError(
                "trainer.select=aer: the valid split has no gold links to measure AER against (the "
                "sample corpus has them); select on bleu or loss"
            )
        self.run_config = run_config or {"trainer": asdict(config)}  # what checkpoints store as their config
        self.place(model, seed)
        self.graph_refusal = (
            graph_refusal(self.device, self.world, config.accumulate, self.dtype)
            if config.cuda_graphs
            else "trainer.cuda_graphs=false"
        )
        static = StaticShapes(max_tokens) if self.graph_refusal is None else None  # what a captured update needs
        self.collate = static.collate if static else collate
        self.dataset = ParallelDataset(train_pairs, vocabulary)
        self.sampler = TokenBatchSampler(self.dataset, max_tokens, True, seed, max_len, static)
        if self.sampler.dropped:
            log.info("dropped %d training pairs longer than data.max_len=%d subwords", self.sampler.dropped, max_len)
        corpus = self.run_config.get("data", {}).get("corpus")
        valid_option = {"sample": "data.sizes.valid", "files": "the data.valid files"}.get(corpus, "the valid split")
        check_splits(self.sampler, valid_pairs, self.world, max_len, valid_option)
        self.valid_dataset = ParallelDataset(valid_pairs, vocabulary)
        # validation decodes greedily, with the trainer's batch size and input limit
        decoding = DecodeOptions(max_tokens=config.valid_max_tokens, max_input_len=config.decode_max_input_len)
        self.search = Search.of(decoding, config)
        check_input_lengths(
            self.valid_dataset.source_lengths,
            range(1, len(valid_pairs) + 1),
            config.decode_max_input_len,
            "trainer.decode_max_input_len",
            "valid line",
        )
        self.optimizer = make_optimizer(self.model, config, captured=self.graph_refusal is None)
        self.schedule = make_schedule(self.optimizer, config)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.dtype == torch.float16)
        self.progress = Progress(static_batches=static is not None)
        self.batches_in_epoch = 0  # set when an epoch's batches are drawn, so no step re-sorts the corpus
        self.last_metrics: dict[str, float] = {}
        self.log = RunLog(None)  # opened on the run directory when training starts (rank 0)
        self.stop_signal = 0  # the signal that interrupted training, if one did
        self.writer = checkpoint.Writer(background=self.device.type == "cuda")  # checkpoints: on a GPU, on a thread
        self.graphed: GraphedUpdate | bool | None = None  # the captured update, False for eager; made at the first

    def place(self, model: torch.nn.Module, seed: int) -> None:
        """The model on its device in the chosen precision (refused where it cannot run: nmt/device.py); under
        torchrun, wrapped for data parallelism."""
        config = self.config
        self.device = distributed.setup(find_device(config.device))
        if config.deterministic:
            make_deterministic()
        self.precision = choose_precision(config.precision, capability(self.device))  # refuses what cannot run
        exact_fp32(self.precision, self.device)
        if self.precision.warning:
            log.warning(self.precision.warning)
        self.dtype = self.precision.dtype
        self.model = model.to(self.device)
        self.world, self.rank = distributed.world_size(), distributed.rank()
        self.features: torch.nn.Module = Features(self.model)
        if self.world > 1:  # DDP starts every replica from rank 0's weights; each draws its own dropout masks
            self.features = torch.nn.parallel.DistributedDataParallel(
                self.features, device_ids=[self.device] if self.device.type == "cuda" else None, broadcast_buffers=False
            )
            torch.manual_seed(seed + self.rank)

    @property
    def step(self) -> int:
        return self.progress.step

    @property
    def tokens_per_second(self) -> float:
        """Target tokens (eos included, padding not) per second of training, validation time excluded."""
        return self.progress.tokens_trained / max(self.progress.train_seconds, 1e-9)

    # --- checkpoints ------------------------------------------------------------------------------------------

    def state(self, ranks: list[dict] | None = None) -> dict:
        """The full training state (with every process's random state, `ranks`, under data parallelism); refuses
        (NonFiniteLoss) to give one with NaN or infinite weights."""
        if not bool(torch.stack([p.detach().isfinite().all() for p in self.model.parameters()]).all()):
            raise NonFiniteLoss(f"the weights became NaN or infinite by step {self.step}")
        return checkpoint.training_state(
            self.model,
            self.optimizer,
            self.schedule,
            self.scaler,
            self.progress,
            self.last_metrics,
            self.run_config,
            self.vocabulary,
            ranks,
        )

    def save(self, name: str, best: bool = False, weights: bool = False) -> None:
        """Write a full checkpoint atomically; `best`: it is also best.pt (a second name of the same file). The
        `last.pt` it replaces stays as `previous.pt`, which resuming falls back to should `last.pt` ever be unreadable
        (a disk error, a copy cut short). `weights`: first this validation's weights as `step<N>.pt` (no optimizer:
        for averaging), the newest `keep_checkpoints` kept. Every process calls it: each one's random state goes into
        the checkpoint. On a GPU the files are written on a thread of their own (checkpoint.Writer) from one copy of
        the state on the host."""
        ranks = distributed.gather(checkpoint.rng_state(self.device)) if self.world > 1 else None
        if self.rank != 0:
            return
        state = self.writer.own(self.state(ranks))
        if weights and self.config.keep_checkpoints > 0:
            path = self.run_dir / f"step{self.progress.step:08d}.pt"
            only = {k: v for k, v in state.items() if k in checkpoint.WEIGHTS_ONLY}
            self.writer.write(partial(checkpoint.write_weights, only, path, self.config.keep_checkpoints))
        self.writer.write(partial(checkpoint.write_run_file, state, self.run_dir / name, best))

    def restore(self, path: str | Path) -> None:
        """Continue from the full checkpoint at `path` (see nmt.resume for which one and whether it may)."""
        self.restore_payload(Path(path), checkpoint.load(path))

    def restore_payload(self, path: Path, payload: dict) -> None:
        try:
            self.progress, self.last_metrics = checkpoint.restore_training(
                payload, self.model, self.optimizer, self.schedule, self.scaler, self.rank, self.device, self.seed
            )
        except (KeyError, RuntimeError, ValueError) as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise UserError(f"{path}: does not fit this model and trainer ({first})") from None
        if self.progress.batches_of(self.sampler.static is not None):
            log.warning("%s: its epoch was cut in other batches (trainer.cuda_graphs); the next epoch starts", path)
        log.info("resumed from %s at step %d (epoch %d)", path, self.progress.step, self.progress.epoch + 1)

    # --- one update -------------------------------------------------------------------------------------------

    def train_step(self, batches: list[Batch], tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One update from this process's `batches`; `tokens` counts the target tokens of the whole update (all
        processes, all accumulated batches), so the gradient is that of the mean loss per token of one large batch.
        Returns this process's summed loss and the gradient norm as tensors (no host sync here)."""
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss_total = torch.zeros((), device=self.device)
        scale = self.world / tokens  # DDP averages the replicas' gradients: undo its 1/world
        for i, batch in enumerate(batches):
            last = i == len(batches) - 1
            with self.features.no_sync() if self.world > 1 and not last else contextlib.nullcontext():
                loss_sum = batch_loss(
                    self.model, self.features, batch, self.config.label_smoothing, self.device, self.dtype
                )
                self.scaler.scale(loss_sum * scale).backward()
            loss_total += loss_sum.detach()
        self.scaler.unscale_(self.optimizer)
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.clip_norm or float("inf"))
        scale = self.scaler.get_scale() if self.scaler.is_enabled() else 0.0  # fp16 only: a host sync
        self.scaler.step(self.optimizer)
        self.scaler.update()
        skipped = self.scaler.is_enabled() and self.scaler.get_scale() < scale  # inf/NaN gradients: no update made
        if not steps_on_validation(self.schedule) and not skipped:  # warm-up counts updates made, not attempted
            self.schedule.step()
        return loss_total, norm.detach()

    def update(self, batches: list[Batch], tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One update: replayed as a CUDA graph where the run allows it (nmt.graphs, made after any restore)."""
        if self.graphed is None:
            self.graphed = graphed_update(self) or False
        if not self.graphed:
            return self.train_step(batches, tokens)
        loss_sum, norm = self.graphed(batches[0], 1.0 / tokens)
        if not steps_on_validation(self.schedule):
            self.schedule.step()
        return loss_sum, norm

    def updates(self):
        """(this process's batches, target tokens of the update, of this process's part, batches in the update, FLOPs
        of the update) from where training stands, epoch after epoch. An update takes `accumulate` x processes batches
        of the epoch's order; process r gets every r-th. Token and FLOP counts come from the corpus lengths, not from
        the tensors (no sync), and cover every process's batches. One DataLoader serves every epoch: on a GPU its
        workers keep making the next batches across an epoch's end (an epoch is a few seconds there)."""
        pin, progress = self.device.type == "cuda", self.progress  # pinned batches: copied without a wait
        lengths, sources = self.dataset.target_lengths, self.dataset.source_lengths  # eos included
        plans = EpochPlans(self.sampler, self.config.accumulate, self.world, self.rank, progress)
        # A generator of its own: a DataLoader otherwise draws its seed from the global RNG, which would shift
        # the dropout masks of a resumed run against an uninterrupted one.
        options = loading(self.device)
        loader = torch.utils.data.DataLoader(
            self.dataset,
            batch_sampler=plans.mine(),
            collate_fn=Shipping(self.collate) if options.get("num_workers") else self.collate,
            generator=torch.Generator(),
            **options,
        )
        loader = iter(loader)
        while True:
            self.batches_in_epoch, groups = plans[progress.epoch]
            for group in groups:
                indices = group[self.rank :: self.world]
                batches = [next(loader).to(self.device, non_blocking=pin) for _ in indices]
                tokens = int(sum(lengths[i].sum() for i in map(np.asarray, group)))
                local = int(sum(lengths[i].sum() for i in map(np.asarray, indices)))
                flops = sum(self.model.training_flops(Shape.of(sources[i], lengths[i])) for i in map(np.asarray, group))
                yield batches, tokens, local, len(group), flops
            progress.epoch += 1
            progress.batch_in_epoch = 0

    # --- the loop ---------------------------------------------------------------------------------------------

    def train(self) -> str:
        """Train until a stop condition; returns the reason. Ctrl-C saves `last.pt` and returns "interrupted"."""
        if self.rank == 0 and self.log.writer is None:
            self.log = RunLog(self.run_dir)
        clock = Clock(self.progress)
        reason = distributed.share(self.finished(clock))
        window = Window(self.device)
        bar = ProgressBar(self.config, self.progress, enabled=self.config.progress and self.rank == 0)
        try:
            with StopRequests() as stop:
                for batches, tokens, local_tokens, count, flops in self.updates() if reason is None else ():
                    loss_sum, norm = self.update(batches, tokens)
                    self.progress.step += 1
                    self.progress.batch_in_epoch += count
                    self.progress.tokens_trained += tokens
                    self.progress.flops += flops
                    window.add(loss_sum, local_tokens)
                    if self.progress.step % self.config.log_every == 0:
                        self.log_train(window, norm, bar)
                    if self.should_validate(self.progress.flops - flops):
                        with clock.paused():
                            self.validate_and_save()
                        window.restart()
                        bar.valid_bleu = self.last_metrics["bleu"]
                    reason = self.finished(clock) if self.rank == 0 else None  # rank 0's clock and patience decide
                    signal_number, done = distributed.agree([stop.requested or 0, reason is not None], self.device)
                    if signal_number:  # Ctrl-C or SIGTERM on any process: every process stops at this update
                        self.stop_signal = signal_number
                        raise KeyboardInterrupt
                    bar.show(self.batches_in_epoch, clock)
                    if done:
                        reason = reason or "rank 0 stopped training"
                        break
            clock.stop()
            if self.last_metrics.get("step") != self.step:
                self.validate_and_save()
            self.writer.wait()
        except KeyboardInterrupt:
            clock.stop()
            self.stop_signal = self.stop_signal or signal.SIGINT
            self.save_interrupted()
            return "interrupted"
        except NonFiniteLoss as error:
            self.writer.wait()  # the good checkpoints given before it
            raise self.non_finite(error) from None
        finally:
            bar.close()
        log.info("stopped: %s", reason)
        return reason or "done"

    def save_interrupted(self) -> None:
        try:
            self.save("last.pt")
        except NonFiniteLoss as error:
            self.writer.wait()
            raise self.non_finite(error) from None
        self.writer.wait()
        log.info(
            "interrupted at step %d; saved %s. Continue with trainer.resume=true.", self.step, self.run_dir / "last.pt"
        )

    def non_finite(self, error: NonFiniteLoss) -> UserError:
        last = self.run_dir / "last.pt"
        good = f"the last good checkpoint is {last}" if last.is_file() else "no checkpoint had been written yet"
        advice = "Lower trainer.lr" + ("" if self.precision.name == "fp32" else " or use trainer.precision=fp32")
        return UserError(
            f"{error}. Training stopped; {good} (no checkpoint is ever written with non-finite weights). "
            f"{advice} (trainer.lr={self.config.lr:g})."
        )

    def finished(self, clock: Clock) -> str | None:
        """Why training stops now, or None."""
        c, p = self.config, self.progress
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

    def should_validate(self, flops_before: int) -> bool:
        """After an update that began at `flops_before`: at the end of each epoch, every valid_every updates, or as
        the compute passes each 1/validations of max_flops (the same fractions of the budget for every model)."""
        c, p = self.config, self.progress
        if c.validations:
            return int(p.flops * c.validations // c.max_flops) > int(flops_before * c.validations // c.max_flops)
        if c.valid_every:
            return p.step % c.valid_every == 0
        return self.progress.batch_in_epoch == self.batches_in_epoch  # the end of an epoch

    def log_train(self, window: Window, norm: torch.Tensor, bar: ProgressBar) -> None:
        loss, speed = window.take()
        if distributed.agree([not math.isfinite(loss)], self.device)[0]:  # every process, at the same update
            raise NonFiniteLoss(f"the training loss became {loss} by step {self.step}")
        lr = float(self.optimizer.param_groups[0]["lr"])  # a device tensor under CUDA graphs
        scalars = {
            "train/loss": loss,
            "train/lr": lr,
            "train/grad_norm": float(norm),
            "train/tokens_per_second": speed,
            "train/petaflops": self.progress.flops / 1e15,
        }
        self.log.scalars({**scalars, "train/epoch": self.progress.epoch + 1}, self.step)
        bar.loss, bar.speed, bar.lr = loss, speed, lr

    # --- validation -------------------------------------------------------------------------------------------

    def validate(self) -> dict[str, float]:
        """Valid loss, then greedy decoding with BLEU and chrF; logged with samples and heatmaps, and against the
        compute trained so far (`compute/valid_bleu`, its x the teraFLOPs, so runs of different models line up)."""
        metrics = validate(
            self.model,
            self.vocabulary,
            self.valid_dataset,
            self.valid_pairs,
            self.search,
            self.config,
            self.log,
            self.progress.step,
            self.device,
            self.dtype,
            self.valid_alignments,
        )
        progress = self.progress
        metrics["petaflops"] = progress.flops / 1e15
        metrics["epochs"] = progress.epoch + progress.batch_in_epoch / max(self.batches_in_epoch, 1)
        self.log.scalars({"valid/petaflops": metrics["petaflops"], "valid/epochs": metrics["epochs"]}, progress.step)
        self.log.scalars({"compute/valid_bleu": metrics["bleu"]}, round(self.progress.flops / 1e12))
        return metrics

    def record_validation(self, metrics: dict[str, float], improved: bool) -> None:
        """One line of `validations.jsonl` in the run directory: the plain record of each validation (update, epochs,
        compute, minutes trained, loss, BLEU, chrF, AER where measured, its own seconds, whether it was the best so
        far), which the study, the tests and a person read; TensorBoard is for looking. A run resumed from last.pt
        may repeat a validation the stopped process had recorded: a reader keeps the last line of each update."""
        p = self.progress
        line = {
            "step": p.step,
            "epochs": metrics["epochs"],
            "petaflops": metrics["petaflops"],
            "train_minutes": p.train_seconds / 60,
            **{k: metrics[k] for k in RECORDED if k in metrics},
            "best": improved,
        }
        with open(self.run_dir / VALIDATIONS, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")

    def better(self, metrics: dict[str, float]) -> bool:
        """Whether this validation is the best so far by trainer.select: a higher BLEU, a lower loss or AER."""
        key, best = self.config.select, self.progress.best_score
        if key not in metrics:
            raise UserError(
                f"trainer.select={key}: this model's validation measures no {key} (a model without "
                "attention has no AER); select on bleu or loss"
            )
        if best is None:  # the first validation, or a run from before the option (BLEU chose its best)
            best = self.progress.best_bleu if key == "bleu" and self.progress.best_bleu >= 0 else None
        if best is None:
            return True
        return metrics[key] > best if key == "bleu" else metrics[key] < best

    def validate_and_save(self) -> None:
        metrics = distributed.share(self.validate() if self.rank == 0 else None)  # every replica steps the schedule
        self.last_metrics, progress = metrics, self.progress
        improved = self.better(metrics)
        if steps_on_validation(self.schedule):
            self.schedule.step(metrics["bleu"])
        if improved:
            progress.best_bleu, progress.best_score = metrics["bleu"], metrics[self.config.select]
            progress.bad_validations = 0
        else:
            progress.bad_validations += 1
        self.save("last.pt", best=improved, weights=True)  # best.pt names last.pt's file (written once, not twice)
        if self.rank == 0:
            self.record_validation(metrics, improved)
        alignment = f"AER {metrics['aer']:.3f} " if "aer" in metrics else ""
        tqdm.write(
            f"step {self.step:>6} epoch {progress.epoch + 1:>3} | valid loss {metrics['loss']:.3f} "
            f"ppl {metrics['perplexity']:.2f} BLEU {metrics['bleu']:.2f} chrF {metrics['chrf']:.2f} {alignment}"
            f"| {progress.train_seconds / 60:.1f} min trained, {self.tokens_per_second:,.0f} tok/s"
            + (" *" if improved else "")
        )
        log.info("validation at step %d: %s", self.step, {k: round(v, 4) for k, v in metrics.items()})
