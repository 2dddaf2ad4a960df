"""The one training loop for every model: updates, validation with BLEU, checkpoints.

`Trainer` takes a model, a vocabulary, parallel text and a `TrainerConfig`, and needs no Hydra:

    trainer = Trainer(model, vocabulary, train_pairs, valid_pairs, "runs/a", TrainerConfig(max_steps=100))
    trainer.train()

What it writes to TensorBoard goes through `nmt.training.runlog`, decoding and BLEU through `nmt.decoding.translator`,
every file of the run folder through its `nmt.runs.folder.RunFolder`; `nmt.launch.experiment` builds everything from the
command line's config and asks a finished training for what it reports (`report`, `decode`, `close`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import signal
from collections.abc import Generator, Iterator
from dataclasses import asdict
from functools import partial
from pathlib import Path

import torch

from nmt import NonFiniteLoss, UserError, distributed
from nmt.config import TrainerConfig
from nmt.decoding.translator import decode_split
from nmt.device import Precision, place
from nmt.runs import checkpoint
from nmt.runs.folder import RunFolder
from nmt.text.batches import StaticShapes, TokenBatchSampler, UpdateBatches, check_splits
from nmt.text.corpus import Pairs
from nmt.text.data import ParallelDataset, Vocabulary, collate
from nmt.training.meters import Clock, ProgressBar, StopRequests, Window, stop_reason, validation_due
from nmt.training.optim import make_optimizer, make_schedule, steps_on_validation
from nmt.training.runlog import RunLog
from nmt.training.state import WEIGHTS_ONLY, Progress, restore_training, rng_state, training_state
from nmt.training.update import Mode, Update, features_of
from nmt.training.validation import Validator, improves, publish, record

log = logging.getLogger(__name__)


class Trainer:
    """Trains `model` on `train_pairs`, validating on `valid_pairs` and writing checkpoints into `run_dir` (a path, or
    its RunFolder).

    `progress` holds every counter (saved in each checkpoint); `last_metrics` the last validation's figures. Under
    torchrun each process trains its share of every update and rank 0 alone validates and writes.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        vocabulary: Vocabulary,
        train_pairs: Pairs,
        valid_pairs: Pairs,
        run_dir: str | Path | RunFolder,
        config: TrainerConfig | None = None,
        *,
        max_tokens: int = 4096,
        max_len: int = 100,
        seed: int = 1234,
        run_config: dict | None = None,
        valid_alignments: list | None = None,
        mode: Mode | None = None,
        placed: tuple[torch.device, Precision] | None = None,
    ):
        """`max_tokens`, `max_len`: data.max_tokens, data.max_len; `run_config`: the config checkpoints store;
        `valid_alignments`: the valid pairs' gold links (valid AER); `mode`, `placed`: how updates run
        (nmt.training.update.Mode) and the device and precision (nmt.device.place) where decided already, else decided
        here from `config`."""
        self.config = config = config or TrainerConfig()
        config.check()
        self.vocabulary, self.seed = vocabulary, seed
        self.folder = run_dir if isinstance(run_dir, RunFolder) else RunFolder(run_dir)
        self.run_config = run_config or {"trainer": asdict(config)}
        self.place(model, seed, placed)
        self.mode = mode or Mode.decide(config.cuda_graphs, self.device, self.world, config.accumulate, self.dtype)
        self.prepare_data(train_pairs, valid_pairs, max_tokens, max_len, valid_alignments)
        self.optimisation(config)
        self.progress = Progress(static_batches=self.mode.static)
        self.stream: UpdateBatches | None = None  # the batches of every update, from training's start
        self.last_metrics: dict[str, float] = {}
        self.log = RunLog(None)  # opened on the run folder when training starts (rank 0: `open_records`)
        self.stop_signal = 0  # the signal that interrupted training, if one did
        self.writer = checkpoint.Writer(background=self.device.type == "cuda")  # checkpoints: on a GPU, on a thread

    def optimisation(self, config: TrainerConfig) -> None:
        """The optimiser, its schedule, the gradient scaler (fp16 only) and the update that steps them
        (nmt.training.update: eager or captured, as `self.mode` decided)."""
        self.optimizer = make_optimizer(self.model, config, captured=self.mode.capturable(self.device))
        self.schedule = make_schedule(self.optimizer, config)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.dtype == torch.float16)
        self.update = Update(
            self.model,
            self.features,
            self.optimizer,
            self.schedule,
            self.scaler,
            label_smoothing=config.label_smoothing,
            clip_norm=config.clip_norm,
            device=self.device,
            dtype=self.dtype,
            world=self.world,
            mode=self.mode,
        )

    def prepare_data(self, train_pairs: Pairs, valid_pairs: Pairs, max_tokens: int, max_len: int, gold) -> None:
        """The training batches (of static shapes where updates are captured), the valid split and its search,
        each checked: a split too small to train or validate on, or too long to decode, is refused by name."""
        Validator.check_select(self.config.select, gold)
        static = StaticShapes(max_tokens) if self.mode.static else None
        self.collate = static.collate if static else collate
        self.dataset = ParallelDataset(train_pairs, self.vocabulary)
        self.sampler = TokenBatchSampler(self.dataset, max_tokens, True, self.seed, max_len, static)
        if self.sampler.dropped:
            log.info("dropped %d training pairs longer than data.max_len=%d subwords", self.sampler.dropped, max_len)
        corpus = self.run_config.get("data", {}).get("corpus")
        valid_option = {"sample": "data.sizes.valid", "files": "the data.valid files"}.get(corpus, "the valid split")
        check_splits(self.sampler, valid_pairs, self.world, max_len, valid_option)
        self.validator = Validator(self.vocabulary, valid_pairs, self.config, self.device, self.dtype, gold)
        self.search = self.validator.search  # the test split is decoded as the valid one

    def place(self, model: torch.nn.Module, seed: int, placed: tuple | None = None) -> None:
        """The model on its device in the chosen precision (nmt.device.place, once); under torchrun, wrapped for
        data parallelism (nmt.training.update.features_of)."""
        config = self.config
        self.device, self.precision = placed or place(config.device, config.precision, config.deterministic)
        self.dtype = self.precision.dtype
        self.model = model.to(self.device)
        self.world, self.rank = distributed.world_size(), distributed.rank()
        self.features = features_of(self.model, self.device, self.world, self.rank, seed)

    @property
    def step(self) -> int:
        return self.progress.step

    @property
    def tokens_per_second(self) -> float:
        """Target tokens (eos included, padding not) per second of training, validation time excluded."""
        return self.progress.tokens_trained / max(self.progress.train_seconds, 1e-9)

    def state(self, ranks: list[dict] | None = None) -> dict:
        """The full training state (with every process's random state, `ranks`, under data parallelism); refuses
        (NonFiniteLoss) to give one with NaN or infinite weights."""
        if not bool(torch.stack([p.detach().isfinite().all() for p in self.model.parameters()]).all()):
            raise NonFiniteLoss(f"the weights became NaN or infinite by step {self.step}")
        parts = self.model, self.optimizer, self.schedule, self.scaler, self.progress, self.last_metrics
        return training_state(*parts, self.run_config, self.vocabulary, ranks)

    def save(self, best: bool = False, weights: bool = False) -> None:
        """Write the full checkpoint, last.pt, atomically (RunFolder.write_last: the last.pt it replaces stays as
        previous.pt); `best`: it is also best.pt. `weights`: first this validation's weights as step<N>.pt (no
        optimizer: for averaging), the newest `keep_checkpoints` kept and those ending at the best. Every process
        calls it: each one's random state goes into the checkpoint. On a GPU the files are written on a thread of
        their own (checkpoint.Writer) from one copy of the state on the host."""
        ranks = distributed.gather(rng_state(self.device)) if self.world > 1 else None
        if self.rank != 0:
            return
        state = self.writer.own(self.state(ranks))
        if weights and self.config.keep_checkpoints > 0:
            only = {k: v for k, v in state.items() if k in WEIGHTS_ONLY}
            best_at = None if best else self.folder.best_step()  # the best validation's update (None: this one)
            keep = self.config.keep_checkpoints
            self.writer.write(partial(self.folder.write_weights, only, self.progress.step, keep, best_at))
        self.writer.write(partial(self.folder.write_last, state, best))

    def restore(self, path: str | Path) -> None:
        """Continue from the full checkpoint at `path` (see nmt.runs.resume for which one and whether it may)."""
        self.restore_payload(Path(path), checkpoint.load(path))

    def restore_payload(self, path: Path, payload: dict) -> None:
        try:
            self.progress, self.last_metrics = restore_training(
                payload, self.model, self.optimizer, self.schedule, self.scaler, self.rank, self.device, self.seed
            )
        except (KeyError, RuntimeError, ValueError) as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise UserError(f"{path}: does not fit this model and trainer ({first})") from None
        if self.progress.batches_of(self.sampler.static is not None):
            log.warning("%s: its epoch was cut in other batches (trainer.cuda_graphs); the next epoch starts", path)
        log.info("resumed from %s at step %d (epoch %d)", path, self.progress.step, self.progress.epoch + 1)

    def updates(self) -> Iterator[tuple]:
        """(this process's batches, target tokens of the update, of this process's part, batches in the update, FLOPs
        of the update) from where training stands, epoch after epoch (nmt.text.batches.UpdateBatches)."""
        self.stream = UpdateBatches(
            self.dataset, self.sampler, self.collate, self.config.accumulate, self.progress, self.device
        )
        return iter(self.stream.of(self.model.training_flops, self.world, self.rank))

    @property
    def batches_in_epoch(self) -> int:
        """Batches of the epoch being trained (0 before training starts)."""
        return self.stream.batches_in_epoch if self.stream else 0

    def open_records(self, hparams: dict | None = None) -> None:
        """The run folder's records as this invocation starts (rank 0): the validation records as the update it
        starts from left them, this invocation in provenance.json, and the TensorBoard log opened (with `hparams`,
        the run's options, in HParams)."""
        self.folder.path.mkdir(parents=True, exist_ok=True)
        self.folder.continue_from(self.step)
        self.folder.record_provenance(self.device, self.precision.name)
        self.log = RunLog(self.folder.path)
        if hparams:
            self.log.hparams(hparams)

    def train(self, hparams: dict | None = None) -> str:
        """Train until a stop condition; returns the reason. Ctrl-C saves last.pt and returns "interrupted".
        `hparams`: the run's options, for TensorBoard's HParams."""
        return drained(self.steps(hparams))

    def steps(self, hparams: dict | None = None, stop: StopRequests | None = None) -> Generator[None, None, str]:
        """`train`, one update per `next`: the generator yields after each update (its clock paused meanwhile, so
        that runs trained in turn in one process each count their own time) and returns why it stopped. `stop`: the
        stop requests of runs trained together (nmt.launch.pack), shared, so that a signal stops every one of them; by
        default the run's own."""
        if self.rank == 0 and self.log.writer is None:
            self.open_records(hparams)
        clock = Clock(self.progress)
        reason = distributed.share(stop_reason(self.config, self.progress, clock))
        window = Window(self.device)
        bar = ProgressBar(self.config, self.progress, enabled=self.config.progress and self.rank == 0)
        try:
            with contextlib.nullcontext(stop) if stop is not None else StopRequests() as stop:
                for batches, tokens, local_tokens, count, flops in self.updates() if reason is None else ():
                    loss_sum, norm = self.update(batches, tokens)  # nmt.training.update: eager or captured
                    self.progress.counted(count, tokens, flops)
                    window.add(loss_sum, local_tokens)
                    if self.progress.step % self.config.log_every == 0:
                        self.log_train(window, norm, bar)
                    before = self.progress.flops - flops  # the compute when this update began
                    if validation_due(self.config, self.progress, before, self.batches_in_epoch):
                        with clock.paused():
                            self.validate_and_save()
                        window.restart()
                        bar.valid_bleu = self.last_metrics["bleu"]
                    reason = self.stop_or_signal(stop, clock)
                    bar.show(self.batches_in_epoch, clock)
                    if reason is not None:
                        break
                    with clock.paused():
                        yield
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
            raise non_finite(error, self.folder.last, self.precision.name, self.config.lr) from None
        finally:
            bar.close()
        log.info("stopped: %s", reason)
        return reason or "done"

    def stop_or_signal(self, stop: StopRequests, clock: Clock) -> str | None:
        """Why training stops after this update, None to go on: rank 0's clock and patience decide, every process
        agrees; Ctrl-C or SIGTERM on any process stops every process at this update (KeyboardInterrupt)."""
        reason = stop_reason(self.config, self.progress, clock) if self.rank == 0 else None
        signal_number, done = distributed.agree([stop.requested or 0, reason is not None], self.device)
        if signal_number:
            self.stop_signal = signal_number
            raise KeyboardInterrupt
        return (reason or "rank 0 stopped training") if done else None

    def save_interrupted(self) -> None:
        try:
            self.save()
        except NonFiniteLoss as error:
            self.writer.wait()
            raise non_finite(error, self.folder.last, self.precision.name, self.config.lr) from None
        self.writer.wait()  # the command says where it is and how to continue (nmt.launch.experiment)

    def log_train(self, window: Window, norm: torch.Tensor, bar: ProgressBar) -> None:
        loss, speed = window.take()
        if distributed.agree([not math.isfinite(loss)], self.device)[0]:  # every process, at the same update
            raise NonFiniteLoss(f"the training loss became {loss} by step {self.step}")
        lr = float(self.optimizer.param_groups[0]["lr"])  # a device tensor under CUDA graphs
        figures = {"loss": loss, "lr": lr, "grad_norm": float(norm), "tokens_per_second": speed}
        figures |= {"petaflops": self.progress.flops / 1e15, "epoch": self.progress.epoch + 1}
        self.log.train(figures, self.step)
        bar.loss, bar.speed, bar.lr = loss, speed, lr

    def validate(self) -> dict[str, float]:
        """Valid loss, then greedy decoding with BLEU and chrF (nmt.training.validation), and where training stands."""
        metrics = self.validator(self.model, self.log, self.progress.step)
        progress = self.progress
        metrics["petaflops"] = progress.flops / 1e15
        metrics["epochs"] = progress.epoch + progress.batch_in_epoch / max(self.batches_in_epoch, 1)
        return metrics

    def validate_and_save(self) -> None:
        """A validation (rank 0's, shared: every replica steps the schedule), patience, the checkpoints, then the
        validation's one record to every sink (nmt.training.validation.publish)."""
        metrics = distributed.share(self.validate() if self.rank == 0 else None)
        self.last_metrics, progress = metrics, self.progress
        improved = improves(self.config.select, metrics, progress)
        if steps_on_validation(self.schedule):
            self.schedule.step(metrics["bleu"])
        if improved:
            progress.best_bleu, progress.best_score = metrics["bleu"], metrics[self.config.select]
            progress.bad_validations = 0
        else:
            progress.bad_validations += 1
        self.save(best=improved, weights=True)  # best.pt names last.pt's file (written once, not twice)
        if self.rank == 0:
            figures = record(metrics, progress, improved, self.tokens_per_second)
            publish(figures, self.log, self.folder.append_validation)

    def report(self) -> dict[str, float]:
        """What a finished training reports, once every checkpoint it gave is on disk: its best valid BLEU, minutes,
        updates, speed and parameters."""
        self.writer.wait()
        return {
            "valid/best_bleu": self.progress.best_bleu,
            "train/minutes": self.progress.train_seconds / 60,
            "train/steps": self.progress.step,
            "train/tokens_per_second": self.tokens_per_second,
            "parameters": sum(p.numel() for p in self.model.parameters()),
        }

    def decode(self, pairs: Pairs, weights: dict | None = None, progress: str = "") -> tuple:
        """`pairs` decoded as validation decodes (greedy, the trainer's batches and limits), with `weights` loaded
        first where given: (hypotheses, references, scores) of nmt.decoding.translator.decode_split."""
        if weights is not None:
            self.model.load_state_dict(weights)
        shown = progress if self.config.progress else ""
        return decode_split(self.model, self.vocabulary, pairs, self.search, self.device, self.dtype, shown)

    def close(self, results: dict | None = None) -> None:
        """Every checkpoint on disk and the TensorBoard log closed; `results`: the finished run's figures, logged
        first as its table."""
        self.writer.wait()
        if results:
            self.log.results(results, self.step)
        self.log.close()


def drained(steps: Generator[None, None, str]) -> str:
    """A generator of updates (`Trainer.steps`) run to its end: what it returned."""
    while True:
        try:
            next(steps)
        except StopIteration as end:
            return end.value


def non_finite(error: NonFiniteLoss, last: Path, precision: str, lr: float) -> UserError:
    """What a user reads when the loss became NaN or infinite: where the last good checkpoint is (`last`, if one was
    written) and what to change."""
    good = f"the last good checkpoint is {last}" if last.is_file() else "no checkpoint had been written yet"
    advice = "Lower trainer.lr" + ("" if precision == "fp32" else " or use trainer.precision=fp32")
    return UserError(
        f"{error}. Training stopped; {good} (no checkpoint is ever written with non-finite weights). "
        f"{advice} (trainer.lr={lr:g})."
    )
