"""What train.py does with a run directory (`plan`): keep the run finished there, continue one from a checkpoint with
the safe changes, or start a new one; and whether the command line may continue it.

A run directory that already holds a run is never trained into afresh: that would overwrite its checkpoints and mix
its step<N>.pt files with the new run's. Continuing one (`trainer.resume=true` or a checkpoint path) compares the
command line's resolved config with the checkpoint's: changes that would continue a different run (corpus,
vocabulary, batches, model, seed, optimiser) are refused, naming the keys; changes that are safe (budget, patience,
validation cadence, logging, decoding, device, learning rate, clipping, label smoothing) are applied and logged.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from nmt import UserError
from nmt.build import constructor_defaults
from nmt.config import FilesConfig, Multi30kConfig, SampleConfig, TrainerConfig, flatten
from nmt.runs import checkpoint
from nmt.runs.folder import RunFolder

log = logging.getLogger(__name__)

# What a finished run was trained for: a resumed run may change these (it trains on), but a finished run kept under
# another budget would be reported as if it had trained for the one asked for.
BUDGET = {
    "trainer.max_flops",
    "trainer.max_minutes",
    "trainer.max_steps",
    "trainer.max_epochs",
    "trainer.validations",
    "trainer.valid_every",
    "trainer.patience",
}
# Options a resumed run may change. Everything else under data, model, trainer and seed must match the checkpoint.
SAFE = {
    "data.dir",
    "data.url",
    "data.cache",
    "data.spm_cache",
    "trainer.max_steps",
    "trainer.max_epochs",
    "trainer.max_minutes",
    "trainer.max_flops",
    "trainer.patience",
    "trainer.valid_every",
    "trainer.validations",
    "trainer.log_every",
    "trainer.progress",
    "trainer.test_at_end",
    "trainer.keep_checkpoints",
    "trainer.average_last",
    "trainer.num_samples",
    "trainer.num_plots",
    "trainer.valid_max_tokens",
    "trainer.decode_ratio",
    "trainer.decode_extra",
    "trainer.device",
    "trainer.deterministic",
    "trainer.resume",
    "trainer.lr",
    "trainer.clip_norm",
    "trainer.label_smoothing",
    "trainer.threads",
}


@dataclass
class Plan:
    """The one decision for a run directory: keep the run finished there (`kept`: its results), continue from a
    checkpoint (`checkpoint`: its path and payload, with the safe `changes` of the command line, {key: (old, new)}),
    or, with neither, start a new run."""

    kept: dict | None = None
    checkpoint: tuple[Path, dict] | None = None
    changes: dict[str, tuple] = field(default_factory=dict)


def plan(folder: RunFolder, option, new: dict, precision_now: str | None = None, sweep: bool = False) -> Plan:
    """What `trainer.resume=option` does with the run `folder` for the command line's resolved config `new`: with
    auto, a finished run that is the run asked for is kept (`finished_run`); otherwise the checkpoint it names is
    continued when its config differs only in safe options (`checkpoint_to_resume`, `check_changes`), or a new run
    starts.
    Whatever cannot be done is refused, named, before anything is written. `precision_now`: what today's
    trainer.precision resolves to here; `sweep`: a job of `train.py -m`."""
    if option == "auto" and (kept := finished_run(folder, new, precision_now)) is not None:
        return Plan(kept=kept)
    resumed = checkpoint_to_resume(folder, option, sweep)
    if resumed is None:
        return Plan()
    return Plan(checkpoint=resumed, changes=check_changes(resumed[1]["config"], new, resumed[0]))


def checkpoint_to_resume(folder: RunFolder, option, sweep: bool = False) -> tuple[Path, dict] | None:
    """(path, payload) of the checkpoint `trainer.resume` asks for, or None for a new run. Refuses a new run in a
    directory that holds one, and a checkpoint that holds weights only. `sweep`: a job of `train.py -m`, whose
    directory the sweep's options name, and which continues with trainer.resume=auto."""
    run_dir, existing = folder.path, folder.holds_a_run()
    resume, elsewhere = ("auto", "hydra.sweep.dir=... or .subdir=...") if sweep else ("true", "hydra.run.dir=...")
    if option is False or option in ("false", "False", None, ""):
        if existing:
            raise UserError(
                f"{run_dir} already holds a run ({existing}); a new run would overwrite it. Continue it with "
                f"trainer.resume={resume}, or give the new run its own directory ({elsewhere})"
            )
        return None
    if option is True or option in ("true", "True", "auto"):
        if not folder.has_checkpoint():
            log.warning("trainer.resume=%s: %s holds no checkpoint yet; starting a new run there", option, run_dir)
            return None
        return folder.latest_good()
    path = Path(str(option)).expanduser()
    if not path.exists() and path.suffix != ".pt" and len(path.parts) == 1:  # a word, not a path: resume=yes
        raise UserError(
            f"trainer.resume={option}: use true (continue this run directory), false (a new run), auto "
            "(a sweep's rerun) or the path of a checkpoint"
        )
    if existing and path.resolve().parent != run_dir.resolve():
        raise UserError(
            f"{run_dir} already holds a run ({existing}); continuing {path} there would overwrite it. "
            f"Give the continued run its own directory ({elsewhere})"
        )
    return path, checkpoint.load_training(path)


