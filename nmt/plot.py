"""Attention heatmaps: source subwords across, generated target subwords down, with a colour bar."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")  # no screen needed; figures go to TensorBoard or PNG files

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def attention_figure(weights: np.ndarray, source: list[str], target: list[str], title: str = "") -> plt.Figure:
    """A heatmap of weights (len(target), len(source)); pieces are sentencepiece subwords."""
    height, width = weights.shape
    figure, axes = plt.subplots(figsize=(max(4.0, 0.38 * width + 2.2), max(3.0, 0.32 * height + 1.6)), dpi=100)
    image = axes.imshow(weights, cmap="viridis", vmin=0.0, vmax=max(float(weights.max()), 1e-6), aspect="auto")
    axes.set_xticks(range(width), source, rotation=70, ha="right", fontsize=8)
    axes.set_yticks(range(height), target, fontsize=8)
    axes.set_xlabel("source")
    axes.set_ylabel("generated target")
    if title:
        axes.set_title(title, fontsize=9)
    figure.colorbar(image, ax=axes, fraction=0.046, pad=0.02)
    figure.tight_layout()
    return figure


def heads_figure(weights: np.ndarray, source: list[str], target: list[str], title: str = "") -> plt.Figure:
    """A grid of heatmaps, one per attention head: weights (heads, len(target), len(source))."""
    heads, height, width = weights.shape
    columns = math.ceil(math.sqrt(heads))  # 4 heads: a 2 x 2 grid
    rows = -(-heads // columns)
    cell = (max(3.0, 0.3 * width + 1.5), max(2.5, 0.26 * height + 1.2))
    figure, grid = plt.subplots(rows, columns, figsize=(cell[0] * columns, cell[1] * rows), dpi=90, squeeze=False)
    for head, axes in enumerate(grid.flat):
        if head >= heads:
            axes.axis("off")
            continue
        axes.imshow(weights[head], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        axes.set_xticks(range(width), source, rotation=70, ha="right", fontsize=7)
        axes.set_yticks(range(height), target if head % columns == 0 else [""] * height, fontsize=7)
        axes.set_title(f"head {head + 1}", fontsize=8)
    if title:
        figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    return figure
