"""One update of the weights, written once: gradients zeroed, the loss, backward, clipping, the optimiser's step and
the schedule's, run eagerly or captured as a CUDA graph per batch shape and replayed (`trainer.cuda_graphs`).

`Mode.decide` says once, for a run, how its updates run and what that asks of the rest:

- eager (a CPU; or a GPU run a graph cannot hold: several processes under DDP, gradient accumulation, fp16 loss
  scaling, whose skipped steps are decided on the host): the corpus's own batches, the RNN encoders packed;
- captured (a GPU): batches of a few static shapes (`nmt.text.batches.StaticShapes`: both sides padded to a multiple of
8,
  the rows the token budget allows), the loss over every position with padding weighted 0, the RNN encoders unpacked
  (`nmt.models.unpacked`), the optimiser fused and capturable with its step count on the device, the learning rate a
  device tensor (the schedule writes it in place), the gradients zeroed in place (every shape's graph shares them)
  and the update's scale 1/tokens a device tensor set before each replay. Dropout stays random: the generator's
  offset moves with each replay, as torch.cuda.graphs arranges.

Both run `Update.body`; accumulation and DDP are around it (several batches, `no_sync` but on the last), the
gradient scaler inside it (a pass-through unless fp16). A captured shape's first WARMUP updates run the body eagerly
on a side stream (lazy initialisation, the optimiser's state), then its graph is captured and replayed for that batch
and every later one of the shape; a capture that fails leaves every later update eager, with the reason logged once.
tests/test_update.py holds the two paths to bit-identical weights with a recorder that replays on a CPU.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from nmt.models.model import static_shapes
from nmt.text.data import Batch
from nmt.training.loss import batch_loss
from nmt.training.optim import steps_on_validation

log = logging.getLogger(__name__)

WARMUP = 2  # eager updates of a shape before its capture


def cuda_graph(step: Callable, inputs: Batch, scale: torch.Tensor, pool) -> tuple:
    """`step(inputs, scale)` captured as a CUDA graph in `pool` (every shape's graph in one pool: they never run at
    once): the graph, its static outputs and the pool."""
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    cache = torch.is_autocast_cache_enabled()
    torch.set_autocast_cache_enabled(False)  # each cast in the graph itself, none kept from outside it
    try:
        # thread_local: the DataLoader's pinning thread allocates pinned memory while this thread captures, which
        # the default (global) mode would count against the capture
        with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
            outputs = step(inputs, scale)
    finally:
        torch.set_autocast_cache_enabled(cache)
    return graph, outputs, graph.pool()


@dataclass(frozen=True)
class Mode:
    """How a run's updates run, decided once. `static`: batches of static shapes and the encoders unpacked (what a
    capture needs); `record`: how an update is captured (`cuda_graph`; a test gives one that replays on a CPU), None
    for eager updates; `refusal`: why updates are not captured, where they are not."""

    static: bool = False
    record: Callable | None = None
    refusal: str | None = None

    @property
    def captured(self) -> bool:
        return self.record is not None

    def capturable(self, device: torch.device) -> bool:
        """Whether the optimiser runs capturable (fused, its rate a device tensor): captured updates on a GPU. A
        test's recorder that replays on a CPU reruns Python, which reads the float rate afresh, as eager Adam does."""
        return self.captured and device.type == "cuda"

    @classmethod
    def decide(cls, wanted: bool, device: torch.device, world: int, accumulate: int, dtype: torch.dtype) -> Mode:
        reason = refusal(device, world, accumulate, dtype) if wanted else "trainer.cuda_graphs=false"
        if reason is None:
            log.info("updates captured as CUDA graphs, one per batch shape (trainer.cuda_graphs)")
            return cls(static=True, record=cuda_graph)
        if device.type == "cuda":
            log.info("updates run eagerly: %s", reason)
        return cls(refusal=reason)


def refusal(device: torch.device, world: int, accumulate: int, dtype: torch.dtype) -> str | None:
    """Why this run's updates cannot be captured, or None when they can."""
    if device.type != "cuda":
        return "CUDA graphs need a GPU"
    if world > 1:
        return "several processes (DDP synchronises gradients between the graph's steps)"
    if accumulate > 1:
        return "gradient accumulation (trainer.accumulate > 1: an update of several batches of several shapes)"
    if dtype == torch.float16:
        return "fp16 loss scaling (whether a step is skipped is decided on the host)"
    return None


