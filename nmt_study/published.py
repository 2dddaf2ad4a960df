"""The results README.md and docs/ report, as JSON in results/: each part's (written by `make results` from its runs,
with the commit, config, seed and machine of each), the records of its runs (results/runs/) and the measurements of
speed and memory (results/measured/). nmt_study/tables.py renders the tables from them.
"""

from __future__ import annotations

import datetime
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from nmt.device import cpu_name
from nmt.paths import read_json, write_text
from nmt.runs.provenance import loaded_code
from nmt_study import design
from nmt_study.significance import MIN_SEEDS

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
# Each finished run of make results as its record (nmt_study.records.save_record):
# <part>/<variant>/seed<N>.record.json
RECORDS = RESULTS / "runs"
# make results' parts, in order; the first two train the FAMILIES and nmt_study.design's CLAIM_RUNS
PARTS = ("main", "claims", "lab", "others")  # the claims judge main's runs too: main first
# The reports and records of the protocol before the converged study's (5e14 FLOPs each, the defaults untuned; the
# claims part trained every variant a claim rests on, fp32 and one thread pinned): kept under a name that says what
# they were, results/<name>.json and results/runs/<name>/, and shown where today's runs have not replaced them (the
# main table until its runs are made; the claims the converged runs do not test again)
EARLIER = {"claims": "claims_5e14", "main": "main_5e14"}
# What the lab's runs pin, so that a seed gives the same model on any CPU: fp32 (`precision=auto` picks bf16 on
# CPUs with native bf16 and fp32 on others) and one thread (a reduction over more threads sums in another order).
# Their records hold both, and the report names the machines; on a GPU, fp32 without TF32 (nmt.device.exact_fp32).
PINNED = ["trainer.precision=fp32", "trainer.threads=1"]
# The protocol of the final runs (the converged claims' and the main table's) and of each tuning trial: trained until
# they stop learning, up to a compute cap, stopped earlier by patience on valid BLEU (nmt_study/design.py)
FINAL = {"max_flops": design.CAP, "patience": design.PATIENCE, "validations": design.VALIDATIONS, "select": "bleu"}
CAP = FINAL["max_flops"]
STOPPING = tuple(f"trainer.{key}={value}" for key, value in FINAL.items() if key != "max_flops")  # tuning adds its cap
PROTOCOL = (f"trainer.max_flops={CAP:g}", *STOPPING)


# The files whose marked blocks are generated
DOCUMENTS = (
    "README.md",
    "docs/results.md",
    "docs/speed.md",
    "docs/training.md",
    "docs/alignment.md",
    "docs/attention.md",
    "docs/tuning.md",
)
# The variables that hold this CPU's kernels to AVX2, as on a CPU without native bf16 (docs/speed.md); a measurement
# records those that were set
KERNEL_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")
HELD_TO_AVX2 = "ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2"
# Measurements of speed and memory (results/measured/<name>.json), each written by its script's --record, run alone
MEASUREMENTS = {
    "decode_memory": "python -m nmt_study measure decode_memory --record",
    "export": "python -m nmt_study measure export --record --checkpoint RUN/best.pt --data-dir ../shared/data/multi30k",
    "alignment_offset": "python -m nmt_study measure alignment_offset --record RUN...",
    "attention_kernels": "python -m nmt_study measure attention_kernels --record",
    "validation_cost": "python -m nmt_study measure validation_cost --record --data-dir ../shared/data/multi30k",
    "benchmark": "python -m nmt_study measure speed --record --data-dir ../shared/data/multi30k "
    "--checkpoints 'multirun/results/compare/runs/{model}/seed1234'",
    "benchmark_fp32": f"{HELD_TO_AVX2} python -m nmt_study measure speed --record benchmark_fp32 --train-only "
    "--data-dir ../shared/data/multi30k",
    "benchmark_cuda": "bash scripts/device_check.sh (on a GPU machine: nmt_study measure speed --record benchmark_cuda "
    "--train-only --device cuda)",
    "joeynmt": "python -m nmt_study measure joeynmt --record (after TRAIN_SECONDS=300 TP_SECONDS=60 RNN_VALID=100000 "
    "TF_VALID=100000 bash ../shared/peers/joeynmt/run.sh)",
    "joeynmt_fp32": f"python -m nmt_study measure joeynmt --record joeynmt_fp32 (after {HELD_TO_AVX2} "
    "TRAIN_SECONDS=300 TP_SECONDS=60 RNN_VALID=100000 TF_VALID=100000 bash ../shared/peers/joeynmt/run.sh)",
    "joeynmt_cuda": "python -m nmt_study measure joeynmt --record joeynmt_cuda --cuda DIR (DIR: what "
    "scripts/device_check.sh brought back of ../shared/peers/joeynmt/gpu.sh, in the call that wrote benchmark_cuda)",
}


def load(part: str, folder: Path = RESULTS) -> dict | None:
    path = folder / f"{part}.json"
    if not path.is_file():
        return None
    return read_json(
        path,
        "restore it from git, or make it again with the command that wrote it (docs/results.md: "
        "`python -m nmt_study results --parts PART --record` for a part's report)",
    )


