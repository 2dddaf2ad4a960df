"""Subword vocabularies, the encoded pairs and how a batch of them is padded.

Subwords come from sentencepiece, trained on the training split only; the text itself comes from `nmt.text.corpus`, and
which pairs make a batch from `nmt.text.batches`.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sentencepiece as spm
import torch

from nmt import UserError
from nmt.models.flops import Shape
from nmt.paths import write_text
from nmt.text.corpus import Pairs

log = logging.getLogger(__name__)

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


# --- subwords ---------------------------------------------------------------------------------------------------


class Vocabulary:
    """A sentencepiece model for each side (one shared model when the vocabulary is joint).

    Ids are fixed for every model: pad 0, unk 1, bos 2, eos 3.
    """

    def __init__(self, source_model: bytes, target_model: bytes):
        self.source_model, self.target_model = source_model, target_model
        self.source = spm.SentencePieceProcessor(model_proto=source_model)
        self.target = spm.SentencePieceProcessor(model_proto=target_model)

    @property
    def joint(self) -> bool:
        return self.source_model == self.target_model

    @property
    def source_size(self) -> int:
        return self.source.get_piece_size()

    @property
    def target_size(self) -> int:
        return self.target.get_piece_size()

    def encode_source(self, sentences: list[str]) -> list[list[int]]:
        return self.source.encode(sentences)

    def encode_target(self, sentences: list[str]) -> list[list[int]]:
        return self.target.encode(sentences)

    def decode_target(self, ids: list[list[int]]) -> list[str]:
        return self.target.decode(ids)

    def save(self, source: Path, target: Path) -> None:
        """Write the sentencepiece models a run used (into its folder: RunFolder.subword_model)."""
        source.write_bytes(self.source_model)
        target.write_bytes(self.target_model)


def train_sentencepiece(sentences: list[str], vocab_size: int, model_type: str, character_coverage: float) -> bytes:
    if model_type not in ("unigram", "bpe"):
        raise UserError(f"data.subword={model_type!r}: use unigram or bpe")
    if vocab_size < 5:
        raise UserError(
            f"data.vocab_size={vocab_size}: a vocabulary holds the 4 special pieces (pad, unk, bos, eos) and at least "
            "one of the text's; give a number of subword pieces (8000 for Multi30k, 250 for the sample corpus)"
        )
    if not 0 < character_coverage <= 1:
        raise UserError(
            f"data.character_coverage={character_coverage}: a share of the characters, above 0 and at most 1"
        )
    writer = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=writer,
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=character_coverage,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            num_threads=1,  # one thread: the same corpus always gives the same model
            minloglevel=2,
        )
    except RuntimeError as error:
        raise UserError(vocabulary_advice(str(error), vocab_size)) from None
    return writer.getvalue()


def vocabulary_advice(error: str, vocab_size: int) -> str:
    """What to change when sentencepiece refuses a vocabulary size: it says which way, in its own words."""
    few = re.search(r"smaller than required_chars\. (\d+) vs (\d+)", error)
    many = re.search(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)", error)
    if few:
        return (
            f"data.vocab_size={vocab_size}: below the {few.group(2)} characters (and special pieces) the corpus "
            f"needs; raise data.vocab_size to at least {few.group(2)}, or lower data.character_coverage"
        )
    if many:
        return (
            f"data.vocab_size={vocab_size}: the training text gives at most {many.group(2)} pieces; lower "
            f"data.vocab_size to {many.group(2)} or less (or train on more text)"
        )
    said = re.sub(r"^\w+: \S+\(\d+\) ", "", error.strip())  # its INTERNAL: file(line) prefix
    return f"sentencepiece could not train a vocabulary with data.vocab_size={vocab_size}: {said}"


def build_vocabulary(
    train: Pairs, vocab_size: int, joint: bool, model_type: str, character_coverage: float, cache: str | Path | None
) -> Vocabulary:
    """Train sentencepiece on the training split, or reuse the cached models trained with the same settings."""
    sources = [s for s, _ in train]
    targets = [t for _, t in train]
    settings = f"{vocab_size}|{joint}|{model_type}|{character_coverage}|".encode()
    key = hashlib.sha256(settings + "\n".join(sources).encode() + b"\x00" + "\n".join(targets).encode()).hexdigest()
    paths = [Path(cache, f"{key[:16]}.{side}.model") for side in ("src", "tgt")] if cache else []
    if paths and all(p.is_file() for p in paths):
        try:
            vocabulary = Vocabulary(paths[0].read_bytes(), paths[1].read_bytes())
            log.info("reusing the sentencepiece models in %s", paths[0].parent)
            return vocabulary
        except (RuntimeError, OSError) as error:  # a cache: a damaged copy is trained again and replaced
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            log.warning(
                "the cached sentencepiece models %s and %s are unreadable (%s); training them again",
                paths[0],
                paths[1],
                reason,
            )
    if joint:
        source_model = target_model = train_sentencepiece(sources + targets, vocab_size, model_type, character_coverage)
    else:
        source_model = train_sentencepiece(sources, vocab_size, model_type, character_coverage)
        target_model = train_sentencepiece(targets, vocab_size, model_type, character_coverage)
    if paths:
        paths[0].parent.mkdir(parents=True, exist_ok=True)
        for path, model in zip(paths, (source_model, target_model)):
            write_text(path, model)  # jobs that start together may train and write the same models: each whole
    return Vocabulary(source_model, target_model)


# --- batches ----------------------------------------------------------------------------------------------------


@dataclass
class Batch:
    """Padded id tensors of one batch, batch-first. Masks are True on real tokens."""

    source: torch.Tensor  # (B, S)
    source_mask: torch.Tensor  # (B, S) bool
    target_in: torch.Tensor  # (B, T): bos y_1 ... y_n
    target_out: torch.Tensor  # (B, T): y_1 ... y_n eos
    indices: torch.Tensor  # (B,) positions of the pairs in their dataset
    # (tokens,) where target_out's real tokens are, flattened row by row: computed on the CPU when the batch is made, so
    # the loss gathers them with index_select, where a boolean mask would make a GPU wait for the host each batch
    target_positions: torch.Tensor
    # (B,) the source lengths, kept on the CPU where the batch goes: what packing an RNN's input needs, without a wait
    source_lengths: torch.Tensor
    # A batch of static shape (StaticShapes) has rows of padding and no target_positions: (B * T,) fp32, 1 on the
    # real target tokens and 0 elsewhere, weights the loss over every position instead
    token_weights: torch.Tensor | None = None

    def device_tensors(self) -> dict[str, torch.Tensor]:
        """The tensors that go to the device, by name: every one but source_lengths, which stays on the CPU."""
        return {k: t for k, t in vars(self).items() if k != "source_lengths" and t is not None}

    def to(self, device: torch.device, non_blocking: bool = False) -> Batch:
        moved = {k: t.to(device, non_blocking=non_blocking) for k, t in self.device_tensors().items()}
        return Batch(**{**vars(self), **moved})

    def pin_memory(self) -> Batch:
        return Batch(*(t if t is None else t.pin_memory() for t in vars(self).values()))

    @property
    def target_tokens(self) -> int:
        return int((self.target_out != PAD_ID).sum())

    @property
    def shape(self) -> Shape:
        """The sentence lengths a model's FLOP formula reads (a host sync: the trainer takes them from the corpus)."""
        return Shape.of(self.source_mask.sum(1).tolist(), (self.target_out != PAD_ID).sum(1).tolist())


