"""An export checked, not assumed: a split of the run's corpus decoded greedily by the export and by our own decoder
(fp32, the trained weights as they are), compared subword for subword up to where our search stops each line, and
scored with sacreBLEU against the references."""

from __future__ import annotations

import torch

from nmt.build import corpus_of
from nmt.decoding.search import output_limit
from nmt.decoding.translator import Search, score, trained_options, translate


def compare(exported, model, vocabulary, config: dict, split: str, data_dir: str | None) -> dict:
    """`exported` (anything with `token_ids(lines)`, decoding greedily) against `model` on `split`: how many lines
    give the same subwords, both BLEU scores and their gap (the export's minus ours)."""
    pairs = corpus_of(config, data_dir).split(split)
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    trained = trained_options(config)
    ratio, extra = trained.decode_ratio, trained.decode_extra
    ours_texts, ours = translate(
        model,
        vocabulary,
        sources,
        Search(1, 0.0, ratio, extra),
        torch.device("cpu"),
        torch.float32,
        progress=f"ours on {split}",
    )
    theirs = exported.token_ids(sources)
    lengths = [len(ids) or 1 for ids in vocabulary.encode_source(sources)]  # a blank line reads as eos alone
    same = sum(
        hypothesis.tokens[: output_limit(length, ratio, extra)] == ids
        for hypothesis, ids, length in zip(ours, theirs, lengths)
    )
    bleu = score(vocabulary.decode_target(theirs), references).bleu
    ours_bleu = score(ours_texts, references).bleu
    return {
        "split": split,
        "sentences": len(pairs),
        "same": same,
        "bleu": bleu,
        "ours_bleu": ours_bleu,
        "gap": bleu - ours_bleu,
    }
