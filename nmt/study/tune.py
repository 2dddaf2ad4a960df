"""Each family's recipe tuned with equal effort on valid BLEU: the same number of trials over the same kinds of knobs,
one seed, under the protocol of the final runs; the test split is never read.

A family's tuning is trial 0, its defaults as they are (the baseline a choice must beat), then `trials` trials that
Optuna's TPE sampler proposes through Hydra's sweeper (`hydra/sweeper=optuna`, the engine configs/hydra/sweeper
already uses), each a `train.py` run whose return value, its best valid BLEU, the sampler maximises. Every finished
trial is recorded as it ends (results/runs/tune/<family>/trial<N>.json: its options, valid curve, compute and what
stopped it), so an interrupted tuning continues with the trials still to run, on this machine or another (the sampler
itself starts afresh then: optuna 2.10, which hydra-optuna-sweeper 1.2 runs, cannot open its sqlite storage under
SQLAlchemy 2). Equal effort is equal trials under one compute cap; the FLOPs each family spent are recorded and shown.
Averaging the last k checkpoints is one more choice made on valid, at no training cost: as a trial ends, the averages
of its last 2, 3 and 5 validations' weights (`AVERAGES`) are decoded on valid as its validations are, and recorded
beside its best checkpoint's BLEU. The choice is the trial and the k (1: the best checkpoint) with the best valid
BLEU; `python -m nmt.study tune --report` renders every trial, the choice and what it gained over the defaults
(docs/tuning.md), and `--apply` makes the choice the family's defaults on Multi30k
(configs/tuned/multi30k_<family>.yaml, which train.py composes after the family's model: `tuned_config`; the demo,
the lab and other corpora keep their own).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from hydra.core.utils import JobReturn
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from nmt import averaging
from nmt.config import DecodeOptions
from nmt.decoding import Translator, decode_split
from nmt.evaluate import corpus_of
from nmt.paths import write_text
from nmt.provenance import loaded_code, read_provenance
from nmt.study import published
from nmt.study.comparison import stop_kind
from nmt.study.variants import FAMILIES
from nmt.validation import read_validations

TRIALS = 8  # proposed trials per family, beside its defaults (trial 0)
# The protocol of the final runs, tuning's too (nmt.study.published: a compute cap, patience on valid BLEU, 40
# validations over the cap), the test split unread
CAP = published.CAP
PROTOCOL = (*published.STOPPING, "trainer.test_at_end=false")
SEED = 1234
AVERAGES = (2, 3, 5)  # trainer.average_last's choices beside 1 (the best checkpoint); 5: the trials' keep_checkpoints
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
    averaging: dict[str, float] = field(default_factory=dict)  # {k: valid BLEU of the last k validations' average}

    @classmethod
    def of(cls, run: Path, family: str, number: int, options: dict[str, str], cap: float) -> Trial:
        validations = read_validations(run)
        best = max((v["bleu"] for v in validations), default=0.0)
        petaflops = validations[-1]["petaflops"] if validations else 0.0
        bleus = [v["bleu"] for v in validations]
        after_best = len(bleus) - 1 - bleus.index(max(bleus)) if bleus else 0  # the first of equals is the best
        protocol = {"max_flops": cap, "patience": published.FINAL["patience"]}
        stopped = stop_kind(protocol, petaflops, validations[-1]["step"] if validations else 0, after_best)
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
        trial = Trial.of(run, self.family, self.first + config.hydra.job.num, options, self.cap)
        trial.averaging = averaged_valid_bleu(run, AVERAGES) if any(run.glob("step*.pt")) else {}
        record(trial, self.records)


def averaged_valid_bleu(run: Path, counts: tuple[int, ...]) -> dict[str, float]:
    """{k: valid BLEU} of the average of the run's last k validations' weights for each k of `counts`, each written
    as the run would write it with trainer.average_last=k and decoded on the valid split as its validations were
    (greedy, its trained precision, its trainer's length limits)."""
    scores = {}
    for count in counts:
        path, payload = averaging.average_last(run, count)
        trainer = payload["config"]["trainer"]  # validations' batches: the same sums, the same BLEU
        options = DecodeOptions(max_tokens=trainer["valid_max_tokens"], precision="trained")
        translator = Translator.load(path, options)
        valid = corpus_of(translator.config, None).valid
        model, where = translator.model, (translator.device, translator.dtype)
        scores[str(count)] = decode_split(model, translator.vocabulary, valid, translator.search, *where)[2].bleu
    return scores


def shown(value: str) -> str:
    """An option's value as a table shows it: a float to 3 significant digits."""
    try:
        return f"{float(value):.3g}" if "." in value or "e" in value else value
    except ValueError:
        return value


def candidates(trial: dict) -> dict[int, float]:
    """{k: valid BLEU} of a trial's models: k=1 its best checkpoint, k>1 the average of its last k validations."""
    return {1: trial["valid_bleu"]} | {int(k): bleu for k, bleu in trial.get("averaging", {}).items()}


def chosen(trials: list[dict]) -> tuple[dict, int] | None:
    """The trial and the trainer.average_last (1: the best checkpoint) with the best valid BLEU; the earliest trial
    and the fewest checkpoints of equals (the defaults, unaveraged, win a tie)."""
    ranked = [(bleu, -t["number"], -k, i) for i, t in enumerate(trials) for k, bleu in candidates(t).items()]
    if not ranked:
        return None
    _, _, count, index = max(ranked)
    return trials[index], -count


def table(records: Path) -> str:
    """Every family's trials, its choice and what the choice gained on valid BLEU over its defaults (trial 0)."""
    lines = []
    for family in FAMILIES:
        trials = trials_of(records, family)
        if not trials:
            lines.append(f"**{family}**: no trials recorded yet (`python -m nmt.study tune --families {family}`)\n")
            continue
        (best, count), defaults = chosen(trials), next((t for t in trials if t["number"] == 0), None)
        bleu = candidates(best)[count]
        gain = f"{bleu - defaults['valid_bleu']:+.2f}" if defaults else "-"
        spent = sum(t["petaflops"] for t in trials)
        averaged = f", the average of its last {count} validations" if count > 1 else ", its best checkpoint"
        lines.append(
            f"**{family}**: {len(trials)} trials, {spent:.2f} PFLOP; chosen trial {best['number']}{averaged} "
            f"(valid BLEU {bleu:.2f}, {gain} over the defaults)\n"
        )
        lines += trial_rows(trials, best)
    return "\n".join(lines)


def trial_rows(trials: list[dict], best: dict) -> list[str]:
    """A family's table: each trial's options, the valid BLEU of its best checkpoint and of its averages, its compute
    and what stopped it."""
    keys = sorted({k for t in trials for k in t["options"]})
    averages = [f"last {k} averaged" for k in AVERAGES]
    lines = ["| trial | " + " | ".join(keys + ["valid BLEU", *averages, "PFLOP", "stopped by"]) + " |"]
    lines.append("|---" * (len(keys) + len(averages) + 4) + "|")
    for t in trials:
        mark = " **chosen**" if t is best else ""
        cells = [shown(t["options"].get(k, "default")) for k in keys] + [f"{t['valid_bleu']:.2f}"]
        cells += [f"{t['averaging'][str(k)]:.2f}" if str(k) in t.get("averaging", {}) else "-" for k in AVERAGES]
        lines.append(f"| {t['number']}{mark} | " + " | ".join(cells) + f" | {t['petaflops']:.2f} | {t['stopped_by']} |")
    return lines + [""]


def tuned_config(trials: list[dict], family: str, current: dict[str, str]) -> str | None:
    """configs/tuned/multi30k_<family>.yaml of the family's choice: the chosen trial's options over those of the
    `current` tuned file (flattened: what trial 0, the defaults, ran with), and its trainer.average_last. train.py
    composes it after the family's model and before a variant, a recipe (the demo's, the lab's) and the command line,
    which keep their say. None when nothing is left to set (no file). `trials`: at least one."""
    best, count = chosen(trials)
    options = current | best["options"]
    options.pop("trainer.average_last", None)
    if count > 1:
        options["trainer.average_last"] = str(count)
    if not options:
        return None
    tuned = OmegaConf.to_yaml(OmegaConf.from_dotlist([f"{key}={value}" for key, value in sorted(options.items())]))
    source = f"trial {best['number']} of {len(trials)}, valid BLEU {candidates(best)[count]:.2f}"
    return (
        f"# @package _global_\n# {family}'s recipe as tuned on valid BLEU (docs/tuning.md): {source}.\n"
        f"# Written by `python -m nmt.study tune --apply` from results/runs/tune/{family}/: rerun it, do not edit.\n"
        + tuned
    )
