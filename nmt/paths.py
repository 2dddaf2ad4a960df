"""Every file a command writes: checked before the work that fills it starts (so a typo never costs a decoding run),
and written atomically (`write_text`).

The rule (`output_file`): a command never replaces a file it did not create in this invocation unless its overwrite
option says so, and never a file of a training run (checkpoints, results, vocabularies, records, logs) whatever the
options say: those are the run's, and resume, evaluate and the reports read them. A command may replace the file it
writes by default (evaluate's `<checkpoint>.<split>.beam<N>.hyp`): that one is its own.

A run folder's files are named here, once: which files mark a folder as holding a training run and which are its own
(`run_file`), each checked before the run writes it (`own_file`: never a link, FIFO or folder followed elsewhere, a
hard link replaced by a copy of its own). `nmt.runs.folder.RunFolder` builds every path inside a run folder from these
names; nothing else in nmt/ spells them.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import shlex
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
FAILED = "failed.txt"  # in a sweep job's folder: why it stopped (nmt.launch.multirun)
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


UMASK = os.umask(0o022)
os.umask(UMASK)  # the process's umask, read once (reading it means setting it)


def output_file(
    path: str | Path,
    option: str,
    inputs: tuple = (),
    overwrite: bool | None = False,
    also_written: tuple = (),
    checkpoint: bool = False,
) -> Path:
    """`path` as a file that can be written: its folder exists and is writable, it is not a folder, it is none of
    the command's `inputs` (a source, a reference, a checkpoint) nor of the other files it writes (`also_written`),
    it is no file of a training run, no trained model (a checkpoint, wherever it lies and whatever its name) unless
    the command writes one (`checkpoint`), and it does not exist unless `overwrite` (the user's overwrite option:
    True; None for a command's own default path, which it may replace)."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise UserError(f"{option}={path}: is a folder; give a file name")
    folder = path.parent
    if not folder.is_dir():
        raise UserError(f"{option}={path}: the folder {folder} does not exist; create it or choose another path")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UserError(f"{option}={path}: cannot write there (permission denied)")
    for given in inputs:
        if given and path.exists() and Path(given).expanduser().exists() and path.samefile(Path(given).expanduser()):
            raise UserError(f"{option}={path}: is one of this command's inputs and would be overwritten")
    for other in also_written:
        if other and Path(other).expanduser().absolute() == path.absolute():
            raise UserError(f"{option}={path}: this command writes another file there too; give each its own path")
    owner = run_file(path)
    if owner:
        raise UserError(f"{option}={path}: is {owner}, which this command must not replace; write elsewhere")
    if path.exists() and not path.is_file():
        raise UserError(f"{option}={path}: is not a regular file; give the path of a file")
    if not checkpoint and holds_a_model(path):
        raise UserError(
            f"{option}={path}: is a checkpoint (a trained model), which this command must not replace; write elsewhere"
        )
    if path.exists() and overwrite is False:
        raise UserError(
            f"{option}={path}: exists, and this command would replace it; choose another path, or say "
            "so with the overwrite option (overwrite=true, --overwrite)"
        )
    return path


def holds_a_model(path: Path) -> bool:
    """Whether `path` is a file torch.save wrote (a zip archive with a data.pkl): a checkpoint, whatever its name."""
    import zipfile

    try:
        if not path.is_file() or not zipfile.is_zipfile(path):
            return False
        with zipfile.ZipFile(path) as archive:
            return any(name.endswith("/data.pkl") or name == "data.pkl" for name in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


PUT_IN_PLACE: list[
    Path
] = []  # what this process has put in place so far (write_text, an export's folder): said on Ctrl-C


def write_text(path: Path, text: str | bytes, exclusive: bool = False) -> None:
    """Write `text` (or bytes) to `path` atomically: a temporary file of this writer's own in the same folder, then a
    rename, so two processes writing one path (two jobs filling one cache) each replace it whole. Names the path when
    the disk refuses. `exclusive`: a file the command was not told to replace, checked when it is put in place, not
    only when the command started: one that appeared meanwhile (another process's, the user's) is kept and refused
    by name (a hard link puts the new file in place only where the name is free)."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    try:
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as error:
        raise UserError(f"{path}: could not write ({error.strerror or error})") from None
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.chmod(temporary, 0o666 & ~UMASK)  # mkstemp makes it private; the file gets the mode open() would give
        if exclusive:
            os.link(temporary, path)
            os.unlink(temporary)
        else:
            os.replace(temporary, path)
        PUT_IN_PLACE.append(path)
    except FileExistsError:
        Path(temporary).unlink(missing_ok=True)
        raise UserError(
            f"{path}: a file appeared there while this command ran (another process's, or yours): kept, and nothing "
            "written; run again with another path, or overwrite=true to replace it"
        ) from None
    except OSError as error:
        Path(temporary).unlink(missing_ok=True)
        raise UserError(f"{path}: could not write ({error.strerror or error})") from None


def written_by(record: Path, command: str) -> bool:
    """Whether the JSON file `record` says a command starting with `command` wrote it (its "command" entry)."""
    import json

    try:
        return str(json.loads(record.read_text(encoding="utf-8")).get("command", "")).startswith(command)
    except (OSError, ValueError, AttributeError):
        return False


MANIFEST = ".written-by-nmt"  # in an output folder: the files nmt's commands wrote there, which they may replace


def folder_option(path: Path, option: str) -> None:
    """Refuse, naming `option`, a folder option that names a file, or a folder this process cannot write in (or
    cannot make: the nearest folder above it that exists is read-only), checked before anything is made or run."""
    if path.exists() and not path.is_dir():
        raise UserError(f"{option}={path}: is a file; give a folder (made if it does not exist)")
    existing = next((folder for folder in (path, *path.absolute().parents) if folder.exists()), None)
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        made = "" if existing == path else f" (it would be made in {existing})"
        raise UserError(f"{option}={path}: cannot write there{made}: permission denied; give a folder you can write")


def output_folder(
    path: str | Path, option: str, fills: tuple[str, ...] = (), made_by: tuple[str, str] | None = None
) -> Path:
    """`path` as a folder to write into, created if it is missing (with its parents). `fills`: the files the command
    writes there (report.md, compare.json, ...); one of them already there that no nmt command wrote (the folder's
    MANIFEST lists those that one did) is a user's, and the folder is refused before any work. The names are then
    added to the manifest: rerunning the command replaces its own files. `made_by`: (a JSON file, the start of its
    "command"), by which a folder that an nmt from before the manifest wrote is known as the command's own."""
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise UserError(f"{option}={path}: is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"{option}={path}: cannot create this folder ({error.strerror})") from None
    if not os.access(path, os.W_OK):
        raise UserError(f"{option}={path}: cannot write there (permission denied)")
    if fills:
        manifest = path / MANIFEST
        ours = set(manifest.read_text(encoding="utf-8").split()) if manifest.is_file() else set()
        if not manifest.is_file() and made_by and written_by(path / made_by[0], made_by[1]):
            ours = set(fills)  # the folder of an earlier run of this command, from before the manifest
        theirs = [name for name in fills if (path / name).exists() and name not in ours]
        if theirs:
            raise UserError(
                f"{option}={path}: holds {', '.join(theirs)}, which this command would replace and no nmt "
                "command wrote; choose another folder, or move them away (written by an nmt from before "
                f"it kept {MANIFEST}? list their names in it)"
            )
        write_text(manifest, "".join(f"{name}\n" for name in sorted(ours | set(fills))))
    return path


def digest(path: Path) -> str:
    """The SHA-256 of a file's bytes."""
    import hashlib

    found = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            found.update(block)
    return found.hexdigest()


def stamp(path: Path, source: Path, settings: str) -> None:
    """Note beside `path`, a file derived from `source` (a checkpoint's translations), which bytes of `source` and
    which `settings` (beam, precision) made it: `path.source`. A reader then tells it from one made from an older
    checkpoint of the same name (a run resumed since) or with other settings (`derived_from`)."""
    import json

    note = {"source": source.name, "sha256": digest(source), "settings": settings}
    write_text(path.with_name(f"{path.name}.source"), json.dumps(note) + "\n")


def derived_from(path: Path, source: Path, settings: str) -> bool:
    """Whether `path` exists and was made from `source` as it is now, with `settings` (`stamp`'s note says so)."""
    import json

    try:
        note = json.loads(path.with_name(f"{path.name}.source").read_text(encoding="utf-8"))
        return path.is_file() and note["settings"] == settings and note["sha256"] == digest(source)
    except (OSError, ValueError, KeyError, TypeError):
        return False


def read_json(path: Path, remedy: str, fields: dict[str, type] | None = None) -> dict:
    """The JSON object in `path`, the one reader of nmt's JSON files (records, results, reports): a damaged or
    unreadable file, one that holds something else than an object, or one whose `fields` ({name: type}) are missing
    or of another type is refused naming the file and the field, with `remedy` (what to do)."""
    import json

    try:
        found = json.loads(Path(path).read_bytes().decode("utf-8"))
    except (OSError, ValueError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise UserError(f"{path}: damaged or unreadable ({reason}); {remedy}") from None
    if not isinstance(found, dict):
        raise UserError(f"{path}: holds a JSON {type(found).__name__}, not the object nmt writes; {remedy}")
    for name, kind in (fields or {}).items():
        if not isinstance(found.get(name), kind) or isinstance(found.get(name), bool) and kind is not bool:
            what = "missing" if name not in found else f"a {type(found[name]).__name__}, not a {kind.__name__}"
            raise UserError(f"{path}: field {name!r} is {what}; {remedy}")
    return found


def shell_word(path: str | Path) -> str:
    """A path as a user pastes it: relative where it lies under the working folder, quoted where the shell needs it."""
    path = Path(os.path.abspath(path))
    with_cwd = Path(os.path.abspath(os.getcwd()))
    shown = str(path.relative_to(with_cwd)) if path.is_relative_to(with_cwd) else str(path)
    return shlex.quote(shown)


def program(name: str) -> str:
    """How a user's shell runs the program `name` of this interpreter's environment (python, tensorboard): its bare
    name where the shell's PATH finds this one, else its path (make runs .venv/bin/python without activating .venv,
    so a hint saying `python` would run another interpreter)."""
    beside = Path(os.path.abspath(sys.executable)).with_name(name)
    mine = Path(os.path.abspath(sys.executable)) if name == "python" else beside
    found = shutil.which(name)
    if found and os.path.abspath(found) == str(mine):
        return name
    if not mine.exists():
        return name
    shown = shell_word(mine)
    return shown if "/" in shown else f"./{shown}"  # a bare name would be looked up on PATH


def command_again(script: str, options: list[str]) -> str:
    """This command line as a user pastes it to run it again: the interpreter as `program` gives it, the script (a
    checkout's train.py, or the installed console script by name) and `options`, each quoted for the shell."""
    entry = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path(script)
    if entry.suffix != ".py":  # an installed console script: nmt-train
        words = [program(entry.name)]
    else:
        words = [program("python"), shell_word(entry) if entry.parent != Path() else entry.name]
    return " ".join([*words, *map(shlex.quote, options)])
