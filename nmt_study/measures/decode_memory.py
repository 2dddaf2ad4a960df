"""Peak memory of decoding one long line, greedy or beam, in a process of its own.

python -m nmt_study measure decode_memory [--model bahdanau] [--beam 5] [--length 1000]
python -m nmt_study measure decode_memory --record [--length 1000]   # docs/training.md's table: each family with
                                                                     # attention, greedy and beam 5, into
                                                                     # results/measured/

An untrained model of the default config (sample vocabulary, eos made unlikely) decodes one line of --length random
subwords under bf16 autocast to its length limit (1.5 x the input + 10 steps); the figure is the process's peak RSS
before and after decoding. The memory of a search is what it keeps per step, which this measures; the weights do not
change it. Run it alone on the machine: the seconds it prints are a timing.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import torch

from nmt import build
from nmt.decoding.search import beam_search, greedy
from nmt.text.data import EOS_ID
from nmt_study import published
from nmt_study.measures import options
from nmt_study.sweep import composed

RECORDED = (("bahdanau", "luong", "transformer"), (1, 5))  # the table's models and beams


def measure(model_name: str, beam: int, length: int) -> dict:
    cfg = composed([f"model={model_name}", "data=sample"])
    splits = build.load_corpus(cfg.data)
    vocabulary = build.vocabulary(cfg.data, splits)
    torch.manual_seed(0)
    model = build.model(cfg.model, vocabulary).eval()
    with torch.no_grad():  # eos never wins, so every search runs to the length limit, its most memory
        model.output.bias[EOS_ID] = -1e4
    source = torch.randint(4, vocabulary.source_size, (1, length))
    mask = torch.ones_like(source, dtype=torch.bool)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    started = time.perf_counter()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        greedy(model, source, mask) if beam == 1 else beam_search(model, source, mask, beam)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    return {
        "model": model_name,
        "beam": beam,
        "length": length,
        "before_mib": before,
        "peak_mib": peak,
        "seconds": seconds,
    }


def record(length: int) -> None:
    """Every model and beam of RECORDED, each in a process of its own (its own peak), into results/measured/."""
    found = {}
    for model_name in RECORDED[0]:
        for beam in RECORDED[1]:
            command = [
                sys.executable,
                "-m",
                "nmt_study",
                "measure",
                "decode_memory",
                "--model",
                model_name,
                "--beam",
                str(beam),
                "--length",
                str(length),
                "--json",
            ]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            found[model_name, beam] = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{model_name}, beam {beam}: {found[model_name, beam]['peak_mib']:,.0f} MiB", file=sys.stderr)

    def cell(m: dict) -> str:
        return f"{m['peak_mib']:,.0f} MiB, {m['seconds']:.1f} s"

    rows = [
        [
            name,
            f"{min(found[name, b]['before_mib'] for b in RECORDED[1]):,.0f} MiB",
            *(cell(found[name, b]) for b in RECORDED[1]),
        ]
        for name in RECORDED[0]
    ]
    beams = ["greedy" if b == 1 else f"beam {b}" for b in RECORDED[1]]
    note = (
        f"One line of {length:,} subwords decoded to its length limit ({int(length * 1.5 + 10):,} steps), bf16, an "
        "untrained default model; peak RSS of the process, and the search's seconds."
    )
    path = published.record_measurement("decode_memory", ["model", "before decoding", *beams], rows, note)
    print(f"wrote {path}", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    parser = options(__name__, __doc__)
    parser.add_argument("--model", default="bahdanau")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--length", type=int, default=1000)
    parser.add_argument("--record", action="store_true", help="measure the table of docs/training.md and save it")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # internal: one measurement as JSON
    args = parser.parse_args(argv)
    if args.beam < 1 or args.length < 1:
        sys.exit("error: --beam and --length must be at least 1")
    if args.record:
        return record(args.length)
    found = measure(args.model, args.beam, args.length)
    if args.json:
        return print(json.dumps(found))
    print(
        f"{args.model}, beam {args.beam}, {args.length} subwords: peak RSS {found['peak_mib']:,.0f} MiB "
        f"({found['before_mib']:,.0f} before decoding), {found['seconds']:.1f} s"
    )
