"""Speed of training and decoding, per model, on real Multi30k batches: a markdown table and JSON.

python -m nmt_study measure speed [--models "sutskever;bahdanau;luong;transformer"] [--checkpoints outputs/runs]
                            [--precision auto] [--threads 2] [--device auto] [--steps 8] [--windows 5]
                            [--train-only] [--profile N] [--output bench]
                            [--record [benchmark|benchmark_fp32|benchmark_cuda]]

--record also saves the table as results/measured/<name>.json, from which docs/speed.md's tables are rendered
(nmt_study/published.py); run it alone on the machine. `--checkpoints` may name the model's folder with `{model}`:
`--checkpoints 'multirun/results/main/runs/{model}/seed1234'` decodes with `make results`' runs.

A model is a name with optional config overrides: `--models "luong model/attention=dot;luong model.alignment=local_p"`
compares attention variants (their decoding needs a checkpoint of that variant, so use --train-only there).

For each model at its default size: training target tokens/s of the updates as training makes them (on a GPU each
captured as a CUDA graph, where `trainer.cuda_graphs` holds: add `trainer.cuda_graphs=false` to a model spec for
the eager ones; after warm-up, each graph's capture included, the median of --windows timed windows of --steps
updates each), peak resident memory of a process that only trains it, and decoding sentences/s of greedy
search and beam 5 over test2016 with a trained checkpoint (`<checkpoints>/<model>/best.pt`, when there is one; an
untrained model decodes to its length limit, which says little). The harness also measures this machine's
matrix-multiply peak in the chosen precision and reports each model's FLOP/s against it: the floating-point operations
of the timed updates from the model's own formula (nmt/models/flops.py: matrix products forward and backward, as
torch.utils.flop_counter counts them, tested against it; the elementwise work is not counted; the same on a GPU,
where the counter misses cuDNN's RNN kernels), per target token, times tokens/s. 6 x parameters x tokens/s, the usual
estimate, is in the JSON too; it overstates the RNNs (embeddings do no products) and understates attention. Each
model runs in a fresh subprocess, so peak memory is its own. Timings on a shared machine are noisy: compare ratios
taken in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from nmt import UserError
from nmt.device import cpu_name, resolve
from nmt.device import device as find_device
from nmt.paths import output_folder, write_text
from nmt_study import published
from nmt_study.measures import options, record_option
from nmt_study.measures.timing import checkpoint, matmul_peak, measure
from nmt_study.sweep import ROOT


def memory(result: dict) -> str:
    """Peak memory of training: the GPU's tensors (and how busy it was) on a GPU, the process's RSS on a CPU."""
    if result.get("peak_gpu_gib") is None:
        return f"{result['peak_rss_gib']:.2f} GiB"
    busy = f", {result['gpu_utilization']:.0f}% busy" if result.get("gpu_utilization") is not None else ""
    return f"{result['peak_gpu_gib']:.2f} GiB GPU{busy}"


COLUMNS = [
    "model",
    "params",
    "train tok/s (target)",
    "MFLOP per token",
    "GFLOP/s (% of peak)",
    "peak memory training",
    "greedy sent/s",
    "beam 5 sent/s",
]


def row(r: dict, peak: float) -> list[str]:
    """One model's cells of the table."""
    flops = r["model_flops_per_second"]
    greedy, beam = (
        f"{r[k]:,.1f}" if k in r else "-"
        for k in ("decode_beam1_sentences_per_second", "decode_beam5_sentences_per_second")
    )
    return [
        r["model"],
        f"{r['parameters']:,}",
        f"{r['train_tokens_per_second']:,.0f}",
        f"{r['flops_per_token'] / 1e6:,.0f}",
        f"{flops / 1e9:,.0f} ({100 * flops / peak:.0f}%)",
        memory(r),
        greedy,
        beam,
    ]


