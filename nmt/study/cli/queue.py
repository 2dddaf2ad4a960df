"""python -m nmt.study queue: the study's design (nmt/study/design.py) trained in the background of all other work.

  python -m nmt.study queue start     # make queue: start, or continue where it stopped
  python -m nmt.study queue pause     # make queue-pause: its running trial saves and stops; `start` continues it
  python -m nmt.study queue status    # make queue-status: running or paused, what is recorded, machine-hours left

The queue trains from one fixed commit, in a git worktree of its own beside the checkout (../nmt-queue, --home), so
that work on the checkout never changes the code under a run; `start --commit REV` moves it to another commit (the
journal refuses a tuning whose protocol changed). Its runner is a process of its own at the lowest CPU priority
(SCHED_IDLE, nice 19: it takes only what other work leaves), its runs in the worktree's multirun/queue, outside the
checkout. It tunes both arms of the design one trial at a time, alternating between them so that every machine
trains both alike; each trial continues where it stopped (trainer.resume=auto), and each finished or pruned trial is
recorded, with the study's journal, in the checkout's results/runs/tune (commit them). A trial that fails is named in
the log and asked again at the next start; an arm that fails twice in a row is left until then.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from nmt import UserError
from nmt.study import design, progress
from nmt.study.sweep import ROOT

HOME = ROOT.parent / "nmt-queue"  # beside the checkout: the worktree the queue trains from
STATE = ".queue"  # in the worktree (ignored by git there: not a tracked path): pid, log, the step running


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m nmt.study queue", description=__doc__.split("\n\n")[0], epilog="make queue | queue-pause"
    )
    parser.add_argument("action", choices=("start", "pause", "status", "run"), help="run: the runner itself")
    parser.add_argument("--home", type=Path, default=HOME, help="the queue's worktree (default: ../nmt-queue)")
    parser.add_argument("--commit", default=None, help="start: train from this commit (default: the worktree's own)")
    parser.add_argument("--records", type=Path, default=ROOT / "results" / "runs", help="where records go")
    parser.add_argument("--flops", type=float, default=design.CAP, help=argparse.SUPPRESS)  # tests: a tiny design
    parser.add_argument("--validations", type=int, default=design.VALIDATIONS, help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=design.THREADS, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=0, help="run: stop after this many trials (0: the whole queue)")
    parser.add_argument("--extra", nargs="*", default=[], help="more train.py options (data.dir=...)")
    return parser.parse_args(argv)


def runner_pid(home: Path) -> int | None:
    """The running runner's process id, or None (no pid file, or its process has ended)."""
    path = home / STATE / "pid"
    with contextlib.suppress(OSError, ValueError):
        pid = int(path.read_text())
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if b"queue" in command and b"run" in command:
            return pid
    return None


