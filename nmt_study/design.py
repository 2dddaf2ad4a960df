"""The converged study's design on the CPUs this project has, fixed before its first run (docs/tuning.md): one open
claim settled, what the tuning and the final runs train under which rules, and what it costs in machine-hours at the
measured rate.

- **The question** (PRIMARY): does the Transformer beat the recurrent models on Multi30k de->en? The opponent is fixed
  in advance, Luong's global attention with input feeding (`luong_feeding`, the best recurrent arm of the 5e14 runs),
  and the answer is one test: the seed-level difference of mean test BLEU (beam 5, test2016) between the two arms,
  with its 95% interval. Supported where the interval lies above 0, contradicted where below, "no difference larger
  than EQUIVALENCE BLEU" where it lies inside (-EQUIVALENCE, +EQUIVALENCE) (two one-sided tests), inconclusive
  otherwise. Every other row of the main table keeps its 5e14 figures, labelled "5e14 FLOPs, hand-set defaults".
- **Both arms tuned alike** (TUNED): TRIALS trials each, trial 0 the arm's defaults, then scrambled Sobol points of
  its space (TUNING_SEED as the trials' training seed, each target its own Sobol seed). Successive halving on valid
  BLEU (Optuna's SuccessiveHalvingPruner, reduction factor REDUCTION): rung 0 at RUNG_FLOPS (a trial goes on only if
  its best valid BLEU so far ranks in the top third of those that reached the rung; the first always does). A choice
  is adopted only if its valid BLEU beats trial 0's by ADOPT_MARGIN; otherwise the defaults stay.
- **The final runs** (FINAL_RUNS): SEEDS seeds per arm (FIRST_SEED ...), each trained until it stops learning: up to
  CAP FLOPs, a validation every SPACING FLOPs (a spacing, not a count of the cap: VALIDATIONS follows from it),
  stopped after PATIENCE validations without a better valid BLEU. A run stopped by patience is "converged"; one that
  reaches the cap is labelled "capped". At 5 seeds the project's seed-level test has 80% power at about 1.0 BLEU
  (1.7 at 3 seeds).
- **One precision and thread count for every run** (PINNED): fp32 (the only precision every CPU kind runs and
  continues) and THREADS threads, one run at a time on a 2-core machine. A run must end inside the session that
  starts it (a session's machine, its run folders included, is gone at its end; a checkpoint of these models with its
  optimiser state is too large to commit), and a converged Luong run (6.5-9e14 FLOPs at the 5e14 curves' pace) takes
  longer than a session at one thread: two threads take it in about two hours. The runs alternate between the arms,
  so that every machine and CPU kind contributes alike to both, and each record holds ATen's CPU capability.
- **The cost** (`machine_hours`): each arm's FLOPs at its measured rate (results/measured/cpu_rate.json: FLOPs per
  second of a run alone at THREADS threads, `python -m nmt_study measure cpu_rate`) plus VALIDATION_SECONDS per
  validation, with the runs' expected stops (EXPECTED_STOP: where the 5e14 curves put them) and at most (every run
  to the cap, every trial promoted).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from nmt_study.variants import FAMILIES

PRIMARY = ("transformer", "luong_feeding")  # the claim: the first beats the second (the opponent fixed in advance)
EQUIVALENCE = 1.0  # BLEU: a difference inside +-1 reads "no difference larger than 1 BLEU"
ADOPT_MARGIN = 0.5  # valid BLEU a tuned choice must gain over trial 0 (the defaults) to be adopted
CAP = 1e15  # FLOPs a final run or trial may train
SPACING = 2e13  # FLOPs between validations
VALIDATIONS = round(CAP / SPACING)  # 50 over the cap
PATIENCE = 5  # validations without a better valid BLEU before a run stops
RUNG_FLOPS = 2e14  # successive halving's rung 0
RUNG = round(RUNG_FLOPS / SPACING)  # in validations: the 10th
REDUCTION = 3  # the top 1/REDUCTION of the trials at a rung go on
TRIALS = 6  # per tuned target: trial 0 (its defaults) and 5 Sobol points
TUNED = PRIMARY  # both arms, in the order the queue alternates them
TUNING_SEED = 1000  # below every final seed (FIRST_SEED, FIRST_SEED + 1, ...)
FIRST_SEED = 1234  # the final runs' seeds: FIRST_SEED .. FIRST_SEED + SEEDS - 1 (the lab: up to 8)
SEEDS = 5
THREADS = 2  # every run's torch threads (with fp32: PINNED)


def pinned(threads: int = THREADS) -> tuple[str, ...]:
    """The precision and thread count a run of the design trains with (fp32, `threads` torch threads)."""
    return ("trainer.precision=fp32", f"trainer.threads={threads}")


PINNED = pinned()
# The final runs: the Transformer as the main table's converged row, luong_feeding as the claim's other arm
CLAIM_RUNS = ("luong_feeding",)
FINAL_RUNS = {"main": {"transformer": SEEDS}, "claims": dict.fromkeys(CLAIM_RUNS, SEEDS)}
# Where the runs are expected to stop (FLOPs), from the 5e14 runs' valid curves (results/runs/main_5e14, claims_5e14):
# the Transformer's best at 0.20-0.34 PFLOP in 6 of 6 runs, then PATIENCE validations more; Luong with input feeding
# still gaining at 5e14, its fitted curve flat at 6.5-9e14
EXPECTED_STOP = {"transformer": 4.0e14, "luong_feeding": 8.0e14}
# One validation of a Multi30k model at THREADS threads (loss and greedy BLEU on valid): 22 s for an untrained
# Transformer, whose outputs run to the length limit (python -m nmt_study measure cpu_rate), 15-20 s once it translates
VALIDATION_SECONDS = 20.0


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


def trial_flops(number: int, stop: float = CAP) -> float:
    """What the `number`-th trial of a target (from 1) trains on average: up to rung 0, then on to where it stops
    (`stop`: the cap at most) when it is promoted."""
    rung = min(RUNG_FLOPS, stop)
    return rung + promotion(number) * (stop - rung)


# What each part of the queue trains: its targets and the runs of each; the tuning first, then the final runs
RUNS = {"tune": dict.fromkeys(TUNED, TRIALS), **FINAL_RUNS}


@dataclass(frozen=True)
class Part:
    """A part of the queue: its name, its runs wanted and recorded (per target), the FLOPs its runs train as expected
    (EXPECTED_STOP) and as expected of those still to run (per target), and at most (every trial promoted, every run
    to the cap)."""

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
    """The part `name` of the queue with `done` runs recorded of each target (none by default)."""
    runs, done = RUNS[name], {target: min(n, (done or {}).get(target, 0)) for target, n in RUNS[name].items()}

    def flops(first: int, target: str) -> float:  # the expected FLOPs of the target's runs from the first-th on
        stop = min(CAP, EXPECTED_STOP.get(target, CAP))
        if name == "tune":
            return sum(trial_flops(number, stop) for number in range(first, runs[target] + 1))
        return (runs[target] - first + 1) * stop

    whole = {target: flops(1, target) for target in runs}
    left = {target: flops(done[target] + 1, target) for target in runs}
    return Part(name, runs, done, whole, left, sum(runs.values()) * CAP)


def queue(done: dict[str, dict[str, int]] | None = None) -> list[Part]:
    """The queue in its order: the tuning of both arms, then their final runs (FINAL_RUNS, SEEDS seeds each); `done`:
    each part's runs recorded of each target."""
    return [part(name, (done or {}).get(name)) for name in RUNS]


def machine_hours(flops: dict[str, float], rates: dict[str, float]) -> float:
    """Hours of a 2-core machine for `flops` (per target), one run at a time at THREADS threads: each target's FLOPs
    at its rate, and a validation every SPACING FLOPs at VALIDATION_SECONDS each."""
    return sum(f / rates[target] + f / SPACING * VALIDATION_SECONDS for target, f in flops.items()) / 3600


def rates(measured: Path) -> dict[str, float]:
    """Each family's training rate alone on the GPU, model FLOPs per second, from a benchmark's record
    (results/measured/benchmark_cuda.json: every update a CUDA graph, one run at a time)."""
    values = json.loads(measured.read_text(encoding="utf-8"))["values"]
    return {family: values[family]["model_flops_per_second"] for family in FAMILIES}


def minutes(part: Part, rate: dict[str, float], left: bool = False) -> float:
    """The part's expected training time in minutes (`left`: of its runs not yet recorded), one at a time at `rate`
    (per family: a variant trains at its family's)."""
    return sum(flops / rate[family_of(target)] for target, flops in (part.left if left else part.flops).items()) / 60