def finished_run(folder: RunFolder, new: dict, precision_now: str | None = None) -> dict | None:
    """For `trainer.resume=auto` (a sweep's job, rerun): the results of the run finished in `folder` when it is the
    run `new` (the command line's resolved config) asks for (`another_run`; `precision_now`: what today's
    `trainer.precision` resolves to here), None when there is no finished run there; a finished run that is another
    run is refused, naming the options. A damaged results.json leaves the run unfinished: it is continued."""
    results = folder.results
    if not (results.is_file() and folder.last.is_file()):
        return None
    try:
        kept = json.loads(results.read_bytes().decode("utf-8"))
        if not isinstance(kept, dict):
            raise ValueError(f"it holds a JSON {type(kept).__name__}, not the results' object")
    except (OSError, ValueError) as error:
        log.warning(
            "%s is damaged (%s): the run counts as unfinished and continues from its last checkpoint",
            results,
            str(error).splitlines()[0] if str(error) else type(error).__name__,
        )
        return None
    saved = folder.latest_good("reading the run's settings from")[1]["config"]  # as resume=true would continue
    changed, other = another_run(saved, new, folder.trained_precision(), precision_now)
    if other:
        raise UserError(
            f"{folder} holds a finished run trained with other settings than asked for "
            f"({listed(changed, other, 'then')}): move it away, or ask for its settings"
        )
    return kept


def same_run_options() -> set[str]:
    """The options another value of which trains the same run (where files are, what is logged, threads): those the
    schema marks SAME_RUN (nmt/config.py). Every other option of data, model, trainer and the seed, the budget among
    them, makes another run."""
    schemas = [
        ("trainer", TrainerConfig),
        *(("data", schema) for schema in (Multi30kConfig, SampleConfig, FilesConfig)),
    ]
    return {
        f"{prefix}.{f.name}"
        for prefix, schema in schemas
        for f in dataclasses.fields(schema)
        if f.metadata.get("same_run")
    }


def unread(key: str, saved: dict, new: dict) -> bool:
    """Whether the option `key` is one neither run reads, given their other options: Luong's window D where both
    runs' attention is global (section 3.2: D bounds local attention), so that a lab whose local window changes keeps
    its global runs."""
    if key == "model.window":
        return all(config.get("model", {}).get("alignment") == "global" for config in (saved, new))
    return False


