"""What a run shows in TensorBoard: curves, sample translations, attention heatmaps, signatures and hyperparameters.

The layout is decided here, for a person opening `tensorboard --logdir outputs`: the Time Series tab orders its groups
by name and opens the first two, so the curves a reader wants first are in `curves` (train and valid loss, valid BLEU
and chrF, AER where gold links are known, learning rate, tokens/s) and the heatmaps in `heatmaps`; `training` and
`validation` (gradient norm, compute, epochs, each attention map's entropy, diagonality and AER, valid BLEU against
the teraFLOPs trained) follow, closed. Hyperparameters are the HParams tab's alone, as the user's options, beside the
curves' last values; nothing is logged that draws a one-point card.

A `RunLog` needs no trainer: open one on any folder to log a model's heatmaps or a finished run's results.
`RunLog(None)` logs nothing (what processes other than rank 0 use under torchrun).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams as hparams_summaries

from nmt.build import option_name
from nmt.config import flatten
from nmt.decoding.plot import attention_figure, heads_figure
from nmt.decoding.search import Hypothesis
from nmt.decoding.translator import Scores
from nmt.device import autocast
from nmt.metrics import METRICS, VALIDATED
from nmt.text.data import BOS_ID, EOS_ID, PAD_ID, Vocabulary

log = logging.getLogger(__name__)
CURVES = {  # (side, figure) -> tag, in the group TensorBoard opens first
    ("train", "loss"): "curves/train_loss",
    **{
        ("valid", name): metric.tag
        for name, metric in METRICS.items()
        if metric.tag and metric.tag.startswith("curves/")
    },
    ("train", "lr"): "curves/learning_rate",
    ("train", "tokens_per_second"): "curves/tokens_per_second",
}
GROUPS = {"train": "training", "valid": "validation"}  # every other figure of a side, in a group that starts closed
VALID_FIGURES = (*VALIDATED, "best_bleu", "petaflops", "epochs")  # of a record
METRICS = ("curves/valid_bleu", "validation/best_bleu", "curves/valid_chrf", "curves/valid_loss")  # HParams columns


def tags(side: str, figures: dict[str, float]) -> dict[str, float]:
    """A side's figures ("train" or "valid") under their tags: {"loss": 2.3} -> {"curves/train_loss": 2.3}."""
    return {CURVES.get((side, name), f"{GROUPS[side]}/{name}"): value for name, value in figures.items()}


HOW_IT_RUNS = {  # trainer options about how a run is executed and decoded, not what it learns: not in HParams
    "trainer.device",
    "trainer.cuda_graphs",
    "trainer.decode_ratio",
    "trainer.decode_extra",
    "trainer.decode_max_input_len",
    "trainer.test_at_end",
}


def user_options(config: dict, skipped: set[str] = frozenset(), given: tuple[str, ...] = ()) -> dict[str, object]:
    """A resolved run config as the options a user chose, for the HParams table: the model and its attention by the
    names a user gives them (`model`: bahdanau, `model.attention`: additive), the seed, then every model, trainer and
    data option as a dotted key; Hydra's underscore keys, a corpus's generator and sizes (data.grammar.*, data.sizes.*),
    `skipped` (options that do not change the run: folders, logging) and HOW_IT_RUNS left out."""
    options = {}
    for key, value in flatten({k: config[k] for k in ("model", "trainer", "data", "seed") if k in config}).items():
        *node, leaf = key.split(".")
        if leaf == "_target_":
            options[".".join(node)] = option_name(str(value))
        elif not (leaf.startswith("_") or key in skipped or key in HOW_IT_RUNS or key.startswith("data.") and node[1:]):
            options[key] = value if isinstance(value, (int, float, str, bool)) else str(value)
    # The table opens on what runs differ in: the model, its attention, the seed, then the options this command line
    # set (`given`: its overrides; a sweep's jobs differ in those), then the rest (the same in every run of a sweep)
    chosen = [option.lstrip("+~").split("=", 1)[0] for option in given]
    first = ("model", "model.attention", "seed", *(key for key in chosen if key not in ("model", "seed")))
    return {k: options[k] for k in first if k in options} | {k: v for k, v in options.items() if k not in first}


