"""The one training loop for every model: optimisation, validation with BLEU, checkpoints and TensorBoard.

`train(cfg)` is the entry point behind `python train.py`; `Trainer` itself takes named arguments and can be driven
from a test or a REPL without Hydra.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sacrebleu
import torch
from omegaconf import DictConfig, OmegaConf
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from nmt import UserError, build, checkpoint, distributed
from nmt.data import BOS_ID, EOS_ID, PAD_ID, Batch, Pairs, ParallelDataset, TokenBatchSampler, Vocabulary, collate
from nmt.loss import linear_cross_entropy
from nmt.plot import attention_figure, heads_figure
from nmt.search import Hypothesis, beam_search, greedy

log = logging.getLogger(__name__)


@dataclass
class TrainerOptions:
    """The `trainer` config group, typed. See configs/trainer/default.yaml for what each value means."""

    optimizer: str = "adam"
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 0.0
    schedule: str = "plateau"
    warmup_steps: int = 4000
    plateau_factor: float = 0.5
    plateau_patience: int = 1
    min_lr: float = 1e-5
    clip_norm: float = 1.0
    label_smoothing: float = 0.1
    max_epochs: int = 0
    max_steps: int = 0
    max_minutes: float = 0.0
    valid_every: int = 0
    patience: int = 0
    precision: str = "fp32"
    device: str = "auto"
    resume: bool | str = False
    log_every: int = 20
    valid_max_tokens: int = 8000
    decode_ratio: float = 1.5
    decode_extra: int = 10
    num_samples: int = 4
    num_plots: int = 3
    progress: bool = True
    test_at_end: bool = True
    keep_checkpoints: int = 5
    accumulate: int = 1


def autocast(device: torch.device, dtype: torch.dtype):
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def make_optimizer(model: torch.nn.Module, options: TrainerOptions) -> torch.optim.Optimizer:
    kinds = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}
    if options.optimizer not in kinds:
        raise UserError(f"trainer.optimizer={options.optimizer!r}: use adam or adamw")
    return kinds[options.optimizer](
        model.parameters(), lr=options.lr, betas=tuple(options.betas), weight_decay=options.weight_decay
    )


def make_schedule(optimizer: torch.optim.Optimizer, options: TrainerOptions):
    """constant; plateau (halve the rate when valid BLEU stops improving); inverse_sqrt (Vaswani et al. eq. 3 shape)."""
    if options.schedule == "constant":
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    if options.schedule == "plateau":
        return torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer,
            mode="max",
            factor=options.plateau_factor,
            patience=options.plateau_patience,
            min_lr=options.min_lr,
        )
    if options.schedule == "inverse_sqrt":
        warmup = max(1, options.warmup_steps)
        return torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: min((step + 1) / warmup, math.sqrt(warmup / (step + 1)))
        )
    raise UserError(f"trainer.schedule={options.schedule!r}: use constant, plateau or inverse_sqrt")


def translate_pairs(
    model,
    vocabulary: Vocabulary,
    sources: list[str],
    device: torch.device,
    dtype: torch.dtype,
    max_tokens: int,
    ratio: float,
    extra: int,
    beam_size: int = 1,
    alpha: float = 0.6,
):
    """Translations of raw sentences, in their order: (detokenized strings, hypotheses). Greedy for beam size 1.

    Sentences are decoded in length-sorted batches of at most `max_tokens` source tokens times the beam size.
    """
    hypotheses = [Hypothesis([], 0.0, None) for _ in sources]  # an empty line translates to an empty line
    texts = [i for i, s in enumerate(sources) if s.strip()]
    if not texts:
        return ["" for _ in sources], hypotheses
    dataset = ParallelDataset([(sources[i], "") for i in texts], vocabulary)
    budget = max(max_tokens // beam_size, int(dataset.source_lengths.max()) * 2)
    sampler = TokenBatchSampler(dataset, budget, shuffle=False)
    model.eval()
    with torch.no_grad(), autocast(device, dtype):
        for indices in sampler:
            batch = collate([dataset[i] for i in indices]).to(device)
            if beam_size == 1:
                found = greedy(model, batch.source, batch.source_mask, ratio, extra)
            else:
                found = beam_search(model, batch.source, batch.source_mask, beam_size, alpha, ratio, extra)
                found = [n_best[0] for n_best in found]
            for index, hypothesis in zip(indices, found):
                hypotheses[texts[index]] = hypothesis
    return vocabulary.decode_target([h.tokens for h in hypotheses]), hypotheses


def score(hypotheses: list[str], references: list[str]) -> tuple[sacrebleu.metrics.base.Score, ...]:
    bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
    return bleu.corpus_score(hypotheses, [references]), chrf.corpus_score(hypotheses, [references]), bleu, chrf


class NonFiniteLoss(Exception):
    pass


class Features(torch.nn.Module):
    """`model.features` as a module's forward, so that DistributedDataParallel can wrap it (the output layer and the
    loss run after it, fused, in nmt/loss.py; DDP's gradient hooks fire for the output weights all the same)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, source: torch.Tensor, source_mask: torch.Tensor, target_in: torch.Tensor):
        return self.model.features(source, source_mask, target_in)


