"""python -m nmt_study queue: the study's design (nmt_study/design.py) trained in the background of all other work.

  python -m nmt_study queue start     # make queue: start, or continue where it stopped
  python -m nmt_study queue pause     # make queue-pause: its running trial saves and stops; `start` continues it
  python -m nmt_study queue status    # make queue-status: running or paused, what is recorded, machine-hours left
  python -m nmt_study queue record    # make queue-record: the records so far committed with the tables they render

The queue trains from one fixed commit, in a git worktree of its own beside the checkout (../nmt-queue, --home), so
that work on the checkout never changes the code under a run; `start --commit REV` moves it to another commit (the
journal refuses a tuning whose protocol changed). Its runner is a process of its own at the lowest CPU priority
(SCHED_IDLE, nice 19: it takes only what other work leaves), its runs in the worktree's multirun/queue, outside the
checkout. It tunes both arms of the design one trial at a time, alternating between them so that every machine
trains both alike; each trial continues where it stopped (trainer.resume=auto), and each finished or pruned trial is
recorded, with the study's journal, in the checkout's results/runs/tune. Once both tunings are recorded it trains
the final runs (design.FINAL_RUNS: SEEDS seeds of each arm, the arms alternating) with each arm's tuned choice from
those records, each recorded, with its test BLEU, in results/runs/main or results/runs/claims as make results
records its runs. `record` commits them, with the tables of docs/tuning.md and the others that count them, rendered
again: a record committed without them leaves a table that no longer matches its records. A step that fails is named
in the log and asked again at the next start; an arm that fails twice in a row is left until then.
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
from dataclasses import dataclass
from pathlib import Path

from nmt import UserError
from nmt.paths import write_text
from nmt_study import design, progress, published, tables, tune
from nmt_study.cli import tune as tune_cli
from nmt_study.cli.results import MAIN_BEAM
from nmt_study.published import STOPPING, finished
from nmt_study.records import recorded_sweep
from nmt_study.sweep import ROOT

HOME = ROOT.parent / "nmt-queue"  # beside the checkout: the worktree the queue trains from
STATE = ".queue"  # in the worktree (ignored by git there: not a tracked path): pid, log, the step running


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m nmt_study queue", description=__doc__.split("\n\n")[0], epilog="make queue | queue-pause"
    )
    actions = ("start", "pause", "status", "record", "run", "final")
    parser.add_argument("action", choices=actions, help="run: the runner itself; final: one final run (the runner's)")
    parser.add_argument("--home", type=Path, default=HOME, help="the queue's worktree (default: ../nmt-queue)")
    parser.add_argument("--commit", default=None, help="start: train from this commit (default: the worktree's own)")
    parser.add_argument("--records", type=Path, default=ROOT / "results" / "runs", help="where records go")
    parser.add_argument("--flops", type=float, default=design.CAP, help=argparse.SUPPRESS)  # tests: a tiny design
    parser.add_argument("--validations", type=int, default=design.VALIDATIONS, help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=design.THREADS, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=0, help="run: stop after this many trials (0: the whole queue)")
    parser.add_argument("--extra", nargs="*", default=[], help="more train.py options (data.dir=...)")
    for option, kind in (("--part", str), ("--target", str), ("--seed", int)):  # final: which run
        parser.add_argument(option, type=kind, default=None, help=argparse.SUPPRESS)
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
    elif commit:  # named as the checkout names it (HEAD: the checkout's, not the worktree's)
        git("checkout", "--quiet", "--detach", git("rev-parse", "--verify", f"{commit}^{{commit}}"), cwd=home)
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
    study = "nmt_study" if (home / "nmt_study").is_dir() else "nmt.study"  # a worktree from before the move: its own
    command = [sys.executable, "-m", study, "queue", "run", "--home", str(home), "--records"]
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
    print("the queue is paused: its trial saved its run; `python -m nmt_study queue start` continues it")


def status_lines(args: argparse.Namespace) -> list[str]:
    """What `status` prints: the runner and its step, then each part's runs recorded and machine-hours left."""
    home = args.home.absolute()
    pid = runner_pid(home)
    commit = git("rev-parse", "--short", "HEAD", cwd=home) if (home / ".git").exists() else "none yet"
    step = home / STATE / "step.json"
    running = json.loads(step.read_text())["step"] if pid and step.is_file() else "nothing"
    lines = [f"queue: {'running, process ' + str(pid) if pid else 'paused'}; from {commit}; training {running}"]
    lines[0] += so_far(home)
    rates = progress.cpu_rates(args.records.parent / "measured" / "cpu_rate.json")
    for part in design.queue(progress.recorded_queue(args.records)):
        counts = ", ".join(f"{target} {part.done[target]} of {n}" for target, n in part.runs.items())
        left = f"; {design.machine_hours(part.left, rates):.1f} machine-hours left" if rates else ""
        lines.append(f"  {part.name}: {counts}{left}")
    return lines


