"""Is one variant really better than another? Intervals over training runs and test sentences together, with
sacrebleu's paired tests per seed beside them.

From one training run to the next the same variant moves by as much as many differences between variants (the power
line under each table gives the spread measured), so a verdict has to count training runs as well as test sentences,
and with the 3 to 8 seeds a study can afford, it has to be calibrated for few seeds. `contrast` adds two variance
components: the seeds' (each variant's spread over its seeds, divided by their number: what a Welch test over seeds
uses) and the test sentences' (the variance of the contrast over bootstrap resamples of the sentences, one draw shared
by every system, so the comparison stays paired over sentences). The interval is the difference of the means over
seeds plus or minus a t quantile times the root of their sum, with Welch-Satterthwaite degrees of freedom (each
variant's k - 1 seeds; the sentences' n - 1), and the p-value is the t test's. Where seeds dominate, this is Welch's
test over seeds, whose false-positive rate holds at 3 against 3 seeds (tests/test_significance.py simulates it); where
sentences dominate, it is the paired bootstrap's normal interval. (A bootstrap over 3 seeds draws only 10 distinct
sets, keeps 2/3 of their variance and uses percentile quantiles: 18% false positives at a nominal 5% where seeds
dominate, in `python -m nmt_study measure calibration`'s simulation.) Clark et al. (2011) showed why the optimizer's
replicates must be part of the test. Holm's correction (statsmodels) adjusts the p-values of a claim's secondary
comparisons; `Interval.detectable` gives the difference the test finds 80% of the time, in the claim's own unit.

Per seed, sacrebleu's paired bootstrap (Koehn 2004) and approximate randomization (Riezler and Maxwell 2005) from
`sacrebleu.significance.PairedTest`, with its fixed seed, still test seed k of one system against seed k of the other
(`paired_tests`, `seeded_tests`): they say how much the score would move with another test set, not with another
training run. Ties: both count resamples strictly above the observed difference, so two systems with the same score
would get the smallest p-value (MultEval's issue #5 reports the same); an observed difference of exactly zero gets 1.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

from nmt import UserError

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
    """A p-value for a table, to two significant digits; below 1e-15, where a t distribution's tail is rounding
    noise (and 0 in floating point), as "<1e-15"."""
    if p < 1e-15:
        return "<1e-15"
    return f"{p:.2g}" if p < 0.01 else f"{p:.3f}".rstrip("0").rstrip(".") if p < 1 else "1"


class Scored:
    """A system's test output held as sacrebleu's sufficient statistics per sentence, for each of `METRICS`, instead
    of its text: what a finished run's record keeps (`nmt_study.records.save_record`), so that its scores, paired
    tests and intervals can be made again where the run's folder is gone, without publishing translations of a corpus
    that is not ours. Every function here that takes a system's hypotheses takes a `Scored` as well, with the same
    results: the statistics are the ones sacrebleu extracts from the text."""

    def __init__(self, statistics: dict[str, list[list[int]]]):
        lengths = {metric: len(statistics[metric]) for metric in METRICS}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"statistics for a different number of sentences per metric: {lengths}")
        self.statistics = statistics

    @classmethod
    def of(cls, hypotheses: list[str], references: list[str]) -> Scored:
        return cls({metric: _extract(metric, hypotheses, [references]) for metric in METRICS})

    def __len__(self) -> int:
        return len(self.statistics[METRICS[0]])


def _extract(metric: str, hypotheses, references) -> list[list[int]]:
    """sacrebleu's statistics of `metric` per sentence, as it extracts them (integers: n-gram counts and lengths)."""
    return [[int(x) for x in row] for row in _metrics()[metric]._extract_corpus_statistics(hypotheses, references)]


