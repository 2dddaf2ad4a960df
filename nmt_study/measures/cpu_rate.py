"""How fast the converged study's arms train on this CPU, in fp32, at one and two threads: what its design costs.

python -m nmt_study measure cpu_rate [--flops 4e12] [--threads 1,2] [--data-dir ../shared/data/multi30k]
python -m nmt_study measure cpu_rate --record     # results/measured/cpu_rate.json, read by nmt_study/design.py's cost

Each arm of the design (nmt_study.design.PRIMARY) trains `--flops` FLOPs of its Multi30k recipe as `train.py` trains
it, one run at a time, at each thread count; the rate is the FLOPs that trainer.max_flops counts over the training
minutes the run itself reports (its validations' and start-up's time apart), and a validation's seconds are the run's
last validation's. A machine-hour then trains 3600 x rate FLOPs of that arm. Run it alone on the machine (the study's
queue paused: `python -m nmt_study queue pause`): a busy machine gives noise, not figures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from nmt.device import cpu_capability
from nmt.paths import write_text
from nmt.runs.folder import RunFolder
from nmt.runs.provenance import loaded_code
from nmt_study import design, published
from nmt_study.measures import options, record_option
from nmt_study.sweep import ROOT, TRAIN


def selects(target: str) -> str:
    """The option that trains `target`: a family by model=, a variant by variant=."""
    return f"model={target}" if "_" not in target else f"variant={target}"


def measured(target: str, threads: int, flops: float, data_dir: str | None, folder: Path) -> dict:
    """One run of `target` at `threads` threads: FLOPs per second of training, and one validation's seconds."""
    run = folder / f"{target}-{threads}"
    extra = [f"data.dir={data_dir}"] if data_dir else []
    command = [
        *TRAIN,
        selects(target),
        "trainer.precision=fp32",
        f"trainer.threads={threads}",
        f"trainer.max_flops={flops:g}",
        "trainer.validations=1",
        "trainer.test_at_end=false",
        "trainer.progress=false",
        *extra,
        f"hydra.run.dir={run}",
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"error: {target} at {threads} threads failed: {done.stderr.strip().splitlines()[-1]}")
    last = RunFolder(run).validations()[-1]
    return {"flops_per_second": last["petaflops"] * 1e15 / (last["train_minutes"] * 60), "validation": last["seconds"]}


def main(argv: list[str] | None = None) -> None:
    parser = options(__name__, __doc__)
    parser.add_argument("--flops", type=float, default=4e12, help="FLOPs each run trains")
    parser.add_argument("--threads", default="1,2", help="thread counts to time, comma-separated")
    parser.add_argument("--data-dir", default=None, help="Multi30k's .gz files (else NMT_DATA_DIR, the shared copy)")
    record_option(parser, ("cpu_rate", "cpu_rate_avx2"), "also write")
    args = parser.parse_args(argv)
    threads = [int(n) for n in args.threads.split(",")]
    values: dict[str, dict[str, dict]] = {}
    with tempfile.TemporaryDirectory(prefix="cpu-rate-") as scratch:
        for target in design.PRIMARY:
            for count in threads:
                figures = measured(target, count, args.flops, args.data_dir, Path(scratch))
                values.setdefault(target, {})[str(count)] = figures
                rate = figures["flops_per_second"] / 1e9
                said = (
                    f"{target:14s} {count} thread(s): {rate:6.1f} GFLOP/s, a validation {figures['validation']:.1f} s"
                )
                print(said, flush=True)
    if args.record:
        found = cpu_capability()
        record = {
            "machine": f"{found.name}, {found.detail}, {os.cpu_count()} cores, torch {torch.__version__}",
            "flops": args.flops,
            "values": values,
            "code": loaded_code(),
        }
        path = published.RESULTS / "measured" / f"{args.record}.json"
        write_text(path, json.dumps(record, indent=1) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
