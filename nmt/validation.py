"""One validation: loss, greedy decoding with BLEU and chrF, and attention against gold links where there are some;
its figures made once, as one record (`record`), and handed to every sink by `publish`: TensorBoard's curves, a line
of the run's validation records (`line_of`, read back by `read_validations`), the console and the log."""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import torch
from tqdm import tqdm

from nmt import UserError
from nmt.aer import Gold
from nmt.alignment import attention_report
from nmt.batches import TokenBatchSampler
from nmt.config import DecodeOptions, TrainerConfig
from nmt.corpus import Pairs
from nmt.data import ParallelDataset, Vocabulary, collate
from nmt.decoding import Search, check_input_lengths, decode_split
from nmt.loss import batch_loss
from nmt.paths import write_text
from nmt.runlog import RunLog
from nmt.state import Progress

log = logging.getLogger(__name__)
READABLE = 16  # subwords: up to about this length a heatmap's labels stay legible at TensorBoard's card size
FIGURES = ("epochs", "petaflops", "train_minutes", "loss", "perplexity", "chrf", "aer", "seconds", "best_bleu")
FIGURES += ("tokens_per_second",)  # of a record's fields, the numbers besides step and bleu (`parsed`)
RECORDED = ("loss", "perplexity", "bleu", "chrf", "aer", "seconds")  # of a validation's metrics, what its record keeps


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

    def __call__(self, model, run_log: RunLog, step: int) -> dict[str, float]:
        """{step, loss, perplexity, bleu, chrf, seconds} of the model on the valid pairs, and `aer` when the gold
        alignments of the valid pairs are known; logged to `run_log` with sample translations, attention heatmaps
        and, for each attention map, its entropy, diagonality and AER (`nmt.alignment`)."""
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


def line_of(figures: dict) -> str:
    """A validation's record as a line of its file: one JSON object."""
    return json.dumps(figures) + "\n"


def parsed(line: str) -> dict | None:
    """A line of validations.jsonl as its record, or None where it is not one (cut short by a crash, damaged or
    edited): a JSON object whose `step` is a whole number, whose `bleu` is a number, and whose other figures, where
    present, are numbers."""
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict) or not all(number(entry.get(key)) for key in ("step", "bleu")):
        return None
    if not float(entry["step"]).is_integer() or not all(number(entry[k]) for k in FIGURES if k in entry):
        return None
    return entry


def number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def read_validations(path: Path) -> list[dict]:
    """A run's validations (its file at `path`), the last line of each update (a resumed run may repeat one), in
    order: the one reader of the file. Lines that are not records (`parsed`) are skipped, said once, naming the file
    and lines: the others still hold."""
    if not path.is_file():
        return []
    found, skipped = {}, []
    for line_number, line in enumerate(path.read_bytes().decode("utf-8", errors="replace").splitlines(), 1):
        entry = parsed(line)
        if entry is not None:
            found[int(entry["step"])] = entry
        elif line.strip():
            skipped.append(line_number)
    if skipped:
        shown = ", ".join(map(str, skipped[:5])) + (f" and {len(skipped) - 5} more" if len(skipped) > 5 else "")
        log.warning("%s: line %s not a validation record (cut short, damaged or edited): skipped", path, shown)
    return [found[step] for step in sorted(found)]


def continue_from(path: Path, past: Path, step: int) -> None:
    """The validation records at `path` as a run continuing from update `step` finds them: the lines of later updates
    (validated after the checkpoint it continues from, by the process that stopped, or by an older run in this folder
    whose checkpoints are gone) moved to `past`, so that the file holds one history and its readers see only it."""
    if not path.is_file():
        return
    kept, later = [], []
    for line in path.read_bytes().decode("utf-8", errors="replace").splitlines(keepends=True):
        entry = parsed(line)  # a line that is not a record stays: readers skip it
        (later if entry is not None and entry["step"] > step else kept).append(line)
    if later:
        with open(past, "a", encoding="utf-8") as handle:
            handle.writelines(later)
        write_text(path, "".join(kept))
        log.warning("%s: %d validations past update %d moved to %s", path, len(later), step, past.name)


def improves(select: str, metrics: dict[str, float], progress: Progress) -> bool:
    """Whether this validation is the best so far by trainer.select: a higher BLEU, a lower loss or AER."""
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
    return metrics[select] > best if select == "bleu" else metrics[select] < best
