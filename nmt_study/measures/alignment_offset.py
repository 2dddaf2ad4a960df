"""Does a model's attention sit a fixed number of words off the words it translates? AER of its argmax links, with
every link moved by -3..+3 source words, against the gold alignments of the sample corpus it was trained on.

python -m nmt_study measure alignment_offset RUN_DIR [RUN_DIR ...] [--shifts 3]
python -m nmt_study measure alignment_offset --record RUN_DIR ...   # docs/alignment.md's table (results/measured/)

Luong's model with the reversed source of its paper attends one word early (docs/alignment.md): its AER is lowest
at shift +1. A model that aligns where the words are is lowest at shift 0.
"""

from __future__ import annotations

from pathlib import Path

from nmt import UserError
from nmt.build import corpus_of
from nmt.config import DecodeOptions
from nmt.decoding.alignment import choose_map, map_names, parse_key, shifted_links, word_attention
from nmt.decoding.translator import Translator
from nmt.runs.folder import RunFolder
from nmt.text.aer import alignment_error
from nmt_study import published
from nmt_study.measures import options
from nmt_study.variants import Variant


def offsets(run: Path, shifts: int) -> tuple[str, dict[int, float]]:
    """The run's model's name and seed, and {shift: test AER} for its alignment map (the RNNs' attention, the
    Transformer's last layer)."""
    best = RunFolder(run).best
    if not best.is_file():
        raise UserError(f"{run}: no {best.name}; name the folder of a run trained on the sample corpus")
    translator = Translator.load(best, DecodeOptions(device="cpu"))
    splits = corpus_of(translator.config, None)
    if splits.alignments is None:
        raise UserError(f"{run}: not trained on the sample corpus, so there are no gold alignments to compare with")
    names = map_names(translator.model, translator.device)
    if not names:
        raise UserError(f"{run}: this model has no attention")
    key = parse_key(choose_map(names, None))
    matrices = word_attention(
        translator.model, translator.vocabulary, splits.test, translator.device, translator.dtype, [key[0]], (key[1],)
    )[key]
    gold = splits.alignments["test"]
    name = Variant.of(translator.config["model"]).name
    seed = translator.config.get("seed")
    label = f"{name}, seed {seed}" if seed is not None else f"{name} (`{run}`)"
    return label, {k: alignment_error(shifted_links(matrices, k), gold).aer for k in range(-shifts, shifts + 1)}


def main(argv: list[str] | None = None) -> None:
    parser = options(__name__, __doc__)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--shifts", type=int, default=3)
    parser.add_argument(
        "--record",
        action="store_true",
        help="save the table as results/measured/alignment_offset.json (docs/alignment.md renders it)",
    )
    args = parser.parse_args(argv)
    columns = ["run", *(f"{k:+d}" for k in range(-args.shifts, args.shifts + 1))]
    rows = []
    for run in args.runs:
        label, aer = offsets(run, args.shifts)
        best = min(aer, key=aer.get)
        rows.append([label, *(f"**{v:.3f}**" if k == best else f"{v:.3f}" for k, v in aer.items())])
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    print("\n".join("| " + " | ".join(row) + " |" for row in rows))
    if args.record:
        note = (
            "Test AER of each run's argmax links moved by k source words (bold: the lowest), on the sample "
            "corpus's gold links."
        )
        path = published.record_measurement("alignment_offset", columns, rows, note, folder=published.RESULTS)
        print(f"wrote {path}")
