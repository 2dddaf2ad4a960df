"""Attention as word alignment: links read from a model's attention (its argmax over source words), their AER
against gold links (`nmt.text.aer`), and the attention report of a validation (entropy, support, diagonality).
"""

from __future__ import annotations

import numpy as np
import torch

from nmt import UserError
from nmt.device import autocast
from nmt.text.aer import Gold, Link, alignment_counts, alignment_error
from nmt.text.data import BOS_ID, EOS_ID, PAD_ID, Vocabulary

WORD_START = "\u2581"  # sentencepiece's mark of a piece that begins a word


# --- from attention to links --------------------------------------------------------------------------------------


def piece_words(pieces: list[str]) -> list[int]:
    """The word index of each sentencepiece piece: a piece that starts with '\u2581' begins a new word."""
    words, index = [], -1
    for piece in pieces:
        if piece.startswith(WORD_START) or index < 0:
            index += 1
        words.append(index)
    return words


def word_weights(weights: np.ndarray, source_words: list[int], target_words: list[int]) -> np.ndarray:
    """Attention between words (target words, source words) from attention between pieces (target pieces, source
    pieces): a source word gets the sum of its pieces' weights, a target word the mean of its pieces' rows."""
    source_sum = np.zeros((weights.shape[0], max(source_words) + 1))
    np.add.at(source_sum.T, source_words, weights.T)  # columns summed per source word
    rows = np.zeros((max(target_words) + 1, source_sum.shape[1]))
    np.add.at(rows, target_words, source_sum)
    return rows / np.bincount(target_words)[:, None]


def argmax_links(words: np.ndarray) -> set[Link]:
    """Each target word linked to the source word it attends to most (Luong et al. 2015, section 5.4)."""
    return {(int(i), j) for j, i in enumerate(words.argmax(1))}


def alignment_maps(model: torch.nn.Module, device: torch.device) -> list[str]:
    """The names of the model's attention maps whose rows are target positions and columns source positions: the
    RNNs' one alignment, the Transformer's encoder-decoder attention of each layer; empty without attention."""
    source = torch.full((1, 1), BOS_ID, device=device)
    with torch.no_grad():
        names = model.attention_maps(source, source != PAD_ID, source)
    return [name for name in names if name == "alignment" or name.startswith("cross_layer_")]


Key = tuple[str, bool]  # (attention map, shifted)


def key_name(key: Key) -> str:
    return key[0] + ("_shifted" if key[1] else "")


@torch.no_grad()
def word_attention(
    model: torch.nn.Module,
    vocabulary: Vocabulary,
    pairs: list[tuple[str, str]],
    device: torch.device,
    dtype: torch.dtype,
    maps: list[str],
    shifts: tuple[bool, ...] = (False,),
    max_tokens: int = 8000,
) -> dict[Key, list[np.ndarray | None]]:
    """Attention between words (target words, source words) from force-decoding each reference, for every map and
    shift, in the order of `pairs`; None for a pair with an empty side. The pairs run in batches of similar lengths
    of at most `max_tokens` padded source and target pieces (at least one pair): few batches, each a loop over its
    longest target, which is what a GPU waits on; little padding, which is what a CPU computes.

    Row t of a map is the query that predicts target piece t (shift=False). With shift=True a piece's row is the
    next one, where the piece is the decoder's input: the Transformer's attention often aligns better there.
    """
    model.eval()
    sources = vocabulary.source.encode([s for s, _ in pairs], out_type=str)  # pieces keep their word-start marks ...
    targets = vocabulary.target.encode([t for _, t in pairs], out_type=str)
    # ... the ids are what the model reads; an empty line reads as eos, as in training, and gets no links
    source_ids = [ids or [EOS_ID] for ids in vocabulary.encode_source([s for s, _ in pairs])]
    target_in = [[BOS_ID, *ids] for ids in vocabulary.encode_target([t for _, t in pairs])]
    results: dict[Key, list[np.ndarray | None]] = {
        (name, shift): [None] * len(pairs) for name in maps for shift in shifts
    }
    for chunk in length_batches([len(s) for s in source_ids], [len(t) for t in target_in], max_tokens):
        source, target = pad([source_ids[i] for i in chunk], device), pad([target_in[i] for i in chunk], device)
        with autocast(device, dtype):
            weights = model.attention_maps(source, source != PAD_ID, target)
        for name in maps:
            batch_weights = weights[name][:, 0].float().cpu().numpy()  # (B, T, S)
            for row, index in enumerate(chunk):
                source_pieces, target_pieces = sources[index], targets[index]
                if not source_pieces or not target_pieces:
                    continue
                for shift in shifts:
                    first = 1 if shift else 0  # target_in is bos + n pieces: rows 0..n-1 predict them, 1..n read them
                    rows = batch_weights[row, first : first + len(target_pieces), : len(source_pieces)]
                    words = word_weights(rows, piece_words(source_pieces), piece_words(target_pieces))
                    results[(name, shift)][index] = words
    return results


