"""How fast the training batches reach the training process: what a GPU's update waits on when its data cannot keep up.

python -m nmt_study measure loader_rate [--data-dir DIR] [--workers 2] [--max-tokens 4096] [--epochs 3] [--rounds 3]

Multi30k's training split in the static shapes of a captured update (nmt.text.batches.StaticShapes), three ways:
collated in the process itself (a CPU run's path), and through a DataLoader with --workers worker processes (a GPU
run's path, nmt.text.batches.loading, without the pinning a CPU cannot do) sending each batch as torch tensors (each
goes through a shared-memory file of its own) or as numpy arrays (nmt.text.batches.Shipped, pickled through the loader's
pipe, what the trainer sends). Prints milliseconds per batch after 20 batches of warm-up, --rounds times alternating.
Timings on a shared machine are noisy: read the ratios within one run, taken with the machine to itself.
"""

from __future__ import annotations

import multiprocessing
import time

import numpy as np
import torch

from nmt import build
from nmt.config import Multi30kConfig
from nmt.text.batches import Shipping, StaticShapes
from nmt.text.data import ParallelDataset
from nmt_study.measures import options


def per_batch(dataset, batches, collate, workers: int) -> float:
    """Milliseconds per batch, each made into a Batch in this process, after 20 of warm-up."""
    if workers:
        fork = multiprocessing.get_context("fork")
        loader = torch.utils.data.DataLoader(
            dataset, batch_sampler=batches, collate_fn=collate, num_workers=workers, prefetch_factor=4,
            multiprocessing_context=fork,
        )  # fmt: skip
        made = iter(loader)
    else:
        made = (collate([dataset[i] for i in batch]) for batch in batches)
    for _ in range(20):
        next(made)
    started, count = time.perf_counter(), 0
    for batch in made:
        batch.to(torch.device("cpu"))
        count += 1
    return (time.perf_counter() - started) / count * 1e3


def main(argv: list[str] | None = None) -> None:
    parser = options(__name__, __doc__)
    parser.add_argument("--data-dir", default=None, help="Multi30k's .gz files (else NMT_DATA_DIR or a download)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=4096, help="padded tokens a batch (the RNNs' default)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    config = Multi30kConfig(**({"dir": args.data_dir} if args.data_dir else {}))
    splits = build.load_corpus(config)
    dataset = ParallelDataset(splits.train, build.vocabulary(config, splits))
    shapes = StaticShapes(args.max_tokens)
    order = np.random.default_rng(0).permutation(len(dataset))
    batches = shapes.batches(dataset.source_lengths, dataset.target_lengths, order) * args.epochs
    ways = {
        "in process": (shapes.collate, 0),
        f"{args.workers} workers, torch tensors": (shapes.collate, args.workers),
        f"{args.workers} workers, numpy arrays (Shipped)": (Shipping(shapes.collate), args.workers),
    }
    print(f"{len(batches)} batches of at most {args.max_tokens} padded tokens, {torch.get_num_threads()} threads")
    for round_ in range(1, args.rounds + 1):
        for name, (collate, workers) in ways.items():
            print(f"round {round_}: {name}: {per_batch(dataset, batches, collate, workers):.2f} ms per batch")
