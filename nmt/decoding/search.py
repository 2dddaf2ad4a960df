"""Decoding over the one model interface (encode, decode_step); the search never asks which model it holds.

Beam search (`beam_search`): a finished hypothesis keeps its score and stops growing (it can only be followed by eos
at no cost); hypotheses are ranked by log-probability / lp(length) at the end. The state of any model is reordered
with index_select, so RNN states and Transformer caches are handled alike. The per-step work stays small: only the
`beam_size` best tokens of each hypothesis are scored (`best_continuations`), a sentence whose hypotheses have all
ended leaves the batch, and each step stores only its tokens, attention and back-pointers (`Steps`), so no history
is copied and the cost of a step does not grow with the output. Sentences that have ended are collected every
`every` steps (`stop_check_interval`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nmt.config import DecodeOptions
from nmt.text.data import BOS_ID, EOS_ID


@dataclass
class Hypothesis:
    tokens: list[int]  # without bos and eos
    score: float  # sum of token log-probabilities, eos included
    attention: torch.Tensor | None  # (len(tokens) + 1, S) over the real source tokens, or None


def output_limit(source_length: int, ratio: float, extra: int) -> int:
    """Where a search stops an output: `ratio` x the source's subwords + `extra` tokens (the run's
    trainer.decode_ratio and decode_extra), eos included."""
    return int(source_length * ratio + extra)


def max_output_length(source_mask: torch.Tensor, ratio: float, extra: int) -> int:
    """The limit of a batch: its longest source's."""
    return output_limit(source_mask.sum(1).max().item(), ratio, extra)


# Steps between the searches' checks of whether sentences have ended: each check reads a flag back from the device, and
# on a GPU that wait costs more than a step. A sentence that has ended only takes eos at no cost until the next check,
# so the output is the same whatever the interval (tests/test_search.py); on a CPU the check is free.
STOP_CHECK = {"cpu": 1, "cuda": 8}


def stop_check_interval(device: torch.device) -> int:
    return STOP_CHECK.get(device.type, 1)


@torch.no_grad()
def greedy(
    model,
    source: torch.Tensor,
    source_mask: torch.Tensor,
    ratio: float = 1.5,
    extra: int = 10,
    every: int | None = None,
):
    """Batched greedy decoding: the most probable token at each step, until every sentence has ended (checked every
    `every` steps: `stop_check_interval`).

    Returns one Hypothesis per sentence.
    """
    batch, every = source.shape[0], every or stop_check_interval(source.device)
    limit = max_output_length(source_mask, ratio, extra)
    state = model.encode(source, source_mask, limit)
    previous = torch.full((batch,), BOS_ID, dtype=torch.long, device=source.device)
    finished = torch.zeros(batch, dtype=torch.bool, device=source.device)
    tokens, scores, weights = [], torch.zeros(batch, device=source.device), None
    for step in range(limit):
        logits, state, step_weights = model.decode_step(previous, state)
        logits = logits.float()  # (B, V)
        best_logit, previous = logits.max(-1)  # (B,)
        best_score = best_logit - torch.logsumexp(logits, dim=-1)  # its log-probability
        scores += best_score.masked_fill(finished, 0.0)
        previous = previous.masked_fill(finished, EOS_ID)
        tokens.append(previous)
        if step_weights is not None:
            if weights is None:  # one buffer for every step's attention: thousands of small tensors kept between
                # each step's large temporaries fragment the heap (a 1,000-word line took 1.5 GB in bf16, 0.3 without)
                weights = step_weights.new_empty((batch, limit, step_weights.shape[-1]), dtype=torch.float32)
            weights[:, step] = step_weights
        finished |= previous == EOS_ID
        if (step + 1) % every == 0 and finished.all():
            break
    tokens = torch.stack(tokens, 1).cpu()  # (B, T)
    weights = weights[:, : tokens.shape[1]].cpu() if weights is not None else None  # (B, T, S)
    lengths = source_mask.sum(1).cpu()
    hypotheses = []
    for row in range(batch):
        sequence = tokens[row].tolist()
        length = sequence.index(EOS_ID) if EOS_ID in sequence else len(sequence)
        attention = weights[row, : length + 1, : lengths[row]] if weights is not None else None
        hypotheses.append(Hypothesis(sequence[:length], float(scores[row]), attention))
    return hypotheses


# Models name the decoding-state entries computed from the source alone `source_*` (encoder annotations, attention
# keys, the Transformer's cross-attention cache, the mask). A hypothesis only ever extends a hypothesis of its own
# sentence, so these are the same for every beam of a sentence and beam search does not copy them at each step.
SOURCE_SIDE = "source_"


