"""How decoding time grows with the input: greedy and beam search over random inputs of growing length.

python -m nmt_study measure long_input [--model bahdanau] [--lengths 100,200,400,800] [--beam 5] [--threads 2]
                                       [--precision auto]

An untrained model of the default size decodes to its length limit (1.5 x input + 10 tokens), the worst case; the
attention of each step reads the whole input, so total time grows at best as input x output. A search that copied
its history at every step would grow a power faster.
"""

from __future__ import annotations

import time

import torch

from nmt import build
from nmt.decoding.search import beam_search, greedy
from nmt.device import autocast, resolve
from nmt.text.data import PAD_ID, build_vocabulary
from nmt.text.sample import generate
from nmt_study.measures import options
from nmt_study.sweep import composed


def main(argv: list[str] | None = None) -> None:
    parser = options(__name__, __doc__)
    parser.add_argument("--model", default="bahdanau")
    parser.add_argument("--lengths", default="100,200,400,800", help="input lengths in subwords")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--precision", default="auto", help="auto (nmt/device.py), fp32 or bf16")
    args = parser.parse_args(argv)
    cpu = torch.device("cpu")
    dtype = resolve(args.precision, cpu, option="--precision").dtype
    torch.set_num_threads(args.threads)
    cfg = composed([f"model={args.model}"])
    vocabulary = build_vocabulary(generate(400, 10, 10, 7).train, 200, True, "unigram", 1.0, None)
    torch.manual_seed(0)
    model = build.model(cfg.model, vocabulary).eval()
    print(f"| input subwords | output tokens | greedy s | beam {args.beam} s |\n|---|---|---|---|")
    for length in map(int, args.lengths.split(",")):
        source = torch.randint(4, vocabulary.source_size, (1, length))
        mask = source != PAD_ID
        times = []
        with autocast(cpu, dtype):
            for beam in (1, args.beam):
                started = time.perf_counter()
                found = greedy(model, source, mask) if beam == 1 else beam_search(model, source, mask, beam)[0]
                times.append(time.perf_counter() - started)
        print(f"| {length} | {len(found[0].tokens)} | {times[0]:.2f} | {times[1]:.2f} |", flush=True)