class _ReadsScored:
    """Mixed into a sacrebleu metric: it also reads the statistics of a `Scored` output. sacrebleu's paired tests ask
    the metric for each system's statistics once, then resample those alone."""

    KEY = ""

    def _extract_corpus_statistics(self, hypotheses, references):
        if isinstance(hypotheses, Scored):
            if references:
                self._cache_references(references)  # what the signature reads (the number of references)
            return hypotheses.statistics[self.KEY]
        return super()._extract_corpus_statistics(hypotheses, references)


class _BLEU(_ReadsScored, BLEU):
    KEY = "BLEU"


class _CHRF(_ReadsScored, CHRF):
    KEY = "chrF"


def _metrics() -> dict:
    return {"BLEU": _BLEU(), "chrF": _CHRF()}


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


# --- over seeds and sentences together ---------------------------------------------------------------------------

RESAMPLES = 10_000
MIN_RESAMPLES = 20  # fewer resamples estimate the sentences' variance too roughly to put an interval on it


def check_resamples(samples: int, trials: int) -> None:
    """Refuse, naming the option, resample counts that give no interval (`--samples 0`) or one on noise alone."""
    for option, count in (("--samples", samples), ("--trials", trials)):
        if count < MIN_RESAMPLES:
            raise UserError(
                f"{option} {count}: at least {MIN_RESAMPLES} (the default, {RESAMPLES:,}, is what the reports use)"
            )


MIN_SEEDS = 3  # fewer seeds per variant give figures, never a verdict
SEED = 12345  # sacrebleu's own, so a report is reproducible
SUPPORTED, CONTRADICTED, INCONCLUSIVE = "supported", "contradicted", "inconclusive"
NEEDS_SEEDS, NOT_MEASURED = f"needs {MIN_SEEDS} seeds", "not measured"


def sentence_statistics(metric: str, hypotheses: list[str] | Scored, references: list[str]) -> np.ndarray:
    """(sentences, d): sacrebleu's sufficient statistics of BLEU or chrF per sentence (a `Scored` output's own);
    their column sums give the corpus score (`corpus_score`)."""
    return np.asarray(_metrics()[metric]._extract_corpus_statistics(hypotheses, [references]), dtype=np.float64)


def corpus_score(metric: str) -> Callable[[np.ndarray], float]:
    """The corpus score from summed sufficient statistics."""
    scorer = _metrics()[metric]
    return lambda totals: scorer._compute_score_from_stats(list(totals)).score


class Resampler:
    """Bootstrap resamples of one test set's sentences, drawn once and shared by every system scored on it, so that
    differences between systems are paired over sentences: `counts[r, i]` is how often sentence i is in resample r."""

    def __init__(self, sentences: int, resamples: int = RESAMPLES, seed: int = SEED):
        if sentences < 1:
            raise ValueError("no sentences to resample")
        rng = np.random.default_rng(seed)
        self.counts = rng.multinomial(sentences, np.full(sentences, 1 / sentences), size=resamples).astype(np.float64)

    def scores(self, statistics: np.ndarray, score: Callable[[np.ndarray], float]) -> np.ndarray:
        """(resamples,): the corpus score of each resample, from per-sentence statistics (sentences, d)."""
        return np.array([score(totals) for totals in self.counts @ statistics])


@dataclass
class Runs:
    """One variant's seeds on one test set: each seed's score (a corpus score, or a statistic of scores such as the
    share of BLEU kept on long sentences), and the same on every shared resample of the sentences."""

    name: str
    observed: np.ndarray  # (seeds,), in the order of the variant's seeds
    resampled: np.ndarray  # (seeds, resamples)
    sentences: int = 0  # the test sentences behind the scores: the sentence component's n - 1 degrees of freedom