def status(args: argparse.Namespace) -> None:
    print("\n".join(status_lines(args)))


def generated(document: str, text: str, records: Path) -> str:
    """`text` of `document` (published.DOCUMENTS) with every generated block rendered again from the records: the
    results tables, and in docs/tuning.md the tuning's trials from `records`/tune too."""
    if ROOT / document == tune_cli.DOCUMENT:
        return tune_cli.rendered_report(text, records / "tune")
    return tables.rendered(text)


def record(args: argparse.Namespace) -> None:
    """The records so far (--records: the trials, the tunings' journals, the final runs) committed on the checkout's
    branch with the generated blocks of published.DOCUMENTS rendered again from them, and nothing else the checkout
    holds; a document with changes of its own besides them is refused (it goes in whole). The message says where the
    queue stands."""
    records = args.records.absolute()
    texts = {}
    for document in published.DOCUMENTS:
        text = (ROOT / document).read_text(encoding="utf-8")
        texts[document] = generated(document, text, records)
        committed = subprocess.run(["git", "show", f"HEAD:{document}"], cwd=ROOT, capture_output=True, text=True)
        if committed.returncode == 0 and generated(document, committed.stdout, records) != texts[document]:
            raise UserError(
                f"{document} has changes of its own besides its generated tables: commit them (or stash them) first, "
                "then `python -m nmt_study queue record`"
            )
    for document, text in texts.items():
        if text != (ROOT / document).read_text(encoding="utf-8"):
            write_text(ROOT / document, text)
            print(f"rendered the tables of {document} again", flush=True)
    paths = [str(records), *(str(ROOT / document) for document in published.DOCUMENTS)]
    git("add", "--", *paths)
    if not git("diff", "--cached", "--name-only", "--", *paths):
        print("nothing new to commit: the records and their tables are as committed")
        return
    lines = status_lines(args)
    message = "The queue's records and the tables they render: " + "; ".join(line.strip() for line in lines[1:])
    git("commit", "--quiet", "-m", message, "-m", lines[0], "--", *paths)
    print(f"committed {git('rev-parse', '--short', 'HEAD')}: {message}")


def so_far(home: Path) -> str:
    """How far the newest run of the queue's worktree (a trial or a final run) is, from its last validation:
    " (transformer trial000: 4.0e+13 FLOPs, 2 validations, valid BLEU 12.3)"; empty before its first."""
    queued = home / "multirun" / "queue"  # tuning trials: <target>/trial<N>; final runs: <part>/<target>/seed<N>
    found = [*queued.glob("*/trial*/validations.jsonl"), *queued.glob("*/*/seed*/validations.jsonl")]
    runs = sorted(found, key=lambda p: p.stat().st_mtime)
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


@dataclass(frozen=True)
class Step:
    """What the queue trains next: a tuning trial of `target` (`part` "tune"; `number`: the trials its arm then
    holds) or a final run (`part` main or claims, design.FINAL_RUNS; `number`: its seed)."""

    part: str
    target: str
    number: int

    def __str__(self) -> str:
        if self.part == "tune":
            return f"{self.target} trial {self.number - 1}"
        return f"{self.target} seed {self.number} ({self.part})"


def next_step(records: Path, blocked: set[str]) -> Step | None:
    """What to train next. The tuning first: the arm with fewer trials ended (finished or pruned; the first of the
    design's order on a tie). Once both arms' tunings are recorded, the final runs the same way: the arm with fewer
    seeds recorded, its first seed without a record. None when the queue is done, or when what is left belongs to
    `blocked` arms (failed twice in a row)."""
    ended = {t: len(progress.ended_trials(records / "tune", t)) for t in design.TUNED}
    if any(n < design.TRIALS for n in ended.values()):
        open_arms = [t for t in design.TUNED if ended[t] < design.TRIALS and t not in blocked]
        if not open_arms:
            return None
        target = min(open_arms, key=lambda t: (ended[t], design.TUNED.index(t)))
        return Step("tune", target, ended[target] + 1)
    arms = [(part, target) for part, runs in design.FINAL_RUNS.items() for target in runs]
    seeds = range(design.FIRST_SEED, design.FIRST_SEED + design.SEEDS)
    have = {arm: set(finished(records / arm[0]).get(arm[1], [])) & set(seeds) for arm in arms}
    open_arms = [a for a in arms if len(have[a]) < design.FINAL_RUNS[a[0]][a[1]] and a[1] not in blocked]
    if not open_arms:
        return None
    part, target = min(open_arms, key=lambda a: (len(have[a]), arms.index(a)))
    return Step(part, target, next(seed for seed in seeds if seed not in have[(part, target)]))


