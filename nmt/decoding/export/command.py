"""`nmt-export checkpoint=PATH [quantization=int8] [output=FOLDER] [check=valid]`: a trained Transformer written as a
CTranslate2 model folder (`nmt.decoding.export.ct2`) with its sentencepiece models, checked against our decoder
(`nmt.decoding.export.check`) and noted with what it came from (`nmt.decoding.export.folder`).

Everything is refused before anything is written: options out of range, a model CTranslate2 cannot compute, a
checkpoint that is damaged or not nmt's (loaded as every checkpoint is, with weights_only=True), an output folder
holding files nmt-export did not write. The export is made in a folder of its own beside the output and renamed into
place once whole and checked; a check that loses more than `tolerance` BLEU to ours leaves nothing behind.
"""

from __future__ import annotations

import math
import shutil
import sys
from pathlib import Path

import torch

from nmt import UserError
from nmt.config import DecodeOptions
from nmt.decoding.export import check, ct2, folder
from nmt.decoding.export.engine import SUBWORDS, Exported
from nmt.decoding.translator import load_model
from nmt.device import int8_pairs_clip
from nmt.paths import PUT_IN_PLACE

FORMATS = ("ctranslate2",)
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")
CHECKS = ("valid", "test", "none")

USAGE = """## Use it

Without nmt or PyTorch (`pip install ctranslate2 sentencepiece`), from the folder above this one:

```python
import ctranslate2
import sentencepiece as spm

folder = "{name}"
translator = ctranslate2.Translator(folder, device="cpu")
source = spm.SentencePieceProcessor(model_file=f"{{folder}}/source.spm")
target = spm.SentencePieceProcessor(model_file=f"{{folder}}/target.spm")
lines = ["{example}"]
results = translator.translate_batch(source.encode(lines, out_type=str), beam_size=5, min_decoding_length=0)
print("\\n".join(target.decode(result.hypotheses[0]) for result in results))
```

With nmt, which also stops each output where nmt's own search would:
`echo "{example}" | nmt-translate engine=ctranslate2 model_dir={name} beam=5`
"""
EXAMPLES = {"de": "Ein Hund läuft über die Wiese.", "en": "A dog runs across the meadow."}


def check_options(format: str, quantization: str, check_split: str, tolerance: float, threads: int) -> None:
    """Refuse, naming the option, what the command cannot do, before the checkpoint is read."""
    for option, value, choices in (
        ("format", format, FORMATS),
        ("quantization", quantization, QUANTIZATIONS),
        ("check", check_split, CHECKS),
    ):
        if value not in choices:
            raise UserError(f"{option}={value}: one of {', '.join(choices)}")
    if isinstance(tolerance, bool) or not math.isfinite(tolerance) or tolerance < 0:
        raise UserError(f"tolerance={tolerance}: the BLEU the export may lose on the check, 0 or more")
    if threads < 0:
        raise UserError(f"threads={threads}: 0 (every core) or more")


def export(
    checkpoint: str,
    format: str = "ctranslate2",
    quantization: str = "int8",
    output: str | None = None,
    overwrite: bool = False,
    check_split: str = "valid",
    tolerance: float = 0.5,
    data_dir: str | None = None,
    threads: int = 0,
) -> Path:
    """Write `checkpoint`'s Transformer as a CTranslate2 folder (`output`, or <checkpoint>.ctranslate2-<q> beside
    it), checked on `check_split` unless it is none; returns the folder."""
    check_options(format, quantization, check_split, tolerance, threads)
    ct2.ctranslate2_module()  # installed, or say how before any work
    path = Path(checkpoint).expanduser()
    model, vocabulary, config = load_model(path, torch.device("cpu"))
    reasons = ct2.unsupported(config["model"])
    if reasons:
        raise UserError(f"{path}: cannot be exported to CTranslate2: " + "; ".join(reasons))
    spec = ct2.transformer_spec(model, vocabulary)
    chosen = Path(output).expanduser() if output else folder.default_folder(path, format, quantization)
    if chosen.parent.is_dir():
        for line in folder.leftovers(chosen):  # what an export cut short left: put right before this one starts
            print(f"nmt-export: {line}", file=sys.stderr)
    target = folder.target_folder(chosen, overwrite)
    staging = folder.staging_folder(target)
    try:
        write_model(spec, vocabulary, staging, quantization)
        settings = {"format": format, "quantization": quantization, "ctranslate2": ct2.ctranslate2_module().__version__}
        note = folder.note_of(path, config, settings, None)
        note["files"] = folder.file_digests(staging)  # checked each time the folder is loaded
        if check_split != "none":
            exported = Exported.open(staging, note, DecodeOptions(beam=1), threads)
            note["check"] = check.compare(exported, model, vocabulary, config, check_split, data_dir)
            report(note["check"], quantization, tolerance)
        usage = USAGE.format(name=target.name, example=EXAMPLES.get(config["data"].get("src_lang"), "..."))
        folder.write_note(staging, note, usage)
        folder.install(staging, target, overwrite)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        PUT_IN_PLACE[:] = [p for p in PUT_IN_PLACE if staging not in p.parents]  # the staging files are gone
    print(f"wrote {target} (CTranslate2, {quantization}); use: nmt-translate engine=ctranslate2 model_dir={target}")
    return target


def write_model(spec, vocabulary, staging: Path, quantization: str) -> None:
    """The specification's weights (quantized), config and vocabularies, and both sentencepiece models."""
    try:
        spec.validate()
        spec.optimize(quantization=quantization)
        spec.save(str(staging))
        vocabulary.save(staging / SUBWORDS["source"], staging / SUBWORDS["target"])
    except OSError as error:
        raise UserError(f"{staging.parent}: could not write the export ({error.strerror or error})") from None


def report(found: dict, quantization: str, tolerance: float) -> None:
    """The check's figures, printed; a BLEU loss beyond `tolerance` refused (and so nothing installed)."""
    print(
        f"check on the {found['split']} split ({found['sentences']:,} sentences, greedy): the same subwords as our "
        f"decoder (fp32) for {found['same']:,}; BLEU {found['bleu']:.2f} (CTranslate2 {quantization}) against "
        f"{found['ours_bleu']:.2f} (ours), a gap of {found['gap']:+.2f}"
    )
    if found["gap"] < -tolerance:
        why = (
            " (this CPU sums int8 products in 16 bits, without VNNI, where they can clip)"
            if quantization.startswith("int8") and int8_pairs_clip()
            else ""
        )
        raise UserError(
            f"the export loses {-found['gap']:.2f} BLEU to our decoder on the {found['split']} split, more than "
            f"tolerance={tolerance}{why}; nothing was written. Try quantization=float32, or raise tolerance"
        )