def length_penalty(length: torch.Tensor, alpha: float) -> torch.Tensor:
    """GNMT (Wu et al. 2016, eq. 14): lp(Y) = ((5 + |Y|) / 6)^alpha; alpha = 0 ranks by raw log-probability."""
    return ((5.0 + length.float()) / 6.0) ** alpha


@torch.no_grad()
def beam_search(
    model,
    source: torch.Tensor,
    source_mask: torch.Tensor,
    beam_size: int = 5,
    alpha: float = DecodeOptions.alpha,
    ratio: float = 1.5,
    extra: int = 10,
    n_best: int = 1,
    every: int | None = None,
) -> list[list[Hypothesis]]:
    """Batched beam search: every sentence keeps `beam_size` hypotheses, all advanced in one decode_step call
    (the module's docstring says how). Returns the n best hypotheses of each sentence, best first."""
    batch, device = source.shape[0], source.device
    every = every or stop_check_interval(device)
    limit = max_output_length(source_mask, ratio, extra)
    state = model.encode(source, source_mask, limit)
    state = {k: v.repeat_interleave(beam_size, 0) for k, v in state.items()}  # (B * K, ...)
    scores, previous, finished, lengths = empty_beams(batch, beam_size, device)
    alive = torch.arange(batch, device=device)  # the sentences still in the batch
    steps, results = Steps(), {}
    source_lengths = source_mask.sum(1)
    for step in range(limit):
        logits, state, weights = model.decode_step(previous, state)
        alive_count = alive.shape[0]
        scores, origin, previous = best_continuations(logits.float(), scores, finished)
        was_finished = finished.index_select(0, origin)
        lengths = lengths.index_select(0, origin) + (~was_finished).long()
        finished = was_finished | (previous == EOS_ID)
        steps.add(origin, previous, weights.index_select(0, origin) if weights is not None else None)
        done = finished.view(alive_count, beam_size).all(1)  # (N,)
        kept_rows = None
        if (step + 1) % every == 0 and done.any():
            results.update(collect(done, alive, source_lengths, scores, lengths, finished, steps, alpha, n_best))
            kept = (~done).nonzero().squeeze(1)
            if kept.numel() == 0:
                break
            kept_rows = (kept[:, None] * beam_size + torch.arange(beam_size, device=device)).view(-1)
            alive, scores = alive.index_select(0, kept), scores.index_select(0, kept)
            previous, finished = previous.index_select(0, kept_rows), finished.index_select(0, kept_rows)
            lengths, origin = lengths.index_select(0, kept_rows), origin.index_select(0, kept_rows)
            steps.keep(kept_rows)
        state = reorder(state, origin, kept_rows)
    else:  # the length limit ended the search: the sentences still alive keep what they have
        everything = torch.ones(alive.shape[0], dtype=torch.bool, device=device)
        results.update(collect(everything, alive, source_lengths, scores, lengths, finished, steps, alpha, n_best))
    return [results[sentence] for sentence in range(batch)]