def shown_report(part: str, folder: Path = RESULTS) -> tuple[dict | None, str]:
    """The report a part's tables show and its name: today's protocol's (results/<part>.json), or where it has none
    yet the earlier protocol's (EARLIER)."""
    record = load(part, folder)
    if record is None and part in EARLIER:
        return load(EARLIER[part], folder), EARLIER[part]
    return record, part


def finished(runs: Path) -> dict[str, list[int]]:
    """The seeds each variant has finished under a sweep folder (<variant>/seed<N>/results.json) or a folder of
    records (<variant>/seed<N>.record.json)."""
    found: dict[str, set[int]] = {}
    for result in runs.glob("*/seed*/results.json"):
        found.setdefault(result.parent.parent.name, set()).add(int(result.parent.name.removeprefix("seed")))
    for record in runs.glob("*/seed*.record.json"):
        found.setdefault(record.parent.name, set()).add(int(record.name.removeprefix("seed").split(".")[0]))
    return {variant: sorted(seeds) for variant, seeds in sorted(found.items())}


UNFINISHED = "its table is written when all its runs end"


def complete(finished: dict[str, list[int]], wanted: list[str]) -> bool:
    """Whether every variant of `wanted` has finished its seeds (`finished`: the seeds of each)."""
    return all(len(finished.get(variant, [])) >= MIN_SEEDS for variant in wanted)


FIGURES = ROOT / "docs" / "figures" / "results"
# The report figures that `make results` copies into FIGURES as <part>_<file>: (file, caption)
FIGURE_FILES = (
    ("bleu_by_compute.png", "valid BLEU against training compute"),
    ("bleu_by_length.png", "test BLEU by source sentence length"),
    ("attention.png", "each model's attention on a sentence we wrote"),
)


def copy_figures(report: Path, part: str, figures: Path = FIGURES, names: tuple[str, ...] = ()) -> None:
    """A report's figures (`names`, default FIGURE_FILES') into docs/figures/results/<part>_<file>, for README and
    docs/."""
    import shutil

    figures.mkdir(parents=True, exist_ok=True)
    for name in names or [name for name, _ in FIGURE_FILES]:
        if (report / name).is_file():
            shutil.copyfile(report / name, figures / f"{part}_{name}")


def invoked(argv: list[str]) -> list[str]:
    """The command line as typed: `python -m nmt_study ...` where Python gives the package's __main__.py path."""
    if Path(argv[0]).name == "__main__.py" and Path(argv[0]).parent.name == "nmt_study":
        return ["-m", "nmt_study", *argv[1:]]
    return argv


def record_measurement(
    name: str,
    columns: list[str],
    rows: list[list[str]],
    note: str = "",
    folder: Path = RESULTS,
    values: dict | None = None,
    measured_on: dict | None = None,
) -> Path:
    """Write results/measured/<name>.json: a measurement's table (formatted cells) and its raw `values`, the command
    that made it (with the variables that held the CPU's kernels, if set), when, at which commit, on which machine;
    `render(name)` gives the table with that line under it. `measured_on` replaces the date, machine, threads and
    torch of this process with those of the machine that measured (logs read here of a run on a GPU machine)."""
    import torch

    if name not in MEASUREMENTS:
        raise ValueError(f"{name}: not a measurement (results.MEASUREMENTS)")
    held = [f"{key}={os.environ[key]}" for key in KERNEL_VARIABLES if os.environ.get(key)]
    record = {
        "command": " ".join([*held, shlex.join(["python", *invoked(sys.argv)])]),
        **loaded_code(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="minutes"),
        "machine": f"{cpu_name()}, {os.cpu_count()} cores",
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "columns": columns,
        "rows": rows,
        "note": note,
        "values": values or {},
    }
    record |= {
        key: value for key, value in (measured_on or {}).items() if key in ("date", "machine", "threads", "torch")
    }
    (folder / "measured").mkdir(parents=True, exist_ok=True)
    path = folder / "measured" / f"{name}.json"
    write_text(path, json.dumps(record, indent=1) + "\n")
    return path


RULES = "nmt_study/claims.py"  # the claims' decision rules; a report names the commit that last changed them
# What a training run's outcome depends on: the toolkit and its configs, not the study that reads the runs
TRAINING_CODE = ("nmt", "configs", ":(exclude)nmt_study")


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


def rules_commit() -> str | None:
    """The commit that last changed the claims' rules (None outside a git checkout)."""
    try:
        return git("log", "-1", "--format=%H", "--", RULES).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def training_code_changed(commits: list[str]) -> bool | None:
    """Whether the training code differs between any of the commits a part's runs came from (None where git cannot
    say: no checkout, or a commit it does not hold); a commit with uncommitted changes counts as a change."""
    plain = sorted({c.removesuffix("+changes") for c in commits})
    if any(c.endswith("+changes") for c in commits):
        return True
    try:
        for other in plain[1:]:
            found = git("diff", "--quiet", plain[0], other, "--", *TRAINING_CODE)
            if found.returncode not in (0, 1):
                return None
            if found.returncode == 1:
                return True
    except (OSError, subprocess.SubprocessError):
        return None
    return False
