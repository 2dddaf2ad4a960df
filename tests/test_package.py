"""The package installs and runs outside a checkout: a wheel built from this tree holds the toolkit, the study and
every config, and its console scripts train and translate from a folder that is not the checkout."""

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import tomllib
from conftest import ROOT, bare_venv

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_package_list_holds_every_package_under_nmt():
    """pyproject lists the packages by hand (configs/ ships as nmt.configs, which a glob cannot find; the packed
    launcher lives in Hydra's plugins' namespace): a new subpackage missing from the list would be left out of the
    wheel."""
    found = {
        ".".join(path.parent.relative_to(ROOT).parts)
        for folder in ("nmt", "nmt_study", "hydra_plugins")
        for path in (ROOT / folder).rglob("__init__.py")
    }
    assert set(PROJECT["tool"]["setuptools"]["packages"]) == found | {"nmt.configs"}


def copy_tree(destination: Path) -> Path:
    """What a build needs, copied, so that building leaves nothing (build/, *.egg-info) in the checkout."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("nmt", "nmt_study", "configs", "hydra_plugins"):
        shutil.copytree(ROOT / name, destination / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, destination / name)
    return destination


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("wheel")
    source = copy_tree(folder / "source")
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--wheel-dir",
            str(folder / "dist"),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (found,) = (folder / "dist").glob("nmt_classics-*.whl")
    return found


def test_the_wheel_holds_the_study_every_config_and_the_console_scripts(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(archive.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
    configs = {f"nmt/configs/{p.relative_to(ROOT / 'configs').as_posix()}" for p in (ROOT / "configs").rglob("*.yaml")}
    assert configs and configs <= names, sorted(configs - names)
    study = {f"nmt_study/{p.relative_to(ROOT / 'nmt_study').as_posix()}" for p in (ROOT / "nmt_study").rglob("*.py")}
    assert "nmt_study/__main__.py" in study and study <= names, sorted(study - names)
    assert "hydra_plugins/nmt_packed_launcher/packed.py" in names  # hydra/launcher=packed, where Hydra finds it
    for script in ("nmt-train", "nmt-evaluate", "nmt-translate", "nmt-study"):
        assert f"{script} = " in entry_points


@pytest.mark.slow
def test_the_installed_wheel_trains_and_translates_from_any_folder(wheel, tmp_path):
    """A fresh virtual environment outside the checkout gets the wheel (its dependencies from this environment's
    site-packages, read as a plain path, so this environment's editable install of nmt is not seen), at first without
    the study's extra (optuna, scipy, statsmodels): from a folder of its own, nmt-train trains a tiny model on the
    sample corpus, nmt-evaluate scores it and nmt-translate translates a line with it, and nmt-study says in one line
    what to install; with the extra's packages, nmt-study runs."""
    venv = tmp_path / "venv"
    python, site = bare_venv(venv)
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    # `pip install .` without extras: this environment's packages less the study's (nmt_study.__main__.STUDY_EXTRA)
    everything = Path(sysconfig.get_paths()["purelib"])
    toolkit_only = tmp_path / "toolkit-only"
    toolkit_only.mkdir()
    for entry in everything.iterdir():
        if not entry.name.lower().startswith(("optuna", "scipy", "statsmodels")):
            (toolkit_only / entry.name).symlink_to(entry)
    Path(site, "dependencies.pth").write_text(f"{toolkit_only}\n")
    work = tmp_path / "elsewhere"
    work.mkdir()
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    environment["HYDRA_FULL_ERROR"] = "0"

    def command(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(venv / "bin" / args[0]), *args[1:]],
            cwd=work,
            capture_output=True,
            text=True,
            env=environment,
            input=stdin,
            timeout=600,
        )

    where = command("python", "-c", "import nmt, nmt.config as c; print(nmt.__file__); print(c.CONFIGS)")
    package, configs = where.stdout.split()
    assert Path(package).is_relative_to(venv) and Path(configs) == Path(package).parent / "configs", where.stdout
    run_dir = work / "run"
    train = command(
        "nmt-train",
        "data=sample",
        "model=luong",
        "model.embedding_size=32",
        "model.hidden_size=48",
        "model.layers=1",
        "data.sizes.train=300",
        "data.sizes.valid=20",
        "data.sizes.test=20",
        "trainer=debug",
        "trainer.max_steps=6",
        "trainer.valid_every=3",
        "trainer.progress=false",
        "trainer.num_plots=0",
        f"hydra.run.dir={run_dir}",
    )
    assert train.returncode == 0, train.stderr[-3000:]
    assert (run_dir / "best.pt").is_file() and (work / "data" / "spm").is_dir()  # caches go where it runs
    translated = command("nmt-translate", f"checkpoint={run_dir / 'best.pt'}", stdin="Ein Hund läuft.\n")
    assert translated.returncode == 0, translated.stderr[-3000:]
    assert len(translated.stdout.splitlines()) == 1 and translated.stdout.strip()
    evaluated = command("nmt-evaluate", f"checkpoint={run_dir / 'best.pt'}", f"output={work / 'test.hyp'}")
    assert evaluated.returncode == 0 and "BLEU" in evaluated.stdout, evaluated.stderr[-3000:]
    absent = command("python", "-c", "import importlib.util as u; print([u.find_spec(n) for n in ('optuna', 'scipy')])")
    assert absent.stdout.strip() == "[None, None]", absent.stdout  # the toolkit ran without the study's extra
    study = command("nmt-study", "--help")
    assert study.returncode != 0 and len(study.stderr.strip().splitlines()) == 1, study.stderr
    assert "pip install 'nmt-classics[study]'" in study.stderr
    Path(site, "dependencies.pth").write_text(f"{everything}\n")  # pip install '.[study]'
    study = command("nmt-study", "--help")
    assert study.returncode == 0 and "compare" in study.stdout
