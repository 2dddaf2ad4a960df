"""One validation: loss, greedy decoding with BLEU and chrF, and what TensorBoard shows of it."""

from __future__ import annotations

import logging
import math
import time

import torch

from nmt.alignment import Gold, attention_report
from nmt.config import TrainerConfig
from nmt.corpus import Pairs
from nmt.data import ParallelDataset, TokenBatchSampler, Vocabulary, collate
from nmt.decoding import Search, decode_split
from nmt.loss import batch_loss
from nmt.runlog import RunLog

log = logging.getLogger(__name__)


@torch.no_grad()
def valid_loss(model, dataset: ParallelDataset, max_tokens: int, device: torch.device, dtype: torch.dtype) -> float:
    """Mean cross-entropy per target token (no label smoothing)."""
    model.eval()
    longest = int(dataset.target_lengths.max()) if len(dataset) else 1
    total, tokens = 0.0, 0
    for indices in TokenBatchSampler(dataset, max(max_tokens, 2 * longest), shuffle=False):
        batch = collate([dataset[i] for i in indices]).to(device)
        total += batch_loss(model, model.features, batch, 0.0, device, dtype).item()
        tokens += batch.target_tokens
    return total / max(tokens, 1)


def validate(
    model,
    vocabulary: Vocabulary,
    dataset: ParallelDataset,
    pairs: Pairs,
    search: Search,
    config: TrainerConfig,
    run_log: RunLog,
    step: int,
    device: torch.device,
    dtype: torch.dtype,
    gold: list[Gold] | None = None,
) -> dict[str, float]:
    """{step, loss, perplexity, bleu, chrf, seconds} of the model on the valid pairs, and `aer` when the gold
    alignments of the valid pairs are known; logged to `run_log` with sample translations, attention heatmaps and,
    for each attention map, its entropy, diagonality and AER (`nmt.alignment`)."""
    started = time.perf_counter()
    loss = valid_loss(model, dataset, config.valid_max_tokens, device, dtype)
    decoding = time.perf_counter()
    texts, hypotheses, scores = decode_split(model, vocabulary, pairs, search, device, dtype)
    reporting = time.perf_counter()
    if not run_log.signatures_logged:
        log.info("sacrebleu signatures: BLEU %s | chrF %s", scores.bleu_signature, scores.chrf_signature)
    run_log.signatures(scores, step)
    metrics = {
        "step": step,
        "loss": loss,
        "perplexity": math.exp(min(loss, 50)),
        "bleu": scores.bleu,
        "chrf": scores.chrf,
    }
    run_log.scalars({f"valid/{k}": metrics[k] for k in ("loss", "perplexity", "bleu", "chrf")}, step)
    report = attention_report(model, vocabulary, pairs, device, dtype, gold)
    for name, figures in report.items():
        run_log.scalars({f"valid/{metric}/{name}": value for metric, value in figures.items()}, step)
    if report and gold is not None:
        metrics["aer"] = min(figures["aer"] for figures in report.values())  # the best-aligning map
        run_log.scalars({"valid/aer": metrics["aer"]}, step)
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    run_log.samples(sources, references, texts, config.num_samples, step)
    plotting = time.perf_counter()
    run_log.attention(model, vocabulary, sources, hypotheses, config.num_plots, device, dtype, step)
    ended = time.perf_counter()
    # where a validation's time goes: on a GPU the decoding is short and the host's share shows
    log.info(
        "validation %.2f s: loss %.2f, decoding %.2f, attention report %.2f, %d heatmaps %.2f",
        ended - started,
        decoding - started,
        reporting - decoding,
        plotting - reporting,
        config.num_plots,
        ended - plotting,
    )
    return {**metrics, "seconds": ended - started}
