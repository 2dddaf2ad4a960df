"""Token-bucketed batches of the training split, and how they reach the training process.

Batches hold at most `max_tokens` padded tokens and gather sentences of similar length so that little of a batch is
padding (`TokenBatchSampler`), or come in a few static shapes that a captured update replays (`StaticShapes`);
`UpdateBatches` cuts each epoch into updates from where training stands and, on a GPU, has worker processes make
them (`Shipped`). The pairs and their collation come from `nmt.text.data`.
"""

from __future__ import annotations

import itertools
import multiprocessing
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from nmt import UserError
from nmt.models.flops import Shape
from nmt.text.corpus import Pairs
from nmt.text.data import EOS_ID, PAD_ID, Batch, ParallelDataset, collate


class Shipped:
    """A batch on its way from a DataLoader's worker process: its arrays as numpy, which the loader pickles through
    its pipe, where each torch tensor would travel through a shared-memory file of its own (a batch's 8 tensors took
    3.4-4.6 ms through 2 workers, the same arrays as numpy 1.0 ms, on a 2-core CPU: nmt_study measure loader_rate). The
    loader's pinning thread (`pin_memory`) or `to` makes it a Batch again."""

    def __init__(self, batch: Batch):
        self.arrays = {name: None if t is None else t.numpy() for name, t in vars(batch).items()}

    def batch(self) -> Batch:
        return Batch(**{name: None if a is None else torch.from_numpy(a) for name, a in self.arrays.items()})

    def pin_memory(self) -> Batch:
        return self.batch().pin_memory()

    def to(self, device: torch.device, non_blocking: bool = False) -> Batch:
        return self.batch().to(device, non_blocking=non_blocking)


@dataclass(frozen=True)
class Shipping:
    """A collate function whose batches a worker process sends as `Shipped`."""

    collate: Callable[[list], Batch]

    def __call__(self, items: list) -> Shipped:
        return Shipped(self.collate(items))


