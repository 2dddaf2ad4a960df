"""What the validation loss costs with and without gradients formed inside the fused loss (issue 33, item 8).

python -m nmt_study measure validation_cost [--model bahdanau] [--repeats 5] [--data-dir ../shared/data/multi30k]
python -m nmt_study measure validation_cost --record --data-dir ../shared/data/multi30k   # docs/speed.md's table

Until 2026-11-24 the fused output layer and loss (`nmt/training/loss.py`) decided whether to form its gradients from its
inputs' `requires_grad`, which the output layer's weight has even under `torch.no_grad`, so every validation loss
pass also formed the gradients it would never use. This times `nmt.training.validation.valid_loss` over the valid split
as it runs today and with that old behaviour put back, alternating, and prints the medians and their ratio. Run it alone
on the machine: a busy machine gives noise, not figures.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from nmt import build
from nmt.device import capability, choose
from nmt.text.data import ParallelDataset
from nmt.training import loss, validation
from nmt_study import published
from nmt_study.measures import options
from nmt_study.sweep import composed


def forming_gradients(features, weight, bias, target, smoothing=0.0, dtype=None, per_token=False):
    """The fused loss as it was: its inputs not detached under no_grad, so the Function forms their gradients."""
    total, token_loss = loss._LinearCrossEntropy.apply(
        features, weight, bias, target, smoothing, dtype or features.dtype
    )
    return (total, token_loss) if per_token else total


def timed(model_name: str, repeats: int, data_dir: str | None) -> dict:
    """Medians of `repeats` valid loss passes as today and with the gradients formed, alternating."""
    cfg = composed([f"model={model_name}"] + ([f"data.dir={data_dir}"] if data_dir else []))
    splits = build.load_corpus(cfg.data)
    vocabulary = build.vocabulary(cfg.data, splits)
    torch.manual_seed(0)
    model = build.model(cfg.model, vocabulary)
    device = torch.device("cpu")
    dtype = choose("auto", capability(device), "precision").dtype
    dataset = ParallelDataset(splits.valid, vocabulary)
    fused = loss.linear_cross_entropy
    times = {"today": [], "gradients formed": []}
    for _ in range(repeats):
        for name, function in (("today", fused), ("gradients formed", forming_gradients)):
            loss.linear_cross_entropy = function
            started = time.perf_counter()
            validation.valid_loss(model, dataset, cfg.trainer.valid_max_tokens, device, dtype)
            times[name].append(time.perf_counter() - started)
    loss.linear_cross_entropy = fused
    return {
        "pairs": len(dataset),
        "dtype": str(dtype).removeprefix("torch."),
        "today": statistics.median(times["today"]),
        "before": statistics.median(times["gradients formed"]),
        "each": {name: [round(t, 2) for t in values] for name, values in times.items()},
    }


def main(argv: list[str] | None = None) -> None:
    parser = options(__name__, __doc__)
    parser.add_argument("--model", default="bahdanau")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument(
        "--record", action="store_true", help="both models of docs/speed.md's table, saved in results/measured/"
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:
        sys.exit("error: --repeats must be at least 1")
    models = ["bahdanau", "transformer"] if args.record else [args.model]
    rows = []
    for name in models:
        found = timed(name, args.repeats, args.data_dir)
        today, before = found["today"], found["before"]
        print(
            f"{name}, {found['pairs']} valid pairs, {found['dtype']}, {torch.get_num_threads()} threads: valid loss "
            f"pass {today:.2f} s today, {before:.2f} s with the gradients formed ({before / today:.2f}x); medians of "
            f"{args.repeats}: {found['each']['today']} and {found['each']['gradients formed']}"
        )
        rows.append([name, f"{today:.2f} s", f"{before:.2f} s", f"{before - today:.1f} s ({before / today:.2f}x)"])
    if args.record:
        note = (
            f"The valid loss pass over the {found['pairs']:,} valid pairs, {found['dtype']}, an untrained default "
            f"model; medians of {args.repeats}, alternating."
        )
        columns = ["model", "today", "with the gradients formed", "saved per validation"]
        print(f"wrote {published.record_measurement('validation_cost', columns, rows, note)}", file=sys.stderr)
