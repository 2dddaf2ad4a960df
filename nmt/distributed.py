"""Data parallelism under torchrun: `torchrun --nproc_per_node=N train.py ...` runs N copies of this program.

torchrun sets RANK, LOCAL_RANK and WORLD_SIZE; without them (a plain `python train.py`) everything here is a no-op on
one process. The trainer wraps its model in DistributedDataParallel, gives each process its share of every update's
batches, lets rank 0 alone validate and write logs and checkpoints, and shares rank 0's decisions (validation BLEU,
when to stop) with the others so that every replica steps the same schedule.
"""

from __future__ import annotations

import datetime
import logging
import os

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def is_main() -> bool:
    return rank() == 0


def setup(device: torch.device) -> torch.device:
    """Join torchrun's process group (NCCL on GPUs, gloo on CPUs) once, and return this process's device."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return device
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if dist.is_initialized():
        return device
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, timeout=datetime.timedelta(minutes=60))  # rank 0 may validate for a while
    log.info("process %d of %d (%s, %s)", rank(), world_size(), backend, device)
    return device


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def share(value):
    """Rank 0's `value` on every process (any picklable object)."""
    if not dist.is_initialized():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def replicas_agree(model: torch.nn.Module) -> bool:
    """Whether every process holds the same parameters (a sum of each, compared bit for bit across processes)."""
    if not dist.is_initialized():
        return True
    sums = torch.stack([p.detach().double().sum() for p in model.parameters()]).cpu()
    gathered = [torch.empty_like(sums) for _ in range(world_size())]
    dist.all_gather_object(gathered, sums)
    return all(torch.equal(sums, other) for other in gathered)
