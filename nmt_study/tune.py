"""Each family's recipe tuned with equal effort on valid BLEU, the test split never read: the same number of trials,
the same space-filling design, the same successive-halving rule and rungs for every tuned target (nmt_study/design.py
fixes them before the runs), each family's space holding only the knobs that act on its model and schedule.

A target's tuning is an Optuna study (nmt_study/tuning.py drives it: ask, run `train.py`, tell), kept in a journal
file beside its records (results/runs/tune/<target>.journal, committed), so that a tuning stopped when a GPU window
ends continues at its next trial with its sampler's state: trial 0 is the target's defaults as they are (the baseline
a choice must beat), then points of a scrambled Sobol sequence seeded per target. Every trial is also recorded as it
ends (results/runs/tune/<target>/trial<N>.json: its options, valid curve, compute, what stopped it, the rung that
pruned it). Averaging checkpoints is one more choice made on valid, at no training cost: as a finished trial ends,
the averages of the 2, 3 and 5 validations' weights ending at its best one (`AVERAGES`; the window always holds the
best checkpoint) are decoded on valid as its validations are and recorded beside its best checkpoint's BLEU. The
choice is the finished trial and the k (1: the best checkpoint) with the best valid BLEU; `python -m nmt_study tune
--report` renders every trial, the choice and what it gained over the defaults (docs/tuning.md), and `--apply` makes
the choice the target's defaults on Multi30k (configs/tuned/multi30k_<family>.yaml, composed after the family's
model; configs/tuned/variant/multi30k_<variant>.yaml for a variant tuned as its own arm, composed after the variant).
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf
from optuna.distributions import BaseDistribution, FloatDistribution, IntDistribution

from nmt.build import corpus_of
from nmt.config import DecodeOptions
from nmt.decoding.translator import Translator, decode_split
from nmt.paths import write_text
from nmt.runs import averaging
from nmt.runs.folder import RunFolder
from nmt.runs.provenance import loaded_code
from nmt_study import design, published
from nmt_study.comparison import stop_kind
from nmt_study.progress import trial_path, trials_of

TRIALS = design.TRIALS
CAP = design.CAP
# The final runs' stopping rules, valid only; the tuning adds its cap and validations (nmt_study/tuning.py: command)
PROTOCOL = (*(o for o in published.STOPPING if not o.startswith("trainer.validations=")), "trainer.test_at_end=false")
SEED = design.TUNING_SEED
AVERAGES = (2, 3, 5)  # trainer.average_last's choices beside 1 (the best checkpoint); 5: the trials' keep_checkpoints
# The knobs that act on every family: the peak learning rate, label smoothing (the loss), the token batch (the
# batches), dropout (each family's model has it)
COMMON: dict[str, BaseDistribution] = {
    "trainer.lr": FloatDistribution(2e-4, 4e-3, log=True),
    "trainer.label_smoothing": FloatDistribution(0.0, 0.2),
    "data.max_tokens": IntDistribution(2048, 8192, step=1024),
    "model.dropout": FloatDistribution(0.1, 0.5),
}
# Each schedule's own knob: the recurrent families' plateau schedule halves (by plateau_factor) the rate when valid
# BLEU stalls and has no warm-up; the Transformer's inverse square root has a warm-up and no plateau
RECURRENT = COMMON | {"trainer.plateau_factor": FloatDistribution(0.25, 0.75)}
TRANSFORMER = COMMON | {
    "trainer.warmup_steps": IntDistribution(200, 4000, log=True),
    "model.attention_dropout": FloatDistribution(0.0, 0.2),  # on the attention weights (small-data recipes)
    "model.activation_dropout": FloatDistribution(0.0, 0.2),  # inside the feed-forward layers
}
SPACE: dict[str, dict[str, BaseDistribution]] = {
    "sutskever": RECURRENT,
    "bahdanau": RECURRENT,
    "luong": RECURRENT,
    "luong_feeding": RECURRENT,
    "transformer": TRANSFORMER,
}


def sampler_seed(target: str) -> int:
    """The Sobol sequence's scrambling seed of a target: its own, so that no two targets draw the same points."""
    return zlib.crc32(f"{target}/{SEED}".encode())


