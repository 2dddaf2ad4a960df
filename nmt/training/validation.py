"""One validation: loss, greedy decoding with BLEU and chrF, and attention against gold links where there are some;
its figures made once, as one record (`record`), and handed to every sink by `publish`: TensorBoard's curves, a line
of the run's validation records (`line_of`, read back by `read_validations`), the console and the log."""

from __future__ import annotations

import logging
import math
import time

import torch
from tqdm import tqdm

from nmt import UserError
from nmt.config import DecodeOptions, TrainerConfig
from nmt.decoding.alignment import attention_report
from nmt.decoding.translator import Search, check_input_lengths, decode_split
from nmt.metrics import VALIDATED, better
from nmt.text.aer import Gold
from nmt.text.batches import TokenBatchSampler
from nmt.text.corpus import Pairs
from nmt.text.data import ParallelDataset, Vocabulary, collate
from nmt.training.loss import batch_loss
from nmt.training.runlog import RunLog
from nmt.training.state import Progress

log = logging.getLogger(__name__)
READABLE = 16  # subwords: up to about this length a heatmap's labels stay legible at TensorBoard's card size
RECORDED = (*VALIDATED, "seconds")  # of a validation's metrics, what its record keeps


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


class Validator:
    """The valid split, checked once (each line decodable within trainer.decode_max_input_len) and decoded greedily
    with the trainer's batch size and input limit; `gold`: its gold links, for valid AER (the sample corpus has them).
    """

    def __init__(
        self,
        vocabulary: Vocabulary,
        pairs: Pairs,
        config: TrainerConfig,
        device: torch.device,
        dtype: torch.dtype,
        gold: list[Gold] | None = None,
    ):
        self.vocabulary, self.pairs, self.config, self.gold = vocabulary, pairs, config, gold
        self.device, self.dtype = device, dtype
        self.dataset = ParallelDataset(pairs, vocabulary)
        decoding = DecodeOptions(max_tokens=config.valid_max_tokens, max_input_len=config.decode_max_input_len)
        self.search = Search.of(decoding, config)
        limit, lines = config.decode_max_input_len, range(1, len(pairs) + 1)
        check_input_lengths(self.dataset.source_lengths, lines, limit, "trainer.decode_max_input_len", "valid line")
        self.plotted = readable(self.dataset.source_lengths.tolist(), config.num_plots)

    @staticmethod
    def check_select(select: str, gold: list[Gold] | None) -> None:
        """trainer.select=aer needs the valid split's gold links: refused, before anything is built, without them."""
        if select == "aer" and gold is None:
            raise UserError(
                "trainer.select=aer: the valid split has no gold links to measure AER against (the "
                "sample corpus has them); select on bleu or loss"
            )

    def __call__(self, model, run_log: RunLog, step: int) -> dict[str, float]:
        """{step, loss, perplexity, bleu, chrf, seconds} of the model on the valid pairs, and `aer` when the gold
        alignments of the valid pairs are known; logged to `run_log` with sample translations, attention heatmaps
        and, for each attention map, its entropy, diagonality and AER (`nmt.decoding.alignment`)."""
        vocabulary, pairs, config, gold = self.vocabulary, self.pairs, self.config, self.gold
        device, dtype = self.device, self.dtype
        started = time.perf_counter()
        loss = valid_loss(model, self.dataset, config.valid_max_tokens, device, dtype)
        decoding = time.perf_counter()
        progress = "validating" if config.progress else ""
        texts, hypotheses, scores = decode_split(model, vocabulary, pairs, self.search, device, dtype, progress)
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
        report = attention_report(model, vocabulary, pairs, device, dtype, gold)
        run_log.maps(report, step)
        if report and gold is not None:
            metrics["aer"] = min(figures["aer"] for figures in report.values())  # the best-aligning map
        sources, references = [s for s, _ in pairs], [t for _, t in pairs]
        run_log.samples(sources, references, texts, config.num_samples, step)
        plotting = time.perf_counter()
        plotted = self.plotted
        run_log.attention(model, vocabulary, [sources[i] for i in plotted], [hypotheses[i] for i in plotted],
                          len(plotted), device, dtype, step)  # fmt: skip
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


def readable(lengths: list[int], count: int) -> list[int]:
    """The valid sentences whose attention is drawn at every validation: the first `count` of at most READABLE
    subwords (then the shortest others, where too few are), the same ones each time, so that TensorBoard's step slider
    shows their attention forming."""
    short = [i for i, length in enumerate(lengths) if length <= READABLE]
    rest = sorted((i for i, length in enumerate(lengths) if length > READABLE), key=lambda i: (lengths[i], i))
    return (short + rest)[:count]


def record(metrics: dict[str, float], progress: Progress, improved: bool, tokens_per_second: float) -> dict:
    """A validation's figures, once: the update, epochs, compute and minutes trained, loss, BLEU, chrF, AER where
    measured, its own seconds, whether it is the best so far, the best BLEU so far, the training speed. Every sink
    writes this mapping."""
    return {
        "step": progress.step,
        "epochs": metrics["epochs"],
        "petaflops": metrics["petaflops"],
        "train_minutes": progress.train_seconds / 60,
        **{k: metrics[k] for k in RECORDED if k in metrics},
        "best": improved,
        "best_bleu": progress.best_bleu,
        "tokens_per_second": tokens_per_second,
    }


def publish(figures: dict, run_log: RunLog, append) -> None:
    """A validation's record to each sink: TensorBoard (`RunLog.validation`), the run's validation records
    (`append`: RunFolder.append_validation, the plain record the study, the tests and a person read), the console and
    the log."""
    step = figures["step"]
    run_log.validation(figures)
    append(figures)
    alignment = f"AER {figures['aer']:.3f} " if "aer" in figures else ""
    tqdm.write(
        f"step {step:>6} epoch {max(1, math.ceil(figures['epochs'])):>3} | valid loss {figures['loss']:.3f} "
        f"ppl {figures['perplexity']:.2f} BLEU {figures['bleu']:.2f} chrF {figures['chrf']:.2f} {alignment}"
        f"| {figures['train_minutes']:.1f} min trained, {figures['tokens_per_second']:,.0f} tok/s"
        + (" *" if figures["best"] else "")
    )
    log.info(
        "validation at step %d: %s", step, {k: v if isinstance(v, bool) else round(v, 4) for k, v in figures.items()}
    )


def improves(select: str, metrics: dict[str, float], progress: Progress) -> bool:
    """Whether this validation is the best so far by trainer.select, in the figure's own direction
    (nmt.metrics.better: a higher BLEU, a lower loss or AER)."""
    best = progress.best_score
    if select not in metrics:
        raise UserError(
            f"trainer.select={select}: this model's validation measures no {select} (a model without "
            "attention has no AER); select on bleu or loss"
        )
    if best is None:  # the first validation, or a run from before the option (BLEU chose its best)
        best = progress.best_bleu if select == "bleu" and progress.best_bleu >= 0 else None
    if best is None:
        return True
    return better(select, metrics[select], best)
