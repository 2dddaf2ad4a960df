"""Is one system's score really above another's? sacrebleu's own paired tests on the same test sentences, per seed.

Paired bootstrap resampling (Koehn 2004; sacrebleu's `bs`, as Moses' script) and approximate randomization
(Riezler and Maxwell 2005; sacrebleu's `ar`, as MultEval) both come from `sacrebleu.significance.PairedTest`, with
its fixed seed (`SACREBLEU_SEED`, 12345), so a report is reproducible; nothing here resamples by hand.

Two things are added around them:
- Ties. Both tests count resamples whose difference is strictly above the observed one, so two systems with the same
  score (a system against itself above all) get the smallest possible p-value, 1 / (n + 1), and would read as
  "significantly different" (MultEval's issue #5 reports the same). When the observed difference is exactly zero the
  p-value is 1: there is no difference that chance would have to explain.
- Seeds. With several seeds per system, seed k of one system is tested against seed k of the other, and a difference
  is marked significant only when every seed's pair is significant by both tests in the same direction (the reported
  p-value is the largest over seeds): a conservative reading that one lucky seed cannot pass.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

METRICS = ("BLEU", "chrF")
LEVEL = 0.05


@dataclass
class Difference:
    """A system against a reference system on one metric, over the seeds both ran."""

    delta: float  # mean over seeds of (system score - reference score)
    p_bootstrap: float  # the largest over seeds
    p_randomization: float  # the largest over seeds
    seeds: int
    consistent: bool  # every seed's difference has the delta's sign (and none is zero)

    def significant(self, level: float = LEVEL) -> bool:
        return self.consistent and self.p_bootstrap < level and self.p_randomization < level

    def mark(self, level: float = LEVEL) -> str:
        """'*' when significant at `level`, else ''."""
        return "*" if self.significant(level) else ""


def p_value(p: float) -> str:
    """A p-value for a table: three decimals, or '<0.001' (the smallest a test of 10,000 trials gives is 0.0001)."""
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def _metrics() -> dict:
    return {"BLEU": BLEU(), "chrF": CHRF()}


def paired_tests(
    systems: dict[str, list[str]], references: list[str], against: str, samples: int = 1000, trials: int = 10000
) -> tuple[dict[str, dict[str, dict]], dict[str, str]]:
    """One seed: every system in `systems` against `systems[against]`, by paired bootstrap (`samples` resamples)
    and approximate randomization (`trials` trials). Returns {system: {metric: {score, mean, ci, p_bootstrap,
    p_randomization}}} (the reference system has no p-values; `mean` and `ci` are the bootstrap's mean and 95%
    half-width) and each test's sacrebleu signature ({'bs BLEU': ..., 'ar chrF': ...})."""
    if against not in systems:
        raise ValueError(f"{against!r} is not among the systems")
    lengths = {name: len(hyps) for name, hyps in systems.items() if len(hyps) != len(references)}
    if lengths:
        raise ValueError(f"hypotheses and {len(references)} references differ in number: {lengths}")
    named = [(against, systems[against])] + [(name, hyps) for name, hyps in systems.items() if name != against]
    results: dict[str, dict[str, dict]] = {name: {} for name, _ in named}
    signatures = {}
    for test_type, count in (("bs", samples), ("ar", trials)):
        if len(named) == 1:  # sacrebleu needs a system besides the reference one
            break
        test_signatures, columns = PairedTest(named, _metrics(), [references], test_type=test_type, n_samples=count)()
        for column, values in columns.items():
            if column == "System":
                continue
            metric = "BLEU" if column.startswith("BLEU") else "chrF"
            signatures[f"{test_type} {metric}"] = str(test_signatures[column])
            reference_score = values[0].score
            for (name, _), result in zip(named, values):
                entry = results[name].setdefault(metric, {"score": result.score})
                if test_type == "bs":
                    entry.update(mean=result.mean, ci=result.ci)
                if name != against:  # a tie is no difference at all (see the module docstring)
                    p = 1.0 if result.score == reference_score else result.p_value
                    entry["p_bootstrap" if test_type == "bs" else "p_randomization"] = p
    return results, signatures


def seeded_tests(
    hypotheses: dict[str, dict[int, list[str]]],
    references: list[str],
    against: str,
    samples: int = 1000,
    trials: int = 10000,
) -> tuple[dict[str, dict[str, Difference]], dict[str, str]]:
    """Every system of {system: {seed: hypotheses}} against `against`, seed by seed over the seeds both ran
    (`paired_tests`), combined into one `Difference` per system and metric; and the tests' signatures."""
    seeds = sorted(hypotheses[against])
    per_seed, signatures = {}, {}
    for seed in seeds:
        systems = {name: runs[seed] for name, runs in hypotheses.items() if seed in runs}
        per_seed[seed], signatures = paired_tests(systems, references, against, samples, trials)
    differences: dict[str, dict[str, Difference]] = {}
    for name in hypotheses:
        if name == against:
            continue
        shared = [seed for seed in seeds if name in per_seed[seed]]
        if not shared:
            continue
        differences[name] = {}
        for metric in METRICS:
            deltas = [per_seed[s][name][metric]["score"] - per_seed[s][against][metric]["score"] for s in shared]
            delta = statistics.mean(deltas)
            differences[name][metric] = Difference(
                delta=delta,
                p_bootstrap=max(per_seed[s][name][metric]["p_bootstrap"] for s in shared),
                p_randomization=max(per_seed[s][name][metric]["p_randomization"] for s in shared),
                seeds=len(shared),
                consistent=delta != 0 and all(d * delta > 0 for d in deltas),
            )
    return differences, signatures
