"""The folder an export is written to: refused when it holds anything nmt-export did not write, replaced only when the
user says so, and filled whole or not at all (written beside it, then renamed into place); with a note of what it came
from (`nmt_export.json`) and a README saying how to use it with or without nmt."""

from __future__ import annotations

import datetime
import glob
import json
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from nmt import UserError
from nmt.decoding.export.ct2 import POSITIONS
from nmt.decoding.export.engine import NOTE, SUBWORDS
from nmt.decoding.translator import trained_options
from nmt.paths import PUT_IN_PLACE, UMASK, digest, folder_option, write_text
from nmt.runs.provenance import loaded_code

# Every name an export of either format may hold: a folder holding anything else is someone's, and never replaced
WRITTEN = {NOTE, "README.md", "model.bin", "config.json", "shared_vocabulary.json", "source_vocabulary.json"}
WRITTEN |= {"target_vocabulary.json", *SUBWORDS.values(), "encoder.onnx", "decoder_step.onnx"}
WRITTEN |= {"encoder.onnx.data", "decoder_step.onnx.data"}


def default_folder(checkpoint: Path, format: str, quantization: str) -> Path:
    """best.pt -> best.ctranslate2-int8/ beside it (best.onnx/ for the ONNX export, which is float32)."""
    suffix = f"{format}-{quantization}" if format == "ctranslate2" else format
    return checkpoint.with_name(f"{checkpoint.stem}.{suffix}")


def target_folder(folder: Path, overwrite: bool) -> Path:
    """`folder` as the place of a new export: absent, empty, or an earlier export (replaced with overwrite=true);
    one holding a file nmt-export did not write is refused, whatever the options say."""
    folder_option(folder, "output")
    entries = sorted(entry.name for entry in folder.iterdir()) if folder.is_dir() else []
    if not entries:
        return folder
    ours = (folder / NOTE).is_file()
    foreign = [name for name in entries if not ours or name not in WRITTEN or (folder / name).is_dir()]
    if foreign:
        listed = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise UserError(
            f"output={folder}: holds {listed}, which nmt-export did not write; nothing was replaced. Give an empty "
            "or new folder"
        )
    if not overwrite:
        raise UserError(
            f"output={folder}: holds an earlier export; give overwrite=true to replace it, or another folder"
        )
    return folder


def aside_prefix(folder: Path) -> str:
    """The name's start of a folder an export keeps beside `folder` while it works (its staging, `.partial`; the
    earlier export it replaces, `.replaced`): hidden, and naming the process, so that a later export knows whether
    its owner still runs (`leftovers`)."""
    return f".{folder.name}.{os.getpid()}."


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: running
        return True
    return True


def leftovers(folder: Path) -> list[str]:
    """What exports into `folder` that did not finish left beside it (killed with SIGKILL, or the machine stopped),
    put right and said: a staging folder (`.partial`) removed; an earlier export that an install cut between its two
    renames had moved aside (`.replaced`) put back where `folder` is missing or empty, removed where a new export is in
    place. What a running export keeps is left alone."""
    said = []
    for path in sorted(folder.parent.glob(f".{glob.escape(folder.name)}.*")):
        if path.suffix not in (".partial", ".replaced") or path.is_symlink() or not path.is_dir():
            continue
        owner = path.name[len(folder.name) + 2 :].split(".", 1)[0]
        if owner.isdigit() and running(int(owner)) and int(owner) != os.getpid():
            continue
        earlier = path / folder.name
        missing = not folder.exists() or (folder.is_dir() and not any(folder.iterdir()))
        if path.suffix == ".replaced" and missing and (earlier / NOTE).is_file():
            if folder.is_dir():
                folder.rmdir()
            os.replace(earlier, folder)
            said.append(f"put back {folder}, an earlier export that an export cut short had moved aside to {path}")
        else:
            said.append(f"removed {path}, left by an export that did not finish")
        shutil.rmtree(path, ignore_errors=True)
    return said


