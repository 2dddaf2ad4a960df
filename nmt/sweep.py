"""Several training runs one after another, each a `train.py` process, that a rerun continues where it stopped.

`make lab` (scripts/lab.py) runs its variants through `train_runs`: a run whose `results.json` exists is kept, an
interrupted one (a `last.pt` without results) resumes with `trainer.resume=true`, and the rest start.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from nmt import UserError

ROOT = Path(__file__).resolve().parents[1]


def train_run(name: str, overrides: list[str], run_dir: Path) -> bool:
    """Train one run in `run_dir` with `train.py OVERRIDES`; False when it was finished before (and is kept)."""
    if (run_dir / "results.json").is_file():
        print(f"{name}: done before, kept ({run_dir})", flush=True)
        return False
    resume = ["trainer.resume=true"] if (run_dir / "last.pt").is_file() else []
    command = [sys.executable, str(ROOT / "train.py"), *overrides, *resume, "trainer.progress=false",
               f"hydra.run.dir={run_dir}"]  # fmt: skip
    print(f"{name}: {'resuming' if resume else 'training'} (train.py {' '.join(command[2:])})", flush=True)
    result = subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        raise UserError(f"{name}: train.py failed in {run_dir}; rerun to continue. Its last words:\n"
                        f"{result.stderr[-2000:]}")  # fmt: skip
    return True
