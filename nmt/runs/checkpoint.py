"""Checkpoints that are never half-written and never run code when loaded (what they hold: nmt/training/state.py)."""

from __future__ import annotations

import os
import pickle
import re
import shutil
import zipfile
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

import torch

from nmt import UserError, build, paths
from nmt.config import GrammarOptions, TrainerConfig

# Options added after checkpoints had been written without them, with the value that keeps such a checkpoint's
# behaviour (the code's behaviour before the option existed). Loading fills them in, so an older run still decodes,
# and resuming it with today's different defaults is refused by name instead of silently changing the model.
ADDED_OPTIONS = {
    "nmt.models.rnn.LuongSeq2Seq": {"uniform_embeddings": True, "feed_dropout": True, "bidirectional": False},
    "nmt.models.attention.DotAttention": {"scaled": False},
}

# Where the model and attention classes lived before the toolkit moved into wings (nmt.rnn.BahdanauSeq2Seq is now
# nmt.models.rnn.BahdanauSeq2Seq): checkpoints and committed records name their classes by the path of their day,
# and `upgrade` gives each today's. The one table of moved names: each old module's prefix, and the new one.
MOVED = {
    "nmt.rnn.": "nmt.models.rnn.",
    "nmt.transformer.": "nmt.models.transformer.",
    "nmt.attention.": "nmt.models.attention.",
}


def current_name(target: str) -> str:
    """A class's dotted name as today's code has it (`MOVED`); any other name as it is."""
    for old, new in MOVED.items():
        if target.startswith(old) and "." not in target[len(old) :]:
            return new + target[len(old) :]
    return target


def current_names(node):
    """`node` (a config, any shape) with every `_target_` in it by its current name (`current_name`), in place."""
    if isinstance(node, dict):
        if isinstance(node.get("_target_"), str):
            node["_target_"] = current_name(node["_target_"])
        for value in node.values():
            current_names(value)
    return node


def upgrade(config: dict) -> dict:
    """A checkpoint's or record's config as today's code reads it: each class by its current name (`MOVED`), and the
    options added since it was written (`ADDED_OPTIONS`, the sample grammar's options) filled in with the values it
    was trained with."""

    def fill(node) -> None:  # any shape: check_config, after this, refuses what is not nmt's
        if isinstance(node, dict):
            target = node.get("_target_")
            for key, value in (ADDED_OPTIONS.get(target, {}) if isinstance(target, str) else {}).items():
                node.setdefault(key, value)
            for value in node.values():
                fill(value)

    fill(current_names(config.get("model")))
    data = config.get("data")
    if isinstance(data, dict) and data.get("corpus") == "sample" and "grammar" not in data:
        data["grammar"] = asdict(GrammarOptions())  # the one grammar there was
    return config


def save(payload: dict, path: str | Path) -> None:
    """Write to a temporary file in the same folder, flush it to disk, then rename it over `path` (atomic)."""
    replace_atomically(Path(path), lambda handle: torch.save(payload, handle))


def replace_atomically(path: Path, write: Callable) -> None:
    """`write(handle)` into a temporary file beside `path`, flushed to disk, then renamed over `path`."""
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        with open(temporary, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
    except (OSError, RuntimeError) as error:  # a full disk fails inside torch's writer ("unexpected pos ...")
        temporary.unlink(missing_ok=True)
        free = shutil.disk_usage(path.parent).free
        raise UserError(
            f"{path}: could not be written ({str(error).splitlines()[0] if str(error) else error}; "
            f"{free / 2**20:,.0f} MiB free on its disk). The last complete checkpoint is kept; free "
            "space and continue with trainer.resume=true"
        ) from None
    temporary.replace(path)
    sync_folder(path.parent)


def sync_folder(folder: Path) -> None:
    """A rename in `folder` made to survive a power cut."""
    directory = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def on_host(payload):
    """A copy of `payload` whose tensors are on the CPU and its own, so training may go on changing the originals."""
    if isinstance(payload, torch.Tensor):
        return payload.detach().to("cpu", copy=True)
    if isinstance(payload, dict):
        return {key: on_host(value) for key, value in payload.items()}
    if isinstance(payload, (list, tuple)):
        return type(payload)(on_host(value) for value in payload)
    return payload


class Writer:
    """Checkpoint writes, in the order given: on a thread of their own (`background`: a GPU run, whose host waits
    on the GPU meanwhile; a validation's writes took a quarter of a short run there) or at once (a CPU run, whose
    cores train). A background write works on `own(payload)`, a copy on the host made before training goes on; its
    error (a full disk) is raised by the next `write` or by `wait`, which training calls before it returns."""

    PENDING = 2  # writes queued at most (each holds a copy of the state); the next waits for the oldest

    def __init__(self, background: bool):
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="checkpoints") if background else None
        self.pending: list[Future] = []

    def own(self, payload):
        return on_host(payload) if self.pool else payload

    def write(self, job: Callable[[], None]) -> None:
        if self.pool is None:
            job()
            return
        while self.pending and (self.pending[0].done() or len(self.pending) >= self.PENDING):
            self.pending.pop(0).result()  # a failed write raises here
        self.pending.append(self.pool.submit(job))

    def wait(self) -> None:
        """Every write given so far on disk; the first failure raised."""
        pending, self.pending = self.pending, []
        for future in pending:
            future.result()