class RunLog:
    def __init__(self, folder: str | Path | None):
        self.writer = SummaryWriter(str(folder)) if folder is not None else None
        self.signatures_logged = False
        self.drawing: ThreadPoolExecutor | None = None  # the thread that draws heatmaps while a GPU trains on

    def scalars(self, values: dict[str, float], step: int) -> None:
        """Each value under its tag: {"curves/train_loss": 2.3}."""
        if self.writer:
            for tag, value in values.items():
                self.writer.add_scalar(tag, value, step)

    def train(self, figures: dict[str, float], step: int) -> None:
        """The training figures of a logging step: loss, learning rate, speed, gradient norm, compute, epoch."""
        self.scalars(tags("train", figures), step)

    def validation(self, record: dict) -> None:
        """A validation's record (`nmt.training.validation.record`): its curves at its update, and valid BLEU against
        the teraFLOPs trained (`validation/bleu_by_teraflops`), where runs of different models and speeds line up."""
        self.scalars(tags("valid", {k: record[k] for k in VALID_FIGURES if k in record}), record["step"])
        self.scalars({"validation/bleu_by_teraflops": record["bleu"]}, round(record["petaflops"] * 1e3))

    def maps(self, report: dict[str, dict[str, float]], step: int) -> None:
        """Each attention map's entropy, diagonality and AER (`nmt.decoding.alignment.attention_report`)."""
        for name, figures in report.items():
            self.scalars({f"validation/{metric}/{name}": value for metric, value in figures.items()}, step)

    def signatures(self, scores: Scores, step: int) -> None:
        """sacrebleu's signatures, once per run, in the TEXT tab."""
        if self.writer and not self.signatures_logged:
            text = f"BLEU `{scores.bleu_signature}`, chrF `{scores.chrf_signature}`"
            self.writer.add_text("valid/signature", text, step)
            self.signatures_logged = True

    def samples(self, sources: list[str], references: list[str], hypotheses: list[str], count: int, step: int):
        """The first `count` translations beside their source and reference, as a markdown table."""
        if not self.writer:
            return
        rows = ["| source | reference | hypothesis |", "|---|---|---|"]
        for source, reference, hypothesis in list(zip(sources, references, hypotheses))[:count]:
            rows.append(f"| {source} | {reference} | {hypothesis} |".replace("\n", " "))
        self.writer.add_text("valid/samples", "\n".join(rows), step)

    def attention(
        self,
        model,
        vocabulary: Vocabulary,
        sources: list[str],
        decoded: list[Hypothesis],
        count: int,
        device: torch.device,
        dtype: torch.dtype,
        step: int,
        background: bool | None = None,
    ) -> None:
        """Heatmaps of the first `count` sentences, the same ones at every validation, so the images step through
        training: whatever the model's `attention_maps` returns for its own output (nothing without attention). The
        maps are computed here; on a GPU they are drawn on a thread of their own (drawing takes the host a few tenths
        of a second a figure, while a captured update leaves it idle), elsewhere at once (`background` decides)."""
        if not self.writer:
            return
        model.eval()
        figures = []
        for i, (text, hypothesis) in enumerate(list(zip(sources, decoded))[:count]):
            source_ids = vocabulary.encode_source([text])[0] or [EOS_ID]
            source = torch.tensor([source_ids], device=device)
            target_in = torch.tensor([[BOS_ID, *hypothesis.tokens]], device=device)
            with torch.no_grad(), autocast(device, dtype):
                maps = model.attention_maps(source, source != PAD_ID, target_in)
            source_pieces = [vocabulary.source.id_to_piece(t) for t in source_ids]
            target_pieces = [vocabulary.target.id_to_piece(t) for t in hypothesis.tokens] + ["</s>"]
            for name, weights in maps.items():
                rows = source_pieces if name.startswith("encoder_self") else target_pieces
                weights = weights[0].float().cpu().numpy()  # (heads or 1, rows, S)
                figures.append((f"heatmaps/{name}/{i}", weights, source_pieces, rows, name))
        if device.type == "cuda" if background is None else background:
            self.drawing = self.drawing or ThreadPoolExecutor(1, thread_name_prefix="heatmaps")
            self.drawing.submit(self.draw, figures, step)
        else:
            self.draw(figures, step)

    def draw(self, figures: list[tuple], step: int) -> None:
        """The heatmaps of `attention`, into TensorBoard; on the drawing thread a failure is logged, not raised."""
        try:
            for tag, weights, source, rows, name in figures:
                if weights.shape[0] == 1:
                    figure = attention_figure(weights[0], source, rows, title=name)
                else:
                    figure = heads_figure(weights, source, rows, title=name)
                self.writer.add_figure(tag, figure, step, close=False)  # a figure of its own: no pyplot to close
        except Exception as error:
            if threading.current_thread() is threading.main_thread():
                raise
            log.warning("attention heatmaps of step %d not drawn: %s: %s", step, type(error).__name__, error)

    def hparams(self, options: dict[str, object]) -> None:
        """The run's options (`user_options`) in the HParams tab, with the last values of the curves in `METRICS`
        beside them: written as training starts, so a run still training compares there too."""
        if self.writer:
            for summary in hparams_summaries(options, dict.fromkeys(METRICS, 0.0)):
                self.writer.file_writer.add_summary(summary)

    def results(self, results: dict[str, float], step: int) -> None:
        """The finished run's figures (test BLEU and chrF, best valid BLEU, steps, minutes) as a table in TEXT."""
        if self.writer and results:
            rows = ["| result | value |", "|---|---|"]
            rows += [f"| {name} | {value:.4g} |" for name, value in results.items() if isinstance(value, (int, float))]
            rows += [f"| {name} | {value} |" for name, value in results.items() if isinstance(value, str)]
            self.writer.add_text("results", "\n".join(rows), step)

    def close(self) -> None:
        if self.drawing:  # the heatmaps still being drawn go in first
            self.drawing.shutdown(wait=True)
            self.drawing = None
        if self.writer:
            self.writer.close()
