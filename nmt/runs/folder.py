"""A training run's folder as one object: `RunFolder` knows its files (named once, in nmt/paths.py), holds its
lock, writes and finds its checkpoints, appends and reads its validation records, records its provenance and results,
and says what a finished run left there. It is built where a run starts (nmt.launch.experiment) or where a run's folder
is read (the study, averaging), and passed where the folder's path travelled before: nothing else in nmt/ builds a path
inside a run folder.

    folder = RunFolder("outputs/bahdanau/2026-11-29_10-00-00")
    folder.validations()        # every validation's record, in order
    folder.latest_good()        # (path, payload) of the checkpoint a resumed run continues from

It loads light: what reads or writes checkpoints or provenance imports those modules (torch) when called, so that a
command refused before training (nmt.cli.train) names a job's files without waiting for torch. The validation
record's format (validations.jsonl, one JSON object a line) is here too, with its one reader; the TensorBoard log is
the trainer's (nmt.training.runlog), not the folder's.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import logging
import math
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from nmt import UserError, paths
from nmt.metrics import VALIDATED
from nmt.paths import program, shell_word, write_text

if TYPE_CHECKING:
    import torch


log = logging.getLogger(__name__)


class RunFolder:
    """The folder at `path` and the files of the training run in it."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def __str__(self) -> str:
        return str(self.path)

    def __fspath__(self) -> str:
        return str(self.path)

    def file(self, name: str) -> Path:
        """The path of one of the run's files (a name of nmt.paths)."""
        return self.path / name

    @property
    def last(self) -> Path:
        return self.file(paths.LAST)

    @property
    def previous(self) -> Path:
        return self.file(paths.PREVIOUS)

    @property
    def best(self) -> Path:
        return self.file(paths.BEST)

    @property
    def results(self) -> Path:
        return self.file(paths.RESULTS)

    @property
    def hypotheses(self) -> Path:
        return self.file(paths.HYPOTHESES)

    @property
    def log_file(self) -> Path:
        return self.file(paths.LOG)

    @property
    def failed(self) -> Path:
        return self.file(paths.FAILED)

    def failure(self) -> str | None:
        """Why a sweep's job in this folder failed, as it wrote (`write_failure`); None where it did not."""
        return self.failed.read_text(encoding="utf-8").strip() if self.failed.is_file() else None

    def write_failure(self, reason: str) -> None:
        write_text(self.failed, f"{reason}\n")

    def step_file(self, step: int) -> Path:
        """A validation's weights: step<N>.pt, N zero-padded so that names sort as updates do."""
        return self.file(f"step{step:08d}.pt")

    def step_files(self, up_to: int | None = None) -> list[Path]:
        """The validations' weights kept, oldest first; `up_to`: those of updates up to it."""
        found = sorted(self.path.glob(paths.STEPS))
        return [p for p in found if up_to is None or int(p.stem.removeprefix("step")) <= up_to]

    def averaged(self, count: int) -> Path:
        """The average of the weights of `count` validations ending at the best (trainer.average_last=count)."""
        return self.file(paths.AVERAGED.format(count=count))

    def reported(self, trainer: dict) -> Path:
        """The checkpoint the run reports (its test output, the study's records), as its trainer options (the
        checkpoint's resolved ones) say: best.pt, or with trainer.average_last=k > 1 the average of k validations."""
        count = trainer.get("average_last", 1) if isinstance(trainer, dict) else 1
        return self.averaged(count) if isinstance(count, int) and count > 1 else self.best

    def subword_model(self, side: str) -> Path:
        return self.file(paths.SUBWORDS[side])

    def holds_a_run(self) -> str | None:
        """The name of a file that shows the folder already holds a training run, or None."""
        return paths.holds_a_run(self.path)

    def has_checkpoint(self) -> bool:
        return self.last.is_file() or self.previous.is_file()

    def finished(self) -> bool:
        return self.results.is_file()

    def own_files(self) -> None:
        """Every file the run writes checked before it writes any (nmt.paths.own_files)."""
        paths.own_files(self.path)

    def check_corpus(self, digests: dict[str, str], files: dict[str, str], resuming: bool) -> None:
        """The text the run reads, known by each split's sha256 (`digests`; `files`: where each split is read from,
        to name it): written as the run starts, and a run continued on other text is refused naming the split and
        its files (a data=files run whose training file changed would otherwise continue silently on another
        corpus). A run from before this record is continued and gets one."""
        path = self.file(paths.CORPUS)
        if resuming and path.is_file():
            saved = json.loads(path.read_text(encoding="utf-8"))
            changed = [split for split in digests if saved.get(split) not in (None, digests[split])]
            if changed:
                named = "; ".join(f"the {split} split ({files.get(split, 'its files')})" for split in changed)
                raise UserError(
                    f"{self.path} was trained on other text than this command reads: {named} changed since (their "
                    f"sha256 are in {path}). Restore the files the run read, or train a new run in a new folder"
                )
        write_text(path, json.dumps(digests, indent=1) + "\n")

    def held(self) -> bool:
        """Whether a running process holds the folder's lock (`lock`), without taking it."""
        path = self.file(paths.LOCK)
        if not path.is_file():
            return False
        with open(path, encoding="utf-8") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
            return False

    @contextlib.contextmanager
    def lock(self):
        """This process's hold on the folder for the life of a run: one run folder, one writer. A second train.py
        into it (or a sweep job whose folder collides with another's) is refused, naming the first: its process,
        machine and start, which the lock file holds while it runs. The lock is the kernel's (flock), released when
        its process ends however it ends: after `kill -9` the next run takes it over. Left empty when released, so a
        finished run's folder does not change."""
        path = self.file(paths.LOCK)
        handle = open(path, "a+", encoding="utf-8")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise UserError(
                f"{self.path} is being trained by {holder} (it holds {path}): one run folder has one "
                "writer. Wait for it to end, or give this run its own folder (hydra.run.dir=...)"
            ) from None
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        handle.seek(0)
        handle.truncate()
        handle.write(f"process {os.getpid()} on {socket.gethostname()}, since {started}\n")
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()

    # Checkpoints

    def write_last(self, state: dict, best: bool = False) -> None:
        """The run's full checkpoint, last.pt: the one it replaces becomes previous.pt first, by a second name, so
        that a last.pt is on disk at every instant (a `kill -9` mid-write leaves the old one); `best`: the file is
        also the run's best.pt."""
        from nmt.runs import checkpoint  # torch: loaded when a checkpoint is written or read, not with the folder

        if self.last.is_file():
            checkpoint.same_as(self.last, self.previous)
        checkpoint.save(state, self.last)
        if best:
            checkpoint.same_as(self.last, self.best)

    def write_weights(self, state: dict, step: int, keep: int, best: int | None = None) -> None:
        """A validation's weights as step<N>.pt, keeping the newest `keep` and the `keep` that end at the best
        validation's (update `best`; None: this one), so that an average of up to `keep` validations ending at the
        best can still be made after patience has run on past it."""
        from nmt.runs import checkpoint  # torch: loaded when a checkpoint is written or read, not with the folder

        checkpoint.save(state, self.step_file(step))
        saved, to_best = self.step_files(), self.step_files(best)
        kept = set(saved[-keep:]) | set(to_best[-keep:])
        for old in saved:
            if old not in kept:
                old.unlink()

    def latest_good(self, doing: str = "resuming from") -> tuple[Path, dict]:
        """last.pt, or previous.pt (one validation older) when last.pt is missing or unreadable (said, with what is
        `doing` with it): (its path, its payload)."""
        from nmt.runs import checkpoint  # torch: loaded when a checkpoint is written or read, not with the folder

        try:
            return self.last, checkpoint.load_training(self.last)
        except UserError as error:
            if not self.previous.is_file():
                raise
            log.warning("%s; %s %s instead", error, doing, self.previous)
            return self.previous, checkpoint.load_training(self.previous)

    # Validation records

    def append_validation(self, figures: dict) -> None:
        """A validation's record as a line of validations.jsonl (a run resumed from last.pt may repeat one the
        stopped process had recorded: a reader keeps the last line of each update)."""
        with open(self.file(paths.VALIDATIONS), "a", encoding="utf-8") as handle:
            handle.write(line_of(figures))

    def validations(self) -> list[dict]:
        """The run's validations, the last line of each update, in order (`read_validations`)."""
        return read_validations(self.file(paths.VALIDATIONS))

    def best_step(self) -> int | None:
        """The update of the run's best validation (the last its records mark best), None without one."""
        marked = [v["step"] for v in self.validations() if v.get("best")]
        return marked[-1] if marked else None

    def continue_from(self, step: int) -> None:
        """The validation records as a run continuing from update `step` finds them: later ones moved apart
        (`continue_from`)."""
        continue_from(self.file(paths.VALIDATIONS), self.file(paths.PAST), step)

    # Provenance, results, the TensorBoard log

    def record_provenance(self, where: torch.device, precision: str = "") -> None:
        """This invocation appended to provenance.json (nmt.runs.provenance.provenance_entry): a resumed run lists
        each."""
        from nmt.runs.provenance import provenance_entry  # torch: loaded when provenance is written or read

        path = self.file(paths.PROVENANCE)
        history = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
        write_text(path, json.dumps([*history, provenance_entry(where, precision)], indent=1) + "\n")

    def provenance(self) -> dict:
        """The commits, dates, machines and torch versions of the run's invocations, and when it finished
        (nmt.runs.provenance.provenance_summary); a run from before provenance.json, its dates from Hydra's records."""
        from nmt.runs.provenance import provenance_summary  # torch: loaded when provenance is written or read

        path = self.file(paths.PROVENANCE)
        entries = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
        finished = self.results.stat().st_mtime if self.results.is_file() else None
        invocations = sorted(p.name for p in self.path.glob(f"{paths.HYDRA}/*") if p.is_dir())
        return provenance_summary(entries, finished, invocations)

    def trained_precision(self) -> str | None:
        """The precision the run last trained in, from its provenance.json; None where it is not there."""
        try:
            entries = json.loads(self.file(paths.PROVENANCE).read_text(encoding="utf-8"))
            return entries[-1].get("precision") or None
        except (OSError, ValueError, IndexError, AttributeError, TypeError):
            return None

    def hydra_configs(self) -> list[Path]:
        """Hydra's record of each invocation's config, oldest first."""
        return sorted(self.path.glob(f"{paths.HYDRA}/**/config.yaml"), key=lambda path: path.stat().st_mtime)

    def write_results(self, report: dict) -> None:
        self.results.write_text(json.dumps(report, indent=2) + "\n")

    def write_hypotheses(self, texts: list[str]) -> None:
        self.hypotheses.write_text("".join(h + "\n" for h in texts), encoding="utf-8")

    def saved_line(self, config) -> str:
        """What a finished run left in the folder, for the console's last line (`config`: its TrainerConfig)."""
        files = [f"{paths.BEST} (best valid {config.select})", paths.LAST]
        if config.average_last > 1:
            files.append(f"{self.averaged(config.average_last).name} (the run's model)")
        files += [paths.HYPOTHESES, paths.RESULTS] if config.test_at_end else []
        files += [paths.VALIDATIONS, paths.LOG, "TensorBoard's events"]
        runs = self.path.parent.parent if self.path.parent.parent.name == "outputs" else self.path.parent
        tensorboard = f"{program('tensorboard')} --logdir {shell_word(runs)}"
        return f"saved in {self.path}: {', '.join(files)}; compare runs with: {tensorboard}"


