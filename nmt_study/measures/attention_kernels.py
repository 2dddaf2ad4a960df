"""Which kernel F.scaled_dot_product_attention runs for the Transformer's attention, and what a sliding window saves.

python -m nmt_study measure attention_kernels [--device auto] [--precision auto] [--window 4] [--reps 10]
                                              [--output bench]
python -m nmt_study measure attention_kernels --record  # also docs/attention.md's table (results/measured/); alone

1. The profiler: forward and backward of each attention of the default Transformer (encoder self-attention with the
   padding mask, decoder self-attention with the causal mask, encoder-decoder attention), globally and with the band
   of --window, at the shapes of a Multi30k batch and of a batch of the lab's long sentences, through
   `F.scaled_dot_product_attention` under torch.profiler: the aten kernel it dispatched to (flash, memory-efficient,
   cuDNN or the math fallback), read from the trace rather than from the documentation.
2. The clock: one training step (forward and backward, the fused output layer and loss) of the default Transformer
   (configs/model/transformer.yaml) on random batches of --tokens target tokens at both lengths, global and windowed,
   with the explicit product and with the fused kernel; the median of --reps steps after two warm-up steps.

Writes attention_kernels.md and attention_kernels.json into --output. Timings on a shared machine are noisy: read
the ratios within one run, taken with the machine to itself.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from nmt import build
from nmt.device import autocast, resolve
from nmt.device import device as find_device
from nmt.models.attention import MultiHeadAttention
from nmt.models.transformer import band
from nmt.paths import output_folder, write_text
from nmt.training.loss import linear_cross_entropy
from nmt_study import published
from nmt_study.measures import options
from nmt_study.sweep import composed

# (name, subword tokens per sentence): a Multi30k sentence is about 15 subwords on each side (test2016 means); the
# lab's longest test sentences are 61-80 words, about 100 subwords.
LENGTHS = {"Multi30k (15 subwords)": 15, "lab long (100 subwords)": 100}
KERNEL_PREFIXES = ("aten::_scaled_dot_product", "aten::_flash_attention", "aten::_efficient_attention")


def default_transformer(window: int, device: torch.device) -> torch.nn.Module:
    config = composed(["model=transformer", f"model.window={window}"])
    vocabulary = SimpleNamespace(source_size=8000, target_size=8000)  # Multi30k's joint sentencepiece size
    return build.model(config.model, vocabulary).to(device)


def masks(kind: str, batch: int, length: int, window: int, device: torch.device) -> torch.Tensor:
    """The bool mask (True: may attend) the Transformer passes for this attention; every sentence full length."""
    padding = torch.ones(batch, 1, 1, length, dtype=torch.bool, device=device)
    if kind == "decoder self":
        return band(length, length, window, True, device)  # (T, T)
    if kind == "encoder self" and window:
        return padding & band(length, length, window, False, device)  # (B, 1, S, S)
    return padding  # (B, 1, 1, S)


def kernel_of(kind: str, batch: int, length: int, window: int, heads: int, head_size: int, device, dtype) -> str:
    """The aten attention kernels that one forward and backward of SDPA ran, as the profiler lists them."""
    shape = (batch, heads, length, head_size)
    q, k, v = (torch.randn(shape, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    mask = masks(kind, batch, length, window, device)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as profile:
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask).float().sum().backward()
    names = sorted({e.key for e in profile.key_averages() if e.key.startswith(KERNEL_PREFIXES)})
    names = [n for n in names if n != "aten::scaled_dot_product_attention"]
    return ", ".join(n.removeprefix("aten::") for n in names) or "none listed"


def step_seconds(model, batch: int, length: int, reps: int, device, dtype) -> float:
    """Median seconds of one training step on random full-length batches (2 warm-up steps first)."""
    generator = torch.Generator().manual_seed(0)
    source = torch.randint(4, 8000, (batch, length), generator=generator).to(device)
    target = torch.randint(4, 8000, (batch, length), generator=generator).to(device)
    mask = torch.ones_like(source, dtype=torch.bool)
    model.train()
    times = []
    for rep in range(reps + 2):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        with autocast(device, dtype):
            features, _ = model.features(source, mask, target)  # (B, T, D)
        loss = linear_cross_entropy(
            features.flatten(0, 1), model.output.weight, model.output.bias, target.flatten(), 0.1, dtype
        )
        loss.backward()
        model.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        if rep >= 2:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def timed(name: str, batch: int, length: int, models: dict, reps: int, device, dtype) -> list[dict]:
    """One training step's time of each model (window -> model) at one shape, by the explicit product and by SDPA."""
    timings = []
    for fused in (False, True):
        MultiHeadAttention.fused_on_cpu = fused  # on a GPU the fused kernel runs either way
        for window, model in models.items():
            seconds = step_seconds(model, batch, length, reps, device, dtype)
            path = "fused" if fused or device.type == "cuda" else "explicit"
            timings.append(
                {
                    "shape": name,
                    "batch": batch,
                    "length": length,
                    "window": window,
                    "path": path,
                    "seconds": seconds,
                    "tokens_per_second": batch * length / seconds,
                }
            )
            print(f"{name:26} {path:8} window {window}: {seconds * 1000:.1f} ms", flush=True)
    return timings