def another_run(
    saved: dict, new: dict, trained_in: str | None = None, precision_now: str | None = None
) -> tuple[dict[str, tuple], list[str]]:
    """{key: (old, new)} of the options that differ from the finished run's config `saved` to `new`, and the keys
    among them that make `new` another run than the one finished (`same_run_options`). The precision counts as what
    it was: `auto` stands for the precision the run trained in (`trained_in`, its provenance's) and for the one
    today's `auto` resolves to (`precision_now`)."""
    changed, _ = changes(saved, new)
    other = sorted(k for k in changed if k not in same_run_options() and not unread(k, saved, new))
    if "trainer.precision" in other:
        old, value = changed["trainer.precision"]
        then = trained_in if old == "auto" else old
        now = precision_now if value == "auto" else value
        if then is not None and then == now:
            other.remove("trainer.precision")
    return changed, other


def added_at_its_default(key: str, old_flat: dict, new_flat: dict) -> bool:
    """Whether `key` is an option that the checkpoint predates (a newer nmt added it) set to the value that the
    checkpoint's run had without it: the default of the model constructor argument or of the trainer option."""
    if key in old_flat:
        return False
    parent, name = key.rsplit(".", 1)
    if key.startswith("model."):
        defaults = constructor_defaults(new_flat.get(f"{parent}._target_"))
    elif parent == "trainer":
        defaults = {f.name: f.default for f in dataclasses.fields(TrainerConfig)}
    else:
        return False
    return name in defaults and defaults[name] == new_flat[key]


def changes(saved: dict, new: dict) -> tuple[dict[str, tuple], list[str]]:
    """{key: (old, new)} of every option that differs from the saved config to the new one (options added since, at
    the value the saved run had, do not count), and the keys among them that make it a different run."""
    old_flat, new_flat = (flatten({k: c.get(k) for k in ("data", "model", "trainer", "seed")}) for c in (saved, new))
    changed = {
        k: (old_flat.get(k), new_flat.get(k))
        for k in old_flat.keys() | new_flat.keys()
        if old_flat.get(k) != new_flat.get(k) and not added_at_its_default(k, old_flat, new_flat)
    }
    precision = changed.get("trainer.precision", ())
    harmless = "fp16" not in precision  # bf16 <-> fp32 keeps every state; fp16 adds a gradient scaler's
    return changed, sorted(k for k in changed if k not in SAFE and not (k == "trainer.precision" and harmless))


def listed(changed: dict[str, tuple], keys: list[str], where: str) -> str:
    return "; ".join(f"{k}: {changed[k][0]!r} {where}, {changed[k][1]!r} now" for k in keys)


def check_changes(saved: dict, new: dict, path: Path) -> dict[str, tuple]:
    """{key: (old, new)} of the safe changes from the checkpoint's config to the command line's; refuses the rest."""
    changed, breaking = changes(saved, new)
    if breaking:
        raise UserError(
            f"{path} was trained with other settings, so continuing it would be a different run "
            f"({listed(changed, breaking, 'in the checkpoint')}). Use the checkpoint's values, or start a new run in "
            "a new directory"
        )
    safe = {k: v for k, v in changed.items() if k not in breaking and k != "trainer.resume"}
    for key, (old, value) in sorted(safe.items()):
        if key.removeprefix("data.") not in LOCATIONS:  # those: nmt.launch.experiment says which folder it reads
            log.info("resuming with %s=%r (the checkpoint had %r)", key, value, old)
    return safe


LOCATIONS = ("dir", "spm_cache")  # of a data config: where the corpus and its subword models lie on a machine


def saved_locations(saved: dict, changed: dict[str, tuple], given: list[str]) -> dict[str, object]:
    """{data option: the checkpoint's value} for where the corpus and its subword models lie, where this command line
    leaves them at their defaults and the checkpoint's folder is there: a resumed run reads its corpus where it did
    (offline too), unless the user names another place (`given`: the command line's overrides)."""
    named = {o.split("=", 1)[0].lstrip("+") for o in given}
    kept = {}
    for key in LOCATIONS:
        old = saved.get("data", {}).get(key)
        if f"data.{key}" in changed and f"data.{key}" not in named and old and Path(str(old)).is_dir():
            kept[key] = old
    return kept