def table(results: list[dict], peak: float, machine: str) -> str:
    lines = [
        f"Machine: {machine}. Matrix-multiply peak measured here: {peak / 1e9:,.0f} GFLOP/s.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(row(r, peak)) + " |" for r in results]
    return "\n".join(lines) + "\n"


def record(
    name: str,
    results: list[dict],
    peak: float,
    machine: str,
    args: argparse.Namespace,
    folder: Path = published.RESULTS,
) -> Path:
    """results/measured/<name>.json: the table, and each model's figures for the comparison with Joey NMT."""
    decoded = checkpoint(args.checkpoints, "{model}") if any("decoded_with" in r for r in results) else None
    note = (
        f"{machine}; matrix-multiply peak measured in the same run {peak / 1e9:,.0f} GFLOP/s. Training: the "
        f"median of {args.windows} windows of {args.steps} updates at each model's default batch; MFLOP per token "
        "counts the matrix products of an update, forward and backward (nmt/models/flops.py); peak memory of a process "
        "that only trains." + (f" Decoding test2016 (1,000 sentences) with `{decoded}`." if decoded else "")
    )
    return published.record_measurement(
        name, COLUMNS, [row(r, peak) for r in results], note, folder, values={r["model"]: r for r in results}
    )


def main(argv: list[str] | None = None) -> None:
    parser = options(__name__, __doc__)
    parser.add_argument("--models", default="sutskever;bahdanau;luong;transformer", help="';'-separated")
    parser.add_argument("--train-only", action="store_true", help="skip decoding")
    parser.add_argument("--checkpoints", default="outputs/runs", help="folder of <model>/best.pt, for decoding")
    parser.add_argument("--data-dir", default=os.environ.get("NMT_DATA_DIR"))
    parser.add_argument("--precision", default="auto", help="auto (nmt/device.py), fp32, bf16 or fp16")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--steps", type=int, default=8, help="updates per timed window")
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="also profile N training updates: <output>/profile_<model>.txt",
    )
    parser.add_argument("--output", default="bench", help="folder for benchmark.md and benchmark.json")
    record_option(parser, ("benchmark", "benchmark_fp32", "benchmark_cuda"), "also save the table for docs/speed.md as")
    parser.add_argument(
        "--model-timeout", type=float, default=0, metavar="S", help="give up on a model after S seconds (0: never)"
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure this model in this process
    args = parser.parse_args(argv)
    args.argv = list(argv if argv is not None else sys.argv[1:])  # what each model's own process is given
    run(args)


def run(args: argparse.Namespace) -> None:
    if args.one:
        print(json.dumps(measure(args.one, args)))
        return
    for option, value, least in (
        ("--threads", args.threads, 1),
        ("--steps", args.steps, 1),
        ("--windows", args.windows, 1),
        ("--profile", args.profile, 0),
    ):
        if value < least:
            raise UserError(f"{option} {value}: must be at least {least}")
    names = [spec.strip() for spec in args.models.split(";") if spec.strip()]
    if args.record and not args.train_only:  # a recorded decoding speed is a trained model's, never an untrained one's
        for name in names:
            path = checkpoint(args.checkpoints, name)
            if path is None or not path.is_file():
                raise UserError(
                    f"--record: no trained checkpoint of {name} to decode with "
                    f"({path or 'a model with overrides has none'}); set --checkpoints or --train-only"
                )
    output = output_folder(args.output, "--output", ("benchmark.md", "benchmark.json"))  # before any measuring
    where = find_device(args.device)
    torch.set_num_threads(args.threads)
    precision = resolve(args.precision, where, option="--precision")
    args.precision = precision.name  # every model measured in the one precision chosen here
    print(f"precision {precision.reason}", file=sys.stderr)
    peak = matmul_peak(precision.dtype, where)
    gpu = torch.cuda.get_device_name(where) if where.type == "cuda" else "no GPU"
    machine = f"{cpu_name()}, {os.cpu_count()} cores, {gpu}, torch {torch.__version__}, {args.threads} threads, "
    machine += precision.reason
    results, failed = [], []
    for name in names:  # the tables are written after each model, so that a time limit keeps what was measured
        try:
            results.append(measured_in_subprocess(name, args))
            print(f"{name}: {results[-1]['train_tokens_per_second']:,.0f} tok/s", file=sys.stderr)
        except UserError as error:  # the other models are still measured; the run fails at the end
            failed.append(str(error))
            print(error, file=sys.stderr)
            continue
        write_tables(results, peak, machine, output, args)
    if failed:
        raise UserError(f"{len(failed)} of {len(names)} models could not be measured:\n" + "\n".join(failed))
    print(table(results, peak, machine))


def measured_in_subprocess(name: str, args: argparse.Namespace) -> dict:
    """One model's figures, measured in a process of its own (its peak memory its own), within --model-timeout."""
    command = [sys.executable, "-m", "nmt_study", "measure", "speed", "--one", name, *args.argv]
    try:
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=args.model_timeout or None)
    except subprocess.TimeoutExpired as expired:
        raise UserError(
            f"benchmarking {name} took over --model-timeout {args.model_timeout} s; not measured"
        ) from expired
    if done.returncode:
        raise UserError(f"benchmarking {name} failed:\n{done.stderr[-2000:].strip()}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def write_tables(results: list[dict], peak: float, machine: str, output: Path, args: argparse.Namespace) -> None:
    """<output>/benchmark.md and benchmark.json, and with --record results/measured/<name>.json."""
    if args.record:
        print(f"wrote {record(args.record, results, peak, machine, args)}", file=sys.stderr)
    write_text(output / "benchmark.md", table(results, peak, machine))
    write_text(
        output / "benchmark.json",
        json.dumps({"peak_flops": peak, "machine": machine, "results": results}, indent=2) + "\n",
    )