def selects(target: str) -> str:
    """The train.py option that picks a target: a family's model, or a variant."""
    return f"variant={target}" if "_" in target else f"model={target}"


def option(value: float | int) -> str:
    """A proposed value as a train.py option: ints as they are, floats to 4 significant digits."""
    return str(value) if isinstance(value, int) else f"{value:.4g}"


@dataclass
class Trial:
    """What a trial's record holds: its number, the options it tried, its valid curve and best valid BLEU (at the rung
    that pruned it, for a pruned one), the compute it trained, what stopped it (cap, patience, pruned, failed) and the
    rung (in validations) that pruned it."""

    family: str  # the tuned target (a family, or a variant tuned as its own arm)
    number: int
    options: dict[str, str]
    valid_bleu: float
    petaflops: float
    stopped_by: str
    curve: list[dict]
    provenance: dict
    averaging: dict[str, float] = field(default_factory=dict)  # {k: valid BLEU of the k validations ending at best}
    rung: int | None = None

    @classmethod
    def of(cls, run: Path, target: str, number: int, options: dict[str, str], cap: float) -> Trial:
        validations = RunFolder(run).validations()
        best = max((v["bleu"] for v in validations), default=0.0)
        petaflops = validations[-1]["petaflops"] if validations else 0.0
        bleus = [v["bleu"] for v in validations]
        after_best = len(bleus) - 1 - bleus.index(max(bleus)) if bleus else 0  # the first of equals is the best
        protocol = {"max_flops": cap, "patience": published.FINAL["patience"]}
        stopped = stop_kind(protocol, petaflops, validations[-1]["step"] if validations else 0, after_best)
        curve = [{k: v[k] for k in ("step", "petaflops", "bleu", "loss")} for v in validations]
        return cls(target, number, options, best, petaflops, stopped, curve, RunFolder(run).provenance())


def record(trial: Trial, records: Path) -> Path:
    path = trial_path(records, trial.family, trial.number)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(vars(trial) | {"code": loaded_code()}, indent=1) + "\n")
    return path


def averaged_valid_bleu(run: Path, counts: tuple[int, ...]) -> dict[str, float]:
    """{k: valid BLEU} of the average of the weights of the run's k validations ending at its best one, for each k of
    `counts`, each written as the run would write it with trainer.average_last=k and decoded on the valid split as its
    validations were (greedy, its trained precision, its trainer's length limits)."""
    scores = {}
    for count in counts:
        path, payload = averaging.average_last(RunFolder(run), count)
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
    """{k: valid BLEU} of a trial's models: k=1 its best checkpoint, k>1 the average of the k validations ending at
    its best."""
    return {1: trial["valid_bleu"]} | {int(k): bleu for k, bleu in trial.get("averaging", {}).items()}


UNCHOSEN = ("pruned", "failed")  # trials that did not train to their end: never the choice


def chosen(trials: list[dict]) -> tuple[dict, int] | None:
    """The finished trial and the trainer.average_last (1: the best checkpoint) with the best valid BLEU; the earliest
    trial and the fewest checkpoints of equals (the defaults, unaveraged, win a tie). Pruned and failed trials are not
    candidates: they did not train as far. A choice other than the defaults (trial 0, its best checkpoint) is adopted
    only if it beats them by design.ADOPT_MARGIN valid BLEU, fixed before the runs: a smaller gain over one seed's
    trials is within what a seed changes."""
    ranked = [
        (bleu, -t["number"], -k, i)
        for i, t in enumerate(trials)
        if t.get("stopped_by") not in UNCHOSEN
        for k, bleu in candidates(t).items()
    ]
    if not ranked:
        return None
    bleu, _, count, index = max(ranked)
    defaults = next((t for t in trials if t["number"] == 0 and t.get("stopped_by") not in UNCHOSEN), None)
    if defaults is not None and bleu < defaults["valid_bleu"] + design.ADOPT_MARGIN:
        return defaults, 1
    return trials[index], -count


