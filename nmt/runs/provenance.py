"""Where a run's figures come from: the commit of the code that trained it, the machine, torch and the precision of
each invocation (`provenance_entry`, which RunFolder.record_provenance appends to the run's provenance.json), read
back for the study's records (`provenance_summary`, through RunFolder.provenance).
"""

from __future__ import annotations

import datetime
import functools
import os
import platform
import subprocess
from pathlib import Path

import torch

from nmt.device import cpu_kernels, cpu_name

NOT_CODE = (":(exclude)results", ":(exclude)docs", ":(exclude)*.md")  # git pathspecs
REPOSITORY = Path(__file__).resolve().parents[2]


def code_version(root: Path = REPOSITORY) -> dict:
    """The commit of the code that runs (and whether tracked files other than the results and their Markdown differ
    from it), where it is a git checkout; elsewhere (a copy of the tree on a GPU machine: scripts/device_check.sh)
    the commit the variable NMT_COMMIT names. `make results` rewrites results/ and the tables of README.md and docs/
    in its own checkout between its parts; that changes no code a later part runs."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        changed = bool(git("status", "--porcelain", "--untracked-files=no", "--", ".", *NOT_CODE))
    except (OSError, subprocess.SubprocessError):
        commit, changed = "", False
    commit = commit or os.environ.get("NMT_COMMIT", "")
    return {"commit": commit or None, "uncommitted_changes": changed}


@functools.cache
def loaded_code() -> dict:
    """The commit of the code this process runs (`code_version`), found once: at the start of its first run (or of a
    study program), never at import, and the same for every later run of the process (a sweep's worker), whatever is
    checked out meanwhile."""
    return code_version()


def provenance_entry(where: torch.device, precision: str = "") -> dict:
    """This invocation, as provenance.json lists it (RunFolder.record_provenance): the commit checked out when this
    process started its first run (`loaded_code`), the time, machine, torch, the precision it trained in, and a
    CPU's vector kernels or a GPU's CUDA stack."""
    machine = torch.cuda.get_device_name(where) if where.type == "cuda" else cpu_name()
    return {
        **loaded_code(),
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine,
        "platform": platform.platform(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "precision": precision,
        **(gpu_stack() if where.type == "cuda" else {"kernels": cpu_kernels()}),
    }


def gpu_stack() -> dict:
    """What a GPU run's arithmetic also rests on: the CUDA and cuDNN versions torch was built with and the driver's
    (nvidia-smi's; empty where it cannot be asked)."""
    try:
        found = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        driver = found.stdout.strip().splitlines()[0] if found.returncode == 0 and found.stdout.strip() else ""
    except (OSError, subprocess.SubprocessError):
        driver = ""
    return {"cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(), "driver": driver}


def provenance_summary(entries: list[dict] | None, finished: float | None, invocations: list[str]) -> dict:
    """The commits, start times, machines and torch versions of a run's invocations (`entries`, its provenance.json),
    and when it finished (`finished`: its results' modification time). A run started before train.py recorded them
    (`entries` None) has its dates from Hydra's records (`invocations`: their folders' names, <%Y-%m-%d_%H-%M-%S[.%f]>)
    and no commit: the commit checked out at that time need not be the code a long-lived worker process had loaded."""
    ended = datetime.datetime.fromtimestamp(finished, datetime.timezone.utc) if finished is not None else None
    done = {"finished": ended.isoformat(timespec="seconds")} if ended else {}
    if entries is not None:
        return done | {
            "commits": sorted(
                {e["commit"] + ("+changes" if e["uncommitted_changes"] else "") for e in entries if e["commit"]}
            ),
            "dates": [e["started"] for e in entries],
            "machines": sorted(
                {e["machine"] + (f" ({e['precision']})" if e.get("precision") else "") for e in entries}
            ),
            "torch": sorted({e["torch"] for e in entries if e.get("torch")}),
            "kernels": sorted({e["kernels"] for e in entries if e.get("kernels")}),
            "threads": sorted({e["threads"] for e in entries if e.get("threads")}),
            **{
                key: sorted({str(e[key]) for e in entries if e.get(key)})
                for key in ("cuda", "cudnn", "driver")
                if any(e.get(key) for e in entries)
            },
        }
    dates = [f"{day}T{time.replace('-', ':')}" for day, time in (r.split("_") for r in invocations)]
    return done | {"commits": [], "dates": dates, "machines": []}  # the commit was not recorded
