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


def average(paths: list[str | Path]) -> dict:
    """The element-wise mean of the model weights of `paths` (same model), in the newest one's payload.

    Averaging the last few checkpoints of a run is a cheap gain (Vaswani et al. 2017 average the last 5 or 20; fairseq
    and OpenNMT ship a script for it). The result holds no optimizer state: it is for decoding, not for resuming.
    """
    if not paths:
        raise UserError("no checkpoints to average")
    payloads = [load(path) for path in paths]
    newest = max(payloads, key=lambda payload: payload.get("progress", {}).get("step", 0))
    first = payloads[0]
    for path, payload in zip(paths, payloads):
        if set(payload["model"]) != set(first["model"]) or payload["config"]["model"] != first["config"]["model"]:
            raise UserError(f"{path}: holds a different model from {paths[0]}; average checkpoints of one run only")
    averaged = {}
    for name, tensor in newest["model"].items():
        if tensor.is_floating_point():
            total = sum(payload["model"][name].double() for payload in payloads)
            averaged[name] = (total / len(payloads)).to(tensor.dtype)
        else:
            averaged[name] = tensor  # counters and the like: the newest value
    steps = [payload.get("progress", {}).get("step") for payload in payloads]
    return {
        "model": averaged,
        "config": newest["config"],
        "vocabulary": newest["vocabulary"],
        "progress": {**newest.get("progress", {}), "averaged_steps": steps},
    }
