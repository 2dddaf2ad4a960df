"""Every update as one CUDA graph: captured once per static batch shape, then replayed (`trainer.cuda_graphs`).

On a GPU an eager update of these small models waits on the host: Python and a few thousand kernel launches per
update, each a few microseconds, for kernels that run for less. A graph replays the whole update (forward, loss,
backward, clipping, the optimiser's step) with one launch. What a graph needs, and where it comes from:

- fixed shapes: batches of a few static shapes (`nmt.data.StaticShapes`: both sides padded to a multiple of 8, the
  rows the token budget allows), the loss over every position with padding weighted 0, the RNN encoders unpacked
  (`nmt.unpacked`) while an update is captured; a graph per shape, all sharing one memory pool;
- no host reads: the learning rate a device tensor (the schedule writes it in place), the optimiser fused and
  capturable, its step count on the device, the gradients zeroed in place (the graphs share them), the update's
  scale 1/tokens a device tensor set before each replay;
- dropout stays random: the generator's offset moves with each replay, as torch.cuda.graphs arranges.

A shape's first WARMUP updates run eagerly on a side stream (lazy initialisation, the optimiser's state), then its
graph is captured and replayed for that batch and every later one of the shape. What a graph cannot hold falls back
to the eager update, with the reason logged once: no GPU, several processes (DDP), gradient accumulation, fp16 loss
scaling (its skipped steps are decided on the host), or a capture that fails.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator

import torch

from nmt.data import Batch

log = logging.getLogger(__name__)

WARMUP = 2  # eager updates of a shape before its capture


@contextlib.contextmanager
def static_shapes(model: torch.nn.Module) -> Iterator[None]:
    """The model's RNN encoders run unpacked while the block runs (packing sizes a tensor by the batch's tokens)."""
    encoders = [module for module in model.modules() if hasattr(module, "packed")]
    for encoder in encoders:
        encoder.packed = False
    try:
        yield
    finally:
        for encoder in encoders:
            encoder.packed = True


def graph_refusal(device: torch.device, world: int, accumulate: int, dtype: torch.dtype) -> str | None:
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


class GraphedUpdate:
    """The update `step(batch, scale)` (gradients zeroed in place, loss, backward, clipping, optimiser step; returns
    the summed loss and the gradient norm as device tensors) captured per batch shape and replayed. `step` must
    read nothing back to the host. Once a capture fails, every later update runs `step` eagerly (logged).
    `record` captures (`cuda_graph`; tests/test_graphs.py gives one that runs on a CPU)."""

    def __init__(
        self,
        step: Callable[[Batch, torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
        device: torch.device,
        record: Callable | None = None,
    ):
        self.step, self.device, self.record = step, device, record or cuda_graph
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
            fill(inputs, batch, scale_tensor, scale)
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


def fill(inputs: Batch, batch: Batch, scale_tensor: torch.Tensor, scale: float) -> None:
    """A graph's static inputs set to this batch (copies on the device, in stream order: no wait)."""
    for name, target in inputs.device_tensors().items():
        target.copy_(getattr(batch, name), non_blocking=True)
    scale_tensor.fill_(scale)


def update_of(trainer) -> Callable[[Batch, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """The trainer's update as one function of a static batch and its scale (world / tokens, a device tensor):
    gradients zeroed in place, the loss with the encoders unpacked, backward, clipping, the optimiser's step.
    Nothing is read back to the host, so it can be captured; on a CPU it runs as it is (tests/test_graphs.py)."""
    from nmt.loss import batch_loss

    model, optimizer, config = trainer.model, trainer.optimizer, trainer.config
    parameters = [p for p in model.parameters() if p.requires_grad]
    clip = config.clip_norm or float("inf")

    def step(batch: Batch, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gradients = [p.grad for p in parameters if p.grad is not None]
        if gradients:  # in place: every captured graph reads and writes these same tensors
            torch._foreach_zero_(gradients)
        model.train()
        with static_shapes(model):
            loss_sum = batch_loss(model, trainer.features, batch, config.label_smoothing, trainer.device, trainer.dtype)
        (loss_sum * scale).backward()
        norm = torch.nn.utils.clip_grad_norm_(parameters, clip, foreach=True)
        optimizer.step()
        return loss_sum.detach(), norm.detach()

    return step


def graphed_update(trainer) -> GraphedUpdate | None:
    """The trainer's updates captured as CUDA graphs where `trainer.cuda_graphs` is on and the run allows it (the
    reason logged where it does not, on a GPU), else None: the trainer's eager update."""
    if trainer.graph_refusal is not None:
        if trainer.device.type == "cuda":
            log.info("updates run eagerly: %s", trainer.graph_refusal)
        return None
    capturable_lr(trainer.optimizer, trainer.device)
    log.info("updates captured as CUDA graphs, one per batch shape (trainer.cuda_graphs)")
    return GraphedUpdate(update_of(trainer), trainer.device)
