"""Decoding speed and BLEU of a Transformer exported to CTranslate2 (nmt-export), beside our own search.

python -m nmt_study measure export --checkpoint RUN/best.pt [--beam 5] [--data-dir ../shared/data/multi30k]
python -m nmt_study measure export --record --checkpoint RUN/best.pt --data-dir ../shared/data/multi30k
                                                                        # docs/speed.md's table

The checkpoint is exported once in each of --weights (int8, float32 by default) into a temporary folder, without
the export's own check; then our Translator (precision auto, as translate.py decodes) and each export translate the
test split on the same threads, each in a process of its own, warmed up on its first 100 sentences and then timed
over the whole split, --rounds times taking turns (the median counts); each output is scored with sacreBLEU. Run it
alone on the machine: a busy machine gives noise, not figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from nmt import UserError
from nmt.build import corpus_of
from nmt.config import DecodeOptions
from nmt.decoding.export.command import export
from nmt.decoding.export.engine import Exported, read_note
from nmt.decoding.translator import Translator, score
from nmt.runs.checkpoint import load
from nmt_study import published
from nmt_study.measures import options, record_option


def decode_once(checkpoint: str, beam: int, decoder: str, data_dir: str | None) -> dict:
    """One decoder (`nmt`, ours, or the export in folder `decoder`) over the checkpoint's test split in this process:
    warmed up on the first 100 sentences, then timed over all of them, and scored."""
    decoding = DecodeOptions(beam=beam)
    ours = Translator.load(checkpoint, decoding)
    pairs = corpus_of(ours.config, data_dir).test
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    engine, weights = "nmt", f"PyTorch, {str(ours.dtype).removeprefix('torch.')} (precision=auto)"
    if decoder != "nmt":
        engine, weights = "CTranslate2", read_note(Path(decoder))["quantization"]
        ours = Exported.load(decoder, decoding, torch.get_num_threads())
    ours.translate(sources[:100])
    started = time.perf_counter()
    texts = ours.translate(sources)
    seconds = time.perf_counter() - started
    bleu = score(texts, references).bleu
    return {"engine": engine, "weights": weights, "sentences": len(sources), "seconds": seconds, "bleu": bleu}


def measure(checkpoint: str, beam: int, weights: list[str], data_dir: str | None, rounds: int) -> list[dict]:
    """Ours, then CTranslate2 in each of `weights` (each exported once, without the export's check), each decoding
    in a process of its own (two engines in one process slowed ours by a third: their thread pools wait on the same
    cores), `rounds` times taking turns; each entry with the median of its timings."""
    with tempfile.TemporaryDirectory() as folder:
        decoders = {"nmt": "nmt"}
        for kind in weights:
            decoders[kind] = str(
                export(checkpoint, quantization=kind, output=str(Path(folder, kind)), check_split="none")
            )
        found: dict[str, list[dict]] = {kind: [] for kind in decoders}
        for _ in range(rounds):
            for kind, decoder in decoders.items():
                command = [sys.executable, "-m", "nmt_study", "measure", "export", "--checkpoint", checkpoint]
                command += ["--beam", str(beam), "--decoder", decoder, *(["--data-dir", data_dir] if data_dir else [])]
                done = subprocess.run(command, capture_output=True, text=True)
                if done.returncode:
                    raise UserError(f"decoding with {kind} failed: {done.stderr.strip()[-1000:]}")
                found[kind].append(json.loads(done.stdout.strip().splitlines()[-1]))
                print(f"{kind}: {found[kind][-1]['seconds']:.2f} s", file=sys.stderr)
    entries = []
    for runs in found.values():
        seconds = statistics.median(run["seconds"] for run in runs)
        entries.append({**runs[0], "seconds": seconds, "sentences_per_second": runs[0]["sentences"] / seconds})
    return entries


def table(found: list[dict]) -> list[list[str]]:
    ours = found[0]
    return [
        [
            entry["engine"],
            entry["weights"],
            f"{entry['sentences_per_second']:,.1f}",
            f"{entry['sentences_per_second'] / ours['sentences_per_second']:.2f}x",
            f"{entry['bleu']:.2f}",
            f"{entry['bleu'] - ours['bleu']:+.2f}",
        ]
        for entry in found
    ]


def trained(checkpoint: str) -> str:
    """What the checkpoint is, in words: its name, the budget and updates it was trained with."""

    payload = load(checkpoint)
    budget = payload["config"].get("trainer", {}).get("max_flops")
    step = payload.get("progress", {}).get("step")
    return (
        f"{Path(checkpoint).name} of a Transformer (default config) trained on Multi30k de->en for "
        f"{f'{budget:g} FLOPs' if budget else 'its run'} ({step:,} updates)."
    )


def main(argv: list[str] | None = None) -> None:
    parser = options(__name__, __doc__)
    parser.add_argument("--checkpoint", required=True, help="a Transformer's checkpoint (best.pt of a Multi30k run)")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--weights", default="int8,float32", help="the exports' weight types, comma-separated")
    parser.add_argument("--data-dir", help="where Multi30k is (else the run's own data options)")
    parser.add_argument("--rounds", type=int, default=3, help="timings of each decoder, taking turns (the median)")
    parser.add_argument("--decoder", help=argparse.SUPPRESS)  # internal: nmt or an export's folder, timed here
    record_option(parser, ("export",), "also save the table as")
    args = parser.parse_args(argv)
    if args.beam < 1 or args.rounds < 1:
        raise UserError(f"--beam {args.beam}, --rounds {args.rounds}: each 1 or more")
    if args.decoder:
        return print(json.dumps(decode_once(args.checkpoint, args.beam, args.decoder, args.data_dir)))
    found = measure(args.checkpoint, args.beam, args.weights.split(","), args.data_dir, args.rounds)
    rows = table(found)
    columns = ["engine", "weights", "sent/s", "x ours", "BLEU", "BLEU - ours"]
    print(" | ".join(columns))
    for row in rows:
        print(" | ".join(row))
    if args.record:
        note = (
            f"{found[0]['sentences']:,} test sentences, beam {args.beam} (CTranslate2's length penalty: length^0.6; "
            f"ours: GNMT's), {torch.get_num_threads()} threads each (CTranslate2: a batch per thread); each decoder "
            f"in a process of its own, warmed up on 100 sentences, then timed over the split; {args.rounds} rounds "
            f"taking turns (the median); detokenized cased sacreBLEU. {trained(args.checkpoint)}"
        )
        path = published.record_measurement(args.record, columns, rows, note, values={"decoders": found})
        print(f"wrote {path}", file=sys.stderr)