class NoWriter:
    """What processes other than rank 0 log to: nothing."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


class Trainer:
    def __init__(
        self,
        model: torch.nn.Module,
        vocabulary: Vocabulary,
        train_pairs: Pairs,
        valid_pairs: Pairs,
        run_dir: str | Path,
        options: TrainerOptions,
        max_tokens: int,
        max_len: int,
        seed: int,
        config: dict,
    ):
        self.options, self.vocabulary, self.run_dir = options, vocabulary, Path(run_dir)
        self.config, self.seed = config, seed
        self.device = distributed.setup(build.device(options.device))
        self.dtype = build.precision(options.precision)
        if self.dtype == torch.float16 and self.device.type == "cpu":
            raise UserError("trainer.precision=fp16 needs a GPU; on a CPU use bf16")
        if options.accumulate < 1:
            raise UserError(f"trainer.accumulate={options.accumulate}: accumulate at least 1 batch per update")
        self.model = model.to(self.device)
        self.world, self.rank = distributed.world_size(), distributed.rank()
        self.features: torch.nn.Module = Features(self.model)
        if self.world > 1:  # DDP starts every replica from rank 0's weights; each draws its own dropout masks
            self.features = torch.nn.parallel.DistributedDataParallel(
                self.features, device_ids=[self.device] if self.device.type == "cuda" else None, broadcast_buffers=False
            )
            torch.manual_seed(seed + self.rank)
        self.valid_pairs = valid_pairs
        self.dataset = ParallelDataset(train_pairs, vocabulary)
        self.sampler = TokenBatchSampler(self.dataset, max_tokens, shuffle=True, seed=seed, max_len=max_len)
        if self.sampler.dropped:
            log.info("dropped %d training pairs longer than data.max_len=%d subwords", self.sampler.dropped, max_len)
        self.valid_dataset = ParallelDataset(valid_pairs, vocabulary)
        self.optimizer = make_optimizer(self.model, options)
        self.schedule = make_schedule(self.optimizer, options)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.dtype == torch.float16)
        self.step = self.epoch = self.batch_in_epoch = 0
        self.batches_in_epoch = 0  # set when an epoch's batches are drawn, so no step re-sorts the corpus
        self.best_bleu, self.bad_validations, self.train_seconds, self.tokens_trained = -1.0, 0, 0.0, 0
        self.last_metrics: dict[str, float] = {}
        self.writer: SummaryWriter | None = None
        self.logged_signature = False

    # --- checkpoints ------------------------------------------------------------------------------------------

    def state(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "schedule": self.schedule.state_dict(),
            "scaler": self.scaler.state_dict(),
            "progress": {
                "step": self.step,
                "epoch": self.epoch,
                "batch_in_epoch": self.batch_in_epoch,
                "best_bleu": self.best_bleu,
                "bad_validations": self.bad_validations,
                "train_seconds": self.train_seconds,
                "tokens_trained": self.tokens_trained,
            },
            "metrics": dict(self.last_metrics),
            "rng": {
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            },
            "config": self.config,
            "vocabulary": {"source": self.vocabulary.source_model, "target": self.vocabulary.target_model},
        }

    def save(self, name: str) -> None:
        """Write a full checkpoint atomically. The `last.pt` it replaces stays as `previous.pt`, which resuming falls
        back to should `last.pt` ever be unreadable (a disk error, a copy cut short)."""
        if self.rank != 0:
            return
        path = self.run_dir / name
        if name == "last.pt" and path.is_file():
            path.replace(self.run_dir / "previous.pt")
        checkpoint.save(self.state(), path)

    def save_weights(self) -> None:
        """The weights of this validation as `step<N>.pt` (no optimizer: for averaging), keeping the newest few."""
        keep = self.options.keep_checkpoints
        if keep <= 0 or self.rank != 0:
            return
        state = {k: v for k, v in self.state().items() if k in ("model", "progress", "config", "vocabulary")}
        checkpoint.save(state, self.run_dir / f"step{self.step:08d}.pt")
        for old in sorted(self.run_dir.glob("step*.pt"))[:-keep]:
            old.unlink()

    def restore(self, path: str | Path) -> None:
        payload = checkpoint.load(path)
        self.model.load_state_dict(payload["model"])
        self.optimizer.load_state_dict(payload["optimizer"])
        self.schedule.load_state_dict(payload["schedule"])
        self.scaler.load_state_dict(payload["scaler"])
        progress = payload["progress"]
        self.step, self.epoch, self.batch_in_epoch = progress["step"], progress["epoch"], progress["batch_in_epoch"]
        self.best_bleu, self.bad_validations = progress["best_bleu"], progress["bad_validations"]
        self.train_seconds, self.tokens_trained = progress["train_seconds"], progress["tokens_trained"]
        self.last_metrics = dict(payload.get("metrics", {}))
        torch.set_rng_state(payload["rng"]["torch"])
        if payload["rng"]["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(payload["rng"]["cuda"])
        log.info("resumed from %s at step %d (epoch %d)", path, self.step, self.epoch + 1)

    # --- training ---------------------------------------------------------------------------------------------

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
                loss_sum = self.loss(batch, self.options.label_smoothing, train=True)
                self.scaler.scale(loss_sum * scale).backward()
            loss_total += loss_sum.detach()
        self.scaler.unscale_(self.optimizer)
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.options.clip_norm or float("inf"))
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if not isinstance(self.schedule, torch.optim.lr_scheduler.ReduceLROnPlateau):
            self.schedule.step()
        return loss_total, norm.detach()

    def loss(self, batch: Batch, smoothing: float, train: bool = False) -> torch.Tensor:
        """Summed cross-entropy of the batch's real target tokens: the model's features, then the output layer and the
        loss fused (nmt/loss.py), so the (tokens, vocabulary) logits are never held whole. `train` goes through
        the DDP wrapper when there is one."""
        features_of = self.features if train else self.model.features
        with autocast(self.device, self.dtype):
            features, _ = features_of(batch.source, batch.source_mask, batch.target_in)  # (B, T, F)
        real = batch.target_out != PAD_ID
        output = self.model.output
        return linear_cross_entropy(
            features[real], output.weight, output.bias, batch.target_out[real], smoothing, self.dtype
        )

    def finished(self, started: float) -> str | None:
        """Why training stops now, or None."""
        o = self.options
        if o.max_steps and self.step >= o.max_steps:
            return f"reached trainer.max_steps={o.max_steps}"
        if o.max_epochs and self.epoch >= o.max_epochs:
            return f"reached trainer.max_epochs={o.max_epochs}"
        if o.max_minutes and self.train_seconds + time.perf_counter() - started >= o.max_minutes * 60:
            return f"reached trainer.max_minutes={o.max_minutes:g}"
        if o.patience and self.bad_validations >= o.patience:
            return f"valid BLEU did not improve in {o.patience} validations (trainer.patience)"
        return None

    def updates(self):
        """(this process's batches, target tokens of the update, of this process's part, batches in the update) from
        where training stands, epoch after epoch. An update takes `accumulate` x processes batches of the epoch's
        order; process r gets every r-th. Token counts come from the corpus lengths, not from the tensors (no sync)."""
        pin = self.device.type == "cuda"
        per_update = self.options.accumulate * self.world
        lengths = self.dataset.target_lengths  # eos included
        while True:
            self.sampler.set_epoch(self.epoch)
            epoch_batches = self.sampler.batches()
            rest = len(epoch_batches) % per_update
            self.batches_in_epoch = len(epoch_batches) - (rest if rest < self.world else 0)  # none may go empty
            groups = [
                epoch_batches[start : start + per_update]
                for start in range(self.batch_in_epoch, self.batches_in_epoch, per_update)
            ]
            mine = [batch for group in groups for batch in group[self.rank :: self.world]]
            # A generator of its own: a DataLoader otherwise draws its seed from the global RNG, which would shift
            # the dropout masks of a resumed run against an uninterrupted one.
            loader = torch.utils.data.DataLoader(
                self.dataset, batch_sampler=mine, collate_fn=collate, pin_memory=pin, generator=torch.Generator()
            )
            loader = iter(loader)
            for group in groups:
                indices = group[self.rank :: self.world]
                batches = [next(loader).to(self.device, non_blocking=pin) for _ in indices]
                tokens = int(sum(lengths[i].sum() for i in map(np.asarray, group)))
                local = int(sum(lengths[i].sum() for i in map(np.asarray, indices)))
                yield batches, tokens, local, len(group)
            self.epoch += 1
            self.batch_in_epoch = 0

    @contextlib.contextmanager
    def ctrl_c_between_updates(self):
        """While training, the first Ctrl-C only sets `self.interrupted`, which the loop checks between updates (so it
        never lands inside a checkpoint write, nor gets lost inside a library call); a second one stops at once."""
        self.interrupted = False
        if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
            yield
            return
        default_handler = signal.getsignal(signal.SIGINT)

        def request_stop(signum, frame):
            self.interrupted = True
            signal.signal(signal.SIGINT, default_handler)

        signal.signal(signal.SIGINT, request_stop)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, default_handler)

    def train(self) -> str:
        """Train until a stop condition; returns the reason. Ctrl-C saves `last.pt` and returns."""
        self.writer = SummaryWriter(str(self.run_dir)) if self.rank == 0 else NoWriter()
        started = time.perf_counter()
        reason = distributed.share(self.finished(started))
        window_loss, window_tokens, window_start = torch.zeros((), device=self.device), 0, time.perf_counter()
        bar = tqdm(
            total=self.options.max_steps or None,
            initial=self.step,
            disable=not self.options.progress or self.rank != 0,
            unit="step",
            dynamic_ncols=True,
        )
        try:
            with self.ctrl_c_between_updates():
                for batches, tokens, local_tokens, count in self.updates() if reason is None else ():
                    if self.interrupted:
                        raise KeyboardInterrupt
                    loss_sum, norm = self.train_step(batches, tokens)
                    self.step += 1
                    self.batch_in_epoch += count
                    window_loss += loss_sum
                    window_tokens += local_tokens
                    self.tokens_trained += tokens
                    bar.update(1)
                    if self.step % self.options.log_every == 0:
                        self.log_train(window_loss, window_tokens, time.perf_counter() - window_start, norm, bar)
                        window_loss.zero_()
                        window_tokens, window_start = 0, time.perf_counter()
                    if self.should_validate():
                        self.train_seconds += time.perf_counter() - started
                        self.validate_and_save()
                        started = time.perf_counter()
                        window_start = started
                    reason = distributed.share(self.finished(started))  # rank 0's clock and patience decide for all
                    if reason:
                        break
        except KeyboardInterrupt:
            self.train_seconds += time.perf_counter() - started
            self.save("last.pt")
            log.info(
                "interrupted at step %d; saved %s. Continue with trainer.resume=true.",
                self.step,
                self.run_dir / "last.pt",
            )
            return "interrupted"
        except NonFiniteLoss as error:
            raise UserError(
                f"{error}. Training stopped; the last good checkpoint is {self.run_dir / 'last.pt'}. "
                "Lower trainer.lr or use trainer.precision=fp32."
            ) from None
        finally:
            bar.close()
        self.train_seconds += time.perf_counter() - started
        if self.last_metrics.get("step") != self.step:
            self.validate_and_save()
        log.info("stopped: %s", reason)
        return reason or "done"

    @property
    def tokens_per_second(self) -> float:
        """Target tokens (eos included, padding not) per second of training, validation time excluded."""
        return self.tokens_trained / max(self.train_seconds, 1e-9)

    def should_validate(self) -> bool:
        if self.options.valid_every:
            return self.step % self.options.valid_every == 0
        return self.batch_in_epoch == self.batches_in_epoch  # the end of an epoch

    def log_train(self, loss_sum, tokens: int, seconds: float, norm, bar) -> None:
        loss = loss_sum.item() / max(tokens, 1)
        if not math.isfinite(loss):
            raise NonFiniteLoss(f"the training loss became {loss} by step {self.step}")
        speed = tokens / max(seconds, 1e-9)
        lr = self.optimizer.param_groups[0]["lr"]
        for tag, value in (
            ("train/loss", loss),
            ("train/lr", lr),
            ("train/grad_norm", float(norm)),
            ("train/tokens_per_second", speed),
            ("train/epoch", self.epoch + 1),
        ):
            self.writer.add_scalar(tag, value, self.step)
        bar.set_postfix(epoch=self.epoch + 1, loss=f"{loss:.3f}", tok_s=f"{speed:,.0f}", lr=f"{lr:.2g}")

    # --- validation -------------------------------------------------------------------------------------------

    @torch.no_grad()
    def valid_loss(self) -> float:
        self.model.eval()
        sampler = TokenBatchSampler(
            self.valid_dataset,
            max(self.options.valid_max_tokens, 2 * int(self.valid_dataset.target_lengths.max())),
            shuffle=False,
        )
        total, tokens = 0.0, 0
        for indices in sampler:
            batch = collate([self.valid_dataset[i] for i in indices]).to(self.device)
            total += self.loss(batch, smoothing=0.0).item()
            tokens += batch.target_tokens
        return total / max(tokens, 1)

    def validate(self) -> dict[str, float]:
        started = time.perf_counter()
        loss = self.valid_loss()
        sources = [s for s, _ in self.valid_pairs]
        references = [t for _, t in self.valid_pairs]
        hypotheses, decoded = translate_pairs(
            self.model,
            self.vocabulary,
            sources,
            self.device,
            self.dtype,
            self.options.valid_max_tokens,
            self.options.decode_ratio,
            self.options.decode_extra,
        )
        bleu, chrf, bleu_metric, chrf_metric = score(hypotheses, references)
        if not self.logged_signature:
            log.info(
                "sacrebleu signatures: BLEU %s | chrF %s", bleu_metric.get_signature(), chrf_metric.get_signature()
            )
            self.writer.add_text(
                "valid/signature",
                f"BLEU `{bleu_metric.get_signature()}`, chrF `{chrf_metric.get_signature()}`",
                self.step,
            )
            self.logged_signature = True
        metrics = {
            "step": self.step,
            "loss": loss,
            "perplexity": math.exp(min(loss, 50)),
            "bleu": bleu.score,
            "chrf": chrf.score,
            "seconds": time.perf_counter() - started,
        }
        for name in ("loss", "perplexity", "bleu", "chrf"):
            self.writer.add_scalar(f"valid/{name}", metrics[name], self.step)
        self.log_samples(sources, references, hypotheses)
        self.log_attention(sources, decoded)
        return metrics

    def log_samples(self, sources: list[str], references: list[str], hypotheses: list[str]) -> None:
        rows = ["| source | reference | hypothesis |", "|---|---|---|"]
        for i in range(min(self.options.num_samples, len(sources))):
            rows.append(f"| {sources[i]} | {references[i]} | {hypotheses[i]} |".replace("\n", " "))
        self.writer.add_text("valid/samples", "\n".join(rows), self.step)

    def log_attention(self, sources: list[str], decoded) -> None:
        """Heatmaps for the first few validation sentences, the same ones at every validation: whatever the model's
        `attention_maps` returns for its own greedy output (nothing for a model without attention)."""
        self.model.eval()
        for i in range(min(self.options.num_plots, len(sources))):
            source_ids = self.vocabulary.encode_source([sources[i]])[0] or [EOS_ID]
            source = torch.tensor([source_ids], device=self.device)
            target_in = torch.tensor([[BOS_ID, *decoded[i].tokens]], device=self.device)
            with autocast(self.device, self.dtype):
                maps = self.model.attention_maps(source, source != PAD_ID, target_in)
            source_pieces = [self.vocabulary.source.id_to_piece(t) for t in source_ids]
            target_pieces = [self.vocabulary.target.id_to_piece(t) for t in decoded[i].tokens] + ["</s>"]
            for name, weights in maps.items():
                weights = weights[0].float().cpu().numpy()  # (heads or 1, rows, S)
                rows = source_pieces if name.startswith("encoder_self") else target_pieces
                if weights.shape[0] == 1:
                    figure = attention_figure(weights[0], source_pieces, rows, title=name)
                else:
                    figure = heads_figure(weights, source_pieces, rows, title=name)
                self.writer.add_figure(f"valid/attention/{name}/{i}", figure, self.step)

    def validate_and_save(self) -> None:
        metrics = distributed.share(self.validate() if self.rank == 0 else None)  # every replica steps the schedule
        self.last_metrics = metrics
        improved = metrics["bleu"] > self.best_bleu
        if isinstance(self.schedule, torch.optim.lr_scheduler.ReduceLROnPlateau):
            self.schedule.step(metrics["bleu"])
        if improved:
            self.best_bleu, self.bad_validations = metrics["bleu"], 0
            self.save("best.pt")
        else:
            self.bad_validations += 1
        self.save_weights()
        self.save("last.pt")
        mark = " *" if improved else ""
        tqdm.write(
            f"step {self.step:>6} epoch {self.epoch + 1:>3} | valid loss {metrics['loss']:.3f} "
            f"ppl {metrics['perplexity']:.2f} BLEU {metrics['bleu']:.2f} chrF {metrics['chrf']:.2f} "
            f"| {self.train_seconds / 60:.1f} min trained, {self.tokens_per_second:,.0f} tok/s{mark}"
        )
        log.info("validation at step %d: %s", self.step, {k: round(v, 4) for k, v in metrics.items()})


def evaluate_split(model, vocabulary: Vocabulary, pairs: Pairs, device, dtype, options: TrainerOptions):
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    hypotheses, _ = translate_pairs(
        model, vocabulary, sources, device, dtype, options.valid_max_tokens, options.decode_ratio, options.decode_extra
    )
    return hypotheses, score(hypotheses, references)


def set_seed(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)


def parameter_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def train(cfg: DictConfig, run_dir: str | Path) -> dict[str, float]:
    """Build everything from the composed config, train, and report test BLEU of the best checkpoint."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    options = TrainerOptions(**OmegaConf.to_container(cfg.trainer, resolve=True))
    set_seed(cfg.seed)
    distributed.setup(build.device(options.device))
    run_dir = Path(distributed.share(str(run_dir)))  # under torchrun, every process works in rank 0's run directory
    if not distributed.is_main():
        distributed.barrier()  # rank 0 downloads the corpus and trains the subword models first; the rest reuse them
    splits = build.load_corpus(cfg.data)
    vocabulary = build.vocabulary(cfg.data, splits)
    if distributed.is_main():
        vocabulary.save(run_dir)
        distributed.barrier()
    log.info(
        "corpus: %d train / %d valid / %d test pairs; vocabulary %d source / %d target subwords",
        len(splits.train),
        len(splits.valid),
        len(splits.test),
        vocabulary.source_size,
        vocabulary.target_size,
    )
    model = build.model(cfg.model, vocabulary)
    log.info("model %s: %s parameters", cfg.model._target_, f"{parameter_count(model):,}")
    config = OmegaConf.to_container(cfg, resolve=True)
    trainer = Trainer(
        model,
        vocabulary,
        splits.train,
        splits.valid,
        run_dir,
        options,
        cfg.data.max_tokens,
        cfg.data.max_len,
        cfg.seed,
        config,
    )
    resume = options.resume
    if resume is True or resume == "true":
        if (run_dir / "last.pt").is_file() or (run_dir / "previous.pt").is_file():
            restore_latest_good(trainer, run_dir)
        else:
            log.info("trainer.resume=true but %s has no last.pt yet; starting a new run", run_dir)
    elif resume:
        trainer.restore(build.resolve_path(str(resume)))
    reason = trainer.train()
    if trainer.world > 1:
        if not distributed.replicas_agree(model):
            raise RuntimeError("the data-parallel replicas ended with different weights")
        log.info("all %d replicas hold the same weights", trainer.world)
        if not distributed.is_main():
            return {}
    results = {
        "valid/best_bleu": trainer.best_bleu,
        "train/minutes": trainer.train_seconds / 60,
        "train/steps": trainer.step,
        "train/tokens_per_second": trainer.tokens_per_second,
        "parameters": parameter_count(model),
    }
    if reason == "interrupted" or not options.test_at_end:
        trainer.writer.close()
        return results
    best = checkpoint.load(run_dir / "best.pt")
    trainer.model.load_state_dict(best["model"])
    hypotheses, (bleu, chrf, bleu_metric, _) = evaluate_split(
        trainer.model, vocabulary, splits.test, trainer.device, trainer.dtype, options
    )
    (run_dir / "best.test.hyp").write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
    results.update({"test/bleu": bleu.score, "test/chrf": chrf.score, "best/step": best["progress"]["step"]})
    summary = {**results, "model": cfg.model._target_, "signature": str(bleu_metric.get_signature())}
    (run_dir / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
    log.info(
        "test (best checkpoint, greedy): BLEU %.2f chrF %.2f  [%s]", bleu.score, chrf.score, bleu_metric.get_signature()
    )
    print(f"test BLEU {bleu.score:.2f} chrF {chrf.score:.2f} (best checkpoint, greedy; {bleu_metric.get_signature()})")
    hparams = {k: v for k, v in flatten({"model": config["model"], "trainer": config["trainer"]}).items()}
    trainer.writer.add_hparams(hparams, {f"hparam/{k}": v for k, v in results.items()}, run_name=".")
    trainer.writer.close()
    return results


def restore_latest_good(trainer: Trainer, run_dir: Path) -> None:
    """Resume from `last.pt`, or from `previous.pt` (one validation older) when `last.pt` is missing or unreadable."""
    try:
        trainer.restore(run_dir / "last.pt")
    except UserError as error:
        if not (run_dir / "previous.pt").is_file():
            raise
        log.warning("%s; resuming from %s instead", error, run_dir / "previous.pt")
        trainer.restore(run_dir / "previous.pt")


def flatten(tree: dict, prefix: str = "") -> dict:
    """{'model': {'hidden_size': 512}} -> {'model.hidden_size': 512}, with values TensorBoard's hparams accept."""
    flat = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        elif isinstance(value, (int, float, str, bool)):
            flat[name] = value
        else:
            flat[name] = str(value)
    return flat
