"""Attention heatmaps: source subwords across, generated target subwords down, with a colour bar."""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import numpy as np

from nmt import UserError

if TYPE_CHECKING:
    import matplotlib.pyplot as plt


@functools.cache
def pyplot():
    """matplotlib's pyplot, loaded at the first figure: a command that draws nothing (most translate.py and
    evaluate.py calls) does not wait the third of a second it takes to load."""
    import matplotlib

    matplotlib.use("Agg")  # no screen needed; figures go to TensorBoard or PNG files
    import matplotlib.pyplot as plt

    # Line figures (the comparison's curves) have a line per variant, more than the default cycle's 10 colours:
    # tab20's ten strong colours, then its ten light ones, keep every line distinct.
    twenty = plt.get_cmap("tab20").colors
    plt.rcParams["axes.prop_cycle"] = matplotlib.cycler(color=twenty[::2] + twenty[1::2])
    return plt


def image_format(path, option: str) -> None:
    """Refuse, naming `option`, an image path whose suffix matplotlib cannot write (checked before the work that
    draws it): `a.txt` names no image format."""
    from pathlib import Path

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    formats = FigureCanvasAgg.get_supported_filetypes()
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in formats:
        reason = f".{suffix} is no image format that can be written" if suffix else "a name without a suffix"
        raise UserError(
            f"{option}={path}: {reason}; end the name with one of {', '.join('.' + f for f in sorted(formats))} "
            "(.png, say)"
        )


def close(figure: plt.Figure) -> None:
    pyplot().close(figure)


def lines_figure(width: float = 9.0, height: float = 4.2) -> tuple[plt.Figure, plt.Axes]:
    """A figure for one line per variant, its legend beside the axes (`legend_beside`) so that no curve is hidden."""
    figure, grid = own_figure((width, height), dpi=110)
    return figure, grid[0, 0]


def legend_beside(axes: plt.Axes) -> None:
    """The legend right of the axes, and the axes sized to leave it room: laid out by arithmetic from the longest
    label (7-point text), not by a layout engine, which draws a figure twice."""
    legend = axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    width, height = axes.figure.get_size_inches()
    room = 0.45 + 0.052 * max((len(text.get_text()) for text in legend.get_texts()), default=0)
    right = max(0.4, 1 - (room + 0.12) / width)
    axes.figure.subplots_adjust(left=0.8 / width, bottom=0.6 / height, right=right, top=1 - 0.36 / height)


def own_figure(size: tuple[float, float], dpi: int, rows: int = 1, columns: int = 1, layout: str | None = None):
    """A figure outside pyplot's registry and its grid of axes: drawn on any one thread (RunLog draws heatmaps on a
    thread of their own while a GPU trains), written with savefig or TensorBoard, dropped when no longer held."""
    pyplot()  # the Agg backend and the colour cycle, once
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=size, dpi=dpi, layout=layout)
    FigureCanvasAgg(figure)  # its own canvas, which draws it
    return figure, figure.subplots(rows, columns, squeeze=False)


CELL = 0.2  # inches a subword takes on either axis of a heatmap (20 pixels at 100 dpi): square cells


def attention_figure(weights: np.ndarray, source: list[str], target: list[str], title: str = "") -> plt.Figure:
    """A heatmap of weights (len(target), len(source)); pieces are sentencepiece subwords. Sized to the sentence, in
    square cells with 9-point labels and little else around them, so that a sentence of up to about 16 subwords is
    legible at TensorBoard's card size (about 350 pixels wide) without enlarging the card. Laid out by arithmetic,
    not by a layout engine: one draw instead of two, which halves a validation's heatmap time."""
    height, width = weights.shape
    longest = max(map(len, [*source, *target, ""]))  # the labels' room: rotated below, level to the left
    margin = 0.3 + 0.075 * min(longest, 14)
    top = 0.3 if title else 0.1
    bar = 0.65  # the colour bar, its gap and its tick labels, right of the cells
    size = (max(2.4, CELL * width + margin + bar), max(1.8, CELL * height + margin + top))
    figure, grid = own_figure(size, dpi=100)
    axes = grid[0, 0]
    axes.set_position([margin / size[0], margin / size[1], CELL * width / size[0], CELL * height / size[1]])
    image = axes.imshow(weights, cmap="viridis", vmin=0.0, vmax=max(float(weights.max()), 1e-6), aspect="equal")
    axes.set_xticks(range(width), source, rotation=70, ha="right", rotation_mode="anchor", fontsize=9)
    axes.set_yticks(range(height), target, fontsize=9)
    axes.tick_params(length=2, pad=2)
    if title:
        axes.set_title(title, fontsize=9)
    colour_bar = figure.add_axes(
        [(margin + CELL * width + 0.08) / size[0], margin / size[1], 0.12 / size[0], CELL * height / size[1]]
    )
    figure.colorbar(image, cax=colour_bar).ax.tick_params(labelsize=7)
    return figure


def heads_figure(weights: np.ndarray, source: list[str], target: list[str], title: str = "") -> plt.Figure:
    """A grid of heatmaps, one per attention head: weights (heads, len(target), len(source))."""
    return panels_figure(list(weights), [f"head {h + 1}" for h in range(len(weights))], source, target, title)


def panels_figure(
    panels: list[np.ndarray], titles: list[str], source: list[str], target: list[str], title: str = ""
) -> plt.Figure:
    """A grid of heatmaps of one sentence pair on the same axes, each (len(target), len(source)) with its title:
    the heads of a layer, or the models of a comparison side by side."""
    count, (height, width) = len(panels), panels[0].shape
    columns = math.ceil(math.sqrt(count))  # 4 panels: a 2 x 2 grid
    rows = -(-count // columns)
    cell = (max(2.6, CELL * width + 1.3), max(2.2, CELL * height + 1.1))
    size = (cell[0] * columns, cell[1] * rows)
    # constrained, not tight, layout: it keeps the figure's title clear of the panels' titles
    figure, grid = own_figure(size, 90, rows, columns, layout="constrained")
    for index, axes in enumerate(grid.flat):
        if index >= count:
            axes.axis("off")
            continue
        axes.imshow(panels[index], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        axes.set_xticks(range(width), source, rotation=70, ha="right", fontsize=7)
        axes.set_yticks(range(height), target if index % columns == 0 else [""] * height, fontsize=7)
        axes.set_title(titles[index], fontsize=8)
    if title:
        figure.suptitle(title, fontsize=9)
    return figure
