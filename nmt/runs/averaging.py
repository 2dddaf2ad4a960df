"""Checkpoint averaging: the element-wise mean of a run's checkpoints' weights, for decoding (`average`), and the
average of the validations ending at a run's best one, which a run with trainer.average_last=k reports
(`average_last`; which checkpoint a run reports: RunFolder.reported)."""

from __future__ import annotations

from pathlib import Path

from nmt import UserError
from nmt.runs import checkpoint
from nmt.runs.folder import RunFolder
from nmt.runs.resume import changes


def average(paths: list[str | Path]) -> dict:
    """The element-wise mean of the model weights of `paths` (same model), in the newest one's payload.

    Averaging the last few checkpoints of a run is a cheap gain (Vaswani et al. 2017 average the last 5 or 20; fairseq
    and OpenNMT ship a script for it). The result holds no optimizer state: it is for decoding, not for resuming.
    """
    if not paths:
        raise UserError("no checkpoints to average")
    payloads = [checkpoint.load(path) for path in paths]
    newest = max(payloads, key=lambda payload: payload.get("progress", {}).get("step", 0))
    first = payloads[0]
    for path, payload in zip(paths, payloads):
        if set(payload["model"]) != set(first["model"]) or payload["config"]["model"] != first["config"]["model"]:
            raise UserError(f"{path}: holds a different model from {paths[0]}; average checkpoints of one run only")
        _, other = changes(first["config"], payload["config"])  # what no resumed run of one run may change
        if other:
            raise UserError(
                f"{path}: another run's checkpoint than {paths[0]} ({', '.join(other)} differ); "
                "average the checkpoints of one run only"
            )
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


def average_last(folder: RunFolder, count: int) -> tuple[Path, dict]:
    """The average of the weights of the run's `count` validations ending at its best one (its step<N>.pt up to the
    best update; fewer where it kept fewer), written atomically (RunFolder.averaged): (its path, its payload). The
    window always holds the best checkpoint: a run stopped by patience has trained past it, and an average of its
    last validations alone would leave it out. Without validation records, its newest `count`."""
    paths = folder.step_files(folder.best_step())[-count:]
    if not paths:
        raise UserError(
            f"{folder}: no step<N>.pt to average (trainer.keep_checkpoints was 0?); set trainer.average_last=1 to "
            "report the best checkpoint"
        )
    payload = average(paths)
    path = folder.averaged(count)
    checkpoint.save(payload, path)
    return path, payload
