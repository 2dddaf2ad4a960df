"""The power of the claims' own test (`significance.contrast`): what true difference it finds 80% of the time, from
a simulation of that test (Welch over seeds with each variance estimated, plus the test set's part, with
Welch-Satterthwaite degrees of freedom) rather than from a t test whose standard error is taken as known, which at
3 seeds promises more than the test gives."""

from __future__ import annotations

import functools
import math

import numpy as np

from nmt_study.significance import LEVEL, SEED, Interval, exact_detectable

TOLERANCE = 1e-3  # BLEU: the detectable difference is shown to two decimals


def split_variance(se: float, df: float, seeds: int, sentences: int = 1000) -> tuple[float, float]:
    """An interval's variance se^2 split into its two components as `contrast` made it, assuming both variants' seed
    parts equal: (each variant's seed part s, the sentences' part S), with se^2 = 2s + S and the Welch-Satterthwaite
    df = se^4 / (2 s^2 / (seeds - 1) + S^2 / (sentences - 1)) solved for s (clipped to [0, se^2 / 2])."""
    total = se**2
    if not math.isfinite(df) or seeds < 2:
        return 0.0, total
    a = 2 / (seeds - 1) + 4 / (sentences - 1)
    b = -4 * total / (sentences - 1)
    c = total**2 / (sentences - 1) - total**2 / df
    root = (-b + math.sqrt(max(b * b - 4 * a * c, 0.0))) / (2 * a)
    seed_part = min(max(root, 0.0), total / 2)
    return seed_part, total - 2 * seed_part


def simulated_power(
    shift: float,
    seed_part: float,
    sentence_part: float,
    seeds: int,
    sentences: int = 1000,
    level: float = LEVEL,
    studies: int = 20_000,
    seed: int = SEED,
) -> float:
    """How often `contrast`'s test (Welch over seeds, each variant's seed variance estimated from its `seeds` seeds,
    plus the sentences' part estimated over the test set, Welch-Satterthwaite degrees of freedom) finds a true
    difference `shift` at `level`, over `studies` simulated studies (common random numbers: the same draws for
    every shift)."""
    from scipy import stats

    rng = np.random.default_rng(seed)
    spread = math.sqrt(seed_part * seeds)  # one seed's standard deviation: its variant's part is spread^2 / seeds
    a, b = rng.normal(0.0, spread, (2, studies, seeds))
    sentence = rng.normal(0.0, math.sqrt(sentence_part), studies)
    estimated = sentence_part * rng.chisquare(sentences - 1, studies) / (sentences - 1)
    parts = a.var(axis=1, ddof=1) / seeds, b.var(axis=1, ddof=1) / seeds
    variance = parts[0] + parts[1] + estimated
    pieces = (parts[0] ** 2 + parts[1] ** 2) / (seeds - 1) + estimated**2 / (sentences - 1)
    df = np.where(pieces > 0, variance**2 / np.where(pieces > 0, pieces, 1.0), np.inf)
    delta = shift + a.mean(axis=1) - b.mean(axis=1) + sentence
    p = 2 * stats.t.sf(np.abs(delta) / np.sqrt(variance), df)
    return float((p < level).mean())


@functools.lru_cache(maxsize=256)  # a claim's figure is shown in more than one table: simulated once
def simulated_detectable(
    se: float, df: float, seeds: int, sentences: int = 1000, level: float = LEVEL, power: float = 0.8
) -> float:
    """The true difference `contrast`'s test finds with probability `power`, for an interval of standard error `se`
    and `df` degrees of freedom over `seeds` seeds a variant: its variance split as the test made it
    (`split_variance`), then the shift at which `simulated_power` reaches `power` (bisection to a width of TOLERANCE,
    a tenth of the figure's shown precision)."""
    if se <= 0:
        return 0.0
    seed_part, sentence_part = split_variance(se, df, seeds, sentences)
    if seeds < 2 or seed_part == 0:
        return exact_detectable(se, math.inf if seeds < 2 else df, level, power)
    low, high = 0.0, se
    while simulated_power(high, seed_part, sentence_part, seeds, sentences, level) < power:
        low, high = high, high * 2
    while high - low > TOLERANCE:
        middle = (low + high) / 2
        low, high = (
            (middle, high)
            if simulated_power(middle, seed_part, sentence_part, seeds, sentences, level) < power
            else (low, middle)
        )
    return (low + high) / 2


def detects(interval) -> float | None:
    """What the claims' test finds 80% of the time for an `Interval` (None without its se and df)."""
    if interval.se is None or interval.df is None:
        return None
    return simulated_detectable(interval.se, interval.df, interval.seeds)


def of_claim(claim: dict) -> float | None:
    """A recorded claim's "detects": from its primary comparison's se and df at its seeds (`detects`), the stored
    figure where the comparison has neither."""

    primary = next((c for c in claim.get("comparisons", []) if c.get("role") == "primary"), None)
    if primary is None or primary.get("se") is None or primary.get("df") is None:
        return claim.get("detectable")
    fields = ("delta", "low", "high", "p", "seeds", "resamples")
    return detects(Interval(**{k: primary[k] for k in fields}, se=primary["se"], df=primary["df"]))