@dataclass
class Interval:
    """A contrast between variants (most often a minus b): the observed value from the means over seeds, its 95%
    interval and two-sided p-value over seeds and sentences (`contrast`), Holm's adjusted p-value where it is one of
    a claim's secondary comparisons; its standard error and degrees of freedom."""

    delta: float
    low: float
    high: float
    p: float
    seeds: int  # the fewest seeds of the variants it compares
    resamples: int
    p_holm: float | None = None
    se: float | None = None  # None: an interval from before they were kept
    df: float | None = None

    def detectable(self, level: float = LEVEL, power: float = 0.8) -> float | None:
        """The true difference a t test with this interval's standard error and degrees of freedom, taken as known,
        finds with probability `power` at `level` (the noncentral t's two tails). The claims' own test estimates both
        afresh and finds this difference less often (70-77% at 3 seeds): the published figure is
        `nmt_study.power.detects`, from a simulation of that test."""
        if self.se is None or self.df is None:
            return None
        return exact_detectable(self.se, self.df, level, power)

    def verdict(self, direction: int = 1, level: float = LEVEL) -> str:
        """supported when the (adjusted) p-value is below `level` with the delta in the claim's `direction` (+1: a
        above b), contradicted when it is below the other way, inconclusive otherwise; no verdict under MIN_SEEDS."""
        if self.seeds < MIN_SEEDS:
            return NEEDS_SEEDS
        p = self.p if self.p_holm is None else self.p_holm
        if p >= level or self.delta == 0:
            return INCONCLUSIVE
        return SUPPORTED if self.delta * direction > 0 else CONTRADICTED

    def text(self, unit: str = "BLEU") -> str:
        holm = f", Holm {p_value(self.p_holm)}" if self.p_holm is not None else ""
        return (
            f"{self.delta:+.2f} {unit} [{self.low:+.2f}, {self.high:+.2f}] (p {p_value(self.p)}{holm}; "
            f"{self.seeds} seed{'s' * (self.seeds != 1)})"
        )


def contrast(terms: list[tuple[float, Runs]]) -> Interval:
    """sum of weight x (mean over seeds of a variant's score) over `terms`, with its interval from two variance
    components (see the module's docstring). The seeds' component is each variant's: its terms (a variant may appear
    in several, by length bucket) combined seed by seed, their variance over seeds divided by the number of seeds; the
    sentences' is the variance of the contrast over the shared resamples, less the seeds' own sentence noise. All
    terms must come from resamplers of the same number of resamples."""
    from scipy import stats

    delta = float(sum(weight * runs.observed.mean() for weight, runs in terms))
    observed: dict[str, np.ndarray] = {}  # each variant's terms, seed by seed: (seeds,)
    resampled: dict[str, np.ndarray] = {}  # and on each resample: (seeds, resamples)
    for weight, runs in terms:
        observed[runs.name] = observed.get(runs.name, 0.0) + weight * runs.observed
        resampled[runs.name] = resampled.get(runs.name, 0.0) + weight * runs.resampled
    seed_parts = [
        (float(np.var(values, ddof=1)) / len(values), len(values) - 1)
        for values in observed.values()
        if len(values) > 1
    ]
    # The sentences' component is what the seeds' leaves out: the test set's effect shared by every seed of a
    # variant. The bootstrap variance of the contrast of means also holds each seed's own sentence noise, which the
    # spread over seeds already counts; that share, (the bootstrap variance of a seed's deviation from its variant's
    # mean) / (k - 1), is taken out, so that no noise is counted twice.
    on_resamples = sum(values.mean(0) for values in resampled.values())  # (resamples,)
    counted = sum(
        float(np.var(values - values.mean(0), axis=1, ddof=1).mean()) / (len(values) - 1)
        for values in resampled.values()
        if len(values) > 1
    )
    sentence_part = max(0.0, float(np.var(on_resamples, ddof=1)) - counted)
    sentences = min((runs.sentences for _, runs in terms if runs.sentences), default=0)
    seeds, resamples = min(len(r.observed) for _, r in terms), terms[0][1].resampled.shape[1]
    variance = sum(part for part, _ in seed_parts) + sentence_part
    if not variance > 0:  # the very same runs, or runs that agree on every sentence and seed
        return Interval(delta, delta, delta, 1.0 if delta == 0 else 0.0, seeds, resamples, se=0.0, df=math.inf)
    pieces = sum(part**2 / df for part, df in seed_parts) + (sentence_part**2 / (sentences - 1) if sentences > 1 else 0)
    df = variance**2 / pieces if pieces > 0 else math.inf  # Welch-Satterthwaite
    se = math.sqrt(variance)
    half = float(stats.t.ppf(0.975, df)) * se
    p = 1.0 if delta == 0 else float(2 * stats.t.sf(abs(delta) / se, df))
    return Interval(delta, delta - half, delta + half, p, seeds, resamples, se=se, df=df)


