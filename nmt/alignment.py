"""Attention as word alignment: gold links in Pharaoh format, links read from a model's attention, and AER.

Pharaoh format, one sentence per line: space-separated links `i-j` (sure) and `i?j` or `ipj` (possible), where `i`
is a source word and `j` a target word, both 0-based indices of the whitespace-separated words of the sentence as
written (punctuation stays on its word). Gold sets such as the RWTH German-English one use this format.

Alignment error rate (Och and Ney 2003, section 5): with sure links S, possible links P (S is part of P) and
predicted links A, precision = |A & P| / |A|, recall = |A & S| / |S|, AER = 1 - (|A & S| + |A & P|) / (|A| + |S|),
summed over the corpus before dividing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from nmt import UserError
from nmt.data import BOS_ID, PAD_ID, Vocabulary

Link = tuple[int, int]  # (source word, target word)
LINK = re.compile(r"^(\d+)([-?p])(\d+)$")
WORD_START = "\u2581"  # sentencepiece's mark of a piece that begins a word


@dataclass(frozen=True)
class Gold:
    """One sentence's gold links; `possible` holds the sure links too (S is part of P)."""

    sure: frozenset[Link]
    possible: frozenset[Link]

    @classmethod
    def of(cls, sure: Iterable[Link], possible: Iterable[Link] = ()) -> Gold:
        sure = frozenset(sure)
        return cls(sure, sure | frozenset(possible))


def parse_links(line: str, where: str = "") -> Gold:
    """One line of Pharaoh format; `where` (file:line) names the place of a bad link."""
    sure, possible = set(), set()
    for token in line.split():
        match = LINK.match(token)
        if not match:
            raise UserError(f"{where}: {token!r} is not a link: write i-j (sure) or i?j / ipj (possible), 0-based")
        link = (int(match[1]), int(match[3]))
        (sure if match[2] == "-" else possible).add(link)
    return Gold.of(sure, possible)


def format_links(sure: Iterable[Link], possible: Iterable[Link] = ()) -> str:
    """Pharaoh format: sure links as i-j, the possible ones that are not sure as i?j, sorted."""
    sure = set(sure)
    items = [(i, j, "-") for i, j in sure] + [(i, j, "?") for i, j in set(possible) - sure]
    return " ".join(f"{i}{mark}{j}" for i, j, mark in sorted(items))


def read_gold(path: str | Path, pairs: list[tuple[str, str]] | None = None) -> list[Gold]:
    """Gold links, one line per sentence. With the sentence pairs they belong to, the number of lines and every
    index is checked against them, and a mismatch names the file and line."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"alignments={path}: no such file")
    lines = path.read_text(encoding="utf-8").splitlines()
    gold = [parse_links(line, f"{path}:{number}") for number, line in enumerate(lines, 1)]
    if pairs is None:
        return gold
    if len(gold) != len(pairs):
        raise UserError(f"{path}: {len(gold)} lines of links for {len(pairs)} sentence pairs; one line per pair")
    for number, (links, (source, target)) in enumerate(zip(gold, pairs), 1):
        sizes = len(source.split()), len(target.split())
        for i, j in links.possible:
            if i >= sizes[0] or j >= sizes[1]:
                raise UserError(
                    f"{path}:{number}: link {i}-{j} is past the sentence ({sizes[0]} source and {sizes[1]} target "
                    f"words); indices are 0-based over whitespace-separated words"
                )
    return gold


@dataclass
class AlignmentScores:
    precision: float
    recall: float
    aer: float
    links: int  # predicted links
    sentences: int

    def __str__(self) -> str:
        counts = f"precision {self.precision:.3f}, recall {self.recall:.3f}, {self.sentences} sentences"
        return f"AER {self.aer:.3f} ({counts})"


def alignment_error(predicted: list[set[Link]], gold: list[Gold]) -> AlignmentScores:
    """Precision, recall and AER of predicted links against gold ones, summed over the corpus (Och and Ney 2003)."""
    if len(predicted) != len(gold):
        raise ValueError(f"{len(predicted)} predicted alignments for {len(gold)} gold ones")
    found = sure = sure_hits = possible_hits = 0
    for links, reference in zip(predicted, gold):
        found += len(links)
        sure += len(reference.sure)
        sure_hits += len(links & reference.sure)
        possible_hits += len(links & reference.possible)
    precision = possible_hits / found if found else 0.0
    recall = sure_hits / sure if sure else 0.0
    aer = 1 - (sure_hits + possible_hits) / (found + sure) if found + sure else 0.0
    return AlignmentScores(precision, recall, aer, found, len(gold))


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
    names = model.attention_maps(source, source != PAD_ID, source)
    return [name for name in names if name == "alignment" or name.startswith("cross_layer_")]


@torch.no_grad()
def attention_links(
    model: torch.nn.Module,
    vocabulary: Vocabulary,
    pairs: list[tuple[str, str]],
    device: torch.device,
    maps: list[str],
    shifts: tuple[bool, ...] = (False,),
    batch_size: int = 64,
) -> dict[tuple[str, bool], list[set[Link]]]:
    """Links from force-decoding each reference: for every map and shift, one link set per pair.

    Row t of a map is the query that predicts target piece t (shift=False). With shift=True a piece's row is the
    next one, where the piece is the decoder's input: the Transformer's attention often aligns better there.
    """
    results: dict[tuple[str, bool], list[set[Link]]] = {(name, shift): [] for name in maps for shift in shifts}
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        sources = vocabulary.source.encode([s for s, _ in chunk], out_type=str)
        targets = vocabulary.target.encode([t for _, t in chunk], out_type=str)
        source_ids = pad([[vocabulary.source.piece_to_id(p) for p in pieces] for pieces in sources], device)
        target_in = pad([[BOS_ID, *(vocabulary.target.piece_to_id(p) for p in pieces)] for pieces in targets], device)
        weights = model.attention_maps(source_ids, source_ids != PAD_ID, target_in)
        for name in maps:
            batch_weights = weights[name][:, 0].float().cpu().numpy()  # (B, T, S)
            for row, (source_pieces, target_pieces) in enumerate(zip(sources, targets)):
                for shift in shifts:
                    if not source_pieces or not target_pieces:
                        results[(name, shift)].append(set())
                        continue
                    first = 1 if shift else 0  # target_in is bos + n pieces: rows 0..n-1 predict them, 1..n read them
                    rows = batch_weights[row, first : first + len(target_pieces), : len(source_pieces)]
                    words = word_weights(rows, piece_words(source_pieces), piece_words(target_pieces))
                    results[(name, shift)].append(argmax_links(words))
    return results


def pad(rows: list[list[int]], device: torch.device) -> torch.Tensor:
    width = max(1, *(len(r) for r in rows))
    return torch.tensor([r + [PAD_ID] * (width - len(r)) for r in rows], device=device)
