"""What a run shows in TensorBoard: curves, sample translations, attention heatmaps, signatures and hyperparameters.

A `RunLog` needs no trainer: open one on any folder to log a model's heatmaps or a finished run's hyperparameters.
`RunLog(None)` logs nothing (what processes other than rank 0 use under torchrun).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from torch.utils.tensorboard import SummaryWriter

from nmt.config import flatten
from nmt.data import BOS_ID, EOS_ID, PAD_ID, Vocabulary
from nmt.decoding import Scores
from nmt.device import autocast
from nmt.plot import attention_figure, heads_figure
from nmt.search import Hypothesis

log = logging.getLogger(__name__)


class RunLog:
    def __init__(self, folder: str | Path | None):
        self.writer = SummaryWriter(str(folder)) if folder is not None else None
        self.signatures_logged = False
        self.drawing: ThreadPoolExecutor | None = None  # the thread that draws heatmaps while a GPU trains on

    def scalars(self, values: dict[str, float], step: int) -> None:
        """Each value under its tag: {"train/loss": 2.3, "valid/bleu": 31.2}."""
        if self.writer:
            for tag, value in values.items():
                self.writer.add_scalar(tag, value, step)

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
                figures.append((f"valid/attention/{name}/{i}", weights, source_pieces, rows, name))
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

    def hparams(self, config: dict, results: dict[str, float]) -> None:
        """The model and trainer options beside the run's results, for TensorBoard's HPARAMS tab."""
        if self.writer:
            flat = flatten({"model": config.get("model", {}), "trainer": config.get("trainer", {})})
            options = {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in flat.items()}  # hparams
            self.writer.add_hparams(options, {f"hparam/{k}": v for k, v in results.items()}, run_name=".")

    def close(self) -> None:
        if self.drawing:  # the heatmaps still being drawn go in first
            self.drawing.shutdown(wait=True)
            self.drawing = None
        if self.writer:
            self.writer.close()
