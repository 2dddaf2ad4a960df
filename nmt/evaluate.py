"""Score a trained checkpoint: decode a split (or the user's own files) and print BLEU and chrF with signatures."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import torch
from omegaconf import OmegaConf

from nmt import UserError, build, checkpoint
from nmt.data import Pairs, Vocabulary, read_lines, read_parallel
from nmt.trainer import score, translate_pairs

log = logging.getLogger(__name__)


def load_model(path: str | Path, device: torch.device) -> tuple[torch.nn.Module, Vocabulary, dict]:
    """Rebuild the model a checkpoint holds, with the vocabulary and config it was trained with."""
    payload = checkpoint.load(path)
    vocabulary = Vocabulary(payload["vocabulary"]["source"], payload["vocabulary"]["target"])
    model = build.model(payload["config"]["model"], vocabulary)
    model.load_state_dict(payload["model"])
    return model.to(device).eval(), vocabulary, payload["config"]


def pairs_to_score(config: dict, split: str, source: str | None, reference: str | None, data_dir: str | None) -> Pairs:
    if source or reference:
        if not (source and reference):
            raise UserError("give both source=FILE and reference=FILE to score your own files")
        return read_parallel(source, reference)
    data = OmegaConf.create(config["data"])
    if data_dir and data.corpus == "multi30k":
        data.dir = data_dir
    return build.load_corpus(data).split(split)


def evaluate(
    checkpoint_path: str,
    split: str = "test",
    source: str | None = None,
    reference: str | None = None,
    data_dir: str | None = None,
    beam: int = 1,
    alpha: float = 0.6,
    output: str | None = None,
    device: str = "auto",
    precision: str | None = None,
    max_tokens: int = 8000,
) -> dict[str, float]:
    if beam < 1:
        raise UserError(f"beam={beam}: the beam size must be 1 (greedy) or more")
    target_device = build.device(device)
    model, vocabulary, config = load_model(checkpoint_path, target_device)
    dtype = build.precision(precision or config["trainer"]["precision"])
    pairs = pairs_to_score(config, split, source, reference, data_dir)
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    trainer = config["trainer"]
    hypotheses, _ = translate_pairs(
        model,
        vocabulary,
        sources,
        target_device,
        dtype,
        max_tokens,
        ratio=trainer["decode_ratio"],
        extra=trainer["decode_extra"],
        beam_size=beam,
        alpha=alpha,
    )
    bleu, chrf, bleu_metric, chrf_metric = score(hypotheses, references)
    name = Path(source).name if source else split
    output_path = Path(output) if output else Path(checkpoint_path).with_suffix(f".{name}.beam{beam}.hyp")
    output_path.write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
    search = "greedy decoding" if beam == 1 else f"beam {beam}, length penalty alpha {alpha:g}"
    print(f"{name}: {len(pairs)} sentences, {search}; hypotheses in {output_path}")
    print(f"BLEU  {bleu.score:6.2f}  {bleu_metric.get_signature()}")
    print(f"chrF  {chrf.score:6.2f}  {chrf_metric.get_signature()}")
    return {"bleu": bleu.score, "chrf": chrf.score}


def translate_file(
    checkpoint_path: str,
    source: str | None = None,
    output: str | None = None,
    beam: int = 5,
    alpha: float = 0.6,
    device: str = "auto",
    precision: str | None = None,
    max_tokens: int = 8000,
) -> list[str]:
    """Translate the lines of `source` (stdin when None) and write them to `output` (stdout when None)."""
    if beam < 1:
        raise UserError(f"beam={beam}: the beam size must be 1 (greedy) or more")
    target_device = build.device(device)
    model, vocabulary, config = load_model(checkpoint_path, target_device)
    dtype = build.precision(precision or config["trainer"]["precision"])
    if source:
        lines = read_lines(source)
    else:
        try:
            lines = [line.rstrip("\r").strip() for line in sys.stdin.read().split("\n")]
        except UnicodeDecodeError:
            raise UserError("standard input is not valid UTF-8 text") from None
        if lines and lines[-1] == "":
            lines.pop()
    trainer = config["trainer"]
    translations = translate_pairs(model, vocabulary, lines, target_device, dtype, max_tokens, trainer["decode_ratio"],
                                   trainer["decode_extra"], beam, alpha)[0] if lines else []  # fmt: skip
    text = "".join(t + "\n" for t in translations)
    if output:
        Path(output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return translations
