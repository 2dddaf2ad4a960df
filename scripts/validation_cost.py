"""What the validation loss costs with and without gradients formed inside the fused loss (issue 33, item 8).

python scripts/validation_cost.py [--model bahdanau] [--repeats 5] [--data-dir ../shared/data/multi30k]

Until 2026-11-24 the fused output layer and loss (`nmt/loss.py`) decided whether to form its gradients from its
inputs' `requires_grad`, which the output layer's weight has even under `torch.no_grad`, so every validation loss
pass also formed the gradients it would never use. This times `nmt.validation.valid_loss` over the valid split as it
runs today and with that old behaviour put back, alternating, and prints the medians and their ratio. Run it alone on
the machine: a busy machine gives noise, not figures.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nmt import build, loss, validation  # noqa: E402
from nmt.data import ParallelDataset  # noqa: E402
from nmt.device import capability, choose  # noqa: E402
from nmt.study.sweep import composed  # noqa: E402


def forming_gradients(features, weight, bias, target, smoothing=0.0, dtype=None, per_token=False):
    """The fused loss as it was: its inputs not detached under no_grad, so the Function forms their gradients."""
    total, token_loss = loss._LinearCrossEntropy.apply(features, weight, bias, target, smoothing,
                                                       dtype or features.dtype)  # fmt: skip
    return (total, token_loss) if per_token else total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bahdanau")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    cfg = composed([f"model={args.model}"] + ([f"data.dir={args.data_dir}"] if args.data_dir else []))
    splits = build.load_corpus(cfg.data)
    vocabulary = build.vocabulary(cfg.data, splits)
    torch.manual_seed(0)
    model = build.model(cfg.model, vocabulary)
    device = torch.device("cpu")
    dtype = choose("auto", capability(device), "precision").dtype
    dataset = ParallelDataset(splits.valid, vocabulary)
    fused = loss.linear_cross_entropy
    times = {"today": [], "gradients formed": []}
    for _ in range(args.repeats):
        for name, function in (("today", fused), ("gradients formed", forming_gradients)):
            loss.linear_cross_entropy = function
            started = time.perf_counter()
            validation.valid_loss(model, dataset, cfg.trainer.valid_max_tokens, device, dtype)
            times[name].append(time.perf_counter() - started)
    loss.linear_cross_entropy = fused
    today, before = (statistics.median(times[k]) for k in ("today", "gradients formed"))
    each = {name: [round(t, 2) for t in values] for name, values in times.items()}
    print(
        f"{args.model}, {len(dataset)} valid pairs, {dtype}, {torch.get_num_threads()} threads: valid loss pass "
        f"{today:.2f} s today, {before:.2f} s with the gradients formed ({before / today:.2f}x); medians of "
        f"{args.repeats}: {each['today']} and {each['gradients formed']}"
    )


if __name__ == "__main__":
    main()
