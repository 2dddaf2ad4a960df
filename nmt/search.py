"""Decoding over the one model interface (encode, decode_step); the search never asks which model it holds."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nmt.data import BOS_ID, EOS_ID


@dataclass
class Hypothesis:
    tokens: list[int]  # without bos and eos
    score: float  # sum of token log-probabilities, eos included
    attention: torch.Tensor | None  # (len(tokens) + 1, S) over the real source tokens, or None


def max_output_length(source_mask: torch.Tensor, ratio: float, extra: int) -> int:
    return int(source_mask.sum(1).max().item() * ratio + extra)


@torch.no_grad()
def greedy(model, source: torch.Tensor, source_mask: torch.Tensor, ratio: float = 1.5, extra: int = 10):
    """Batched greedy decoding: the most probable token at each step, until every sentence has ended.

    Returns one Hypothesis per sentence.
    """
    batch = source.shape[0]
    state = model.encode(source, source_mask)
    previous = torch.full((batch,), BOS_ID, dtype=torch.long, device=source.device)
    finished = torch.zeros(batch, dtype=torch.bool, device=source.device)
    tokens, scores, weights = [], torch.zeros(batch, device=source.device), []
    for _ in range(max_output_length(source_mask, ratio, extra)):
        logits, state, step_weights = model.decode_step(previous, state)
        log_probs = torch.log_softmax(logits.float(), dim=-1)  # (B, V)
        best_score, previous = log_probs.max(-1)  # (B,)
        scores += best_score.masked_fill(finished, 0.0)
        previous = previous.masked_fill(finished, EOS_ID)
        tokens.append(previous)
        if step_weights is not None:
            weights.append(step_weights.float())
        finished |= previous == EOS_ID
        if finished.all():
            break
    tokens = torch.stack(tokens, 1).cpu()  # (B, T)
    weights = torch.stack(weights, 1).cpu() if weights else None  # (B, T, S)
    lengths = source_mask.sum(1).cpu()
    hypotheses = []
    for row in range(batch):
        sequence = tokens[row].tolist()
        length = sequence.index(EOS_ID) if EOS_ID in sequence else len(sequence)
        attention = weights[row, : length + 1, : lengths[row]] if weights is not None else None
        hypotheses.append(Hypothesis(sequence[:length], float(scores[row]), attention))
    return hypotheses


# Decoding-state entries computed from the source alone (encoder annotations, attention keys, the Transformer's
# cross-attention cache, the mask). A hypothesis only ever extends a hypothesis of its own sentence, so these are the
# same for every beam of a sentence and beam search does not copy them at each step.
SOURCE_SIDE = ("memory", "keys", "source_mask", "cross_keys_", "cross_values_")


def length_penalty(length: torch.Tensor, alpha: float) -> torch.Tensor:
    """GNMT (Wu et al. 2016, eq. 14): lp(Y) = ((5 + |Y|) / 6)^alpha; alpha = 0 ranks by raw log-probability."""
    return ((5.0 + length.float()) / 6.0) ** alpha


@torch.no_grad()
def beam_search(
    model,
    source: torch.Tensor,
    source_mask: torch.Tensor,
    beam_size: int = 5,
    alpha: float = 0.6,
    ratio: float = 1.5,
    extra: int = 10,
    n_best: int = 1,
) -> list[list[Hypothesis]]:
    """Batched beam search: every sentence keeps `beam_size` hypotheses, all advanced in one decode_step call.

    A finished hypothesis keeps its score and stops growing (it can only be followed by eos at no cost); hypotheses
    are ranked by log-probability / lp(length) at the end. The state of any model is reordered with index_select, so
    RNN states and Transformer caches are handled alike. Returns the n best hypotheses of each sentence, best first.
    """
    batch, device = source.shape[0], source.device
    state = model.encode(source, source_mask)
    state = {k: v.repeat_interleave(beam_size, 0) for k, v in state.items()}  # (B * K, ...)
    scores = torch.full((batch, beam_size), float("-inf"), device=device)
    scores[:, 0] = 0.0  # all beams start as the same empty hypothesis; only one may expand at first
    previous = torch.full((batch * beam_size,), BOS_ID, dtype=torch.long, device=device)
    finished = torch.zeros(batch * beam_size, dtype=torch.bool, device=device)
    lengths = torch.zeros(batch * beam_size, dtype=torch.long, device=device)
    history = torch.zeros(batch * beam_size, 0, dtype=torch.long, device=device)
    attention = None
    offsets = (torch.arange(batch, device=device) * beam_size)[:, None]  # (B, 1)
    for _ in range(max_output_length(source_mask, ratio, extra)):
        logits, state, weights = model.decode_step(previous, state)
        log_probs = torch.log_softmax(logits.float(), dim=-1)  # (B * K, V)
        vocabulary = log_probs.shape[-1]
        # A finished hypothesis may only continue with eos, at no cost: it keeps its score and its length.
        done_row = torch.full_like(log_probs[0], float("-inf"))
        done_row[EOS_ID] = 0.0
        log_probs = torch.where(finished[:, None], done_row, log_probs)
        candidates = (scores[:, :, None] + log_probs.view(batch, beam_size, vocabulary)).view(batch, -1)
        scores, flat = candidates.topk(beam_size, dim=-1)  # (B, K)
        origin = (flat // vocabulary + offsets).view(-1)  # which hypothesis each new one extends, (B * K,)
        previous = (flat % vocabulary).view(-1)
        state = {k: v if k.startswith(SOURCE_SIDE) else v.index_select(0, origin) for k, v in state.items()}
        was_finished = finished.index_select(0, origin)
        lengths = lengths.index_select(0, origin) + (~was_finished).long()
        finished = was_finished | (previous == EOS_ID)
        history = torch.cat([history.index_select(0, origin), previous[:, None]], 1)
        if weights is not None:
            step = weights.float()[:, None, :]  # (B * K, 1, S)
            attention = step if attention is None else torch.cat([attention.index_select(0, origin), step], 1)
        if finished.all():
            break
    normalised = scores / length_penalty(lengths.view(batch, beam_size), alpha)  # (B, K)
    order = normalised.argsort(dim=-1, descending=True)[:, :n_best]
    source_lengths = source_mask.sum(1).tolist()
    results = []
    for row in range(batch):
        hypotheses = []
        for beam in order[row].tolist():
            index = row * beam_size + beam
            length = int(lengths[index])
            tokens = history[index].tolist()
            tokens = tokens[: length - 1] if finished[index] else tokens[:length]  # without eos
            weights_kept = attention[index, :length, : source_lengths[row]].cpu() if attention is not None else None
            hypotheses.append(Hypothesis(tokens, float(scores[row, beam]), weights_kept))
        results.append(hypotheses)
    return results
