"""A run folder's files, named once: which files mark a folder as holding a training run and which are its own
(`run_file`), each checked before the run writes it (`own_file`: never a link, FIFO or folder followed elsewhere, a
hard link replaced by a copy of its own). `nmt.run_folder.RunFolder` builds every path inside a run folder from these
names; nothing else in nmt/ spells them.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

from nmt import UserError

LAST = "last.pt"  # the full checkpoint a run continues from, replaced at each validation and on Ctrl-C
PREVIOUS = "previous.pt"  # the last.pt it replaced, kept by a second name: resuming falls back to it
BEST = "best.pt"  # the checkpoint best on valid (trainer.select): a second name of one last.pt
STEPS = "step*.pt"  # a validation's weights (step<N>.pt, N zero-padded to 8 digits), for averaging
AVERAGED = "averaged_last{count}.pt"  # the average of the weights of `count` validations ending at the best
RESULTS = "results.json"  # a finished run's figures: written last, so a run with one has finished
VALIDATIONS = "validations.jsonl"  # one JSON line per validation
PAST = "validations.past.jsonl"  # validations of updates past the checkpoint a run continued from
PROVENANCE = "provenance.json"  # each invocation: commit, time, machine, precision
HYPOTHESES = "best.test.hyp"  # the reported checkpoint's translation of the test split
LOG = "train.log"  # Hydra's job log (configs/train.yaml) and a failed sweep job's traceback
FAILED = "failed.txt"  # in a sweep job's folder: why it stopped (nmt.multirun)
CORPUS = "corpus.json"  # the sha256 of each split's text as the run read it: resuming refuses another text
LOCK = ".lock"  # who trains in the folder now (`RunFolder.lock`)
SUBWORDS = {"source": "spm.src.model", "target": "spm.tgt.model"}  # the sentencepiece models the run used
EVENTS = "events.out.tfevents.*"  # TensorBoard's log
HYDRA = ".hydra"  # Hydra's records of each invocation

# A folder holds a training run when it has one of these: a checkpoint, or any record a run writes once it trains
# (an older run whose checkpoints were deleted still holds its validations); then RUN_FILES name the run's own files.
RUN_MARKS = (LAST, PREVIOUS, BEST, STEPS, RESULTS, VALIDATIONS, PROVENANCE, EVENTS)
RUN_FILES = (*RUN_MARKS, "spm.*.model", "spm.*.vocab", LOG, HYPOTHESES, PAST, LOCK, FAILED, CORPUS)


def holds_a_run(folder: Path) -> str | None:
    """The name of a file that shows `folder` already holds a training run, or None."""
    for pattern in RUN_MARKS:
        found = sorted(folder.glob(pattern))
        if found:
            return found[0].name
    return None


KINDS = {  # what a folder entry is, when it is not a regular file
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFDIR: "a folder",
    stat.S_IFCHR: "a device",
    stat.S_IFBLK: "a device",
    stat.S_IFSOCK: "a socket",
}


def own_file(path: Path) -> None:
    """`path`, which this run is about to write or append, is a regular file of this run's alone, or absent. A link
    (dangling or not), FIFO, folder, device or socket is refused, named: a run never writes through one to a file
    elsewhere, nor waits on a pipe. A file hard-linked from elsewhere (a copy made with `cp -al` or `rsync
    --link-dest`) is first replaced by a copy of its own, so that appending to it leaves the other run untouched."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    kind = KINDS.get(stat.S_IFMT(info.st_mode))
    if kind is not None:
        raise UserError(
            f"{path} is {kind}, not a file: a run folder's files are the run's own and are never followed "
            "elsewhere. Remove it, or train into another folder (hydra.run.dir=...)"
        )
    if info.st_nlink > 1:
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False) as copy:
            with open(path, "rb") as original:
                shutil.copyfileobj(original, copy)
        shutil.copystat(path, copy.name)
        os.replace(copy.name, path)


class RunLogFile(logging.FileHandler):
    """The handler of a run's train.log (configs/train.yaml sets it for Hydra's job log): the file is opened only
    when it is the run's own (`own_file`); otherwise the command stops there, with the reason, before Hydra's first
    log line would have gone through it."""

    def __init__(self, filename, mode: str = "a", encoding: str | None = None, delay: bool = False, errors=None):
        try:
            own_file(Path(filename))
        except UserError as error:
            print(f"error: {error}", file=sys.stderr)
            raise SystemExit(2) from None
        super().__init__(filename, mode, encoding, delay, errors)


def own_files(run_dir: Path) -> None:
    """`own_file` for every file a run writes or appends in `run_dir` (RUN_FILES, its Hydra records' folder), before
    it writes any: checked as a run starts, before its lock is taken."""
    for pattern in (*RUN_FILES, HYDRA):
        names = {p.name for p in run_dir.glob(pattern)} | ({pattern} if "*" not in pattern else set())
        for name in sorted(names):
            if name == HYDRA and (run_dir / name).is_dir() and not (run_dir / name).is_symlink():
                continue  # Hydra's records: a folder of its own
            own_file(run_dir / name)


# Files that are a run's own wherever they lie: a study's records of finished runs (results/runs/**), and Hydra's
# record of each invocation (.hydra/<time>/config.yaml), which resume and the study read
RECORD_FILES = ("*.record.json", "*.lab.json")


def run_file(path: Path) -> str | None:
    """Why `path` belongs to a training run ("best.pt, a file of the training run in DIR"), or None."""
    folder = path.parent
    if any(fnmatch.fnmatch(path.name, pattern) for pattern in RECORD_FILES):
        return f"{path.name}, the record of a finished run"
    if HYDRA in path.absolute().parts:
        return f"{path.name}, Hydra's record of a run's invocation"
    if holds_a_run(folder) is None:
        return None
    if any(fnmatch.fnmatch(path.name, pattern) for pattern in RUN_FILES):
        return f"{path.name}, a file of the training run in {folder}"
    return None
