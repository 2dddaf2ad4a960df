"""The study's queue (python -m nmt_study queue): trained from a worktree of its own at the lowest priority, the arms
alternating, paused and continued by one command each, its records where the checkout keeps them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import commands
import pytest

from nmt_study import design, progress
from nmt_study.cli.queue import Step, next_step
from nmt_study.records import load_record

TINY = [
    "data=sample",
    "size=tiny",
    "data.sizes.train=300",
    "data.sizes.valid=20",
    "data.sizes.test=20",
    "trainer.num_plots=0",
]


def tiny_design(tmp_path: Path) -> list[str]:
    """The queue's options for trials of a few seconds on the sample corpus."""
    return [
        "--flops",
        "1e11",
        "--validations",
        "3",
        "--threads",
        "1",
        "--extra",
        *TINY,
        f"data.spm_cache={tmp_path / 'spm'}",
    ]


def repository(folder: Path) -> Path:
    """A git repository of the checkout's tracked files as they are now (the queue's worktree is made from it)."""
    commands.copy_checkout(folder, ("results/", "docs/", "tests/"))
    identity = ["-c", "user.name=test", "-c", "user.email=test@example.org"]
    for command in (["init", "-q"], ["add", "-A"], [*identity, "commit", "-q", "-m", "the code under test"]):
        subprocess.run(["git", *command], cwd=folder, check=True, capture_output=True)
    return folder


def queue(action: str, repo: Path, home: Path, records: Path, *more: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "nmt_study", "queue", action, "--home", str(home), "--records", str(records)]
    return subprocess.run([*command, *more], cwd=repo, capture_output=True, text=True, timeout=120)


def test_the_queue_starts_from_its_own_worktree_at_idle_priority_once_and_pauses(tmp_path):
    """`start` makes the worktree at the checkout's commit and starts one runner, in the idle scheduling class at
    nice 19 (so it takes no CPU that other work wants: under the suite's load it may not train at all); a second
    `start` says it is running; `pause` ends it and whatever it started; `status` says so."""
    repo = repository(tmp_path / "nmt")
    home, records = tmp_path / "nmt-queue", tmp_path / "records"
    tiny = tiny_design(tmp_path)
    started = queue("start", repo, home, records, *tiny)
    assert started.returncode == 0 and "the queue runs from" in started.stdout, started.stderr
    pid = int((home / ".queue" / "pid").read_text())
    assert os.sched_getscheduler(pid) == os.SCHED_IDLE and os.getpriority(os.PRIO_PROCESS, pid) == 19
    autogroup = Path(f"/proc/{pid}/autogroup")
    if autogroup.is_file():  # the kernel shares the CPU between sessions first: the runner's session yields too
        assert autogroup.read_text().split()[-1] == "19"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout
    assert (home / ".git").is_file() and (home / "nmt_study" / "design.py").is_file()
    assert subprocess.run(["git", "rev-parse", "HEAD"], cwd=home, capture_output=True, text=True).stdout == head
    assert "the queue is running" in queue("start", repo, home, records).stdout  # one runner at a time
    paused = queue("pause", repo, home, records)
    assert paused.returncode == 0 and "the queue is paused" in paused.stdout
    assert "queue: paused" in queue("status", repo, home, records).stdout
    time.sleep(1)
    assert not any(str(home) in " ".join(p.cmdline) for p in processes()), "a trial outlived the pause"
    identity = ["-c", "user.name=test", "-c", "user.email=test@example.org"]
    subprocess.run(["git", *identity, "commit", "-q", "--allow-empty", "-m", "later"], cwd=repo, check=True)
    later = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout
    moved = queue("start", repo, home, records, "--commit", "HEAD", *tiny)  # the checkout's HEAD, not the worktree's
    assert moved.returncode == 0 and f"the queue runs from {later[:10]}" in moved.stdout, moved.stderr
    assert queue("pause", repo, home, records).returncode == 0


@pytest.mark.slow
def test_the_queues_runner_alternates_the_arms_and_records_each_trial_in_the_checkout(tmp_path):
    """The runner itself (in the foreground here, at this process's priority): the first arm's trial 0, a tuning of
    its own recorded with its journal in the checkout's records; the other arm's comes next; status counts them."""
    repo = repository(tmp_path / "nmt")
    home, records = tmp_path / "nmt-queue", tmp_path / "records"
    subprocess.run(["git", "worktree", "add", "--detach", str(home)], cwd=repo, check=True, capture_output=True)
    (home / ".queue").mkdir()
    tiny = tiny_design(tmp_path)
    ran = queue("run", home, home, records, "--steps", "1", *tiny)
    assert ran.returncode == 0, ran.stderr[-3000:]
    first, other = design.TUNED
    started = [
        line.split(" tune ", 1)[1] for line in ran.stdout.splitlines() if line.startswith("20") and " tune " in line
    ]
    assert len(started) == 1 and started[0].startswith(f"--families {first} --trials 1 ")
    assert (
        progress.trial_path(records / "tune", first, 0).is_file() and (records / "tune" / f"{first}.journal").is_file()
    )
    assert next_step(records, set()) == Step("tune", other, 1)  # the arm with fewer trials ended goes next
    assert next_step(records, {other}) == Step("tune", first, 2)  # an arm that failed twice in a row is left
    status = queue("status", repo, home, records).stdout
    assert "queue: paused" in status and f"{first} 1 of {design.TRIALS}, {other} 0 of" in status
    assert f"({first} trial000: " in status and " validations, valid BLEU " in status  # how far its newest run is