def step_command(step: Step, args: argparse.Namespace) -> list[str]:
    """The command that trains `step`: a tuning of one trial more (nmt_study tune), or one final run (`final`)."""
    if step.part == "tune":
        command = [sys.executable, "-m", "nmt_study", "tune", "--families", step.target, "--trials", str(step.number)]
        command += ["--records", str(args.records / "tune"), "--runs", str(args.home / "multirun" / "queue")]
    else:
        command = [sys.executable, "-m", "nmt_study", "queue", "final", "--home", str(args.home), "--records"]
        command += [str(args.records), "--part", step.part, "--target", step.target, "--seed", str(step.number)]
    command += ["--flops", f"{args.flops:g}", "--validations", str(args.validations), "--threads", str(args.threads)]
    return command + (["--extra", *args.extra] if args.extra else [])


def final_overrides(args: argparse.Namespace) -> list[str]:
    """A final run's options: the design's protocol (up to the cap, a validation every SPACING FLOPs, patience on
    valid BLEU), its pinned precision and threads, and the arm's tuned choice (nmt_study.tune.choice: trial 0's
    defaults unless a trial beat them by design.ADOPT_MARGIN), from the tuning's records."""
    choice = tune.choice(tune.trials_of(args.records / "tune", args.target))
    if not choice:
        raise UserError(f"{args.target}: no finished tuning trial in {args.records / 'tune'}; tune it first")
    stopping = [o for o in STOPPING if not o.startswith("trainer.validations=")]  # patience and select on valid BLEU
    protocol = [f"trainer.max_flops={args.flops:g}", *stopping, f"trainer.validations={args.validations}"]
    protocol += design.pinned(args.threads)
    return ["trainer.progress=false", *protocol, *(f"{k}={v}" for k, v in sorted(choice.items())), *args.extra]


def final(args: argparse.Namespace) -> None:
    """One final run of the design (`--part`, `--target`, `--seed`), trained in the worktree's multirun/queue/<part>
    as `python train.py variant=<target>` trains it with final_overrides, and recorded with its test BLEU (beam
    MAIN_BEAM) in the checkout's records/<part>/<target>/seed<N>.record.json, as make results records its runs."""
    if args.part not in design.FINAL_RUNS or args.target not in design.FINAL_RUNS[args.part]:
        raise UserError(f"--part {args.part} --target {args.target}: not one of the design's final runs")
    folder = args.home / "multirun" / "queue" / args.part
    recorded_sweep([args.target], [args.seed], final_overrides(args), folder, args.records / args.part, MAIN_BEAM)


def run(args: argparse.Namespace) -> None:
    """The runner: one step after another (a tuning trial, then the final runs) until the design's runs are all
    recorded, a stop signal, or each arm left failing twice in a row."""
    child: list[subprocess.Popen] = []
    stopped: list[int] = []

    def stop(number, _frame):  # passed on; the runner ends once its child has saved its run and ended
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
        (args.home / STATE / "step.json").write_text(json.dumps({"step": str(step)}) + "\n")
        command = step_command(step, args)
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(command[1:])}", flush=True)
        if stopped:
            break
        child[:] = [subprocess.Popen(command, cwd=args.home)]
        code = child[0].wait()
        if stopped:
            print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} paused", flush=True)
            sys.exit(128 + stopped[0])
        failures[step.target] = 0 if code == 0 else failures.get(step.target, 0) + 1
    (args.home / STATE / "step.json").unlink(missing_ok=True)
    blocked = sorted(t for t, n in failures.items() if n >= 2)
    if blocked:
        sys.exit(f"the queue stopped: {', '.join(blocked)} failed twice in a row (the log above says why)")
    print(
        f"the design's runs are all recorded in {args.records}: `python -m nmt_study queue record` commits them, "
        "then `python -m nmt_study tune --report "
        "--apply` makes the tuned choices the defaults and `python -m nmt_study results --parts main,claims --record` "
        "reports on them",
        flush=True,
    )


def main(argv: list[str]) -> None:
    args = arguments(argv)
    actions = {"start": start, "pause": pause, "status": status, "record": record, "run": run, "final": final}
    actions[args.action](args)
