"""Where the tensors live and in what precision: device `auto`, bf16/fp16 autocast."""

from __future__ import annotations

import contextlib

import torch

from nmt import UserError

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def device(name: str) -> torch.device:
    """`auto` (CUDA when present), `cpu`, `cuda` or `cuda:N`."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name not in ("cpu", "cuda") and not name.startswith("cuda:"):
        raise UserError(f"trainer.device={name!r}: use auto, cpu or cuda")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"trainer.device={name}: no CUDA device is available here; use trainer.device=auto or cpu")
    return torch.device(name)


def precision(name: str) -> torch.dtype:
    if name not in PRECISIONS:
        raise UserError(f"trainer.precision={name!r}: use one of {', '.join(PRECISIONS)}")
    return PRECISIONS[name]


def autocast(where: torch.device, dtype: torch.dtype):
    """Mixed precision for the forward pass (the weights stay fp32); nothing for fp32."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(where.type, dtype=dtype)
