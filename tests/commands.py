"""`run`: a command as a test runs it (`python train.py ...`), with subprocess.run's answer, in a fraction of the time.

Most of a tiny command's time is Python importing torch and Hydra (about 3.5 s of 4.5 on 2 cores). A command whose
environment changes nothing read at start-up is forked from a zygote process that imported them once (tests/zygote.py):
a process of its own all the same, with its exit status, streams, folder and environment. Any other command (an
environment that sets what the interpreter or torch read as they start, an interpreter option, another executable)
runs as a fresh subprocess. NMT_TESTS_FRESH=1 runs every command fresh, as before.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ZYGOTE = Path(__file__).with_name("zygote.py")
READ_AT_START = ("PYTHON", "OMP_", "MKL_", "ATEN_", "TORCH_", "CUDA_", "KMP_", "NMT_TESTS_")  # env prefixes
INTERPRETER_OPTIONS = ("-X", "-W", "-u", "-I", "-O", "-S", "-E", "-B")


class Zygote:
    def __init__(self):
        requests_read, self.requests = os.pipe()
        self.answers, answers_write = os.pipe()
        self.process = subprocess.Popen(
            [sys.executable, str(ZYGOTE), str(requests_read), str(answers_write)],
            pass_fds=(requests_read, answers_write),
            stdin=subprocess.DEVNULL,
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

    def run(self, argv: list[str], cwd, env: dict, stdin: bytes | None, timeout: float | None):
        """(exit status, stdout, stderr) of `python *argv`, forked."""
        with tempfile.TemporaryDirectory(prefix="command-") as scratch:
            folder = Path(scratch)
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
            }
            os.write(self.requests, (json.dumps(request) + "\n").encode())
            pid = self.answer(timeout=60)["pid"]
            ended = self.answer(timeout)
            if ended is None:
                os.kill(pid, signal.SIGKILL)
                self.answer(timeout=60)
                raise subprocess.TimeoutExpired(argv, timeout, (folder / "stdout").read_bytes())
            return ended["rc"], (folder / "stdout").read_bytes(), (folder / "stderr").read_bytes()

    def close(self) -> None:
        os.close(self.requests)
        self.process.wait(timeout=30)


zygote: Zygote | None = None


def forkable(args: list[str], env: dict[str, str]) -> bool:
    """Whether the command can be forked: Python itself, no interpreter option, and nothing in its environment that
    the interpreter or torch read at start-up differs from this process's, which the zygote inherited."""
    if os.environ.get("NMT_TESTS_FRESH") or len(args) < 2 or args[0] != sys.executable:
        return False
    keys = {k for k in set(env) | set(os.environ) if k.startswith(READ_AT_START)}
    return args[1] not in INTERPRETER_OPTIONS and all(env.get(k) == os.environ.get(k) for k in keys)


def run(args, *, cwd, env: dict[str, str] | None = None, input=None, text: bool = False, timeout=None):
    """subprocess.run(args, cwd=cwd, env=env, input=input, text=text, timeout=timeout, capture_output=True)."""
    global zygote
    args = [str(a) for a in args]
    env = dict(os.environ if env is None else env)
    if not forkable(args, env):
        return subprocess.run(args, cwd=cwd, env=env, input=input, text=text, timeout=timeout, capture_output=True)
    if zygote is None:
        zygote = Zygote()
        atexit.register(zygote.close)
    stdin = input.encode() if isinstance(input, str) else input
    rc, stdout, stderr = zygote.run(args[1:], cwd, env, stdin, timeout)
    if text:
        stdout, stderr = stdout.decode(errors="replace"), stderr.decode(errors="replace")
    return subprocess.CompletedProcess(args, rc, stdout, stderr)
