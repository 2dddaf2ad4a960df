"""`run`: a command as a test runs it (`python train.py ...`), with subprocess.run's answer, in a fraction of the time.

Most of a tiny command's time is Python importing torch and Hydra (about 3.5 s of 4.5 on 2 cores). A command is
forked from a zygote process that imported them once (tests/zygote.py): a process of its own all the same, with its
exit status, streams, folder and environment. Each start-up environment (what of it the interpreter or torch read as
they start: a CPU held to AVX2, a thread count) has a zygote of its own, started with it on its first command. A
command with an interpreter option, or another executable, runs as a fresh subprocess; NMT_TESTS_FRESH=1 (in the
command's environment: that one; in the suite's: every command) runs fresh, as before. `start` is Popen's counterpart,
for tests that signal or kill the command while it runs.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ZYGOTE = Path(__file__).with_name("zygote.py")
READ_AT_START = ("PYTHON", "OMP_", "MKL_", "ATEN_", "TORCH_", "CUDA_", "KMP_", "NMT_TESTS_")  # env prefixes
INTERPRETER_OPTIONS = ("-X", "-W", "-u", "-I", "-O", "-S", "-E", "-B")


class Zygote:
    def __init__(self, env: dict[str, str] | None = None):
        requests_read, self.requests = os.pipe()
        self.answers, answers_write = os.pipe()
        self.process = subprocess.Popen(
            [sys.executable, str(ZYGOTE), str(requests_read), str(answers_write)],
            pass_fds=(requests_read, answers_write),
            stdin=subprocess.DEVNULL,
            env=env,
        )
        os.close(requests_read)
        os.close(answers_write)
        self.buffer = b""
        assert self.answer(timeout=120) == {"ready": True}

    def answer(self, timeout: float | None) -> dict | None:
        """The zygote's next line, or None if none came within `timeout` seconds."""
        while b"\n" not in self.buffer:
            readable, _, _ = select.select([self.answers], [], [], timeout)
            if not readable:
                return None
            chunk = os.read(self.answers, 65536)
            if not chunk:
                raise RuntimeError("the test zygote ended")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def start(self, argv: list[str], cwd, env: dict, stdin: bytes | None, folder: Path, session: bool = False) -> int:
        """Fork `python *argv` with its standard streams in `folder`; its pid. `ended` reads its exit status: until
        then the zygote waits on this child and takes no other request."""
        stdin_path = None
        if stdin is not None:
            stdin_path = folder / "stdin"
            stdin_path.write_bytes(stdin)
        request = {
            "argv": argv,
            "cwd": str(cwd),
            "env": env,
            "stdin": str(stdin_path) if stdin_path else None,
            "stdout": str(folder / "stdout"),
            "stderr": str(folder / "stderr"),
            "session": session,
        }
        os.write(self.requests, (json.dumps(request) + "\n").encode())
        return self.answer(timeout=60)["pid"]

    def ended(self, timeout: float | None) -> int | None:
        """The started child's exit status, or None if it has not ended within `timeout` seconds."""
        answer = self.answer(timeout)
        return None if answer is None else answer["rc"]

    def run(self, argv: list[str], cwd, env: dict, stdin: bytes | None, timeout: float | None):
        """(exit status, stdout, stderr) of `python *argv`, forked."""
        with tempfile.TemporaryDirectory(prefix="command-") as scratch:
            folder = Path(scratch)
            pid = self.start(argv, cwd, env, stdin, folder)
            rc = self.ended(timeout)
            if rc is None:
                os.kill(pid, signal.SIGKILL)
                self.ended(timeout=60)
                raise subprocess.TimeoutExpired(argv, timeout, (folder / "stdout").read_bytes())
            return rc, (folder / "stdout").read_bytes(), (folder / "stderr").read_bytes()

    def close(self) -> None:
        os.close(self.requests)
        self.process.wait(timeout=30)


# One zygote for each start-up environment a command asks for (the variables READ_AT_START that it sets): this
# process's own, and for example a CPU held to AVX2 (tests/test_device.py), whose commands then fork too
zygotes: dict[tuple[tuple[str, str], ...], Zygote] = {}


def start_up(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """What of `env` the interpreter or torch read as they start: the zygote it forks from."""
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith(READ_AT_START)))


