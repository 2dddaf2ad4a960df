"""A run folder's files are the run's own: which files mark a folder as holding a training run and which are its
(`run_file`), each checked before the run writes it (`own_file`: never a link, FIFO or folder followed elsewhere, a
hard link replaced by a copy of its own), and the lock that gives a run folder one writer (`run_lock`).
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import fnmatch
import logging
import os
import shutil
import socket
import stat
import sys
import tempfile
from pathlib import Path

from nmt import UserError

# A folder holds a training run when it has one of these: a checkpoint, or any record a run writes once it trains
# (an older run whose checkpoints were deleted still holds its validations); then RUN_FILES name the run's own files.
RUN_MARKS = (
    "last.pt",
    "previous.pt",
    "best.pt",
    "step*.pt",
    "results.json",
    "validations.jsonl",
    "provenance.json",
    "events.out.tfevents.*",
)
LOCK = ".lock"  # a run folder's lock file: who trains in it now (`run_lock`)
RUN_FILES = (
    "last.pt",
    "previous.pt",
    "best.pt",
    "step*.pt",
    "results.json",
    "provenance.json",
    "spm.*.model",
    "spm.*.vocab",
    "events.out.tfevents.*",
    "train.log",
    "best.test.hyp",
    "validations.jsonl",
    "validations.past.jsonl",
    LOCK,
)


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
    for pattern in (*RUN_FILES, ".hydra"):
        names = {p.name for p in run_dir.glob(pattern)} | ({pattern} if "*" not in pattern else set())
        for name in sorted(names):
            if name == ".hydra" and (run_dir / name).is_dir() and not (run_dir / name).is_symlink():
                continue  # Hydra's records: a folder of its own
            own_file(run_dir / name)


@contextlib.contextmanager
def run_lock(run_dir: Path):
    """This process's hold on `run_dir` for the life of a run: one run folder, one writer. A second train.py into
    it (or a sweep job whose folder collides with another's) is refused, naming the first: its process, machine and
    start, which the lock file holds while it runs. The lock is the kernel's (flock), released when its process ends
    however it ends: after `kill -9` the next run takes it over. Left empty when released, so a finished run's
    folder does not change."""
    path = run_dir / LOCK
    handle = open(path, "a+", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise UserError(
            f"{run_dir} is being trained by {holder} (it holds {path}): one run folder has one "
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


# Files that are a run's own wherever they lie: a study's records of finished runs (results/runs/**), and Hydra's
# record of each invocation (.hydra/<time>/config.yaml), which resume and the study read
RECORD_FILES = ("*.record.json", "*.lab.json")


def run_file(path: Path) -> str | None:
    """Why `path` belongs to a training run ("best.pt, a file of the training run in DIR"), or None."""
    folder = path.parent
    if any(fnmatch.fnmatch(path.name, pattern) for pattern in RECORD_FILES):
        return f"{path.name}, the record of a finished run"
    if ".hydra" in path.absolute().parts:
        return f"{path.name}, Hydra's record of a run's invocation"
    if holds_a_run(folder) is None:
        return None
    if any(fnmatch.fnmatch(path.name, pattern) for pattern in RUN_FILES):
        return f"{path.name}, a file of the training run in {folder}"
    return None