def empty_beams(batch: int, beam_size: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """The beams before the first step: scores (B, K), and each row's last token, whether it ended, its length."""
    scores = torch.full((batch, beam_size), float("-inf"), device=device)
    scores[:, 0] = 0.0  # all beams start as the same empty hypothesis; only one may expand at first
    previous = torch.full((batch * beam_size,), BOS_ID, dtype=torch.long, device=device)
    finished = torch.zeros(batch * beam_size, dtype=torch.bool, device=device)
    lengths = torch.zeros(batch * beam_size, dtype=torch.long, device=device)
    return scores, previous, finished, lengths


class Steps:
    """What each step of a beam search chose, with back-pointers: for step s, the row of step s - 1 that each row
    extends, its token and its attention (rows, S). A hypothesis is read back by following the pointers."""

    def __init__(self):
        self.parents: list[torch.Tensor] = []
        self.tokens: list[torch.Tensor] = []
        self.weights: list[torch.Tensor | None] = []

    def add(self, parents: torch.Tensor, tokens: torch.Tensor, weights: torch.Tensor | None) -> None:
        self.parents.append(parents)
        self.tokens.append(tokens)
        self.weights.append(weights)

    def keep(self, rows: torch.Tensor) -> None:
        """Only `rows` of the last step go on (the others' sentences have left the batch)."""
        self.parents[-1], self.tokens[-1] = self.parents[-1][rows], self.tokens[-1][rows]
        self.weights[-1] = self.weights[-1][rows] if self.weights[-1] is not None else None

    def read(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Tokens (R, steps) and attention (R, steps, S) or None of the hypotheses at `rows` of the last step."""
        tokens, weights = [], []
        for parents, step_tokens, step_weights in zip(*map(reversed, (self.parents, self.tokens, self.weights))):
            tokens.append(step_tokens[rows])
            if step_weights is not None:
                weights.append(step_weights[rows])
            rows = parents[rows]
        attention = torch.stack(weights[::-1], 1).float() if weights else None
        return torch.stack(tokens[::-1], 1), attention


def reorder(state: dict[str, torch.Tensor], origin: torch.Tensor, kept_rows: torch.Tensor | None):
    """The decoding state of the new hypotheses: rows `origin` of the old one; `source_*` entries only lose the rows
    of the sentences that left the batch (`kept_rows`, None when none left)."""
    return {
        k: (v if kept_rows is None else v.index_select(0, kept_rows))
        if k.startswith(SOURCE_SIDE)
        else v.index_select(0, origin)
        for k, v in state.items()
    }


def best_continuations(logits: torch.Tensor, scores: torch.Tensor, finished: torch.Tensor):
    """The K best extensions of each sentence's K hypotheses: (scores (N, K), the row each extends (N * K,), its
    token (N * K,)). `logits` (N * K, V) of N sentences; `scores` (N, K) their hypotheses' log-probabilities.

    The K best continuations of a sentence are among the K best tokens of each of its hypotheses, so only those
    (K x K candidates, not K x V) are scored.
    """
    alive_count, beam_size = scores.shape
    width = min(beam_size, logits.shape[-1])
    best_logits, best_tokens = logits.topk(width, dim=-1)  # (N * K, W)
    best = best_logits - torch.logsumexp(logits, dim=-1, keepdim=True)  # their log-probabilities
    # A finished hypothesis may only continue with eos, at no cost: it keeps its score and its length.
    best = best.masked_fill(finished[:, None], float("-inf"))
    best[:, 0].masked_fill_(finished, 0.0)
    best_tokens[:, 0].masked_fill_(finished, EOS_ID)
    candidates = (scores[:, :, None] + best.view(alive_count, beam_size, width)).view(alive_count, -1)
    scores, flat = candidates.topk(beam_size, dim=-1)  # (N, K), over the K x W candidates
    offsets = (torch.arange(alive_count, device=logits.device) * beam_size)[:, None]
    origin = (flat // width + offsets).view(-1)  # which hypothesis each new one extends, (N * K,)
    return scores, origin, best_tokens.view(alive_count, -1).gather(1, flat).view(-1)


def collect(chosen, alive, source_lengths, scores, lengths, finished, steps: Steps, alpha, n_best):
    """{sentence: its n best hypotheses, best first} for the `chosen` sentences (N,) of those `alive` (N,).

    Hypotheses are ranked by log-probability / lp(length); rows of the hypothesis tensors are sentence-major, K each.
    """
    beam_size = scores.shape[1]
    rows = (chosen.nonzero()[:, None] * beam_size + torch.arange(beam_size, device=chosen.device)).view(-1)
    sentence_scores = scores[chosen]  # (C, K)
    normalised = sentence_scores / length_penalty(lengths.index_select(0, rows).view(-1, beam_size), alpha)
    order = normalised.argsort(dim=-1, descending=True)[:, :n_best]  # (C, n)
    picked = rows.view(-1, beam_size).gather(1, order).view(-1)  # (C * n,)
    history, attention = steps.read(picked)
    attention = attention.cpu() if attention is not None else None
    sentences = alive[chosen].tolist()
    real_lengths = source_lengths.index_select(0, alive[chosen]).repeat_interleave(order.shape[1]).tolist()
    hypotheses = []
    for i, (score, length, ended, tokens) in enumerate(
        zip(
            sentence_scores.gather(1, order).view(-1).tolist(),
            lengths.index_select(0, picked).tolist(),
            finished.index_select(0, picked).tolist(),
            history.tolist(),
        )
    ):
        tokens = tokens[: length - 1] if ended else tokens[:length]  # without eos
        weights = attention[i, :length, : real_lengths[i]] if attention is not None else None
        hypotheses.append(Hypothesis(tokens, score, weights))
    n = order.shape[1]
    return {sentence: hypotheses[i * n : (i + 1) * n] for i, sentence in enumerate(sentences)}