# --- the validation record's format: validations.jsonl, one JSON object a line -----------------------------

FIGURES = (*(name for name in VALIDATED if name != "bleu"), "epochs", "petaflops", "train_minutes", "seconds")
FIGURES += ("best_bleu", "tokens_per_second")  # of a record's fields, the numbers besides step and bleu (`parsed`)


def line_of(figures: dict) -> str:
    """A validation's record as a line of its file: one JSON object."""
    return json.dumps(figures) + "\n"


def parsed(line: str) -> dict | None:
    """A line of validations.jsonl as its record, or None where it is not one (cut short by a crash, damaged or
    edited): a JSON object whose `step` is a whole number, whose `bleu` is a number, and whose other figures, where
    present, are numbers."""
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict) or not all(number(entry.get(key)) for key in ("step", "bleu")):
        return None
    if not float(entry["step"]).is_integer() or not all(number(entry[k]) for k in FIGURES if k in entry):
        return None
    return entry


def number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def read_validations(path: Path) -> list[dict]:
    """A run's validations (its file at `path`), the last line of each update (a resumed run may repeat one), in
    order: the one reader of the file. Lines that are not records (`parsed`) are skipped, said once, naming the file
    and lines: the others still hold."""
    if not path.is_file():
        return []
    found, skipped = {}, []
    for line_number, line in enumerate(path.read_bytes().decode("utf-8", errors="replace").splitlines(), 1):
        entry = parsed(line)
        if entry is not None:
            found[int(entry["step"])] = entry
        elif line.strip():
            skipped.append(line_number)
    if skipped:
        shown = ", ".join(map(str, skipped[:5])) + (f" and {len(skipped) - 5} more" if len(skipped) > 5 else "")
        log.warning("%s: line %s not a validation record (cut short, damaged or edited): skipped", path, shown)
    return [found[step] for step in sorted(found)]


def continue_from(path: Path, past: Path, step: int) -> None:
    """The validation records at `path` as a run continuing from update `step` finds them: the lines of later updates
    (validated after the checkpoint it continues from, by the process that stopped, or by an older run in this folder
    whose checkpoints are gone) moved to `past`, so that the file holds one history and its readers see only it."""
    if not path.is_file():
        return
    kept, later = [], []
    for line in path.read_bytes().decode("utf-8", errors="replace").splitlines(keepends=True):
        entry = parsed(line)  # a line that is not a record stays: readers skip it
        (later if entry is not None and entry["step"] > step else kept).append(line)
    if later:
        with open(past, "a", encoding="utf-8") as handle:
            handle.writelines(later)
        write_text(path, "".join(kept))
        log.warning("%s: %d validations past update %d moved to %s", path, len(later), step, past.name)
