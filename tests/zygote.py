"""A process that has imported torch, Hydra and nmt's commands once and forks a child for each command a test runs.

Started by `commands.run` (one per pytest worker); never run by hand. A command run through it is still a process of
its own (its own exit status, signals, working folder, environment and standard streams), without the three to four
seconds a fresh `python train.py` spends importing: the child starts with the modules loaded. It never runs a tensor
operation itself, so the children start with no OpenMP thread pool to inherit.

Protocol: one JSON request a line on the descriptor named by argv[1] {argv, cwd, env, stdin, stdout, stderr, session}
(stdin/stdout/stderr: file paths), answered on argv[2] with {"pid"} when the child starts and {"rc"} when it ends
(a negative signal number if a signal ended it, as subprocess reports).
"""

import atexit
import io
import json
import os
import runpy
import signal
import sys
import traceback

PRELOADED = (
    "torch",
    "numpy",
    "hydra",
    "omegaconf",
    "sentencepiece",
    "sacrebleu",
    "tqdm",
    "torch.utils.tensorboard",
    "torch._dynamo",  # torch.optim's first optimiser imports it: 2.4 s of a tiny train.py command's 9 s
    "torch.distributed",
    "torch.onnx",
    "torch._inductor",
    "PIL.Image",
    "nmt.cli.train",
    "nmt.launch.experiment",  # nmt.cli.train loads it when a run starts
    "nmt.cli.evaluate",
    "nmt.cli.translate",
    "nmt_study.cli",
)


def standard_streams() -> None:
    """Python's standard streams on descriptors 0-2 as a fresh interpreter makes them for pipes and files."""
    encoding = os.environ.get("PYTHONIOENCODING", "utf-8").split(":")[0] or "utf-8"
    sys.stdin = sys.__stdin__ = open(0, encoding=encoding, closefd=False)  # noqa: SIM115
    sys.stdout = sys.__stdout__ = open(1, "w", encoding=encoding, closefd=False)  # noqa: SIM115
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(
        open(2, "wb", buffering=0, closefd=False), encoding=encoding, errors="backslashreplace", line_buffering=True
    )


def child(request: dict) -> None:
    """Become the command: never returns."""
    code = 1
    try:
        os.setsid() if request.get("session") else None  # subprocess's start_new_session
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for fd, (path, flags) in enumerate(
            [
                (request["stdin"] or os.devnull, os.O_RDONLY),
                (request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                (request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
            ]
        ):
            opened = os.open(path, flags, 0o644)
            os.dup2(opened, fd)
            os.close(opened)
        standard_streams()
        argv = request["argv"]
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        elif argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            sys.path[0] = ""
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
        else:
            sys.argv = list(argv)
            sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if not isinstance(stop.code, (int, type(None))):
            print(stop.code, file=sys.stderr)
    except KeyboardInterrupt:  # as Python does: the traceback, then death by SIGINT
        traceback.print_exc()
        code = None
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            if code is None:
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGINT)
            os._exit(1 if code is None else code)


def main() -> None:
    requests, answers = int(sys.argv[1]), int(sys.argv[2])
    for name in PRELOADED:
        __import__(name)
    import nmt.decoding.plot

    nmt.decoding.plot.pyplot()  # matplotlib with its Agg backend, as a run's first heatmap loads it (no figure)
    reader = os.fdopen(requests, "r", encoding="utf-8")
    writer = os.fdopen(answers, "w", encoding="utf-8")
    writer.write(json.dumps({"ready": True}) + "\n")
    writer.flush()
    for line in reader:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            reader.close()
            writer.close()
            child(request)
        writer.write(json.dumps({"pid": pid}) + "\n")
        writer.flush()
        _, status = os.waitpid(pid, 0)
        rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        writer.write(json.dumps({"rc": rc}) + "\n")
        writer.flush()


if __name__ == "__main__":
    main()