def capturable_lr(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """Each parameter group's learning rate as a device tensor, which the schedule then sets in place: a graph reads
    it at every replay (a float would be fixed into the graph when it is captured). Also after a restore, which
    brings floats back."""
    for group in optimizer.param_groups:
        if not isinstance(group["lr"], torch.Tensor):
            group["lr"] = torch.tensor(float(group["lr"]), device=device)


class Update:
    """`update(batches, tokens) -> (summed loss, gradient norm)`, device tensors, nothing read back to the host (but
    fp16's skipped-step check). `batches`: this process's share of one update (several under `trainer.accumulate`);
    `tokens`: the target tokens of the whole update, every process's, so the gradient is that of the mean loss per
    token of one large batch."""

    def __init__(
        self,
        model: torch.nn.Module,
        features: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        schedule,
        scaler: torch.amp.GradScaler,
        *,
        label_smoothing: float,
        clip_norm: float,
        device: torch.device,
        dtype: torch.dtype,
        world: int = 1,
        mode: Mode = Mode(),
    ):
        self.model, self.features, self.optimizer, self.schedule, self.scaler = (
            model,
            features,
            optimizer,
            schedule,
            scaler,
        )
        self.label_smoothing, self.clip_norm = label_smoothing, clip_norm or float("inf")
        self.device, self.dtype, self.world, self.mode = device, dtype, world, mode
        self.parameters = [p for p in model.parameters() if p.requires_grad]
        self.graphs: Graphs | None = None  # made at the first update, after any restore (its learning rate a float)

    def body(self, batches: Sequence[Batch], scale: torch.Tensor | float) -> tuple[torch.Tensor, torch.Tensor]:
        """The update's arithmetic, the one copy both paths run. `scale`: world / tokens (DDP averages the replicas'
        gradients: the world undoes its 1/world); a device tensor where the update is captured."""
        self.model.train()
        self.optimizer.zero_grad(set_to_none=not self.mode.captured)  # captured: in place, every graph reads them
        loss_total = torch.zeros((), device=self.device)
        with static_shapes(self.model, self.mode.static):
            for i, batch in enumerate(batches):
                last = i == len(batches) - 1
                with self.features.no_sync() if self.world > 1 and not last else contextlib.nullcontext():
                    loss_sum = batch_loss(
                        self.model, self.features, batch, self.label_smoothing, self.device, self.dtype
                    )
                    self.scaler.scale(loss_sum * scale).backward()
                loss_total += loss_sum.detach()
        self.scaler.unscale_(self.optimizer)
        norm = torch.nn.utils.clip_grad_norm_(self.parameters, self.clip_norm, foreach=True)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss_total, norm.detach()

    def __call__(self, batches: Sequence[Batch], tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        scale = self.world / tokens
        if self.mode.captured and self.graphs is None:
            if self.mode.capturable(self.device):
                capturable_lr(self.optimizer, self.device)
            self.graphs = Graphs(lambda batch, s: self.body([batch], s), self.device, self.mode.record)
        before = self.scaler.get_scale() if self.scaler.is_enabled() else 0.0  # fp16 only: a host read
        if self.graphs is not None:
            loss_sum, norm = self.graphs(batches[0], scale)
        else:
            loss_sum, norm = self.body(batches, scale)  # a float: no copy to the device
        skipped = self.scaler.is_enabled() and self.scaler.get_scale() < before  # inf/NaN gradients: no step made
        if not steps_on_validation(self.schedule) and not skipped:  # warm-up counts updates made, not attempted
            self.schedule.step()
        return loss_sum, norm


class Graphs:
    """`step(batch, scale)` captured per batch shape and replayed; `step` must read nothing back to the host. Once a
    capture fails, every later update runs `step` eagerly (logged)."""

    def __init__(self, step: Callable[[Batch, torch.Tensor], tuple], device: torch.device, record: Callable):
        self.step, self.device, self.record = step, device, record
        self.graphs: dict[tuple, tuple] = {}  # shape -> (graph, static inputs, static scale, static outputs)
        self.seen: dict[tuple, int] = {}
        self.pool = None
        self.failed = ""  # the reason the graphs were given up, once they were
        self.replays = 0
        self.side = torch.cuda.Stream(device) if device.type == "cuda" else None

    @staticmethod
    def shape(batch: Batch) -> tuple:
        return tuple(t.shape for t in vars(batch).values() if isinstance(t, torch.Tensor))

    def __call__(self, batch: Batch, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        key = self.shape(batch)
        if key in self.graphs:
            graph, inputs, scale_tensor, outputs = self.graphs[key]
            for name, target in inputs.device_tensors().items():  # copies on the device, in stream order: no wait
                target.copy_(getattr(batch, name), non_blocking=True)
            scale_tensor.fill_(scale)
            graph.replay()
            self.replays += 1
            return outputs
        if self.failed or self.seen.get(key, 0) < WARMUP:
            self.seen[key] = self.seen.get(key, 0) + 1
            return self.eager(batch, scale)
        try:
            return self.capture(key, batch, scale)
        except Exception as error:  # the eager update is right wherever a graph is not possible
            self.failed = f"{type(error).__name__}: {error}"
            log.warning("trainer.cuda_graphs: the update could not be captured (%s); updates run eagerly", self.failed)
            if self.side is not None:
                torch.cuda.synchronize(self.device)
            return self.eager(batch, scale)

    def eager(self, batch: Batch, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        """The update run as it is; on a GPU on a side stream (what a capture needs of the updates before it)."""
        if self.side is None:
            return self.step(batch, torch.tensor(scale, device=self.device))
        self.side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.side):
            result = self.step(batch, torch.tensor(scale, device=self.device))
        torch.cuda.current_stream(self.device).wait_stream(self.side)
        return result

    def capture(self, key: tuple, batch: Batch, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Capture `step` on static copies of this batch's tensors (capturing runs nothing), then replay it once
        for this batch."""
        inputs = Batch(**{**vars(batch), **{k: t.clone() for k, t in batch.device_tensors().items()}})
        scale_tensor = torch.tensor(scale, device=self.device)
        graph, outputs, self.pool = self.record(self.step, inputs, scale_tensor, self.pool)
        self.graphs[key] = graph, inputs, scale_tensor, outputs
        graph.replay()
        self.replays += 1
        return outputs


class Features(torch.nn.Module):
    """`model.features` as a module's forward, so that DistributedDataParallel can wrap it (the output layer and the
    loss run after it, fused, in nmt/training/loss.py; DDP's gradient hooks fire for the output weights all the
    same)."""

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


def features_of(model: torch.nn.Module, device: torch.device, world: int, rank: int, seed: int) -> torch.nn.Module:
    """`Features(model)`; under torchrun wrapped for data parallelism: DDP starts every replica from rank 0's
    weights, and each replica draws its own dropout masks."""
    features = Features(model)
    if world > 1:
        features = torch.nn.parallel.DistributedDataParallel(
            features, device_ids=[device] if device.type == "cuda" else None, broadcast_buffers=False
        )
        torch.manual_seed(seed + rank)
    return features