def choice(trials: list[dict]) -> dict[str, str]:
    """The options of a target's choice (`chosen`): its trial's, and trainer.average_last; none where no trial
    finished."""
    if (found := chosen(trials)) is None:
        return {}
    best, count = found
    return best["options"] | {"trainer.average_last": str(count)}


def table(records: Path) -> str:
    """Every tuned target's trials, its choice and what the choice gained on valid BLEU over its defaults (trial 0)."""
    lines = []
    others = [target for target in SPACE if target not in design.TUNED and trials_of(records, target)]
    for family in [*design.TUNED, *others]:
        trials = trials_of(records, family)
        if not trials or chosen(trials) is None:
            lines.append(
                f"**{family}**: no finished trials recorded yet (`python -m nmt_study tune --families {family}`)\n"
            )
            lines += trial_rows(trials, None) if trials else []
            continue
        (best, count), defaults = chosen(trials), next((t for t in trials if t["number"] == 0), None)
        bleu = candidates(best)[count]
        gain = f"{bleu - defaults['valid_bleu']:+.2f}" if defaults else "-"
        spent = sum(t["petaflops"] for t in trials)
        pruned = sum(t.get("stopped_by") == "pruned" for t in trials)
        averaged = (
            f", the average of the {count} validations ending at its best" if count > 1 else ", its best checkpoint"
        )
        lines.append(
            f"**{family}**: {len(trials)} trials ({pruned} pruned), {spent:.2f} PFLOP; "
            f"chosen trial {best['number']}{averaged} "
            f"(valid BLEU {bleu:.2f}, {gain} over the defaults)\n"
        )
        lines += trial_rows(trials, best)
    return "\n".join(lines)


def trial_rows(trials: list[dict], best: dict | None) -> list[str]:
    """A target's table: each trial's options, the valid BLEU of its best checkpoint and of its averages, its compute
    and what stopped it (the rung, in validations, of a pruned one)."""
    keys = sorted({k for t in trials for k in t["options"]})
    averages = [f"{k} to best averaged" for k in AVERAGES]
    lines = ["| trial | " + " | ".join(keys + ["valid BLEU", *averages, "PFLOP", "stopped by"]) + " |"]
    lines.append("|---" * (len(keys) + len(averages) + 4) + "|")
    for t in trials:
        mark = " **chosen**" if t is best else ""
        cells = [shown(t["options"].get(k, "default")) for k in keys] + [f"{t['valid_bleu']:.2f}"]
        cells += [f"{t['averaging'][str(k)]:.2f}" if str(k) in t.get("averaging", {}) else "-" for k in AVERAGES]
        stopped = f"pruned at validation {t['rung']}" if t.get("rung") else t["stopped_by"]
        lines.append(f"| {t['number']}{mark} | " + " | ".join(cells) + f" | {t['petaflops']:.2f} | {stopped} |")
    return lines + [""]


def tuned_path(folder: Path, target: str) -> Path:
    """Where --apply writes a target's choice (under configs/tuned/): a family's, composed after its model
    (train.yaml: tuned/${data}_${model}); a variant's, composed after the variant (tuned/variant/${data}_${variant})."""
    return folder / ("variant" if "_" in target else "") / f"multi30k_{target}.yaml"


def tuned_config(trials: list[dict], family: str, current: dict[str, str]) -> str:
    """The tuned file of a target's choice: the chosen trial's options over those of the `current` tuned file
    (flattened: what an older trial 0 ran with), and its trainer.average_last, always written (a variant's file then
    replaces its family's choice whole). train.py composes a family's after its model and before a variant, a recipe
    (the demo's, the lab's) and the command line, which keep their say. `trials`: one finished at least."""
    best, count = chosen(trials)
    options = current | choice(trials)
    tuned = OmegaConf.to_yaml(OmegaConf.from_dotlist([f"{key}={value}" for key, value in sorted(options.items())]))
    source = f"trial {best['number']} of {len(trials)}, valid BLEU {candidates(best)[count]:.2f}"
    return (
        f"# @package _global_\n# {family}'s recipe as tuned on valid BLEU (docs/tuning.md): {source}.\n"
        f"# Written by `python -m nmt_study tune --apply` from results/runs/tune/{family}/: rerun it, do not edit.\n"
        + tuned
    )
