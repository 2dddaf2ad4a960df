"""Shared fixtures: the sample corpus, its vocabulary, and composing the real Hydra configs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import commands
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from nmt.config import register
from nmt.text.data import build_vocabulary
from nmt.text.sample import generate

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
MULTI30K = Path(os.environ.get("NMT_DATA_DIR") or ROOT.parent / "shared" / "data" / "multi30k")

MODELS = sorted(p.stem for p in (CONFIGS / "model").glob("*.yaml"))
ATTENTIONS = sorted(p.stem for p in (CONFIGS / "model" / "attention").glob("*.yaml"))

register()
torch.set_num_threads(1)  # tiny models: one thread is as fast, and never oversubscribes
# and so for the train.py and evaluate.py processes tests start: pytest runs one worker per core (make test)
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True)
def forked_sweeps(monkeypatch):
    """The study's sweeps forked like the tests' own commands, in every test (`fork_sweeps`)."""
    fork_sweeps(monkeypatch)


def fork_sweeps(monkeypatch) -> None:
    """The study's sweeps (`python train.py -m ...`, run by `nmt_study.sweep.waited`) forked like the tests' own
    commands (tests/commands.py), their output passed on to this process's streams where capfd reads it. Tests that
    signal a sweep start it as a process of their own; a joblib sweep runs fresh (loky's workers, started from a
    forked process, waited minutes to start). A fixture wider than a test calls it with its own MonkeyPatch."""
    import nmt_study.sweep

    def waited(command: list[str]) -> int:
        if "hydra/launcher=joblib" in command:
            return fresh(command)
        done = commands.run(command, cwd=nmt_study.sweep.ROOT)
        sys.stdout.write(done.stdout.decode(errors="replace"))
        sys.stderr.write(done.stderr.decode(errors="replace"))
        return done.returncode

    fresh = getattr(nmt_study.sweep.waited, "fresh", nmt_study.sweep.waited)  # the real one, if patched already
    waited.fresh = fresh
    monkeypatch.setattr(nmt_study.sweep, "waited", waited)


def compose_config(*overrides: str, config_name: str = "train") -> DictConfig:
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose(config_name=config_name, overrides=list(overrides))


@pytest.fixture(scope="session")
def sample_splits():
    return generate(train=600, valid=40, test=40, seed=7)


@pytest.fixture(scope="session")
def sample_vocabulary(sample_splits):
    return build_vocabulary(
        sample_splits.train, vocab_size=150, joint=True, model_type="unigram", character_coverage=1.0, cache=None
    )


TINY = {
    "sutskever": ["model.embedding_size=32", "model.hidden_size=48"],
    "bahdanau": [
        "model.embedding_size=32",
        "model.hidden_size=48",
        "model.readout_size=32",
        "model.attention.attention_size=40",
    ],
    # U(-0.1, 0.1) suits the paper's sizes and ours (512 units), not 48 units, where it is below PyTorch's
    # default 1/sqrt(48) and 300 updates no longer fit the sentences; test_models checks the init itself.
    "luong": ["model.embedding_size=32", "model.hidden_size=48", "model.layers=1", "model.init_range=0"],
    "transformer": [
        "model.d_model=32",
        "model.heads=4",
        "model.feedforward_size=64",
        "model.encoder_layers=2",
        "model.decoder_layers=2",
    ],
}


def tiny_model_overrides(model: str, *extra: str) -> list[str]:
    """Small sizes of each model family, for fast tests, then `extra` overrides. A model config without an entry in
    TINY is shrunk by rule: every `*size` option and `d_model` to 32 and every `*layers` option to 1, so a new model
    file is tested as is. With `model/attention=none` (no attention), no attention sizes."""
    if model in TINY:
        fixed = "model/attention=none" in extra
        return [f"model={model}", *(o for o in TINY[model] if not (fixed and o.startswith("model.attention."))), *extra]
    cfg = compose_config(f"model={model}")
    shrunk = []
    for key, value in cfg.model.items():
        if isinstance(value, int) and (str(key).endswith("size") or key == "d_model"):
            shrunk.append(f"model.{key}=32")
        elif isinstance(value, int) and str(key).endswith("layers"):
            shrunk.append(f"model.{key}=1")
    return [f"model={model}", *shrunk, *extra]


def bare_venv(folder: Path) -> tuple[Path, Path]:
    """A fresh virtual environment in `folder` with no pip and nothing installed: its python, and its site-packages
    (where a test puts a .pth naming just what the environment may see)."""
    import subprocess

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    python = folder / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return python, Path(purelib)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished small run, trained once for each module that asks: (run directory, the sentencepiece cache's
    folder)."""
    from helpers import SMALL, run_cli  # helpers imports this module

    folder = tmp_path_factory.mktemp("trained")
    run_dir, spm = folder / "run", folder / "spm"
    result = run_cli("train.py", *SMALL, f"data.spm_cache={spm}", f"hydra.run.dir={run_dir}")
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    return run_dir, spm
