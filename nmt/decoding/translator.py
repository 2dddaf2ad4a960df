"""From a model and source sentences to translations and sacrebleu scores: the one place that does it.

Validation, `evaluate.py`, `translate.py`, the study's comparison and the benchmark all decode through `translate` (or
a `Translator`, which is a checkpoint with its vocabulary and search settings) and score through `score`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import sacrebleu
import torch
from tqdm import tqdm

from nmt import UserError, build
from nmt.config import DecodeOptions, TrainerConfig
from nmt.decoding.plot import attention_figure
from nmt.decoding.search import Hypothesis, beam_search, greedy
from nmt.device import autocast
from nmt.device import device as find_device
from nmt.device import resolve as resolve_precision
from nmt.runs import checkpoint
from nmt.text.batches import TokenBatchSampler
from nmt.text.corpus import Pairs
from nmt.text.data import BOS_ID, EOS_ID, PAD_ID, ParallelDataset, Vocabulary, collate

TRAINER_FIELDS = {f.name for f in dataclasses.fields(TrainerConfig)}  # a checkpoint's trainer options


@dataclass
class Search:
    """How to decode: greedy (beam 1) or beam search, where the output stops, and how large a batch is (the search
    part of DecodeOptions, with the stopping rule the model was trained with)."""

    beam: int = DecodeOptions.beam
    alpha: float = DecodeOptions.alpha  # GNMT length penalty; 0 ranks by log-probability alone
    ratio: float = TrainerConfig.decode_ratio  # output stops at ratio x source length + extra tokens
    extra: int = TrainerConfig.decode_extra
    max_tokens: int = DecodeOptions.max_tokens  # padded source tokens x beam per batch
    max_input_len: int = DecodeOptions.max_input_len  # longer inputs (subwords) are refused, naming the line

    def __post_init__(self):
        DecodeOptions(
            beam=self.beam, alpha=self.alpha, max_tokens=self.max_tokens, max_input_len=self.max_input_len
        ).check()
        if not (math.isfinite(self.ratio) and self.ratio >= 0 and self.extra >= 1):
            raise UserError(
                f"ratio={self.ratio}, extra={self.extra}: the output stops at ratio x the source length "
                "+ extra tokens; ratio must be at least 0 and extra at least 1"
            )

    @classmethod
    def of(cls, options: DecodeOptions, trainer: TrainerConfig) -> Search:
        """The search of `options`, stopping where `trainer` (the run's trainer options) says the output stops."""
        return cls(
            options.beam,
            options.alpha,
            trainer.decode_ratio,
            trainer.decode_extra,
            options.max_tokens,
            options.max_input_len,
        )


def check_beam_fits(search: Search, longest: int) -> None:
    """One line's beams must fit a batch (`search.max_tokens`): a larger beam is refused before decoding, by every
    engine (ours and an export's), naming the line's length and what to lower."""
    if search.beam > 1 and search.beam * longest > search.max_tokens:
        raise UserError(
            f"beam={search.beam}: the longest line ({longest:,} subwords) times the beam is "
            f"{search.beam * longest:,} tokens, more than a batch holds "
            f"(max_tokens={search.max_tokens:,}); lower the beam, or raise max_tokens (memory grows "
            "with it)"
        )


def translate(
    model,
    vocabulary: Vocabulary,
    sources: list[str],
    search: Search,
    device: torch.device,
    dtype: torch.dtype,
    progress: str = "",
) -> tuple[list[str], list[Hypothesis]]:
    """Translations of raw sentences, in their order: (detokenized strings, hypotheses). Greedy for beam 1.

    Sentences are decoded in length-sorted batches of at most `search.max_tokens` source tokens over the beam size.
    `progress`: a bar with that name counts the sentences on stderr ("validating", "testing"); none if empty.
    """
    hypotheses = [Hypothesis([], 0.0, None) for _ in sources]  # an empty line translates to an empty line
    # A line is empty as training reads it: one that sentencepiece's normalisation empties (zero-width or control
    # characters only) is as blank as a line of spaces (nmt.build.with_subwords drops such pairs from training)
    texts = [i for i, ids in enumerate(vocabulary.encode_source(sources)) if ids]
    if not texts:
        return ["" for _ in sources], hypotheses
    dataset = ParallelDataset([(sources[i], "") for i in texts], vocabulary)
    check_input_lengths(dataset.source_lengths, [i + 1 for i in texts], search.max_input_len, "max_input_len")
    longest = int(dataset.source_lengths.max())
    check_beam_fits(search, longest)
    budget = max(search.max_tokens // search.beam, longest)  # greedy: at least one line a batch
    model.eval()
    bar = tqdm(total=len(texts), desc=progress, unit=" sentences", leave=False, disable=not progress, delay=0.5)
    with bar, torch.no_grad(), autocast(device, dtype):
        for indices in TokenBatchSampler(dataset, budget, shuffle=False):
            batch = collate([dataset[i] for i in indices]).to(device)
            if search.beam == 1:
                found = greedy(model, batch.source, batch.source_mask, search.ratio, search.extra)
            else:
                n_best = beam_search(
                    model, batch.source, batch.source_mask, search.beam, search.alpha, search.ratio, search.extra
                )
                found = [hypotheses_of_one[0] for hypotheses_of_one in n_best]
            for index, hypothesis in zip(indices, found):
                hypotheses[texts[index]] = hypothesis
            bar.update(len(indices))
    return vocabulary.decode_target([h.tokens for h in hypotheses]), hypotheses


def check_input_lengths(lengths, line_numbers: list[int], limit: int, option: str, where: str = "line") -> None:
    """Refuse inputs longer than `limit` subwords, naming the first few lines: decoding time and memory grow with
    the input, and a model trained on sentences has nothing sensible to say about a whole page in one line."""
    too_long = [(number, int(length)) for number, length in zip(line_numbers, lengths) if length > limit]
    if too_long:
        listed = ", ".join(f"{where} {number} ({length:,} subwords)" for number, length in too_long[:3])
        more = f" and {len(too_long) - 3} more" if len(too_long) > 3 else ""
        raise UserError(
            f"{listed}{more}: longer than {option}={limit} subwords. Split such lines into sentences, or raise {option}"
        )


@dataclass
class Scores:
    """Corpus-level BLEU and chrF of detokenized output against one reference each, with sacrebleu's signatures."""

    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str


def score(hypotheses: list[str], references: list[str]) -> Scores:
    bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
    bleu_score, chrf_score = bleu.corpus_score(hypotheses, [references]), chrf.corpus_score(hypotheses, [references])
    return Scores(bleu_score.score, chrf_score.score, str(bleu.get_signature()), str(chrf.get_signature()))


def decode_split(
    model,
    vocabulary: Vocabulary,
    pairs: Pairs,
    search: Search,
    device: torch.device,
    dtype: torch.dtype,
    progress: str = "",
) -> tuple[list[str], list[Hypothesis], Scores]:
    """Translate the source side of `pairs` and score it against the target side (`progress`: `translate`'s)."""
    texts, hypotheses = translate(model, vocabulary, [s for s, _ in pairs], search, device, dtype, progress)
    return texts, hypotheses, score(texts, [t for _, t in pairs])


def load_model(path: str | Path, device: torch.device) -> tuple[torch.nn.Module, Vocabulary, dict]:
    """Rebuild the model a checkpoint holds, with the vocabulary and resolved config it was trained with."""
    payload = checkpoint.load(path)
    if "model" not in payload["config"]:
        raise UserError(
            f"{path}: holds no model config (a Trainer used from Python without `run_config`): it can "
            "resume that Trainer, not be decoded"
        )
    vocabulary = Vocabulary(payload["vocabulary"]["source"], payload["vocabulary"]["target"])
    model = build.model(payload["config"]["model"], vocabulary)
    model.load_state_dict(payload["model"])
    return model.to(device).eval(), vocabulary, payload["config"]


def trained_options(config: dict) -> TrainerConfig:
    """The trainer options a checkpoint's resolved config was trained with (options removed since left out; those
    added since at their defaults): where its outputs stop, its precision."""
    return TrainerConfig(**{k: v for k, v in config.get("trainer", {}).items() if k in TRAINER_FIELDS})


@dataclass
class Translator:
    """A checkpoint ready to decode: `translate(lines)` with the search settings it was made with."""

    model: torch.nn.Module
    vocabulary: Vocabulary
    device: torch.device
    dtype: torch.dtype
    search: Search
    config: dict = field(default_factory=dict)  # the resolved config it was trained with

    @classmethod
    def load(cls, path: str | Path, options: DecodeOptions | None = None) -> Translator:
        """The model of checkpoint `path`, decoding as `options` say (checked before the model loads), its output
        length limit as it was trained; the precision as `options.precision` chooses for this device (`auto`: bf16
        where it runs natively, whatever the model was trained in; `trained`: the run's own trainer.precision)."""
        options = options or DecodeOptions()
        options.check()
        where = find_device(options.device, option="device")
        model, vocabulary, config = load_model(path, where)
        trained = trained_options(config)
        precision = options.precision
        if precision == "trained":
            precision = trained.precision
        dtype = resolve_precision(precision or "auto", where, option="precision").dtype
        return cls(model, vocabulary, where, dtype, Search.of(options, trained), config)

    def translate(self, lines: list[str], progress: str = "") -> list[str]:
        return self.search_lines(lines, progress)[0]

    def search_lines(self, lines: list[str], progress: str = "") -> tuple[list[str], list[Hypothesis]]:
        """Translations and the hypotheses behind them (tokens, score, attention weights); `progress`: `translate`'s."""
        return translate(self.model, self.vocabulary, lines, self.search, self.device, self.dtype, progress)

    def has_attention(self) -> bool:
        """Whether the model has attention weights to plot (the contract's `attention_maps` is empty otherwise)."""
        source = torch.full((1, 1), EOS_ID, device=self.device)
        target = torch.full((1, 1), BOS_ID, device=self.device)
        return bool(self.model.attention_maps(source, source != PAD_ID, target))

    def alignment_figure(self, text: str, translation: str, hypothesis: Hypothesis):
        """The heatmap of one translation's attention (source subwords across, output subwords down), or None for a
        model without attention."""
        if hypothesis.attention is None:
            return None
        weights = hypothesis.attention.float().numpy()  # (generated + eos, source)
        source = self.vocabulary.source.encode(text, out_type=str) or ["</s>"]
        target = [self.vocabulary.target.id_to_piece(t) for t in hypothesis.tokens] + ["</s>"]
        return attention_figure(weights, source, target[: weights.shape[0]], title=translation)
