"""What a newcomer types first, typed as the README writes it: in a fresh copy of the checkout's tracked files, with
the default run folders, no NMT_DATA_DIR, and the corpus where a user's checkout has it (`../shared/data/multi30k`
beside it) or nowhere. CI runs the README's two set-up commands themselves (`.ci/run`); these tests hold what those
commands and the ones after them rest on."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import commands
import pytest
import torch
from conftest import MULTI30K, ROOT

SHARED = ROOT.parent / "shared"
LEFT_OUT = ("results/", "docs/", "tests/", "bench/")  # what no command of the README reads: not copied


def user_environment(fresh: bool = False) -> dict[str, str]:
    """A user's environment: nothing the README does not ask for (no NMT_DATA_DIR, no Hydra debugging variables).
    `fresh`: the command runs as a new interpreter, importing the copy's own nmt (not the test zygote's)."""
    environment = {k: v for k, v in os.environ.items() if k not in ("NMT_DATA_DIR", "HYDRA_FULL_ERROR")}
    return {**environment, "NMT_TESTS_FRESH": "1"} if fresh else environment


def checkout(tmp_path: Path, shared: bool) -> Path:
    """A copy of the checkout's tracked files at tmp_path/nmt, with tmp_path/shared the workplace's shared folder
    (`shared`) or no such folder."""
    copy = commands.copy_checkout(tmp_path / "nmt", LEFT_OUT)
    if shared:
        (tmp_path / "shared").symlink_to(SHARED)
    return copy


def typed(line: str, folder: Path, fresh: bool = False, timeout: float = 120):
    """`line` as a user types it in `folder` with .venv active (`python` is this interpreter)."""
    words = shlex.split(line)
    words[0] = sys.executable if words[0] == "python" else words[0]
    return commands.run(words, cwd=folder, env=user_environment(fresh), text=True, timeout=timeout)


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1] if text.strip() else ""


def test_the_first_training_command_trains_into_its_default_folder(tmp_path):
    """`python train.py ...` with no hydra.run.dir: its default folder (outputs/<model>/<time>) was resolved before
    Hydra had set what it names (`HydraConfig was not set`, on 8312e32); the run lands there, said on its last line,
    and the TensorBoard line it prints runs from the same shell."""
    copy = checkout(tmp_path, shared=False)
    done = typed("python train.py data=sample trainer=debug", copy)
    assert done.returncode == 0, done.stderr
    (run,) = (copy / "outputs" / "bahdanau").iterdir()
    assert (run / "results.json").is_file() and (run / "best.pt").is_file()
    assert f"saved in {run}" in done.stdout + done.stderr
    assert re.search(r"compare runs with: \S*tensorboard --logdir outputs$", done.stdout.strip())


@pytest.mark.parametrize(
    "option, named",
    [("trainer.lr=-1", "trainer.lr"), ("hydra.run.dir=", "hydra.run.dir"), ("seed=1.5", "seed")],
)
def test_an_option_check_is_not_hidden_behind_the_default_folder(tmp_path, option, named):
    copy = checkout(tmp_path, shared=False)
    done = typed(f"python train.py {option}", copy)
    assert done.returncode == 1 and "HydraConfig" not in done.stderr
    assert last_line(done.stderr).startswith(f"error: {named}"), done.stderr
    assert not (copy / "outputs").exists()  # refused before any folder is made


def test_a_run_refused_once_its_folder_was_made_leaves_no_folder_behind_and_a_users_folder_as_it_was(tmp_path):
    """Refusals that need the corpus or the run (a vocabulary size, a data=files run missing its valid files) come
    after Hydra made the run's folder: that folder, holding only the refusal's log, goes; one the user made stays."""
    copy = checkout(tmp_path, shared=False)
    for option, named in (("data.vocab_size=-1", "data.vocab_size=-1"), ("data=files", "data.train.src")):
        done = typed(f"python train.py data=sample trainer=debug {option}", copy)
        assert done.returncode == 1 and last_line(done.stderr).startswith(f"error: {named}"), done.stderr[-2000:]
        assert not list(copy.glob("outputs/*/*")), option
    (copy / "mine").mkdir()
    (copy / "mine" / "notes.txt").write_text("mine")
    done = typed("python train.py data=sample trainer=debug data.vocab_size=-1 hydra.run.dir=mine", copy)
    assert done.returncode == 1 and (copy / "mine" / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("launcher", ["", "hydra/launcher=packed"])
def test_a_sweep_trains_into_its_default_folders(tmp_path, launcher):
    copy = checkout(tmp_path, shared=False)
    done = typed(f"python train.py -m data=sample trainer=debug model=sutskever,transformer {launcher}", copy)
    assert done.returncode == 0, done.stderr
    (sweep,) = (copy / "multirun").iterdir()
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0_sutskever", "1_transformer"]
    assert all((sweep / job / "results.json").is_file() for job in ("0_sutskever", "1_transformer"))
    if launcher:  # one process, the jobs' lines interleaved: each says whose it is, and the end says where they went
        assert "[0_sutskever] " in done.stdout + done.stderr and "[1_transformer] " in done.stdout + done.stderr
        assert f"the pack's runs: {sweep}/ 0_sutskever, 1_transformer" in done.stderr


@pytest.mark.skipif(not (MULTI30K / "train.de.gz").is_file(), reason=f"no Multi30k beside the checkout ({MULTI30K})")
def test_the_readme_training_on_multi30k_finds_the_corpus_beside_the_checkout_and_resumes_as_its_hint_says(tmp_path):
    """`python train.py model=bahdanau`, the model `make train` trains, as typed with ../shared beside the checkout:
    it trains (a few updates), Ctrl-C saves it, and the command it prints to continue runs as printed."""
    copy = checkout(tmp_path, shared=True)
    hint = interrupted("python train.py model=bahdanau", copy)
    assert hint.startswith(("python train.py model=bahdanau ", f"{sys.executable} train.py model=bahdanau "))
    folder = Path(re.search(r"hydra\.run\.dir=(\S+)", hint)[1])
    first = torch.load(folder / "last.pt", weights_only=True)["progress"]["step"]
    interrupted(hint, copy)
    assert torch.load(folder / "last.pt", weights_only=True)["progress"]["step"] > first > 0


def interrupted(line: str, folder: Path) -> str:
    """Start `line` in `folder`, let it train a few seconds once its model is built, Ctrl-C it: the command it says
    continues the run."""
    words = shlex.split(line)
    words[0] = sys.executable if words[0] in ("python", sys.executable) else words[0]
    before = models_built(folder)
    started = commands.start(words, cwd=folder, env=user_environment(), text=True)
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline and started.poll() is None and models_built(folder) == before:
        time.sleep(0.5)
    time.sleep(2)  # a few updates of the full-size model
    started.send_signal(signal.SIGINT)
    stdout, stderr = started.communicate(timeout=60)
    assert started.returncode == 130, stderr[-3000:]
    found = re.search(r"To continue, run (.+)$", stderr.strip())
    assert found, stderr[-2000:]
    return found[1]


def models_built(folder: Path) -> int:
    """How many times a run under folder/outputs has built its model (train.log's "model ...: N parameters")."""
    return sum(p.read_text().count(" parameters\n") for p in (folder / "outputs").glob("*/*/train.log"))


def test_multi30k_offline_and_nowhere_says_how_to_give_it_in_one_line(tmp_path):
    """No internet, no ../shared, no NMT_DATA_DIR: one line that names the make variable and the option."""
    copy = checkout(tmp_path, shared=False)
    done = typed("python train.py model=bahdanau data.url=file:///nowhere", copy, fresh=True)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    line = last_line(done.stderr)
    assert line.startswith("error: could not download") and "make train DATA_DIR=" in line and "data.dir=" in line


def setup_block(readme: str) -> list[str]:
    """The commands of the README's "Setup: two commands" block, as written."""
    section = readme.split("## Setup", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)[1]
    return [line for line in block.splitlines() if line.strip()]


def test_ci_runs_exactly_the_readmes_two_setup_commands():
    """.ci/run is the README's setup block: the same lines, in order, nothing added to them or to the environment."""
    lines = setup_block((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(lines) == 2 and [line.split()[:2] for line in lines] == [["make", "demo"], ["make", "test"]]
    printed = subprocess.run(["bash", ".ci/run", "--print"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert printed.stdout.splitlines() == lines
    script = (ROOT / ".ci" / "run").read_text()
    assert "export" not in script and "NMT_DATA_DIR" not in script


def test_the_demo_is_the_sample_corpus_on_a_budget_that_learns():
    """`make demo`, the README's first command, trains its embedded default: the sample corpus, Bahdanau, a compute
    budget (the same model on a busy machine, only later), nothing downloaded."""
    recipe = re.search(r"^demo:.*\n\t(.+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)[1]
    assert recipe.split()[1:] == ["train.py", "experiment=demo"]
    from conftest import compose_config

    cfg = compose_config("experiment=demo")
    assert cfg.data.corpus == "sample" and cfg.model._target_.endswith("BahdanauSeq2Seq")
    assert cfg.trainer.max_flops and not cfg.trainer.max_minutes


@pytest.mark.skipif(not (SHARED / "data" / "multi30k").is_dir(), reason="no ../shared/data/multi30k beside this one")
def test_multi30k_is_read_from_the_shared_copy_beside_the_checkout_without_a_download(tmp_path, monkeypatch):
    from nmt.text.corpus import SHARED_COPY, load_multi30k

    monkeypatch.delenv("NMT_DATA_DIR", raising=False)
    assert SHARED_COPY == SHARED / "data" / "multi30k"
    splits = load_multi30k("de", "en", None, "file:///nowhere", tmp_path / "cache")
    assert (len(splits.train), len(splits.valid), len(splits.test)) == (29000, 1014, 1000)
    assert not (tmp_path / "cache").exists()  # read in place


def using_block(readme: str) -> list[str]:
    """The command lines of the README's "Using it" block, as written (comments stripped)."""
    section = readme.split("## Using it", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)[1]
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def debug_run(copy: Path, model: str) -> Path:
    """A finished run of `model` in outputs/<model>/<time>/ of the copy, as the README's placeholders name it: a
    20-update run of a tiny model on the sample corpus (the README's own lines train for hours)."""
    done = typed(f"python train.py data=sample trainer=debug model={model}", copy)
    assert done.returncode == 0, done.stderr[-2000:]
    return max((copy / "outputs" / model).iterdir())


@pytest.mark.slow
@pytest.mark.skipif(not (MULTI30K / "train.de.gz").is_file(), reason=f"no Multi30k beside the checkout ({MULTI30K})")
def test_every_line_of_the_readmes_using_it_block_runs_as_typed(tmp_path):
    """Each line of README.md's "Using it", typed in a fresh checkout with Multi30k beside it: a training line starts,
    trains a few updates and is stopped by Ctrl-C, which must say how to continue; a sweep likewise; evaluate,
    translate (stdin, attention maps) and the export run on the run folder their `<time>` names; the study answers
    --help. `make` targets (hours of training on installs of their own) are left to the existence check
    (tests/test_docs.py); tensorboard's server is started and answers."""
    copy = checkout(tmp_path, shared=True)
    lines = using_block((ROOT / "README.md").read_text(encoding="utf-8"))
    assert lines[0] == ". .venv/bin/activate"
    folders: dict[str, Path] = {}
    for line in lines[1:]:
        if line.startswith("make "):
            continue
        if line.startswith("python train.py -m "):
            stopped = swept_and_stopped(line, copy)
            assert "rerun the sweep's command with trainer.resume=auto" in stopped, stopped[-2000:]
        elif line.startswith("python train.py "):
            hint = interrupted(line, copy)
            assert hint.endswith(
                "trainer.resume=true hydra.run.dir=" + str(max((copy / "outputs" / "luong").iterdir()))
            )
        elif line.startswith("tensorboard "):
            assert served(line, copy)
        else:
            model = re.search(r"outputs/(\w+)/<time>", line)
            if model:
                folders.setdefault(model[1], debug_run(copy, model[1]))
                line = line.replace(f"outputs/{model[1]}/<time>", str(folders[model[1]].relative_to(copy)))
            done = piped(line, copy)
            assert done.returncode == 0 and "Traceback" not in done.stderr, (line, done.stderr[-2000:])


# The commands of docs/*.md's code blocks this suite does not type, each with why and what holds it instead; any
# other command found there is typed by the test below (a new one fails it until it is typed or listed here)
NOT_TYPED = {
    "make ": "make's targets install .venv first (pip, minutes) and train for hours: their commands are typed here",
    "pip install": "an install: tests/test_package.py installs the wheel and its extras",
    "torchrun": "four processes on two cores: tests/test_train.py trains two with torchrun",
    "python -m nmt_study compare --train": "hours of sweeps: one is started and stopped below, the study's tests "
    "train each launcher at small scale (tests/test_scripts.py)",
    "python -m nmt_study measure": "measurements, minutes each and run alone (docs/speed.md); tests/test_scripts.py "
    "measures at small scale",
    "python -m nmt_study queue": "starts the background queue in a worktree beside the checkout: tests/test_queue.py",
    "bash ": "a peer's install or a GPU machine's script (scripts/device_check.sh)",
    "export ": "sets variables for the next line, a measurement's",
    "TRAIN_SECONDS=": "Joey NMT's install and measurement (../shared/peers)",
    "python -m nmt_study results --render": "tests/test_results.py renders every table and compares it with the "
    "committed one",
}
STARTED = "python -m nmt_study compare --train --variants"  # the study's sweep the test starts and stops
NOT_TYPED["python -m nmt_study compare --train --variants bahdanau,transformer --seeds 2 --flops 2.5e13 --beam 1 "
          "--samples 100 --trials 100 --launcher joblib"] = (
    "the line before it with joblib: tests/test_scripts.py stops a joblib sweep with Ctrl-C"
)  # fmt: skip


def typed_here(line: str) -> bool:
    """Whether the docs tier types `line` (it is not one NOT_TYPED lists, or it is the study sweep it starts)."""
    skipped = [prefix for prefix in NOT_TYPED if line.startswith(prefix)]
    return not skipped or line.startswith(STARTED) and all(len(prefix) < len(STARTED) for prefix in skipped)


def docs_lines(documents: list[Path]) -> list[tuple[str, str]]:
    """Each command of the documents' bash code blocks as (document, line): continued lines joined, comments and the
    descriptions in plain code blocks left out."""
    found = []
    for path in documents:
        for block in re.findall(r"```bash\n(.*?)```", path.read_text(encoding="utf-8"), re.DOTALL):
            for line in block.replace("\\\n", " ").splitlines():
                if line := re.sub(r"\s+#.*$", "", line).strip():
                    found.append((path.name, re.sub(r"\s+", " ", line)))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not (MULTI30K / "train.de.gz").is_file(), reason=f"no Multi30k beside the checkout ({MULTI30K})")
@pytest.mark.parametrize("sweeps", [True, False], ids=["sweeps", "the others"])
def test_every_command_of_the_docs_code_blocks_runs_as_typed(tmp_path, sweeps):
    """docs/*.md's commands typed in a fresh copy with Multi30k beside it and .venv where make puts it: a training
    and sweeps start, train and stop on Ctrl-C saying how to continue (the training's hint run as printed); the export
    and the CTranslate2 engine run on a Transformer run where their `<time>` names it; the study's reports run or
    refuse in one named line (no finished runs in a fresh copy). What it does not type is listed with why
    (NOT_TYPED)."""
    copy = commands.copy_checkout(tmp_path / "nmt", ("tests/", "bench/"))
    (tmp_path / "shared").symlink_to(SHARED)
    (copy / ".venv").symlink_to(Path(sys.executable).parents[1])
    lines = docs_lines(sorted((copy / "docs").glob("*.md")))
    left = [(doc, line) for doc, line in lines if typed_here(line)]
    assert len(lines) > 25 and len(left) >= 8, left
    swept = [(doc, line) for doc, line in left if " -m " in line and "train.py" in line or line.startswith(STARTED)]
    left = swept if sweeps else [typed for typed in left if typed not in swept]
    runs: dict[str, Path] = {}
    for doc, line in left:
        line = line.replace("...", "mine").replace("data.dir=mine", "data.dir=../shared/data/multi30k")
        if sweeps:
            said = swept_and_stopped(line, copy)
            continues = ("rerun the sweep's command", "rerun the same command")  # the jobs', or the study's alone
            assert any(c in said for c in continues) and "Traceback" not in said, (doc, line, said[-2000:])
            continue
        if line.startswith("python train.py "):  # a run of minutes: started, Ctrl-C, its hint continues it
            hint = interrupted(line, copy)
            assert hint.startswith((f"{line} ", f"{sys.executable} {line.removeprefix('python ')} ")), hint
            interrupted(hint, copy)
            continue
        model = re.search(r"outputs/(\w+)/<time>", line)
        if model:
            runs.setdefault(model[1], debug_run(copy, model[1]))
            line = line.replace(f"outputs/{model[1]}/<time>", str(runs[model[1]].relative_to(copy)))
        done = piped(line.replace(".venv/bin/python ", "python "), copy)
        said = done.stdout + done.stderr
        assert "Traceback" not in said, (doc, line, said[-3000:])
        assert done.returncode == 0 or last_line(done.stderr).startswith("error: "), (doc, line, said[-3000:])


def piped(line: str, folder: Path) -> subprocess.CompletedProcess:
    """`line` (an `echo ... |` before a python command included) run in `folder` as a user's shell runs it."""
    stdin = None
    if line.startswith("echo "):
        echoed, line = line.split("|", 1)
        stdin = shlex.split(echoed)[1] + "\n"
    words = shlex.split(line)
    words[0] = sys.executable if words[0] == "python" else words[0]
    return commands.run(words, cwd=folder, env=user_environment(), input=stdin, text=True, timeout=300)


def swept_and_stopped(line: str, folder: Path) -> str:
    """A sweep's line started, Ctrl-C once its first job has built its model: what it said (exit status 130)."""
    words = shlex.split(line)
    words[0] = sys.executable
    started = subprocess.Popen(words, cwd=folder, env=user_environment(), text=True, stderr=subprocess.PIPE,
                               stdout=subprocess.PIPE, start_new_session=True)  # fmt: skip
    running = int(m[1]) if (m := re.search(r"--jobs (\d+)", line)) else 1  # jobs that start at once
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and started.poll() is None and built(folder) < running:
        time.sleep(0.5)
    if built(folder) < running:  # a Ctrl-C now would test the start-up's one line, not the sweep's hint
        os.killpg(started.pid, signal.SIGKILL)
        _, stderr = started.communicate(timeout=60)
        pytest.fail(f"{line}: no job built its model within 60 s (exit {started.returncode}): {stderr[-2000:]}")
    time.sleep(2)
    os.killpg(started.pid, signal.SIGINT)  # as a terminal's Ctrl-C: to every process of the command
    stdout, stderr = started.communicate(timeout=120)
    assert started.returncode == 130, stderr[-2000:]
    return stdout + stderr


def built(folder: Path) -> int:
    """How many runs of a sweep under folder/multirun have built their model."""
    return sum(" parameters\n" in log.read_text() for log in folder.glob("multirun/**/train.log"))


def served(line: str, folder: Path) -> bool:
    """TensorBoard's line started: whether it serves the outputs folder (then stopped)."""
    words = shlex.split(line)
    program = Path(sys.executable).with_name(words[0])
    started = subprocess.Popen([str(program), *words[1:]], cwd=folder, env=user_environment(),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        said = ""
        while time.monotonic() < deadline and "http://" not in said and started.poll() is None:
            said += started.stdout.readline()
        return "http://" in said
    finally:
        started.kill()
        started.wait()


def test_each_study_programs_help_says_what_it_does_in_whole_sentences():
    """`python -m nmt_study PROGRAM --help`, as the README gives it: its description is whole (compare's stopped at
    its docstring's first line, mid-sentence)."""
    from nmt_study.__main__ import PROGRAMS

    for program in PROGRAMS:
        done = commands.run([sys.executable, "-m", "nmt_study", program, "--help"], cwd=ROOT, text=True)
        assert done.returncode == 0, done.stderr
        paragraphs = done.stdout.split("\n\n")
        description = " ".join((paragraphs[0] if program == "measure" else paragraphs[1]).split())
        assert description.endswith("."), (program, description)


@pytest.mark.parametrize("script", ["translate.py", "evaluate.py"])
def test_a_decoding_commands_help_gives_its_own_options_not_trainings(script):
    done = commands.run([sys.executable, script, "--help"], cwd=ROOT, text=True)
    assert done.returncode == 0, done.stderr
    assert f"python {script} checkpoint=" in done.stdout  # its own examples first
    assert "Config groups" not in done.stdout and "trainer:" not in done.stdout and "model/attention" not in done.stdout
    if script == "translate.py":
        assert "attention=FOLDER also writes each line's attention heatmap" in done.stdout


def test_a_command_started_on_a_busy_machine_waits_sleeping_not_spinning():
    """A two-thread run beside one busy process took 3.3-4.2x its time alone with OpenMP's spinning waits, 1.3x with
    sleeping ones, which alone cost 1.6-2.2x (nmt.cli.wait_policy): so a command picks them by what it meets as it
    starts; a user's OMP_WAIT_POLICY, and one thread, are left alone."""
    asked = [sys.executable, "-c", "import os, nmt.cli; print(os.environ.get('OMP_WAIT_POLICY'))"]
    environment = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        said = subprocess.run(asked, env=environment, capture_output=True, text=True, timeout=60).stdout.strip()
        assert said == "PASSIVE"
        mine = subprocess.run(asked, env={**environment, "OMP_WAIT_POLICY": "ACTIVE"}, capture_output=True, text=True)
        assert mine.stdout.strip() == "ACTIVE"
        one = subprocess.run(asked, env={**environment, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
        assert one.stdout.strip() == "None"
    finally:
        busy.kill()
        busy.wait()