def holm(intervals: list[Interval]) -> list[Interval]:
    """The intervals with Holm's step-down adjusted p-values (statsmodels), for a claim that rests on all of them."""
    if not intervals:
        return []
    from statsmodels.stats.multitest import multipletests

    adjusted = multipletests([i.p for i in intervals], method="holm")[1] if len(intervals) > 1 else [intervals[0].p]
    return [replace(i, p_holm=float(p)) for i, p in zip(intervals, adjusted)]


def pooled_sd(samples: list[list[float]]) -> float | None:
    """The standard deviation over seeds, pooled over variants with at least two seeds; None without any."""
    kept = [s for s in samples if len(s) > 1]
    if not kept:
        return None
    return (sum((len(s) - 1) * statistics.variance(s) for s in kept) / sum(len(s) - 1 for s in kept)) ** 0.5


def exact_detectable(se: float, df: float, level: float = LEVEL, power: float = 0.8) -> float:
    """The difference a two-sided t test with standard error `se` and `df` degrees of freedom finds with probability
    `power` at `level` (scipy's noncentral t)."""
    from scipy import optimize, stats

    if se <= 0:
        return 0.0
    critical = stats.t.ppf(1 - level / 2, df)

    def shortfall(noncentrality: float) -> float:
        found = stats.nct.sf(critical, df, noncentrality) + stats.nct.cdf(-critical, df, noncentrality)
        return (1.0 if np.isnan(found) else found) - power  # far out the far tail is all there is

    high = 4.0
    while shortfall(high) < 0:
        high *= 2
    return float(optimize.brentq(shortfall, 0.0, high) * se)


def detectable(seed_sd: float, seeds: int, level: float = LEVEL, power: float = 0.8) -> float:
    """The difference between two variants of `seeds` seeds each that a two-sided two-sample t-test at `level`
    detects with probability `power`, when the seed-to-seed standard deviation is `seed_sd` (statsmodels)."""
    from statsmodels.stats.power import TTestIndPower

    if seeds < 2:
        return float("inf")
    return float(TTestIndPower().solve_power(nobs1=seeds, alpha=level, power=power, ratio=1.0)) * seed_sd


