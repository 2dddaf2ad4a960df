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
