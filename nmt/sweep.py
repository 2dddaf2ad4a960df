"""Several training runs one after another, each a `train.py` process, that a rerun continues where it stopped.

`make compare` and `make lab` (scripts/compare.py, scripts/lab.py) run their variants through `train_run`: a run
whose `results.json` exists is kept, an interrupted one (a `last.pt` without results) resumes with
`trainer.resume=true`, and the rest start. A kept run must have the settings the overrides give today: after a
default changes, a finished run from before would otherwise be reported as if it had today's, beside seeds that do
(`check_finished` refuses it, naming the options, before anything trains).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from nmt import UserError
from nmt.checkpoint import upgrade
from nmt.config import register
from nmt.resume import changes, listed

ROOT = Path(__file__).resolve().parents[1]


def composed(overrides: list[str]) -> DictConfig:
    """The config `train.py OVERRIDES` runs with, as Hydra composes it (Hydra's own `hydra.*` options left out)."""
    from hydra import compose, initialize_config_dir

    register()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return compose("train", overrides=[o for o in overrides if not o.startswith("hydra.")])


def settings(overrides: list[str]) -> dict:
    """The config `train.py OVERRIDES` would run with today, as plain containers."""
    return OmegaConf.to_container(composed(overrides), resolve=True)


def saved_settings(run_dir: Path) -> dict | None:
    """The config the run in `run_dir` was last started with (Hydra's record of its latest invocation), or None."""
    records = sorted(run_dir.glob(".hydra/**/config.yaml"), key=lambda path: path.stat().st_mtime)
    return upgrade(OmegaConf.to_container(OmegaConf.load(records[-1]))) if records else None


def check_finished(runs: list[tuple[str, list[str], Path]]) -> None:
    """Refuse, before anything trains, the finished runs among (name, overrides, run_dir) that were trained with other
    settings than their overrides give today, naming each run and option."""
    stale = []
    for name, overrides, run_dir in runs:
        saved = saved_settings(run_dir) if (run_dir / "results.json").is_file() else None
        if saved is not None:
            changed, breaking = changes(saved, settings(overrides))
            if breaking:
                stale.append(f"{name} ({run_dir}): {listed(changed, breaking, 'then')}")
    if stale:
        raise UserError(
            "finished runs were trained with other settings than the ones asked for today (a default changed since?), "
            "and would be reported as if they had them:\n  " + "\n  ".join(stale) + "\nMove these folders away "
            "(`scripts/compare.py DIR...` still reports on them) or delete them, and rerun to train them again"
        )


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
