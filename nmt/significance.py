"""Is one system's BLEU really above another's? sacrebleu's own paired tests, on the same test sentences.

Paired bootstrap resampling (Koehn 2004) gives each system's mean and 95% confidence interval over resampled test
sets and a p-value against the baseline; approximate randomization (Riezler and Maxwell 2005) gives another p-value.
Both are sacrebleu's (`sacrebleu.significance.PairedTest`), with its fixed seed (`SACREBLEU_SEED`, 12345), so a
report is reproducible; nothing here resamples by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

METRICS = ("BLEU", "chrF")


@dataclass
class Comparison:
    """One system against the baseline on one metric."""

    score: float
    mean: float | None  # bootstrap mean
    ci: float | None  # half-width of the bootstrap 95% confidence interval
    p_bootstrap: float | None  # None for the baseline itself
    p_randomization: float | None

    def significant(self, level: float = 0.05) -> bool:
        """Different from the baseline by both tests at `level`."""
        return (self.p_bootstrap is not None and self.p_bootstrap < level
                and self.p_randomization is not None and self.p_randomization < level)  # fmt: skip


def paired_tests(
    systems: dict[str, list[str]], references: list[str], baseline: str, samples: int = 1000, trials: int = 10000
) -> tuple[dict[str, dict[str, Comparison]], dict[str, str]]:
    """{system: {metric: Comparison}} of every system (the baseline too, without p-values) against `baseline`, and
    the signature of each test ({'bs BLEU': ..., 'ar BLEU': ...}), by sacrebleu's paired bootstrap resampling
    (`samples` resamples) and approximate randomization (`trials` trials)."""
    if baseline not in systems:
        raise ValueError(f"baseline {baseline!r} is not among the systems")
    named = [(baseline, systems[baseline])] + [(name, hyps) for name, hyps in systems.items() if name != baseline]
    results: dict[str, dict[str, dict]] = {name: {} for name, _ in named}
    signatures = {}
    for test_type, count in (("bs", samples), ("ar", trials)):
        metrics = {"BLEU": BLEU(), "chrF": CHRF()}
        test = PairedTest(named, metrics, [references], test_type=test_type, n_samples=count)
        test_signatures, scores = test()
        for column, values in scores.items():
            if column == "System":
                continue
            label = "BLEU" if column.startswith("BLEU") else "chrF"
            signatures[f"{test_type} {label}"] = str(test_signatures[column])
            for (name, _), result in zip(named, values):
                entry = results[name].setdefault(label, {"score": result.score})
                if test_type == "bs":
                    entry.update(mean=result.mean, ci=result.ci, p_bootstrap=result.p_value)
                else:
                    entry["p_randomization"] = result.p_value
    comparisons = {}
    for name, by_metric in results.items():
        comparisons[name] = {
            label: Comparison(e["score"], e.get("mean"), e.get("ci"), e.get("p_bootstrap"), e.get("p_randomization"))
            for label, e in by_metric.items()
        }
    return comparisons, signatures
