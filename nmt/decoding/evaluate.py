"""Score a trained checkpoint: decode a split (or the user's own files); BLEU, chrF and TER with their signatures."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import sacrebleu

from nmt import UserError, build
from nmt.config import DecodeOptions
from nmt.decoding.alignment import attention_report, choose_map, links_of, map_names, parse_key, word_attention
from nmt.decoding.export.engine import Exported
from nmt.decoding.plot import close
from nmt.decoding.translator import Translator
from nmt.paths import output_file, output_folder, stamp, write_text
from nmt.text.aer import Gold, format_links, read_gold
from nmt.text.corpus import Pairs, read_lines, read_parallel, with_text

log = logging.getLogger(__name__)


LENGTH_BUCKETS = [(1, 10), (11, 15), (16, 20), (21, 30), (31, 1000)]  # source words, as in Bahdanau et al. fig. 2


def bleu_by_length(sources: list[str], hypotheses: list[str], references: list[str]) -> dict[tuple, tuple]:
    """{(low, high): (BLEU, sentences)} over source-length buckets (words), for the buckets that hold sentences."""
    buckets = {}
    for low, high in LENGTH_BUCKETS:
        chosen = [i for i, source in enumerate(sources) if low <= len(source.split()) <= high]
        if chosen:
            bleu = sacrebleu.corpus_bleu([hypotheses[i] for i in chosen], [[references[i] for i in chosen]])
            buckets[(low, high)] = (bleu.score, len(chosen))
    return buckets


def scores_of(sources: list[str], hypotheses: list[str], references: list[str]) -> dict:
    """BLEU, chrF and TER of `hypotheses` with their signatures, and BLEU by source length, printed; the figures."""
    metrics = [sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF(), sacrebleu.metrics.TER()]
    scores = [metric.corpus_score(hypotheses, [references]) for metric in metrics]
    buckets = bleu_by_length(sources, hypotheses, references)
    print_scores(metrics, scores, buckets)
    return {
        "bleu": scores[0].score,
        "chrf": scores[1].score,
        "ter": scores[2].score,
        "bleu_by_length": {f"{low}-{high}": bleu for (low, high), (bleu, _) in buckets.items()},
    }


def pairs_to_score(
    config: dict, split: str, source: str | None, reference: str | None, data_dir: str | None, vocabulary
) -> tuple[Pairs, list[Gold] | None]:
    """The pairs to score, and their gold alignments when the corpus knows them: those with text once sentencepiece
    has normalised them, as training keeps them (a line of zero-width characters has none)."""
    if source or reference:
        if not (source and reference):
            raise UserError("give both source=FILE and reference=FILE to score your own files")
        pairs = read_parallel(source, reference)
        sources, targets = (
            vocabulary.encode_source([s for s, _ in pairs]),
            vocabulary.encode_target([t for _, t in pairs]),
        )
        marked = [(s if a else "", t if b else "") for (s, t), a, b in zip(pairs, sources, targets)]
        return with_text(marked, "given", f"source={source} and reference={reference}"), None
    data = build.saved_data_config(config["data"])
    splits = build.with_subwords(build.corpus_of(config, data_dir), vocabulary, data)
    return splits.split(split), splits.alignments[split] if splits.alignments else None


def scored_from(config: dict, split: str, source: str | None, reference: str | None, data_dir: str | None) -> str:
    """Which text is scored, in words: the user's files, or where the checkpoint's corpus is read from."""
    if source:
        return f"{source} against {reference}"
    data = build.saved_data_config(config["data"])
    if data.corpus == "files":
        pair = data[split]
        return f"the run's data.{split} files, {pair.src} against {pair.tgt}"
    if data.corpus == "multi30k":
        folder = data_dir or data.dir or os.environ.get("NMT_DATA_DIR") or "the download cache"
        return f"Multi30k's {split} split ({data.src_lang} -> {data.tgt_lang}) from {folder}"
    return f"the sample corpus's {split} split (data.sample_seed={data.sample_seed})"


def alignment_map_of(translator: Translator, requested: str | None, data_dir: str | None) -> str | None:
    """The map whose attention gives alignments (`nmt.decoding.alignment.choose_map`); None for a model without
    attention. Without a request, a Transformer trained on a corpus with gold alignments takes the map best on its valid
    split."""
    available = map_names(translator.model, translator.device)
    if not available:
        return None
    valid_report = None
    if not requested and len(available) > 1 and translator.config.get("data", {}).get("corpus") == "sample":
        splits = build.corpus_of(translator.config, data_dir)
        valid_report = attention_report(
            translator.model,
            translator.vocabulary,
            splits.valid,
            translator.device,
            translator.dtype,
            splits.alignments["valid"],
        )
    return choose_map(available, requested, valid_report)


def score_alignment(translator: Translator, pairs: Pairs, gold: list[Gold], chosen: str | None) -> dict:
    """AER, precision and recall of every attention map against gold links, printed as a table with the chosen map
    marked; the chosen map's figures."""
    if chosen is None:
        print("alignment: this model has no attention (the Sutskever model), so no alignment to score")
        return {}
    report = attention_report(translator.model, translator.vocabulary, pairs, translator.device, translator.dtype, gold)
    print("alignment (argmax of each target word's attention, force-decoding the reference; Och and Ney 2003):")
    print(f"  {'map':24} {'AER':>6} {'prec.':>6} {'recall':>6} {'entropy':>8} {'diag.':>6}")
    for name, figures in report.items():
        mark = " <" if name == chosen else ""
        print(
            f"  {name:24} {figures['aer']:6.3f} {figures['precision']:6.3f} {figures['recall']:6.3f} "
            f"{figures['entropy']:8.3f} {figures['diagonality']:6.3f}{mark}"
        )
    return {"alignment_map": chosen, **report[chosen]}


