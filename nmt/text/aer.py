"""Gold word alignments in Pharaoh format, and the alignment error rate of predicted links against them.

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

from nmt import UserError

Link = tuple[int, int]  # (source word, target word)
LINK = re.compile(r"^(\d+)([-?p])(\d+)$")


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
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise UserError(
            f"alignments={path}: not a text file of links (byte {error.start} is not UTF-8); give a file "
            "of 'i-j' pairs, one line per sentence pair"
        ) from None
    gold = [parse_links(line, f"{path}:{number}") for number, line in enumerate(lines, 1)]
    if not any(g.sure for g in gold):
        raise UserError(
            f"alignments={path}: no sure link in any of its {len(gold)} lines, so AER (which divides by "
            "the sure links) is undefined; is it the right file? Links are written i-j (sure) or i?j"
        )
    if pairs is None:
        return gold
    if len(gold) != len(pairs):
        raise UserError(f"{path}: {len(gold)} lines of links, {len(pairs)} sentence pairs: write one line per pair")
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


def alignment_counts(predicted: list[set[Link]], gold: list[Gold]) -> list[tuple[int, int, int, int]]:
    """Per sentence: (|A & S|, |A & P|, |A|, |S|), the counts whose sums give precision, recall and AER; the
    significance tests resample them (`nmt_study.significance.aer_score`)."""
    if len(predicted) != len(gold):
        raise ValueError(f"{len(predicted)} predicted alignments for {len(gold)} gold ones")
    return [
        (len(links & reference.sure), len(links & reference.possible), len(links), len(reference.sure))
        for links, reference in zip(predicted, gold)
    ]


def alignment_error(predicted: list[set[Link]], gold: list[Gold]) -> AlignmentScores:
    """Precision, recall and AER of predicted links against gold ones, summed over the corpus (Och and Ney 2003)."""
    sure_hits, possible_hits, found, sure = (
        sum(column) for column in zip(*alignment_counts(predicted, gold), (0,) * 4)
    )
    precision = possible_hits / found if found else 0.0
    recall = sure_hits / sure if sure else 0.0
    aer = 1 - (sure_hits + possible_hits) / (found + sure) if found + sure else 0.0
    return AlignmentScores(precision, recall, aer, found, len(gold))