def staging_folder(folder: Path) -> Path:
    """An empty folder of this process's own beside `folder` (the same file system), where the export is made."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=aside_prefix(folder), suffix=".partial"))
        os.chmod(staging, 0o777 & ~UMASK)  # mkdtemp makes it private; the export gets the mode mkdir would give
        return staging
    except OSError as error:
        raise UserError(f"output={folder}: cannot write there ({error.strerror or error})") from None


def install(staging: Path, folder: Path, overwrite: bool = False) -> None:
    """The finished export in place of `folder`, checked again now (not only when the export started): a folder
    that meanwhile got a file nmt-export did not write, or another export where overwrite was not given, is refused
    and kept as it is. An earlier export (overwrite=true) is moved aside, the new one renamed in, the earlier one
    removed; Ctrl-C and SIGTERM wait across the two renames, so that the folder is never left without an export."""
    target_folder(folder, overwrite)
    held = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        if folder.is_dir() and any(folder.iterdir()):
            earlier = Path(tempfile.mkdtemp(dir=folder.parent, prefix=aside_prefix(folder), suffix=".replaced"))
            os.replace(folder, earlier / folder.name)
            os.replace(staging, folder)
            shutil.rmtree(earlier, ignore_errors=True)
        else:
            os.replace(staging, folder)
        PUT_IN_PLACE.append(folder)
    except OSError as error:
        raise UserError(f"output={folder}: could not put the export in place ({error.strerror or error})") from None
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, held)


def trained_commits(checkpoint: Path) -> list[str]:
    """The commits the run was trained with, from the provenance.json of its folder (empty when there is none)."""
    try:
        entries = json.loads((checkpoint.parent / "provenance.json").read_text(encoding="utf-8"))
        return sorted({entry["commit"] for entry in entries if isinstance(entry, dict) and entry.get("commit")})
    except (OSError, ValueError, TypeError):
        return []


def note_of(checkpoint: Path, config: dict, settings: dict, check: dict | None) -> dict:
    """What the export came from and how it was checked: the folder's nmt_export.json."""
    trained = trained_options(config)
    return {
        "command": " ".join(["nmt-export", *sys.argv[1:]]),
        **settings,
        "checkpoint": str(checkpoint.resolve()),
        "checkpoint_sha256": digest(checkpoint),
        "trained_at": trained_commits(checkpoint),
        "exported_at": loaded_code(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="minutes"),
        "decode_ratio": float(trained.decode_ratio),
        "decode_extra": int(trained.decode_extra),
        "positions": POSITIONS,
        "languages": [config.get("data", {}).get("src_lang"), config.get("data", {}).get("tgt_lang")],
        "model": config["model"],
        "check": check,
    }


def file_digests(staging: Path) -> dict[str, str]:
    """The sha256 of each file of the export (the weights, config, vocabularies and sentencepiece models), for its
    note: a model.bin changed, or another run's vocabulary put in, is refused when the folder is loaded."""
    return {path.name: digest(path) for path in sorted(staging.iterdir()) if path.is_file() and path.name != NOTE}


def write_note(staging: Path, note: dict, usage: str) -> None:
    write_text(staging / NOTE, json.dumps(note, indent=1) + "\n")
    write_text(staging / "README.md", readme(note, usage))


def readme(note: dict, usage: str) -> str:
    check = note["check"]
    checked = (
        f"Checked on the {check['split']} split ({check['sentences']:,} sentences, greedy) against nmt's own decoder "
        f"in fp32: the same subwords for {check['same']:,} sentences, BLEU {check['bleu']:.2f} against "
        f"{check['ours_bleu']:.2f} ({check['gap']:+.2f}).\n"
        if check
        else "Not checked (check=none).\n"
    )
    source, target = note["languages"]
    return (
        f"# {source} -> {target}, exported by nmt ({note['format']}"
        f"{', ' + note['quantization'] if note['format'] == 'ctranslate2' else ''})\n\n"
        f"From `{note['checkpoint']}` (sha256 {note['checkpoint_sha256']}), trained at commit "
        f"{', '.join(note['trained_at']) or 'unknown'}; exported at commit {note['exported_at'].get('commit', '?')} "
        f"on {note['date']} by `{note['command']}`.\n\n{checked}\n{usage}"
    )
