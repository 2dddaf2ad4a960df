"""The weights a tiny fp32 run of each family trains, as one digest per checkpoint: a change to the code that must not
change what trains (a move of modules, a refactor) leaves every line the same.

  python scripts/weights_digest.py > before.txt    # on the code before the change
  python scripts/weights_digest.py > after.txt     # after it; then: diff before.txt after.txt

Each run trains on the sample corpus (data=sample, size=tiny, fp32, one thread, seed 1234) to 2e11 FLOPs with three
validations, keeps its validations' weights and averages the last two (trainer.average_last=2); each .pt file of the
run is printed with the sha256 over its tensors (model weights, and the optimiser's state where there is one) in
name order.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

FAMILIES = ("sutskever", "bahdanau", "luong", "transformer")
OPTIONS = [
    "data=sample",
    "size=tiny",
    "data.sizes.train=300",
    "data.sizes.valid=20",
    "data.sizes.test=20",
    "trainer.num_plots=0",
    "trainer.max_flops=2e11",
    "trainer.validations=3",
    "trainer.precision=fp32",
    "trainer.threads=1",
    "trainer.average_last=2",
    "trainer.progress=false",
    "seed=1234",
]


def tensors(value, name: str = ""):
    """Every tensor inside a checkpoint's nested dicts and lists, with its dotted place, in name order."""
    if isinstance(value, torch.Tensor):
        yield name, value
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            yield from tensors(value[key], f"{name}.{key}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from tensors(item, f"{name}.{index}")


def digest(path: Path) -> str:
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    hashed = hashlib.sha256()
    for name, tensor in tensors(checkpoint):
        hashed.update(name.encode())
        hashed.update(tensor.detach().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())
    return hashed.hexdigest()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", default=",".join(FAMILIES), help="which families to train")
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as folder:
        for family in args.families.split(","):
            run = Path(folder) / family
            command = [sys.executable, "-m", "nmt.cli.train", f"model={family}", *OPTIONS]
            command += [f"data.spm_cache={Path(folder) / 'spm'}", f"hydra.run.dir={run}"]
            done = subprocess.run(command, cwd=root, capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"{family}: training failed:\n{done.stderr[-2000:]}")
            for path in sorted(run.glob("*.pt")):
                print(f"{family} {path.name} {digest(path)}", flush=True)


if __name__ == "__main__":
    main()
