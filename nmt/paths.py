"""Output paths, checked before the work that fills them starts, so a typo never costs a decoding run."""

from __future__ import annotations

import os
from pathlib import Path

from nmt import UserError


def output_file(path: str | Path, option: str, inputs: tuple = ()) -> Path:
    """`path` as a file that can be written: its folder exists and is writable, it is not a folder, and it is none of
    the command's `inputs` (a source, a reference, a checkpoint), which it would overwrite."""
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
    return path


def output_folder(path: str | Path, option: str) -> Path:
    """`path` as a folder to write into, created if it is missing (with its parents)."""
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise UserError(f"{option}={path}: is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"{option}={path}: cannot create this folder ({error.strerror})") from None
    if not os.access(path, os.W_OK):
        raise UserError(f"{option}={path}: cannot write there (permission denied)")
    return path
