"""Decoding speed and BLEU of a Transformer exported to CTranslate2 (nmt-export), beside our own search.

python -m nmt.study measure export --checkpoint RUN/best.pt [--beam 5] [--data-dir ../shared/data/multi30k]
python -m nmt.study measure export --record --checkpoint RUN/best.pt --data-dir ../shared/data/multi30k
                                                                        # docs/speed.md's table

The checkpoint is exported in each of --weights (int8, float32 by default) into a temporary folder, without the
export's own check; then our Translator (precision auto, as translate.py decodes) and each export translate the test
split one after the other on the same threads, each once to warm up on its first 100 sentences and once timed over
the whole split, and each output is scored with sacreBLEU. Run it alone on the machine: a busy machine gives noise,
not figures.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import torch

from nmt import UserError
from nmt.config import DecodeOptions
from nmt.decoding import Translator, score
from nmt.evaluate import corpus_of
from nmt.export.command import export
from nmt.export.engine import Exported
from nmt.study import published
from nmt.study.measures import options, record_option


def timed(translator, sources: list[str]) -> tuple[list[str], float]:
    """The translations of `sources` and the seconds they took, after a warm-up on the first 100."""
    translator.translate(sources[:100])
    started = time.perf_counter()
    found = translator.translate(sources)
    return found, time.perf_counter() - started


def measure(checkpoint: str, beam: int, weights: list[str], data_dir: str | None) -> list[dict]:
    """One entry per decoder: ours, then CTranslate2 in each of `weights`."""
    decoding = DecodeOptions(beam=beam)
    ours = Translator.load(checkpoint, decoding)
    pairs = corpus_of(ours.config, data_dir).test
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    threads = torch.get_num_threads()
    precision = str(ours.dtype).removeprefix("torch.")
    found = [("nmt", f"PyTorch, {precision} (precision=auto)", *timed(ours, sources))]
    with tempfile.TemporaryDirectory() as folder:
        for kind in weights:
            made = export(checkpoint, quantization=kind, output=str(Path(folder, kind)), check_split="none")
            found.append(("CTranslate2", kind, *timed(Exported.load(made, decoding, threads), sources)))
    return [
        {
            "engine": engine,
            "weights": kind,
            "sentences": len(sources),
            "seconds": seconds,
            "sentences_per_second": len(sources) / seconds,
            "bleu": score(texts, references).bleu,
        }
        for engine, kind, texts, seconds in found
    ]


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


def main(argv: list[str] | None = None) -> None:
    parser = options(__name__, __doc__)
    parser.add_argument("--checkpoint", required=True, help="a Transformer's checkpoint (best.pt of a Multi30k run)")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--weights", default="int8,float32", help="the exports' weight types, comma-separated")
    parser.add_argument("--data-dir", help="where Multi30k is (else the run's own data options)")
    record_option(parser, ("export",), "also save the table as")
    args = parser.parse_args(argv)
    if args.beam < 1:
        raise UserError(f"--beam {args.beam}: 1 (greedy) or more")
    found = measure(args.checkpoint, args.beam, args.weights.split(","), args.data_dir)
    rows = table(found)
    columns = ["engine", "weights", "sent/s", "x ours", "BLEU", "BLEU - ours"]
    print(" | ".join(columns))
    for row in rows:
        print(" | ".join(row))
    if args.record:
        note = (
            f"{found[0]['sentences']:,} test sentences, beam {args.beam} (CTranslate2's length penalty: length^0.6; "
            f"ours: GNMT's), {torch.get_num_threads()} threads each, each decoder warmed up on 100 sentences, then "
            f"timed once over the split; detokenized cased sacreBLEU. Checkpoint {Path(args.checkpoint).name} of a "
            "Transformer trained on Multi30k."
        )
        path = published.record_measurement(args.record, columns, rows, note, values={"decoders": found})
        print(f"wrote {path}", file=sys.stderr)
