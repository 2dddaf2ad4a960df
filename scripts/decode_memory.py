"""Peak memory of decoding one long line, greedy or beam, in a process of its own.

python scripts/decode_memory.py [--model bahdanau] [--beam 5] [--length 1000]

An untrained model of the default config (sample vocabulary) decodes one line of --length random subwords under bf16
autocast to its length limit (1.5 x the input + 10 steps); the figure is the process's peak RSS before and after
decoding. The memory of a search is what it keeps per step, which this measures; the weights do not change it.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nmt import build  # noqa: E402
from nmt.search import beam_search, greedy  # noqa: E402
from nmt.study.sweep import composed  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bahdanau")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--length", type=int, default=1000)
    args = parser.parse_args()
    cfg = composed([f"model={args.model}", "data=sample"])
    splits = build.load_corpus(cfg.data)
    vocabulary = build.vocabulary(cfg.data, splits)
    torch.manual_seed(0)
    model = build.model(cfg.model, vocabulary).eval()
    source = torch.randint(4, vocabulary.source_size, (1, args.length))
    mask = torch.ones_like(source, dtype=torch.bool)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    started = time.perf_counter()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        greedy(model, source, mask) if args.beam == 1 else beam_search(model, source, mask, args.beam)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    print(
        f"{args.model}, beam {args.beam}, {args.length} subwords: peak RSS {peak:,.0f} MiB ({before:,.0f} before "
        f"decoding), {time.perf_counter() - started:.1f} s"
    )


if __name__ == "__main__":
    main()