def length_batches(source_lengths: list[int], target_lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Indices of pairs in batches by length (longest first): each batch's rows times its longest source plus its
    longest target at most `max_tokens`, and at least one pair."""
    order = sorted(range(len(source_lengths)), key=lambda i: (-target_lengths[i], -source_lengths[i]))
    batches: list[list[int]] = []
    longest_source = longest_target = 0
    for index in order:
        source, target = max(longest_source, source_lengths[index]), max(longest_target, target_lengths[index])
        if batches and (len(batches[-1]) + 1) * (source + target) <= max_tokens:
            batches[-1].append(index)
        else:
            batches.append([index])
            source, target = source_lengths[index], target_lengths[index]
        longest_source, longest_target = source, target
    return batches


def shifted_links(matrices: list[np.ndarray | None], shift: int) -> list[set[Link]]:
    """Argmax links with every source index moved by `shift` words (kept inside the sentence): AER as a function of
    the shift tells whether a model's attention sits a fixed number of words off the words it translates."""
    return [
        {(min(max(i + shift, 0), m.shape[1] - 1), j) for i, j in argmax_links(m)} if m is not None else set()
        for m in matrices
    ]


def links_of(matrices: list[np.ndarray | None]) -> list[set[Link]]:
    return [argmax_links(m) if m is not None else set() for m in matrices]


def entropy(matrices: list[np.ndarray | None]) -> float:
    """Mean entropy (nats) of a target word's attention over the source words: 0 when every word attends to one
    source word, log(S) when attention is uniform."""
    values = []
    for m in matrices:
        if m is not None:
            p = m / np.maximum(m.sum(1, keepdims=True), 1e-12)
            values.extend(-(p * np.log(np.maximum(p, 1e-12))).sum(1))
    return float(np.mean(values)) if values else 0.0


def support(matrices: list[np.ndarray | None]) -> float:
    """Mean number of source words a target word gives weight above zero: every word of the sentence under softmax,
    a few under sparsemax and entmax."""
    counts = [count for m in matrices if m is not None for count in (m > 0).sum(1)]
    return float(np.mean(counts)) if counts else 0.0


def diagonality(matrices: list[np.ndarray | None]) -> float:
    """Mean over sentences of the correlation between a target word's position and the source position it attends
    to on average (sum_i a_ji i): 1 for a monotonic alignment, about 0 for attention that ignores word order."""
    values = []
    for m in matrices:
        if m is not None and m.shape[0] > 1 and m.shape[1] > 1:
            p = m / np.maximum(m.sum(1, keepdims=True), 1e-12)
            expected = p @ np.arange(m.shape[1])
            if expected.std() > 1e-9:
                values.append(np.corrcoef(np.arange(m.shape[0]), expected)[0, 1])
    return float(np.mean(values)) if values else 0.0


def attention_report(
    model: torch.nn.Module,
    vocabulary: Vocabulary,
    pairs: list[tuple[str, str]],
    device: torch.device,
    dtype: torch.dtype,
    gold: list[Gold] | None = None,
    shifts: tuple[bool, ...] | None = None,
    counts: bool = False,
) -> dict[str, dict]:
    """{map name: {entropy, diagonality, support[, aer, precision, recall[, counts]]}} for each alignment map (the
    Transformer's also shifted), from force-decoding the references; empty for a model without attention."""
    maps = alignment_maps(model, device)
    if shifts is None:
        shifts = (False, True) if any(name.startswith("cross_layer_") for name in maps) else (False,)
    matrices = word_attention(model, vocabulary, pairs, device, dtype, maps, shifts)
    report = {}
    for key, values in matrices.items():
        figures = {"entropy": entropy(values), "diagonality": diagonality(values), "support": support(values)}
        if gold is not None:
            links = links_of(values)
            scores = alignment_error(links, gold)
            figures.update(aer=scores.aer, precision=scores.precision, recall=scores.recall)
            if counts:  # per sentence, for the significance tests
                figures["counts"] = alignment_counts(links, gold)
        report[key_name(key)] = figures
    return report


def choose_map(available: list[str], requested: str | None, valid_report: dict | None = None) -> str:
    """The attention map that gives alignments: the one asked for, else the one with the lowest valid AER when a
    valid report with AER is given, else the RNNs' `alignment` or the Transformer's last layer."""
    if requested:
        if requested not in available:
            raise UserError(f"alignment_map={requested!r}: this model has {', '.join(available)}")
        return requested
    if valid_report and all("aer" in figures for figures in valid_report.values()):
        return min(valid_report, key=lambda name: valid_report[name]["aer"])
    unshifted = [name for name in available if not name.endswith("_shifted")]
    return max(unshifted, key=lambda name: (len(name), name))  # alignment, or cross_layer_N with the largest N


def map_names(model: torch.nn.Module, device: torch.device) -> list[str]:
    """Every name `attention_report` gives for this model: its maps, and the Transformer's shifted ones too."""
    maps = alignment_maps(model, device)
    if any(name.startswith("cross_layer_") for name in maps):
        return maps + [key_name((name, True)) for name in maps]
    return maps


def parse_key(name: str) -> Key:
    return (name[: -len("_shifted")], True) if name.endswith("_shifted") else (name, False)


def pad(rows: list[list[int]], device: torch.device) -> torch.Tensor:
    width = max(1, *(len(r) for r in rows))
    return torch.tensor([r + [PAD_ID] * (width - len(r)) for r in rows], device=device)