class Evidence:
    """Every variant's seeds on one test set: {name: {seed: hypotheses}} against the references, scored once on the
    whole set and on shared resamples (for BLEU, chrF, and AER where {name: {seed: link counts}} are given), by
    length bucket too (`lengths`: source words per sentence)."""

    def __init__(
        self,
        hypotheses: dict[str, dict[int, list[str]]],
        references: list[str],
        lengths: list[int] | None = None,
        alignments: dict[str, dict[int, np.ndarray]] | None = None,
        resamples: int = RESAMPLES,
    ):
        self.hypotheses, self.references, self.resamples = hypotheses, references, resamples
        self.lengths = np.asarray(lengths if lengths is not None else [0] * len(references))
        self.alignments = alignments or {}
        self.names = list(hypotheses)
        self._resamplers: dict = {}
        self._statistics: dict = {}
        self._runs: dict = {}
        self._compared: dict = {}  # the report's table and the claims ask for the same differences

    def seeds(self, name: str) -> int:
        return len(self.hypotheses.get(name, {}))

    def bucket(self, low: int, high: int) -> np.ndarray:
        """The indices of the sentences whose source has low..high words."""
        return np.flatnonzero((self.lengths >= low) & (self.lengths <= high))

    def _statistics_of(self, name: str, seed: int, metric: str) -> np.ndarray:
        key = name, seed, metric
        if key not in self._statistics:
            if metric == "AER":
                self._statistics[key] = np.asarray(self.alignments[name][seed], dtype=np.float64)
            else:
                self._statistics[key] = sentence_statistics(metric, self.hypotheses[name][seed], self.references)
        return self._statistics[key]

    def runs(self, name: str, metric: str = "BLEU", bucket: tuple[int, int] | None = None) -> Runs:
        key = name, metric, bucket
        if key not in self._runs:
            subset = self.bucket(*bucket) if bucket else np.arange(len(self.references))
            if bucket not in self._resamplers:  # one draw per bucket, shared by every variant and metric
                self._resamplers[bucket] = Resampler(len(subset), self.resamples, SEED + (bucket[0] if bucket else 0))
            score = aer_score if metric == "AER" else corpus_score(metric)
            seeds = sorted(self.alignments[name] if metric == "AER" else self.hypotheses[name])
            stats = [self._statistics_of(name, seed, metric)[subset] for seed in seeds]
            self._runs[key] = Runs(
                name,
                np.array([score(s.sum(0)) for s in stats]),
                np.stack([self._resamplers[bucket].scores(s, score) for s in stats]),
                len(subset),
            )
        return self._runs[key]

    def compare(self, a: str, b: str, metric: str = "BLEU") -> Interval:
        """a minus b."""
        if (a, b, metric) not in self._compared:
            self._compared[a, b, metric] = contrast([(1.0, self.runs(a, metric)), (-1.0, self.runs(b, metric))])
        return self._compared[a, b, metric]

    def retention(self, name: str, short: tuple[int, int], long: tuple[int, int]) -> Runs:
        """The share of its BLEU on `short` sentences that a variant keeps on `long` ones, seed by seed and on every
        resample of each bucket (drawn apart: the buckets hold different sentences): a scale-free measure of how it
        copes with length, which a model near the floor of BLEU cannot win by having less to lose."""
        shorts, longs = self.runs(name, bucket=short), self.runs(name, bucket=long)
        with np.errstate(divide="ignore", invalid="ignore"):
            return Runs(
                f"{name} retention",
                longs.observed / shorts.observed,
                longs.resampled / shorts.resampled,
                min(shorts.sentences, longs.sentences),
            )

    def kept(self, a: str, b: str, short: tuple[int, int], long: tuple[int, int]) -> Interval:
        """a's retention (long over short BLEU) minus b's."""
        return contrast([(1.0, self.retention(a, short, long)), (-1.0, self.retention(b, short, long))])

    def mean_retention(self, name: str, short: tuple[int, int], buckets: list[tuple[int, int]]) -> Runs:
        """The mean over `buckets` of the share of its `short` BLEU a variant keeps in each: the area under its curve
        of BLEU by length, relative to its own short-sentence BLEU. Every bucket counts, a middle that does not fall
        steadily included."""
        parts = [self.retention(name, short, bucket) for bucket in buckets]
        observed = np.mean([part.observed for part in parts], axis=0)
        resampled = np.mean([part.resampled for part in parts], axis=0)
        return Runs(f"{name} mean retention", observed, resampled, min(part.sentences for part in parts))

    def kept_over(self, a: str, b: str, short: tuple[int, int], buckets: list[tuple[int, int]]) -> Interval:
        """a's mean retention over `buckets` minus b's."""
        return contrast([(1.0, self.mean_retention(a, short, buckets)), (-1.0, self.mean_retention(b, short, buckets))])


def aer_score(totals: np.ndarray) -> float:
    """AER from summed link counts (sure hits, possible hits, predicted links, sure links): `nmt.decoding.alignment`."""
    sure_hits, possible_hits, found, sure = totals[:4]
    return float(1 - (sure_hits + possible_hits) / (found + sure)) if found + sure else float("nan")
