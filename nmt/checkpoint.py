"""Checkpoints that are never half-written and never run code when loaded."""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path

import torch

from nmt import UserError


def save(payload: dict, path: str | Path) -> None:
    """Write to a temporary file in the same folder, flush it to disk, then rename it over `path` (atomic)."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "wb") as handle:
        torch.save(payload, handle)
        handle.flush()
        os.fsync(handle.fileno())
    temporary.replace(path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself survives a power cut
    finally:
        os.close(directory)


def load(path: str | Path) -> dict:
    """Load a checkpoint with `weights_only=True`: tensors and plain containers only, never pickled code."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such checkpoint")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        first = str(error).splitlines()[0] if str(error) else "unsafe content"
        raise UserError(f"{path}: refused to load: it holds more than weights ({first})") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError) as error:
        raise UserError(f"{path}: not a readable checkpoint; the file is truncated or corrupt ({error})") from None
    if not isinstance(payload, dict) or "model" not in payload or "config" not in payload:
        raise UserError(f"{path}: not an nmt checkpoint (no model weights and config inside)")
    return payload
