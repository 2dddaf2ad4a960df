"""Data parallelism's decisions and environment, on the CPU: SLURM's variables become torchrun's, and a decision
one process takes (a stop signal, a non-finite loss) every process takes at the same update."""

import contextlib
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from nmt import distributed
from nmt.training import state


def test_a_slurm_task_gets_torchruns_variables():
    slurm = {
        "SLURM_PROCID": "3",
        "SLURM_LOCALID": "1",
        "SLURM_NTASKS": "4",
        "SLURM_JOB_ID": "123456",
        "SLURM_JOB_NODELIST": "gpu[07-08,11],cpu2",
    }
    port = str(20000 + 123456 % 20000)
    assert distributed.from_slurm(slurm) == {
        "RANK": "3",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "4",
        "MASTER_ADDR": "gpu07",
        "MASTER_PORT": port,
    }
    assert distributed.from_slurm({**slurm, "WORLD_SIZE": "4"}) == {}  # torchrun's own, left alone
    assert distributed.from_slurm({**slurm, "SLURM_NTASKS": "1"}) == {}  # one task: no process group
    assert distributed.from_slurm({}) == {}
    assert distributed.from_slurm({**slurm, "MASTER_PORT": "29500"})["MASTER_PORT"] == "29500"
    assert [distributed.first_host(n) for n in ("node1", "a[1-3]", "b[09,12]x", "c,d")] == ["node1", "a1", "b09", "c"]


@contextlib.contextmanager
def gloo(rank: int, world: int, port: int):
    """This process in a gloo group of `world` on this machine, for the duration of the block."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        yield
    finally:
        dist.destroy_process_group()


def decide(rank: int, world: int, port: int, results) -> None:
    with gloo(rank, world, port):
        cpu = torch.device("cpu")
        stopped_at = None
        for update in range(1, 10):  # rank 1 gets a SIGTERM (15) before update 4; rank 0 sees nothing
            signal_number, done = distributed.agree([15 if rank == 1 and update >= 4 else 0, 0], cpu)
            if signal_number:
                stopped_at = (update, signal_number)
                break
        non_finite = distributed.agree([rank == 0], cpu)[0]  # a NaN loss on rank 0 alone
        results.put((rank, (stopped_at, non_finite)))


def in_two_processes(function, port: int) -> dict:
    """`function(rank, 2, port, results)` in two processes, forked from this one (spawned interpreters would each
    import torch first), and what each rank put in `results`, by rank."""
    results = mp.get_context("fork").SimpleQueue()
    mp.start_processes(function, args=(2, port, results), nprocs=2, join=True, start_method="fork")
    return dict(results.get() for _ in range(2))


@pytest.mark.slow
def test_a_stop_or_a_nan_seen_by_one_process_stops_every_process_at_the_same_update(unused_tcp_port):
    assert in_two_processes(decide, unused_tcp_port) == {0: ((4, 15), 1), 1: ((4, 15), 1)}
    assert distributed.agree([0, 7], torch.device("cpu")) == [0, 7]  # one process: the identity


@pytest.fixture
def unused_tcp_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gather_and_restore(rank: int, world: int, port: int, results) -> None:
    """Each rank saves its own random state; after a restore each rank draws what it would have drawn."""
    with gloo(rank, world, port):
        cpu = torch.device("cpu")
        torch.manual_seed(100 + rank)
        ranks = distributed.gather(state.rng_state(cpu))
        expected = torch.rand(3)
        torch.rand(50)  # the run goes on
        state.restore_rng({"torch": ranks[0]["torch"], "cuda": [], "ranks": ranks}, rank, cpu, 1, 10)
        results.put((rank, (len(ranks), torch.equal(torch.rand(3), expected))))


@pytest.mark.slow
def test_each_rank_saves_and_restores_its_own_random_state(unused_tcp_port):
    assert in_two_processes(gather_and_restore, unused_tcp_port) == {0: (2, True), 1: (2, True)}


def test_a_rank_or_device_the_saving_job_did_not_have_is_handled():
    cpu = torch.device("cpu")
    torch.manual_seed(3)
    saved = state.rng_state(cpu)
    expected = torch.rand(2)
    state.restore_rng({"torch": saved["torch"], "cuda": [], "ranks": [saved]}, 0, cpu, 1, 10)
    assert torch.equal(torch.rand(2), expected)  # rank 0 of one saved process
    state.restore_rng({"torch": saved["torch"], "cuda": [], "ranks": [saved]}, 1, cpu, 1, 10)
    first = torch.rand(2)  # rank 1 was not in the saving job: a state of its own from seed, rank and step
    state.restore_rng({"torch": saved["torch"], "cuda": [], "ranks": [saved]}, 1, cpu, 1, 10)
    assert torch.equal(torch.rand(2), first) and not torch.equal(first, expected)
    # a checkpoint of a single process that saw more GPUs than this one: only the states of devices seen are set
    state.restore_rng({"torch": saved["torch"], "cuda": [torch.zeros(16, dtype=torch.uint8)] * 8}, 0, cpu, 1, 0)
    assert torch.equal(torch.rand(2), expected)