def not_its_corpus(path: Path | None, option: str, config: dict | None, data_dir: str | None) -> None:
    """Refuse an output that is a file the checkpoint's corpus is read from (a data=files run's test reference, its
    train.de; Multi30k's files), whatever the overwrite option says: it is an input of this very command or of the
    run, never its output."""
    if path is None or config is None or not path.exists():
        return
    for corpus_file in build.corpus_files(config, data_dir):
        if corpus_file.exists() and path.samefile(corpus_file):
            raise UserError(
                f"{option}={path}: is {corpus_file}, a file of the corpus this model was trained on, which no "
                "command replaces; write elsewhere"
            )


def evaluate(
    checkpoint_path: str,
    decoding: DecodeOptions | None = None,
    split: str = "test",
    source: str | None = None,
    reference: str | None = None,
    data_dir: str | None = None,
    output: str | None = None,
    alignments: str | None = None,
    alignment_map: str | None = None,
    overwrite: bool = False,
) -> dict:
    """Decode a split (or source=/reference= files), print BLEU, chrF and TER with their signatures and BLEU by
    source length, and write the hypotheses; with gold alignments (`alignments=FILE`, or the sample corpus's own),
    also AER. Returns the scores."""
    decoding = decoding or DecodeOptions()
    beam, alpha = decoding.beam, decoding.alpha
    name = Path(source).name if source else split
    default_output = Path(checkpoint_path).with_suffix(f".{name}.beam{beam}.hyp")
    inputs = (source, reference, checkpoint_path, alignments)
    output_path = output_file(
        output or default_output, "output", inputs, overwrite if output else None
    )  # its own default path it may replace
    translator = Translator.load(checkpoint_path, decoding)
    not_its_corpus(output_path, "output", translator.config, data_dir)
    pairs, gold = pairs_to_score(translator.config, split, source, reference, data_dir, translator.vocabulary)
    if not pairs:
        raise UserError(f"{source or split}: no sentences to score")
    if alignments:
        gold = read_gold(alignments, pairs)
    chosen = alignment_map_of(translator, alignment_map, data_dir) if gold is not None else None  # checked early
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    hypotheses = translator.translate(sources, progress=f"decoding {source or split}")
    write_text(output_path, "".join(h + "\n" for h in hypotheses), exclusive=bool(output) and not overwrite)
    stamp(output_path, Path(checkpoint_path), f"beam={beam} alpha={alpha} precision={decoding.precision}")
    search = "greedy decoding" if beam == 1 else f"beam {beam}, length penalty alpha {alpha:g}"
    scored = scored_from(translator.config, split, source, reference, data_dir)
    print(f"{name}: {len(pairs)} sentences of {scored}, {search}; hypotheses in {output_path}")
    results = scores_of(sources, hypotheses, references)
    if gold is not None:
        results.update(score_alignment(translator, pairs, gold, chosen))
    return results


def translate_file(
    checkpoint_path: str,
    decoding: DecodeOptions | None = None,
    source: str | None = None,
    output: str | None = None,
    attention: str | None = None,
    alignments: str | None = None,
    alignment_map: str | None = None,
    overwrite: bool = False,
    engine: str = "nmt",
    model_dir: str | None = None,
) -> list[str]:
    """Translate the lines of `source` (stdin when None) and write them to `output` (stdout when None); with
    `attention=DIR`, also the heatmap of each line's attention as DIR/line<N>.png; with `alignments=FILE`, each
    translation's word alignment to its line in Pharaoh format (source word i - translation word j, 0-based).
    `engine=ctranslate2` translates with the folder nmt-export wrote (`model_dir`) instead of `checkpoint_path`."""
    output_path = output_file(output, "output", (source, checkpoint_path), overwrite) if output else None
    folder = output_folder(attention, "attention") if attention else None
    links_path = (
        output_file(alignments, "alignments", (source, checkpoint_path), overwrite, also_written=(output,))
        if alignments
        else None
    )
    refused = {"attention": attention, "alignments": alignments, "alignment_map": alignment_map}
    translator = engine_of(engine, checkpoint_path, model_dir, decoding or DecodeOptions(beam=5), refused)
    for path, option in ((output_path, "output"), (links_path, "alignments")):
        not_its_corpus(path, option, getattr(translator, "config", None), None)
    if (folder or links_path) and not translator.has_attention():
        option = "attention=" if folder else "alignments="
        raise UserError(f"{checkpoint_path}: this model has no attention to plot or align with; leave out {option}")
    chosen = alignment_map_of(translator, alignment_map, None) if links_path else None
    lines = lines_to_translate(source)
    if folder:  # a line<N>.png there that no nmt command wrote is the user's: refused before decoding
        output_folder(folder, "attention", tuple(f"line{n}.png" for n, line in enumerate(lines, 1) if line.strip()))
    translations, hypotheses = translator.search_lines(lines)
    if folder:
        draw_heatmaps(translator, folder, lines, translations, hypotheses)
    if links_path:
        write_links(translator, chosen, list(zip(lines, translations)), links_path, exclusive=not overwrite)
    write_translations(translations, output_path, exclusive=not overwrite)
    return translations