@dataclass(frozen=True)
class StaticShapes:
    """Batch shapes from a small fixed set, so that a captured update (nmt.training.update) replays the few it has: a
    pair goes to the bucket of its longer side (the target with eos) rounded up to a multiple of `width`, both sides are
    padded to that length, and every batch of the bucket has the same number of rows, the most that fit `max_tokens`
    (the last one of an epoch filled with rows of padding, whose weight in the loss is 0)."""

    max_tokens: int
    width: int = 8

    def length(self, source_length: int, target_length: int) -> int:
        longest = max(int(source_length), int(target_length))
        return -(-longest // self.width) * self.width

    def rows(self, length: int) -> int:
        return max(1, self.max_tokens // length)

    def batches(self, source_lengths: np.ndarray, target_lengths: np.ndarray, order: np.ndarray) -> list[list[int]]:
        """`order` cut into batches of one bucket each, at most rows(bucket) pairs, in the order's sequence."""
        buckets: dict[int, list[int]] = {}
        for index in order:
            buckets.setdefault(self.length(source_lengths[index], target_lengths[index]), []).append(int(index))
        return [
            members[start : start + self.rows(length)]
            for length, members in sorted(buckets.items())
            for start in range(0, len(members), self.rows(length))
        ]

    def collate(self, items: list[tuple[int, list[int], list[int]]]) -> Batch:
        """`items` of one bucket padded to its shape: (rows, length) on both sides. A row of padding has eos for a
        source (attention needs a real position) and an all-padding target."""
        batch = collate(items)
        length = self.length(batch.source.shape[1], batch.target_out.shape[1])
        rows = self.rows(length)
        if len(items) > rows:
            raise ValueError(f"{len(items)} pairs do not fit the static shape ({rows}, {length})")

        def padded(tensor: torch.Tensor, fill: int) -> torch.Tensor:
            grown = torch.full((rows, length), fill, dtype=tensor.dtype)
            grown[: tensor.shape[0], : tensor.shape[1]] = tensor
            return grown

        source = padded(batch.source, PAD_ID)
        source[len(items) :, 0] = EOS_ID
        target_out = padded(batch.target_out, PAD_ID)
        lengths = torch.cat([batch.source_lengths, torch.ones(rows - len(items), dtype=torch.long)])
        weights = (target_out != PAD_ID).flatten().float()
        indices = torch.cat([batch.indices, torch.full((rows - len(items),), -1)])
        return Batch(
            source, source != PAD_ID, padded(batch.target_in, PAD_ID), target_out, indices, None, lengths, weights
        )


def token_batches(
    source_lengths: np.ndarray, target_lengths: np.ndarray, max_tokens: int, order: np.ndarray
) -> list[list[int]]:
    """Cut `order` (indices sorted by length) into batches of at most `max_tokens` padded tokens.

    A batch's cost is its size times its longest sentence on either side, which is what the padded tensors hold.
    """
    batches, current, longest = [], [], 0
    for index in order:
        length = max(source_lengths[index], target_lengths[index])
        if current and max(longest, length) * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(int(index))
        longest = max(longest, length)
    if current:
        batches.append(current)
    return batches


class TokenBatchSampler(torch.utils.data.Sampler):
    """Length-bucketed batches of at most `max_tokens` padded tokens.

    When shuffling, sentences are sorted by length with a little random noise (so that batches differ between
    epochs) and the batches are shuffled; epoch `e` always gives the same batches for the same seed, which is what
    lets a resumed run continue exactly where it stopped. Pairs longer than `max_len` on either side are left out.
    """

    def __init__(
        self,
        dataset: ParallelDataset,
        max_tokens: int,
        shuffle: bool,
        seed: int = 0,
        max_len: int | None = None,
        static: StaticShapes | None = None,
    ):
        self.dataset, self.max_tokens, self.shuffle, self.seed = dataset, max_tokens, shuffle, seed
        self.static = static  # batches of the few static shapes, or token_batches' own
        lengths = np.maximum(dataset.source_lengths, dataset.target_lengths)
        keep = lengths <= max_len if max_len else np.ones(len(dataset), dtype=bool)
        self.kept = np.flatnonzero(keep)
        self.dropped = int((~keep).sum())
        if len(self.kept) and lengths[self.kept].max() > max_tokens:
            raise UserError(
                f"data.max_tokens={max_tokens} is smaller than the longest sentence ({lengths[self.kept].max()} "
                f"subwords); raise data.max_tokens or lower data.max_len"
            )
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def batches(self) -> list[list[int]]:
        source, target = self.dataset.source_lengths, self.dataset.target_lengths
        rng = np.random.default_rng([self.seed, self.epoch])
        noise = rng.uniform(-1.0, 1.0, size=len(self.kept)) if self.shuffle else np.zeros(len(self.kept))
        order = self.kept[np.lexsort((target[self.kept], source[self.kept] + noise))]
        if self.static is None:
            batches = token_batches(source, target, self.max_tokens, order)
        else:
            batches = self.static.batches(source, target, order)
        return [batches[i] for i in rng.permutation(len(batches))] if self.shuffle else batches

    def __iter__(self):
        return iter(self.batches())

    def __len__(self) -> int:
        return len(self.batches())


def check_splits(
    sampler: TokenBatchSampler, valid_pairs: Pairs, world: int, max_len: int, valid_option: str = "the data.valid files"
) -> None:
    """Training needs a batch for every process and validation at least one pair; otherwise it could only spin."""
    if not len(sampler.kept):
        raise UserError(  # empty pairs were left out with the corpus: every one left is too long
            f"no training pair is left: all {sampler.dropped} are longer than data.max_len={max_len} subwords on "
            "one side or the other. Raise data.max_len."
        )
    if len(sampler.batches()) < world:
        raise UserError(
            f"the training split makes {len(sampler.batches())} batches, fewer than the {world} torchrun processes "
            "that would share them: lower data.max_tokens or use fewer processes"
        )
    if not valid_pairs:
        raise UserError(f"the valid split is empty: validation needs at least one pair ({valid_option})")


def loading(device: torch.device) -> dict:
    """How the training batches are made. On a GPU two worker processes collate the next batches and a thread pins
    them while the GPU works on this one (the copy to the device then waits for nothing); on a CPU the batches are
    made in the training process, whose cores the model uses (a worker would take them from it). The workers are
    forked by name: inside a job of the joblib launcher the default start method is loky's, with which a DataLoader
    cannot start its workers."""
    if device.type != "cuda":
        return {"num_workers": 0, "pin_memory": False}
    fork = multiprocessing.get_context("fork")
    return {"num_workers": 2, "pin_memory": True, "prefetch_factor": 4, "multiprocessing_context": fork}


class EpochPlans:
    """Each epoch's batches cut into updates of `accumulate` x `world` batches, from where `progress` stands: epoch e
    gives (the number of its batches trained, its updates' batches). A plan is drawn once, by whichever asks first:
    the DataLoader's sampler (`mine`), which runs ahead of training by the batches its workers prefetch, or the
    training loop (`plans[e]`). It depends on the epoch alone (TokenBatchSampler), so one dropped is drawn again the
    same."""

    def __init__(self, sampler: TokenBatchSampler, accumulate: int, world: int, rank: int, progress):
        self.sampler, self.per_update, self.world, self.rank = sampler, accumulate * world, world, rank
        self.first, self.start = progress.epoch, progress.batch_in_epoch
        self.plans: dict[int, tuple[int, list[list[list[int]]]]] = {}

    def __getitem__(self, epoch: int) -> tuple[int, list[list[list[int]]]]:
        if epoch not in self.plans:
            self.plans[epoch] = self.draw(epoch, self.start if epoch == self.first else 0)
            self.plans.pop(epoch - 3, None)
        return self.plans[epoch]

    def draw(self, epoch: int, start: int) -> tuple[int, list[list[list[int]]]]:
        self.sampler.set_epoch(epoch)
        batches = self.sampler.batches()
        if len(batches) < self.world:  # the same check as at the start; an epoch must give every process work
            raise UserError(f"{len(batches)} training batches for {self.world} processes")
        rest = len(batches) % self.per_update
        trained = len(batches) - (rest if rest < self.world else 0)  # none may go empty
        return trained, [batches[begin : begin + self.per_update] for begin in range(start, trained, self.per_update)]

    def mine(self):
        """This process's batches, epoch after epoch: the DataLoader's batch sampler for the whole run."""
        for epoch in itertools.count(self.first):
            yield from (batch for group in self[epoch][1] for batch in group[self.rank :: self.world])


class UpdateBatches:
    """The batches of every update from where training stands (`progress`), epoch after epoch: an update takes
    `accumulate` x processes batches of the epoch's order; process r gets every r-th. Token and FLOP counts come from
    the corpus lengths, not from the tensors (no sync), and cover every process's batches. One DataLoader serves every
    epoch: on a GPU its workers keep making the next batches across an epoch's end (an epoch is a few seconds there),
    pinned and copied without a wait."""

    def __init__(self, dataset, sampler, collate_fn: Callable, accumulate: int, progress, device: torch.device):
        self.dataset, self.sampler, self.collate, self.accumulate = dataset, sampler, collate_fn, accumulate
        self.progress, self.device = progress, device
        self.batches_in_epoch = 0  # set when an epoch's batches are drawn, so no step re-sorts the corpus

    def of(self, flops_of: Callable[[Shape], int], world: int, rank: int):
        """(this process's batches, target tokens of the update, of this process's part, batches in the update,
        FLOPs of the update by `flops_of`)."""
        pin, progress = self.device.type == "cuda", self.progress
        lengths, sources = self.dataset.target_lengths, self.dataset.source_lengths  # eos included
        plans = EpochPlans(self.sampler, self.accumulate, world, rank, progress)
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
                indices = group[rank::world]
                batches = [next(loader).to(self.device, non_blocking=pin) for _ in indices]
                tokens = int(sum(lengths[i].sum() for i in map(np.asarray, group)))
                local = int(sum(lengths[i].sum() for i in map(np.asarray, indices)))
                flops = sum(flops_of(Shape.of(sources[i], lengths[i])) for i in map(np.asarray, group))
                yield batches, tokens, local, len(group), flops
            progress.epoch += 1
            progress.batch_in_epoch = 0
