"""The converged study's design, fixed before its runs (docs/tuning.md): what the tuning, the main table and the
claims train, under which rules, and what the whole queue costs on one GPU at the measured rate.

- **The final runs' protocol** (the main table's, the converged claims', and each tuning trial's): trained until they
  stop learning, up to CAP FLOPs, validated at each 1/VALIDATIONS of it, stopped earlier after PATIENCE validations
  without a better valid BLEU. The cap is where the recorded 5e14 curves flatten (Bahdanau, Luong and the Transformer
  gain little over their last third; Sutskever's model is still learning there and gets 20% more).
- **Tuning**: TRIALS trials for each of TUNED (trial 0 the defaults, then points of a scrambled Sobol sequence: a
  space-filling design, not random draws, at the handful of trials the budget affords), one seed (TUNING_SEED, none
  of the final runs' seeds), each family's own Sobol seed, so that no two families draw the same configurations.
  Successive halving on valid BLEU (Optuna's SuccessiveHalvingPruner, reduction factor REDUCTION): at rung 0, the
  RUNG-th validation (1/3 of the cap), a trial goes on only if its best valid BLEU so far ranks in the top third of the
  trials that reached that rung (the first trial, the defaults, always goes on), else it is stopped and recorded as
  pruned at that rung. The same trials, rungs and rule for every family.
- **The claims' arms are tuned alike**: a claim between families (the Transformer against the recurrent models)
  compares each family on its own tuning (the main table's runs, trained once for both); a claim within a family
  either trains both arms on one recipe chosen without either (the schema's defaults: the 5e14 runs, whose verdicts
  stand where they are not "still improving") or tunes each arm under the same effort (input feeding: `luong` and
  `luong_feeding` are both in TUNED). Converged runs go to the main table and the claims that need them (Transformer
  against recurrent, input feeding); the others keep their 5e14 evidence.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from nmt.study.variants import FAMILIES

CAP = 6e14  # FLOPs a final run may train
VALIDATIONS = 30  # validations over the cap: one at each 2e13 FLOPs
PATIENCE = 5  # validations without a better valid BLEU before a run stops
RUNG = 10  # successive halving's rung 0, in validations: 1/3 of the cap
REDUCTION = 3  # the top 1/REDUCTION of the trials at a rung go on
TRIALS = 6  # per tuned target: trial 0 (its defaults) and 5 Sobol points
# What is tuned, in the order the queue tunes it: the Transformer first (its recipe was tuned least), then the
# recurrent families, then the input-feeding claim's other arm
TUNED = ("transformer", "sutskever", "bahdanau", "luong", "luong_feeding")
TUNING_SEED = 1000  # below every final seed (FIRST_SEED, FIRST_SEED + 1, ...)
FIRST_SEED = 1234  # the final runs' seeds: FIRST_SEED .. FIRST_SEED + SEEDS - 1 (the lab: up to 8)
SEEDS = 3
# The converged runs beside the main table's: the claims' arms that the main table does not hold
CLAIM_RUNS = ("luong_feeding",)


def family_of(target: str) -> str:
    """The family of a tuned target (a family, or a variant named <family>_<what>)."""
    return target.split("_", 1)[0]


def expected_promotions(trials: int = TRIALS, reduction: int = REDUCTION) -> float:
    """How many of `trials` trials, tuned one after another, pass rung 0 on average when their ranks at the rung are
    in random order: Optuna's rule promotes the i-th trial when it is among the best max(1, i // reduction) of the i
    that reached the rung, which happens with probability max(1, i // reduction) / i."""
    return sum(promotion(i, reduction) for i in range(1, trials + 1))


def promotion(number: int, reduction: int = REDUCTION) -> float:
    """The chance that the `number`-th trial (from 1) passes rung 0 (expected_promotions)."""
    return max(1, number // reduction) / number


def trial_flops(number: int) -> float:
    """What the `number`-th trial of a target (from 1) trains on average: up to rung 0, then the rest of the cap
    when it is promoted."""
    rung = CAP * RUNG / VALIDATIONS
    return rung + promotion(number) * (CAP - rung)


# What each part of the queue trains: its targets (tuned targets, families, variants) and the runs of each
RUNS = {
    "tune": dict.fromkeys(TUNED, TRIALS),
    "main": dict.fromkeys(FAMILIES, SEEDS),
    "claims": dict.fromkeys(CLAIM_RUNS, SEEDS),
}


@dataclass(frozen=True)
class Part:
    """A part of the queue: its name, its runs wanted and recorded (per target), the FLOPs its runs train as expected
    and as expected of those still to run (per family, for the rate), and in the worst case (every trial promoted,
    no run stopped by patience)."""

    name: str
    runs: dict[str, int]
    done: dict[str, int]
    flops: dict[str, float]
    left: dict[str, float]
    bound: float

    @property
    def expected(self) -> float:
        return sum(self.flops.values())


def part(name: str, done: dict[str, int] | None = None) -> Part:
    """The part `name` of the queue with `done` runs recorded of each target (none by default). Runs stopped by
    patience train less; not counted."""
    runs, done = RUNS[name], {target: min(n, (done or {}).get(target, 0)) for target, n in RUNS[name].items()}

    def flops(first: int, target: str) -> float:  # the expected FLOPs of the target's runs from the first-th on
        if name == "tune":
            return sum(trial_flops(number) for number in range(first, runs[target] + 1))
        return (runs[target] - first + 1) * CAP

    whole: dict[str, float] = {}
    left: dict[str, float] = {}
    for target in runs:
        whole[family_of(target)] = whole.get(family_of(target), 0.0) + flops(1, target)
        left[family_of(target)] = left.get(family_of(target), 0.0) + flops(done[target] + 1, target)
    return Part(name, runs, done, whole, left, sum(runs.values()) * CAP)


def queue(done: dict[str, dict[str, int]] | None = None) -> list[Part]:
    """The converged queue in its order: the tuning, the main table (the four families' tuned defaults, SEEDS seeds),
    the claims' own runs (CLAIM_RUNS, tuned, SEEDS seeds); `done`: each part's runs recorded of each target."""
    return [part(name, (done or {}).get(name)) for name in RUNS]


def rates(measured: Path) -> dict[str, float]:
    """Each family's training rate alone on the GPU, model FLOPs per second, from a benchmark's record
    (results/measured/benchmark_cuda.json: every update a CUDA graph, one run at a time)."""
    values = json.loads(measured.read_text(encoding="utf-8"))["values"]
    return {family: values[family]["model_flops_per_second"] for family in FAMILIES}


def minutes(part: Part, rate: dict[str, float], left: bool = False) -> float:
    """The part's expected training time in minutes (`left`: of its runs not yet recorded), one at a time at `rate`."""
    return sum(flops / rate[family] for family, flops in (part.left if left else part.flops).items()) / 60
