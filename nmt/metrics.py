"""The figures nmt measures a translation by, stated once: each one's name (in records, options and reports),
whether a higher value is better, and its TensorBoard tag where validation logs it. Validation
records the validated ones, the log tags them, the best checkpoint is picked by them (trainer.select, `better`),
evaluate prints them, and the study reads them from records. A new figure is a line here (docs/extending.md)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    name: str
    higher_is_better: bool
    tag: str | None  # TensorBoard's tag of its valid curve; None: not measured at validation (evaluate's alone)


# In the order a validation's record holds them
METRICS = {
    metric.name: metric
    for metric in (
        Metric("loss", False, "curves/valid_loss"),
        Metric("perplexity", False, "validation/perplexity"),
        Metric("bleu", True, "curves/valid_bleu"),
        Metric("chrf", True, "curves/valid_chrf"),
        Metric("aer", False, "curves/valid_aer"),  # where the valid split has gold links
        Metric("ter", False, None),
    )
}
VALIDATED = tuple(name for name, metric in METRICS.items() if metric.tag)  # what a validation measures
SELECTABLE = ("bleu", "loss", "aer")  # trainer.select: the best checkpoint by one of these


def better(name: str, value: float, than: float) -> bool:
    """Whether `value` of the figure `name` is strictly better than `than`, by the figure's own direction."""
    return value > than if METRICS[name].higher_is_better else value < than
