"""Data parallelism under torchrun: `torchrun --nproc_per_node=N train.py ...` runs N copies of this program.

torchrun sets RANK, LOCAL_RANK and WORLD_SIZE; a SLURM job of several tasks (`srun`, or Hydra's submitit launcher
with tasks_per_node > 1) sets only SLURM_*, which `from_slurm` turns into torchrun's variables. Without either (a
plain `python train.py`) everything here is a no-op on one process. The trainer wraps its model in
DistributedDataParallel, gives each process its share of every update's batches, lets rank 0 alone validate and write
logs and checkpoints, shares rank 0's validation with the others so that every replica steps the same schedule, and
takes every stop decision (rank 0's budget, a signal or a non-finite loss on any process) on all processes at the same
update (`agree`: one all-reduce per update).
"""

from __future__ import annotations

import datetime
import gc
import logging
import os
import re
from collections.abc import Mapping

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def is_main() -> bool:
    return rank() == 0


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list: "gpu[03-05,9],cpu1" -> "gpu03"."""
    head = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if head is None:
        raise ValueError(f"cannot read the SLURM node list {nodelist!r}")
    prefix, ranges = head.groups()
    return prefix + (re.split(r"[,-]", ranges)[0] if ranges else "")


def from_slurm(environ: Mapping[str, str]) -> dict[str, str]:
    """torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) from a SLURM task's, for a job of
    several tasks started without torchrun; {} when torchrun's are set already or the job has one task."""
    if "WORLD_SIZE" in environ or int(environ.get("SLURM_NTASKS", "1")) <= 1 or "SLURM_PROCID" not in environ:
        return {}
    nodes = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST") or "localhost"
    job = int(environ.get("SLURM_JOB_ID", "0"))
    return {
        "RANK": environ["SLURM_PROCID"],
        "LOCAL_RANK": environ.get("SLURM_LOCALID", "0"),
        "WORLD_SIZE": environ["SLURM_NTASKS"],
        "MASTER_ADDR": environ.get("MASTER_ADDR", first_host(nodes)),
        "MASTER_PORT": environ.get("MASTER_PORT", str(20000 + job % 20000)),
    }


def setup(device: torch.device) -> torch.device:
    """Join torchrun's process group (NCCL on GPUs, gloo on CPUs) once, and return this process's device."""
    os.environ.update(from_slurm(os.environ))
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
    """Leave the process group, and free what still holds it (the data-parallel wrapper) while the interpreter is
    whole: gloo's threads torn down during its shutdown can abort the process (SIGABRT at exit)."""
    if dist.is_initialized():
        dist.destroy_process_group()
        gc.collect()


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


def gather(value) -> list:
    """Every process's `value` (picklable), in rank order, on every process; [value] on one process."""
    if not dist.is_initialized():
        return [value]
    found = [None] * world_size()
    dist.all_gather_object(found, value)
    return found


def agree(flags: list[int], device: torch.device) -> list[int]:
    """The element-wise maximum of every process's `flags`, in one all-reduce: a decision any process takes (a stop
    signal, a non-finite loss, rank 0's budget) every process takes at the same update, so none waits alone in a
    collective the others left. The identity on one process."""
    if not dist.is_initialized():
        return flags
    values = torch.tensor(flags, dtype=torch.int64, device=device)
    dist.all_reduce(values, op=dist.ReduceOp.MAX)
    return values.tolist()


def replicas_agree(model: torch.nn.Module) -> bool:
    """Whether every process holds the same parameters (a sum of each, compared bit for bit across processes)."""
    if not dist.is_initialized():
        return True
    sums = torch.stack([p.detach().double().sum() for p in model.parameters()]).cpu()
    gathered = [torch.empty_like(sums) for _ in range(world_size())]
    dist.all_gather_object(gathered, sums)
    return all(torch.equal(sums, other) for other in gathered)