def tuned(records: Path) -> dict[str, str]:
    """Both arms' tunings recorded (design.TRIALS trials each, one pruned): trial 3 beats trial 0 (the defaults) by
    more than design.ADOPT_MARGIN, trial 4 by less with its average of 2; the choice's options."""
    choice = {"trainer.lr": "0.003", "trainer.label_smoothing": "0.2"}
    for target in design.TUNED:
        for number in range(design.TRIALS):
            bleu = {0: 10.0, 3: 10.0 + design.ADOPT_MARGIN + 0.1, 4: 10.2}.get(number, 9.0)
            trial = {"family": target, "number": number, "valid_bleu": bleu, "averaging": {"2": bleu - 0.5}}
            trial["petaflops"] = 0.1
            trial |= {"stopped_by": "pruned" if number == 5 else "patience", "options": {"trainer.lr": "0.001"}}
            if number == 3:
                trial["options"] = choice
            path = progress.trial_path(records / "tune", target, number)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(trial))
    return choice


def test_once_both_arms_are_tuned_the_queue_trains_the_final_runs_alternating_with_each_arms_choice(tmp_path):
    """After the tuning, the final runs (design.FINAL_RUNS), the arms alternating, each seed from FIRST_SEED on: one
    trained by the runner with its arm's tuned choice and the design's protocol, recorded as make results records its
    runs (with its test BLEU), in the checkout's records/<part>; then the other arm's first seed."""
    repo = repository(tmp_path / "nmt")
    home, records = tmp_path / "nmt-queue", tmp_path / "records"
    subprocess.run(["git", "worktree", "add", "--detach", str(home)], cwd=repo, check=True, capture_output=True)
    (home / ".queue").mkdir()
    choice = tuned(records)
    (part, first), (other_part, other) = [(p, t) for p, runs in design.FINAL_RUNS.items() for t in runs]
    assert next_step(records, set()) == Step(part, first, design.FIRST_SEED)
    ran = queue("run", home, home, records, "--steps", "1", *tiny_design(tmp_path))
    assert ran.returncode == 0, ran.stderr[-3000:]
    record = load_record(records / part / first / f"seed{design.FIRST_SEED}.record.json")
    trainer = record["config"]["trainer"]
    assert trainer["lr"] == float(choice["trainer.lr"]) and trainer["label_smoothing"] == 0.2
    assert trainer["average_last"] == 1 and trainer["patience"] == design.PATIENCE and trainer["precision"] == "fp32"
    assert record["test_bleu_beam"] is not None and record["seed"] == design.FIRST_SEED
    assert next_step(records, set()) == Step(other_part, other, design.FIRST_SEED)  # the arms alternate
    assert next_step(records, {other}) == Step(part, first, design.FIRST_SEED + 1)
    status = queue("status", repo, home, records).stdout
    assert f"{part}: {first} 1 of {design.SEEDS}" in status and f"({first} seed{design.FIRST_SEED}: " in status


def test_queue_record_commits_the_records_with_the_tables_they_render_and_nothing_else(tmp_path):
    """`record` commits the records so far with every generated table rendered again from them: the committed
    tables match the committed records (a record committed alone failed CI); another change of the checkout stays
    uncommitted, a document with changes of its own besides its tables is refused by name (it would go in whole), and
    with nothing new it says so and commits nothing."""
    repo = commands.copy_checkout(tmp_path / "nmt", ("tests/",))
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the code under test"]):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *command], cwd=repo, check=True)
    tuned(repo / "results" / "runs")
    (repo / "train.py").write_text((repo / "train.py").read_text() + "\n# a change of the user's own\n")
    environment = os.environ | {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org"}
    environment |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}
    command = [sys.executable, "-m", "nmt_study", "queue", "record", "--home", str(tmp_path / "nmt-queue")]
    guide = repo / "docs" / "tuning.md"
    guide.write_text(guide.read_text() + "\nA paragraph of the user's own.\n")
    refused = subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=120, env=environment)
    assert refused.returncode == 1 and "docs/tuning.md has changes of its own" in refused.stderr, refused.stderr
    subprocess.run(["git", "checkout", "--", "docs/tuning.md"], cwd=repo, check=True)
    done = subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=120, env=environment)
    assert done.returncode == 0 and "\ncommitted " in done.stdout, done.stderr[-3000:]
    total = 2 * design.TRIALS
    assert f"tune: {design.TUNED[0]} {design.TRIALS} of {design.TRIALS}" in done.stdout
    git = ["git", "-C", str(repo)]
    changed = subprocess.run([*git, "show", "--name-only", "--format=", "HEAD"], capture_output=True, text=True).stdout
    assert "docs/tuning.md" in changed and f"results/runs/tune/{design.TUNED[0]}/trial003.json" in changed
    assert subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True).stdout == " M train.py\n"
    committed = subprocess.run([*git, "show", "HEAD:docs/tuning.md"], capture_output=True, text=True).stdout
    assert f"| {total} of {total} |" in committed or f"| {total} of {total + 2 * design.SEEDS} |" in committed
    assert f"**{design.TUNED[0]}**: {design.TRIALS} trials (1 pruned)" in committed  # the tuning's trials block too
    again = subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=120, env=environment)
    assert again.returncode == 0 and again.stdout.startswith("nothing new to commit"), again.stdout + again.stderr


class Process:
    def __init__(self, pid: str):
        self.cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")


def processes() -> list[Process]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found.append(Process(entry.name))
            except OSError:
                continue
    return found