def same_as(source: str | Path, path: str | Path) -> None:
    """`path` atomically made a second name of the checkpoint `source` (a hard link: no second write of the same
    bytes), or an atomic copy of it where the file system refuses links. Later writes replace `source` by renaming
    (`save`), never in place, so the file `path` names keeps its content."""
    source, path = Path(source), Path(path)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.unlink(missing_ok=True)
    try:
        os.link(source, temporary)
    except OSError:  # no hard links here (some network and FUSE file systems): the bytes written again
        with open(source, "rb") as original:
            replace_atomically(path, lambda handle: shutil.copyfileobj(original, handle))
        return
    temporary.replace(path)
    sync_folder(path.parent)


def damaged(path: Path) -> str | None:
    """Why `path` is no checkpoint before torch reads it (torch.save writes zip archives): not one at all, or one
    cut short; None when it looks whole."""
    with open(path, "rb") as handle:
        head = handle.read(4096)
    if zipfile.is_zipfile(path):
        return None
    if not head:
        return f"{path}: not a checkpoint: an empty file (0 bytes); a save that never finished? name another one"
    if head.startswith(b"PK\x03\x04"):
        return f"{path}: a truncated or damaged checkpoint: it begins like one, but its end is missing"
    try:
        head.decode("utf-8")
        kind = "a text file"
    except UnicodeDecodeError:
        kind = "unknown bytes"
    return f"{path}: not a checkpoint: {kind}, not a file that torch.save writes (a wrong path?)"


def load(path: str | Path) -> dict:
    """Load a checkpoint with `weights_only=True`: tensors and plain containers only, never pickled code. Three
    failures, three messages: not a checkpoint, a damaged one, one that holds Python objects (refused)."""
    path = Path(path)
    if path.is_dir():
        found = ", ".join(sorted(p.name for p in path.glob("*.pt"))[:6])
        inside = f" ({found})" if found else ", and it holds none"
        raise UserError(
            f"{path}: is a folder; name a checkpoint file in it{inside}: {paths.BEST} to decode, {paths.LAST} to resume"
        )
    if path.exists() and not path.is_file():
        raise UserError(f"{path}: not a regular file (a device, FIFO or socket); name a checkpoint file ({paths.BEST})")
    if not path.is_file():
        raise UserError(f"{path}: no such checkpoint")
    problem = damaged(path)
    if problem:
        raise UserError(problem)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        found = re.search(r"(?:Unsupported global: GLOBAL|unsupported GLOBAL) ([\w.]+)", str(error))
        what = f" ({found.group(1)})" if found else ""
        raise UserError(
            f"{path}: refused: besides tensors it holds Python objects{what}, and loading those could "
            "run code. nmt's checkpoints never hold any: other code wrote this file"
        ) from None
    except Exception as error:  # a damaged archive fails anywhere in torch's reader
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise UserError(f"{path}: a damaged checkpoint, not readable ({reason})") from None
    if not isinstance(payload, dict) or "model" not in payload or not isinstance(payload.get("config"), dict):
        raise UserError(f"{path}: not an nmt checkpoint (no model weights and config inside)")
    check_contents(payload, path)
    upgrade(payload["config"])
    check_config(payload["config"], path)
    return payload


def load_training(path: Path) -> dict:
    """A full checkpoint a run continues from (`load`), refused where it holds weights only."""
    payload = load(path)
    if "optimizer" not in payload or "rng" not in payload:
        raise UserError(
            f"{path}: holds weights only (a step<N>.pt or averaged checkpoint), not the optimizer and counters a run "
            f"continues from. Resume from the run's {paths.LAST}; decode this one with evaluate.py or translate.py"
        )
    return payload


def check_contents(payload: dict, path: Path) -> None:
    """The weights a mapping of names to tensors, the vocabulary (where there is one) two sentencepiece models that
    load: refused naming the checkpoint, before anything is built, decoded or averaged from it."""
    weights = payload["model"]
    if not isinstance(weights, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in weights.items()
    ):
        raise UserError(f"{path}: not an nmt checkpoint (its model weights are not a mapping of names to tensors)")
    vocabulary = payload.get("vocabulary")
    if vocabulary is None:
        return
    import sentencepiece

    for side in ("source", "target"):
        model = vocabulary.get(side) if isinstance(vocabulary, dict) else None
        try:
            if not isinstance(model, bytes) or not model:
                raise TypeError(side)
            sentencepiece.SentencePieceProcessor(model_proto=model)
        except Exception:  # missing, not bytes, or bytes sentencepiece cannot read
            raise UserError(
                f"{path}: a damaged checkpoint: its {side} vocabulary is not a sentencepiece model"
            ) from None


def check_config(config: dict, path: Path) -> None:
    """Every part of a checkpoint's config that a command reads (those it has), checked before anything is built
    from it: the model names only nmt's own classes, with options of their schemas' types and ranges
    (`build.checked_model`), the data and trainer options have their schema's types, no value is an interpolation.
    Refused naming the file and the key: a checkpoint is data anyone may have written."""
    try:
        build.check_plain(config, "config")
        if "model" in config:  # a Trainer used from Python without a run config saves none
            build.checked_model(config["model"])
        if "data" in config:
            build.saved_data_config(config["data"])
        build.saved_options(config.get("trainer"), TrainerConfig, "trainer")
    except UserError as error:
        raise UserError(f"{path}: refused: its saved config is not one nmt writes: {error}") from None