def main(argv: list[str] | None = None) -> None:
    parser = options(__name__, __doc__)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--precision", default="auto", help="auto (nmt/device.py), fp32, bf16 or fp16")
    parser.add_argument("--window", type=int, default=4, help="the sliding window W to compare with global")
    parser.add_argument("--tokens", type=int, default=2048, help="target tokens per batch (the Transformer's)")
    parser.add_argument("--reps", type=int, default=10, help="timed steps per setting")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--output", type=Path, default=Path("bench"))
    parser.add_argument(
        "--record",
        action="store_true",
        help="also save the timings as results/measured/attention_kernels.json (docs/attention.md renders it)",
    )
    args = parser.parse_args(argv)
    args.output = output_folder(args.output, "--output", ("attention_kernels.md", "attention_kernels.json"))
    torch.set_num_threads(args.threads)
    device = find_device(args.device, option="--device")
    dtype = resolve(args.precision, device, option="--precision").dtype
    models = {w: default_transformer(w, device) for w in (0, args.window)}
    attention = models[0].encoder[0].self_attention
    heads, head_size = attention.heads, attention.head_size
    kernels, timings = [], []
    for name, length in LENGTHS.items():
        batch = max(1, args.tokens // length)
        for kind in ("encoder self", "decoder self", "encoder-decoder"):
            for window in (0, args.window) if kind != "encoder-decoder" else (0,):
                found = kernel_of(kind, batch, length, window, heads, head_size, device, dtype)
                kernels.append({"shape": name, "attention": kind, "window": window, "kernel": found})
                print(f"{name:26} {kind:16} window {window}: {found}", flush=True)
        timings += timed(name, batch, length, models, args.reps, device, dtype)
    machine = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {args.threads} threads"
    write(args.output, kernels, timings, machine, dtype, args)


def timing_rows(timings: list[dict], window: int) -> list[list[str]]:
    """[shape, path, global ms, windowed ms, windowed / global] for each shape and path timed both ways."""
    rows = []
    for shape in LENGTHS:
        for path in dict.fromkeys(t["path"] for t in timings):
            seconds = {t["window"]: t["seconds"] for t in timings if t["shape"] == shape and t["path"] == path}
            if len(seconds) == 2:
                plain, windowed = seconds[0], seconds[window]
                rows.append([shape, path, f"{plain * 1000:.1f}", f"{windowed * 1000:.1f}", f"{windowed / plain:.2f}"])
    return rows


def write(folder: Path, kernels: list[dict], timings: list[dict], machine: str, dtype, args) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    columns = ["shape", "path", "global ms", f"window {args.window} ms", "window / global"]
    rows = timing_rows(timings, args.window)
    lines = [
        f"# Attention kernels and the sliding window ({machine}, torch {torch.__version__}, {dtype})",
        "",
        "| shape | attention | window | kernel of F.scaled_dot_product_attention (profiler) |",
        "|---|---|---|---|",
    ]
    lines += [f"| {k['shape']} | {k['attention']} | {k['window'] or 'global'} | `{k['kernel']}` |" for k in kernels]
    lines += [
        "",
        f"Training step of the default Transformer, {args.tokens} target tokens per batch, median of {args.reps}:",
        "",
        "| " + " | ".join(columns) + " |",
        "|---|---|---|---|---|",
        *("| " + " | ".join(row) + " |" for row in rows),
    ]
    write_text(folder / "attention_kernels.md", "\n".join(lines) + "\n")
    figures = {"machine": machine, "dtype": str(dtype), "kernels": kernels, "timings": timings}
    write_text(folder / "attention_kernels.json", json.dumps(figures, indent=1))
    print(f"wrote {folder / 'attention_kernels.md'}")
    if args.record:
        found = ", ".join(f"`{k}`" for k in dict.fromkeys(k["kernel"] for k in kernels))
        note = (
            f"One training step of the default Transformer on random batches of {args.tokens} target tokens, "
            f"forward and backward, median of {args.reps} steps, in {str(dtype).removeprefix('torch.')} on "
            f"{machine}; SDPA dispatched every attention (self and encoder-decoder, global or windowed) to "
            f"{found} (the profiler)."
        )
        path = published.record_measurement("attention_kernels", columns, rows, note, published.RESULTS, figures)
        print(f"wrote {path}")