def lines_to_translate(source: str | None) -> list[str]:
    """The lines of `source` (stdin when None); all of them blank is refused (a blank line among others is kept, as
    a blank output line)."""
    lines = read_lines(source) if source else read_stdin()
    if lines and not any(line.strip() for line in lines):
        raise UserError(f"{source or 'stdin'}: all {len(lines)} of its lines are blank: no text to translate")
    return lines


def write_translations(translations: list[str], output_path: Path | None, exclusive: bool = False) -> None:
    text = "".join(t + "\n" for t in translations)
    if output_path:
        write_text(output_path, text, exclusive)
        print(f"wrote {len(translations)} translations to {output_path}", file=sys.stderr)
    else:
        sys.stdout.write(text)


def engine_of(engine: str, checkpoint_path: str | None, model_dir: str | None, decoding: DecodeOptions, refused: dict):
    """What translate.py decodes with: our Translator of `checkpoint_path`, or (engine=ctranslate2) the CTranslate2
    folder `model_dir`, which gives translations only: the options of `refused` that are set are refused by name."""
    if engine not in ("nmt", "ctranslate2"):
        raise UserError(f"engine={engine}: nmt (our decoder: checkpoint=) or ctranslate2 (an export: model_dir=)")
    if engine == "nmt":
        if model_dir:
            raise UserError(f"model_dir={model_dir}: an exported folder: add engine=ctranslate2 to translate with it")
        if checkpoint_path is None:
            raise UserError("checkpoint: required; give it on the command line (checkpoint=...)")
        return Translator.load(checkpoint_path, decoding)
    if not model_dir or checkpoint_path:
        raise UserError(
            "engine=ctranslate2 translates with model_dir=FOLDER (a folder nmt-export wrote), not checkpoint="
        )
    for option, value in refused.items():
        if value:
            raise UserError(f"{option}={value}: engine=ctranslate2 gives translations only; leave it out or use nmt")
    return Exported.load(model_dir, decoding)


def print_scores(metrics: list, scores: list, buckets: dict) -> None:
    """Each score with its sacrebleu signature, then BLEU by source length."""
    for label, metric, result in zip(["BLEU", "chrF", "TER"], metrics, scores):
        print(f"{label:5} {result.score:6.2f}  {metric.get_signature()}")
    print(
        "BLEU by source length (words): "
        + ", ".join(
            f"{low}-{high if high < 1000 else ''}: {bleu:.1f} ({count})"
            for (low, high), (bleu, count) in buckets.items()
        )
    )


def draw_heatmaps(translator: Translator, folder: Path, lines: list[str], translations: list[str], hypotheses) -> None:
    """The attention heatmap of each line that is not empty, as folder/line<N>.png."""
    drawn = 0
    for number, (line, translation, hypothesis) in enumerate(zip(lines, translations, hypotheses), 1):
        if line.strip():
            figure = translator.alignment_figure(line, translation, hypothesis)
            figure.savefig(folder / f"line{number}.png")
            close(figure)
            drawn += 1
    print(f"wrote {drawn} attention heatmap{'s' * (drawn != 1)} to {folder}/line<N>.png", file=sys.stderr)


def write_links(
    translator: Translator, chosen: str, pairs: list[tuple[str, str]], path: Path, exclusive: bool = False
) -> None:
    """Each translation's word alignment to its line (the `chosen` attention map's argmax links), in Pharaoh format."""
    key = parse_key(chosen)
    model, vocabulary, device, dtype = translator.model, translator.vocabulary, translator.device, translator.dtype
    matrices = word_attention(model, vocabulary, pairs, device, dtype, [key[0]], (key[1],))[key]
    write_text(path, "".join(format_links(links) + "\n" for links in links_of(matrices)), exclusive)
    print(f"wrote the word alignments to {path}", file=sys.stderr)


def read_stdin() -> list[str]:
    """The lines of standard input, read as UTF-8 bytes whatever the locale; names the first line that is not."""
    data = sys.stdin.buffer.read()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise UserError(f"standard input, line {line}: not valid UTF-8 text") from None
    lines = [line.rstrip("\r").strip() for line in text.split("\n")]
    if lines and lines[-1] == "":
        lines.pop()
    return lines
