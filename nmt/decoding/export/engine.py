"""Translation with a folder `nmt-export` wrote, as `translate.py engine=ctranslate2 model_dir=FOLDER` runs it: the
folder's sentencepiece models cut each line into the subwords our decoder would read, CTranslate2 searches, and each
output stops where ours would (ratio x the line's subwords + extra, the run's trainer.decode_ratio and decode_extra,
kept in the folder's note) before it is detokenized as ours is.

The search differs from ours in one place, which the docs say: beam search normalises a hypothesis's log-probability
by length^alpha (CTranslate2's length_penalty), ours by GNMT's ((5 + length) / 6)^alpha. Greedy decoding is the same.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm

from nmt import UserError
from nmt.config import DecodeOptions
from nmt.decoding.export.ct2 import POSITIONS, ctranslate2_module
from nmt.decoding.search import output_limit
from nmt.decoding.translator import Search, check_beam_fits, check_input_lengths
from nmt.paths import digest, read_json

NOTE = "nmt_export.json"  # what a folder nmt-export wrote holds beside the model: its source, options and check
SUBWORDS = {"source": "source.spm", "target": "target.spm"}  # the sentencepiece models, named as in the folder
COMPUTE_TYPES = {"auto": "default", "fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # precision= ->


def read_note(folder: Path) -> dict:
    """The note of a folder nmt-export wrote; a folder without one (another tool's, or none) is refused by name."""
    if not folder.is_dir():
        raise UserError(f"model_dir={folder}: no such folder; give the folder nmt-export wrote")
    if not (folder / NOTE).is_file():
        raise UserError(f"model_dir={folder}: holds no {NOTE}, so nmt-export did not write it; export with nmt-export")
    remedy = "export the checkpoint again with nmt-export"
    return read_json(folder / NOTE, remedy, {"format": str, "decode_ratio": float, "decode_extra": int})


def check_files(folder: Path, note: dict) -> None:
    """Each file the note names is there and is the one nmt-export wrote (its sha256): a damaged model.bin, or a
    vocabulary or sentencepiece model of another run, is refused by name instead of translating wrongly. An export
    from before the note held them is read as it is."""
    files = note.get("files")
    if not isinstance(files, dict):
        return
    for name, wanted in sorted(files.items()):
        path = folder / name
        if not path.is_file():
            raise UserError(f"model_dir={folder}: {name} is missing; export the checkpoint again with nmt-export")
        if digest(path) != wanted:
            raise UserError(
                f"model_dir={folder}: {name} is not the file nmt-export wrote there (its sha256 differs from the one "
                f"{NOTE} holds): it was changed or replaced; export the checkpoint again with nmt-export"
            )


@dataclass
class Exported:
    """A CTranslate2 folder ready to decode: `translate(lines)` with the search settings it was loaded with."""

    folder: Path
    translator: object  # ctranslate2.Translator
    source: spm.SentencePieceProcessor
    target: spm.SentencePieceProcessor
    search: Search
    positions: int  # the position vectors the export holds: no input or output may run past them

    @classmethod
    def load(cls, folder: str | Path, options: DecodeOptions | None = None, threads: int = 0) -> Exported:
        """The folder's model on `options.device` (auto: a GPU where CTranslate2 sees one), in its exported weights'
        type unless `options.precision` names another (fp32, bf16, fp16), on `threads` CPU threads (0: all cores)."""
        folder = Path(folder).expanduser()
        note = read_note(folder)
        check_files(folder, note)
        return cls.open(folder, note, options, threads)

    @classmethod
    def open(cls, folder: Path, note: dict, options: DecodeOptions | None = None, threads: int = 0) -> Exported:
        """`load`, with the folder's note given (an export being made, whose note is written last)."""
        options = options or DecodeOptions(beam=5)
        options.check()
        if note["format"] != "ctranslate2":
            raise UserError(
                f"model_dir={folder}: a {note['format']} export; engine=ctranslate2 runs format=ctranslate2"
            )
        ctranslate2 = ctranslate2_module()
        if options.precision not in COMPUTE_TYPES:
            raise UserError(f"precision={options.precision}: with engine=ctranslate2 one of {', '.join(COMPUTE_TYPES)}")
        device = options.device if options.device != "auto" else "cpu"
        if options.device == "auto" and ctranslate2.get_cuda_device_count():
            device = "cuda"
        supported = (
            ctranslate2.get_supported_compute_types(device)
            if device == "cpu" or ctranslate2.get_cuda_device_count()
            else set()
        )
        if device == "cuda" and not supported:
            raise UserError(f"device={options.device}: CTranslate2 sees no GPU here; give device=cpu (or auto)")
        if COMPUTE_TYPES[options.precision] != "default" and COMPUTE_TYPES[options.precision] not in supported:
            runs = ", ".join(sorted(supported))
            raise UserError(
                f"precision={options.precision}: CTranslate2 does not run {COMPUTE_TYPES[options.precision]} on this "
                f"{device} (it runs {runs}); give precision=auto or fp32. The export itself is fine"
            )
        try:
            translator = ctranslate2.Translator(
                str(folder),
                device=device,
                compute_type=COMPUTE_TYPES[options.precision],
                # On a CPU, one batch per core, each on one thread: on 2 cores, 1.46x the sentences/s of one batch on
                # 2 threads (test2016, beam 5, int8, medians of 3); a GPU runs one batch at a time
                inter_threads=(threads or os.cpu_count() or 1) if device == "cpu" else 1,
                intra_threads=1 if device == "cpu" else 0,
            )
            source, target = (spm.SentencePieceProcessor(model_file=str(folder / SUBWORDS[side])) for side in SUBWORDS)
        except (RuntimeError, ValueError, OSError) as error:
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise UserError(f"model_dir={folder}: CTranslate2 could not load it ({reason}); export it again") from None
        search = Search(
            options.beam,
            options.alpha,
            note["decode_ratio"],
            note["decode_extra"],
            options.max_tokens,
            options.max_input_len,
        )
        return cls(folder, translator, source, target, search, note.get("positions", POSITIONS))

    def token_ids(self, lines: list[str]) -> list[list[int]]:
        """Each line's output subword ids, without eos, cut where our search stops it (empty for a blank line)."""
        pieces = [self.source.encode(line, out_type=str) for line in lines]
        texts = [i for i, line_pieces in enumerate(pieces) if line_pieces]  # blank as training reads it: ours too
        found: list[list[int]] = [[] for _ in lines]
        if not texts:
            return found
        sources = [pieces[i] for i in texts]
        lengths = [len(line_pieces) for line_pieces in sources]
        check_input_lengths(lengths, [i + 1 for i in texts], self.search.max_input_len, "max_input_len")
        check_beam_fits(self.search, max(lengths) + 1)  # with eos, as our batches count a line
        limits = [output_limit(length, self.search.ratio, self.search.extra) for length in lengths]
        if max(max(limits), max(lengths)) > self.positions:
            line = texts[max(range(len(texts)), key=lambda i: max(limits[i], lengths[i]))] + 1
            raise UserError(
                f"line {line}: its output may run to {max(limits):,} subwords, past the {self.positions:,} positions "
                f"the export holds; split it into sentences, or lower max_input_len"
            )
        results = self.translator.translate_batch(
            sources,
            beam_size=self.search.beam,
            length_penalty=self.search.alpha if self.search.beam > 1 else 0.0,
            max_decoding_length=max(limits),
            min_decoding_length=0,  # eos may come first, as in ours (an empty translation)
            max_input_length=0,  # lengths are checked above, never cut
            max_batch_size=max(self.search.max_tokens // self.search.beam, max(lengths)),
            batch_type="tokens",
        )
        for index, result, limit in zip(texts, results, limits):
            found[index] = [self.target.piece_to_id(piece) for piece in result.hypotheses[0]][:limit]
        return found

    def search_lines(self, lines: list[str]) -> tuple[list[str], list[list[int]]]:
        """Translations of raw lines, detokenized as ours (a blank line translates to a blank line), and their ids."""
        found = self.token_ids(lines)
        return self.target.decode(found), found

    def translate(self, lines: list[str]) -> list[str]:
        return self.search_lines(lines)[0]