def git(*args: str, cwd: Path = ROOT) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise UserError(f"git {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip()


def worktree(home: Path, commit: str | None) -> str:
    """The queue's worktree at `commit` (made at the checkout's HEAD where new, kept at its own commit otherwise);
    its commit."""
    if not (home / ".git").exists():
        if home.exists() and any(home.iterdir()):
            raise UserError(f"--home {home}: a folder that is not the queue's worktree; give an empty or new folder")
        git("worktree", "add", "--detach", str(home), commit or "HEAD")
    elif commit:
        git("checkout", "--quiet", "--detach", commit, cwd=home)
    return git("rev-parse", "HEAD", cwd=home)


def lowest_priority() -> None:
    """In the runner, before it runs (after its setsid): the idle scheduling class (it runs only when no other
    process wants the CPU) and nice 19, which its trials inherit; and where the kernel groups sessions for fairness
    (autogroup), its new session's group at nice 19 too: otherwise the group gets half the machine against any other
    session's work, whatever its processes' own priority (measured: a make demo beside it trained at a fifth of its
    speed alone)."""
    os.nice(19)
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    with contextlib.suppress(OSError):
        Path("/proc/self/autogroup").write_text("19")


def start(args: argparse.Namespace) -> None:
    home = args.home.absolute()
    if pid := runner_pid(home):
        print(f"the queue is running (process {pid}, from {git('rev-parse', '--short', 'HEAD', cwd=home)})")
        return
    commit = worktree(home, args.commit)
    (home / STATE).mkdir(exist_ok=True)
    command = [sys.executable, "-m", "nmt.study", "queue", "run", "--home", str(home), "--records"]
    command += [str(args.records.absolute()), "--flops", f"{args.flops:g}", "--validations", str(args.validations)]
    command += ["--threads", str(args.threads)]
    command += ["--extra", *args.extra] if args.extra else []
    with open(home / STATE / "queue.log", "a", encoding="utf-8") as log:
        runner = subprocess.Popen(
            command, cwd=home, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=lowest_priority,
        )  # fmt: skip
    (home / STATE / "pid").write_text(f"{runner.pid}\n")
    print(f"the queue runs from {commit[:10]} in {home} (process {runner.pid}); its log: {home / STATE / 'queue.log'}")


def pause(args: argparse.Namespace) -> None:
    """SIGTERM to the runner, which passes it to its tuning and that to its trial: the trial saves its last update;
    waited for until the runner has ended."""
    home = args.home.absolute()
    pid = runner_pid(home)
    if pid is None:
        print("the queue is not running")
        return
    os.kill(pid, signal.SIGTERM)
    while runner_pid(home) == pid:
        time.sleep(0.5)
    print("the queue is paused: its trial saved its run; `python -m nmt.study queue start` continues it")


def status(args: argparse.Namespace) -> None:
    home = args.home.absolute()
    pid = runner_pid(home)
    commit = git("rev-parse", "--short", "HEAD", cwd=home) if (home / ".git").exists() else "none yet"
    step = home / STATE / "step.json"
    running = json.loads(step.read_text())["step"] if pid and step.is_file() else "nothing"
    print(
        f"queue: {'running, process ' + str(pid) if pid else 'paused'}; from {commit}; training {running}{so_far(home)}"
    )
    done = progress.recorded_queue(args.records)
    parts = design.queue(done)
    rates = progress.cpu_rates(args.records.parent / "measured" / "cpu_rate.json")
    for part in parts:
        counts = ", ".join(f"{target} {part.done[target]} of {n}" for target, n in part.runs.items())
        left = f"; {design.machine_hours(part.left, rates):.1f} machine-hours left" if rates else ""
        print(f"  {part.name}: {counts}{left}")


def so_far(home: Path) -> str:
    """How far the newest trial run of the queue's worktree is, from its last validation: " (4.0e+13 FLOPs, 2 of 50
    validations, valid BLEU 12.3)"; empty before its first."""
    runs = sorted((home / "multirun" / "queue").glob("*/trial*/validations.jsonl"), key=lambda p: p.stat().st_mtime)
    if not runs:
        return ""
    lines = runs[-1].read_text(encoding="utf-8").splitlines()
    with contextlib.suppress(ValueError, KeyError, IndexError):
        last = json.loads(lines[-1])
        where = f"{runs[-1].parent.parent.name} {runs[-1].parent.name}"
        return (
            f" ({where}: {last['petaflops'] * 1e15:.1e} FLOPs, {len(lines)} validations, valid BLEU {last['bleu']:.1f})"
        )
    return ""


def next_step(records: Path, blocked: set[str]) -> tuple[str, int] | None:
    """The tuning trial to train next: the arm with fewer trials ended (finished or pruned; the first of the design's
    order on a tie), and the number of trials it then holds; None when both arms' tunings are complete."""
    ended = {t: len(progress.ended_trials(records / "tune", t)) for t in design.TUNED if t not in blocked}
    open_arms = [t for t in design.TUNED if t in ended and ended[t] < design.TRIALS]
    if not open_arms:
        return None
    target = min(open_arms, key=lambda t: (ended[t], design.TUNED.index(t)))
    return target, ended[target] + 1


def run(args: argparse.Namespace) -> None:
    """The runner: one tuning trial after another until both arms' tunings are recorded, a stop signal, or both arms
    failing twice in a row."""
    child: list[subprocess.Popen] = []
    stopped: list[int] = []

    def stop(number, _frame):  # passed on; the runner ends once its tuning has saved its trial and ended
        stopped.append(number)
        for process in child:
            process.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    failures: dict[str, int] = {}
    taken = 0
    while (step := next_step(args.records, {t for t, n in failures.items() if n >= 2})) is not None:
        if args.steps and taken == args.steps:
            return
        taken += 1
        target, trials = step
        (args.home / STATE / "step.json").write_text(json.dumps({"step": f"{target} trial {trials - 1}"}) + "\n")
        command = [sys.executable, "-m", "nmt.study", "tune", "--families", target, "--trials", str(trials)]
        command += ["--records", str(args.records / "tune"), "--runs", str(args.home / "multirun" / "queue")]
        command += [
            "--flops",
            f"{args.flops:g}",
            "--validations",
            str(args.validations),
            "--threads",
            str(args.threads),
        ]
        command += ["--extra", *args.extra] if args.extra else []
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(command[1:])}", flush=True)
        if stopped:
            break
        child[:] = [subprocess.Popen(command, cwd=args.home)]
        code = child[0].wait()
        if stopped:
            print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} paused", flush=True)
            sys.exit(128 + stopped[0])
        failures[target] = 0 if code == 0 else failures.get(target, 0) + 1
    (args.home / STATE / "step.json").unlink(missing_ok=True)
    blocked = sorted(t for t, n in failures.items() if n >= 2)
    if blocked:
        sys.exit(f"the queue stopped: {', '.join(blocked)} failed twice in a row (the log above says why)")
    print(
        "both arms' tunings are recorded: `python -m nmt.study tune --report --apply` makes their choices the "
        "defaults, then the final runs (design.FINAL_RUNS) train",
        flush=True,
    )


def main(argv: list[str]) -> None:
    args = arguments(argv)
    {"start": start, "pause": pause, "status": status, "run": run}[args.action](args)
