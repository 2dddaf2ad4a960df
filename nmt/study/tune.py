"""Each family's recipe tuned with equal effort on valid BLEU: the same number of trials over the same kinds of knobs,
one seed, under the protocol of the final runs; the test split is never read.

A family's tuning is trial 0, its defaults as they are (the baseline a choice must beat), then `trials` trials that
Optuna's TPE sampler proposes through Hydra's sweeper (`hydra/sweeper=optuna`, the engine configs/hydra/sweeper
already uses), each a `train.py` run whose return value, its best valid BLEU, the sampler maximises. Every finished
trial is recorded as it ends (results/runs/tune/<family>/trial<N>.json: its options, valid curve, compute and what
stopped it), so an interrupted tuning continues with the trials still to run, on this machine or another (the sampler
itself starts afresh then: optuna 2.10, which hydra-optuna-sweeper 1.2 runs, cannot open its sqlite storage under
SQLAlchemy 2). Equal effort is equal trials under one compute cap; the FLOPs each family spent are recorded and shown.
The choice is the trial with the best valid BLEU; `python -m nmt.study tune --report` renders every trial, the choice
and what it gained over the defaults (docs/tuning.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from hydra.core.utils import JobReturn
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from nmt.paths import write_text
from nmt.provenance import loaded_code, read_provenance
from nmt.study.variants import FAMILIES
from nmt.validation import read_validations

TRIALS = 8  # proposed trials per family, beside its defaults (trial 0)
# The protocol of the final runs, tuning's too: a compute cap, patience on valid BLEU, 40 validations over the cap
CAP = 2e15
PROTOCOL = ("trainer.patience=5", "trainer.validations=40", "trainer.select=bleu", "trainer.test_at_end=false")
SEED = 1234
# The same kinds of knobs for every family (Optuna's sweep syntax): the peak learning rate and its warm-up, label
# smoothing, the token batch, and dropout wherever the family has it (the Transformer also on attention weights and
# inside its feed-forward layers, as small-data recipes do)
COMMON = {
    "trainer.lr": "tag(log, interval(0.0002, 0.004))",
    "trainer.warmup_steps": "choice(200, 800, 2000, 4000)",
    "trainer.label_smoothing": "choice(0.0, 0.1, 0.2)",
    "data.max_tokens": "choice(2048, 4096, 8192)",
    "model.dropout": "interval(0.1, 0.5)",
}
SPACE = {family: dict(COMMON) for family in FAMILIES}
SPACE["transformer"] |= {
    "model.attention_dropout": "choice(0.0, 0.1, 0.2)",
    "model.activation_dropout": "choice(0.0, 0.1, 0.2)",
}


def trial_path(records: Path, family: str, number: int) -> Path:
    return records / family / f"trial{number:03d}.json"


def trials_of(records: Path, family: str) -> list[dict]:
    """A family's recorded trials, by number."""
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted((records / family).glob("trial*.json"))]


@dataclass
class Trial:
    """What a trial's record holds: its number, the options it tried (none for trial 0), its valid curve and best
    valid BLEU, the compute it trained and what stopped it."""

    family: str
    number: int
    options: dict[str, str]
    valid_bleu: float
    petaflops: float
    stopped_by: str
    curve: list[dict]
    provenance: dict

    @classmethod
    def of(cls, run: Path, family: str, number: int, options: dict[str, str], cap: float) -> Trial:
        validations = read_validations(run)
        best = max((v["bleu"] for v in validations), default=0.0)
        petaflops = validations[-1]["petaflops"] if validations else 0.0
        stopped = "cap" if petaflops * 1e15 >= cap * 0.999 else "patience"
        curve = [{k: v[k] for k in ("step", "petaflops", "bleu", "loss")} for v in validations]
        return cls(family, number, options, best, petaflops, stopped, curve, read_provenance(run))


def record(trial: Trial, records: Path) -> Path:
    path = trial_path(records, trial.family, trial.number)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(vars(trial) | {"code": loaded_code()}, indent=1) + "\n")
    return path


class RecordTrial(Callback):
    """Hydra callback of a tuning sweep: each finished trial recorded as its job ends (numbered after the trials
    recorded before this sweep started: `first`); a failed trial (NaN) is recorded as one, valid BLEU 0."""

    def __init__(self, records: str, family: str, first: int, cap: float, tuned: str):
        self.records, self.family, self.first, self.cap = Path(records), family, first, cap
        self.tuned = tuned.split(",") if tuned else []

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs) -> None:
        run = Path(config.hydra.runtime.output_dir)
        overrides = dict(o.split("=", 1) for o in config.hydra.overrides.task if "=" in o)
        options = {key: overrides[key] for key in self.tuned if key in overrides}
        record(Trial.of(run, self.family, self.first + config.hydra.job.num, options, self.cap), self.records)


def shown(value: str) -> str:
    """An option's value as a table shows it: a float to 3 significant digits."""
    try:
        return f"{float(value):.3g}" if "." in value or "e" in value else value
    except ValueError:
        return value


def chosen(trials: list[dict]) -> dict | None:
    """The trial with the best valid BLEU (the earliest of equals: the defaults win a tie)."""
    return max(trials, key=lambda t: (t["valid_bleu"], -t["number"])) if trials else None


def table(records: Path) -> str:
    """Every family's trials, its choice and what the choice gained on valid BLEU over its defaults (trial 0)."""
    lines = []
    for family in FAMILIES:
        trials = trials_of(records, family)
        if not trials:
            lines.append(f"**{family}**: no trials recorded yet (`python -m nmt.study tune --families {family}`)\n")
            continue
        best, defaults = chosen(trials), next((t for t in trials if t["number"] == 0), None)
        gain = f"{best['valid_bleu'] - defaults['valid_bleu']:+.2f}" if defaults else "-"
        spent = sum(t["petaflops"] for t in trials)
        lines.append(
            f"**{family}**: {len(trials)} trials, {spent:.2f} PFLOP; chosen trial {best['number']} "
            f"(valid BLEU {best['valid_bleu']:.2f}, {gain} over the defaults)\n"
        )
        keys = sorted({k for t in trials for k in t["options"]})
        lines.append("| trial | " + " | ".join(keys) + " | valid BLEU | PFLOP | stopped by |")
        lines.append("|---" * (len(keys) + 4) + "|")
        for t in trials:
            mark = " **chosen**" if t is best else ""
            cells = [shown(t["options"].get(k, "default")) for k in keys]
            lines.append(
                f"| {t['number']}{mark} | " + " | ".join(cells) + f" | {t['valid_bleu']:.2f} | {t['petaflops']:.2f} | "
                f"{t['stopped_by']} |"
            )
        lines.append("")
    return "\n".join(lines)