class ParallelDataset(torch.utils.data.Dataset):
    """Encoded pairs: source ids, and target ids without bos/eos (the collate function adds them)."""

    def __init__(self, pairs: Pairs, vocabulary: Vocabulary):
        self.source = vocabulary.encode_source([s for s, _ in pairs])
        self.target = vocabulary.encode_target([t for _, t in pairs])
        # Every sentence keeps at least one token so that a source is never all padding (an empty line gives eos).
        self.source = [ids or [EOS_ID] for ids in self.source]
        self.source_lengths = np.array([len(s) for s in self.source])
        self.target_lengths = np.array([len(t) + 1 for t in self.target])  # + eos (or bos) in the model's view

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> tuple[int, list[int], list[int]]:
        return index, self.source[index], self.target[index]


def left_aligned(rows: list[list[int]], width: int) -> tuple[np.ndarray, np.ndarray]:
    """`rows` as a (len(rows), width) array padded on the right, and their lengths: one vectorised copy of all the ids
    (a copy per row cost a batch of 200 rows 2.5 ms, the rate a GPU's data workers must keep up with)."""
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    array = np.full((len(rows), width), PAD_ID, dtype=np.int64)
    flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=int(lengths.sum()))
    array[np.arange(width) < lengths[:, None]] = flat
    return array, lengths


def collate(items: list[tuple[int, list[int], list[int]]]) -> Batch:
    indices, sources, targets = zip(*items)
    source, source_lengths = left_aligned(sources, max(map(len, sources)))
    words, target_lengths = left_aligned(targets, max(map(len, targets)) + 1)  # y_1 ... y_n, then padding
    target_in = np.empty_like(words)
    target_in[:, 0], target_in[:, 1:] = BOS_ID, words[:, :-1]
    words[np.arange(len(items)), target_lengths] = EOS_ID
    source, target_in, target_out = (torch.from_numpy(a) for a in (source, target_in, words))
    positions = (target_out != PAD_ID).flatten().nonzero().squeeze(1)
    return Batch(
        source,
        source != PAD_ID,
        target_in,
        target_out,
        torch.tensor(indices),
        positions,
        torch.from_numpy(source_lengths),
    )