def forkable(args: list[str], env: dict[str, str]) -> bool:
    """Whether the command can be forked: Python itself with no interpreter option (a zygote with its start-up
    environment runs it)."""
    if os.environ.get("NMT_TESTS_FRESH") or env.get("NMT_TESTS_FRESH") or len(args) < 2 or args[0] != sys.executable:
        return False
    return args[1] not in INTERPRETER_OPTIONS


def the_zygote(env: dict[str, str]) -> Zygote:
    """The zygote of `env`'s start-up environment, started on its first command."""
    key = start_up(env)
    if key not in zygotes:
        own = {k: v for k, v in os.environ.items() if not k.startswith(READ_AT_START)}
        zygotes[key] = Zygote(None if key == start_up(dict(os.environ)) else {**own, **dict(key)})
        atexit.register(zygotes[key].close)
    return zygotes[key]


def zygote_free() -> bool:
    """Whether no started command holds the zygote (one that a test left running still does)."""
    return Started.running is None or Started.running.poll() is not None


def run(args, *, cwd, env: dict[str, str] | None = None, input=None, text: bool = False, timeout=None):
    """subprocess.run(args, cwd=cwd, env=env, input=input, text=text, timeout=timeout, capture_output=True)."""
    args = [str(a) for a in args]
    env = dict(os.environ if env is None else env)
    if not forkable(args, env) or not zygote_free():
        return subprocess.run(args, cwd=cwd, env=env, input=input, text=text, timeout=timeout, capture_output=True)
    stdin = input.encode() if isinstance(input, str) else input
    rc, stdout, stderr = the_zygote(env).run(args[1:], cwd, env, stdin, timeout)
    if text:
        stdout, stderr = stdout.decode(errors="replace"), stderr.decode(errors="replace")
    return subprocess.CompletedProcess(args, rc, stdout, stderr)


class Started:
    """A command started through the zygote, as `start` gives it: subprocess.Popen's pid, returncode, poll, wait,
    send_signal, kill and communicate, its output read when it has ended. While one runs, `run` starts fresh
    processes (the zygote waits on this one)."""

    running: Started | None = None

    def __init__(self, args: list[str], cwd, env: dict, text: bool, session: bool):
        self.args, self.text, self.returncode = args, text, None
        self.scratch = tempfile.TemporaryDirectory(prefix="command-")
        self.folder = Path(self.scratch.name)
        self.zygote = the_zygote(env)
        self.pid = self.zygote.start(args[1:], cwd, env, None, self.folder, session)
        Started.running = self

    def poll(self) -> int | None:
        return self.returncode if self.returncode is not None else self.ended(0)

    def ended(self, timeout: float | None) -> int | None:
        if self.returncode is None:
            rc = self.zygote.ended(timeout)
            if rc is not None:
                self.returncode, Started.running = rc, None
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.ended(timeout) is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, number: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, number)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple:
        self.wait(timeout)
        streams = [(self.folder / name).read_bytes() for name in ("stdout", "stderr")]
        self.scratch.cleanup()
        return tuple(s.decode(errors="replace") for s in streams) if self.text else tuple(streams)


def start(args, *, cwd, env: dict[str, str] | None = None, text: bool = False, start_new_session: bool = False):
    """subprocess.Popen(args, cwd=cwd, env=env, text=text, start_new_session=..., stdout=PIPE, stderr=PIPE), forked
    where `run` would fork it (`Started`); communicate() gives its output once it has ended."""
    args = [str(a) for a in args]
    env = dict(os.environ if env is None else env)
    if not forkable(args, env) or not zygote_free():
        return subprocess.Popen(
            args,
            cwd=cwd,
            env=env,
            text=text,
            start_new_session=start_new_session,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    return Started(args, cwd, env, text, start_new_session)


def copy_checkout(folder: Path, left_out: tuple[str, ...] = ()) -> Path:
    """The checkout's files as a commit of them would hold them now (tracked, and untracked ones git does not
    ignore) copied into `folder`, those under `left_out` prefixes skipped: a fresh copy a test types commands in."""
    from conftest import ROOT

    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if not name.startswith(left_out) and (ROOT / name).is_file():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, folder / name)
    return folder
