"""How far the converged queue is and how fast a GPU gets through it, from the committed records: the tuning trials
and final runs recorded (nmt/study/design.py's RUNS), and the end-to-end rate of the sweeps run on a GPU.
docs/tuning.md's queue table (nmt.study.tables) is rendered from them."""

from __future__ import annotations

import datetime
import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from nmt.study import design
from nmt.study.published import RECORDS, finished


def trial_path(records: Path, target: str, number: int) -> Path:
    """Where a tuning trial is recorded (nmt.study.tune.record): records/<target>/trial<N>.json."""
    return records / target / f"trial{number:03d}.json"


def trials_of(records: Path, target: str) -> list[dict]:
    """A target's recorded trials, by number."""
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted((records / target).glob("trial*.json"))]


def recorded_queue(records: Path = RECORDS) -> dict[str, dict[str, int]]:
    """How far the converged queue is (nmt.study.design.RUNS): each tuned target's trials recorded (finished or
    pruned) and each final run's seeds recorded (FIRST_SEED ...) of the main table's and the claims' targets."""
    seeds = set(range(design.FIRST_SEED, design.FIRST_SEED + design.SEEDS))
    done = {"tune": {target: len(trials_of(records / "tune", target)) for target in design.RUNS["tune"]}}
    for part in ("main", "claims"):
        have = finished(records / part)
        done[part] = {target: len(seeds & set(have.get(target, []))) for target in design.RUNS[part]}
    return done


@dataclass(frozen=True)
class SweepRate:
    """How fast the GPU trained runs many at once, end to end (start-up, validations and test decoding included):
    FLOPs per second over the sweeps of committed records, and what they were."""

    flops_per_second: float
    runs: int
    sweeps: int
    minutes: float
    folders: tuple[str, ...]
    precisions: tuple[str, ...]
    validations: int  # a run's validations there, the median


def gpu_sweep_rate(records: Path = RECORDS, longest: float = 60.0) -> SweepRate | None:
    """The end-to-end rate of the sweeps recorded on a GPU (runs whose machine names NVIDIA): runs whose spans (first
    start to finish) overlap are one sweep; the rate is their FLOPs over the sweeps' wall time. A sweep longer than
    `longest` minutes (a run resumed in a later window) says nothing of a window's rate and is left out."""
    runs = []
    for path in records.glob("*/*/seed*.record.json"):
        record = json.loads(path.read_text(encoding="utf-8"))
        provenance = record.get("provenance", {})
        if any("NVIDIA" in machine for machine in provenance.get("machines", [])):
            span = [datetime.datetime.fromisoformat(t) for t in (provenance["dates"][0], provenance["finished"])]
            runs.append({"span": span, "record": record, "folder": path.parent.parent.name})
    sweeps: list[list[dict]] = []
    for run in sorted(runs, key=lambda r: r["span"][0]):
        if sweeps and run["span"][0] <= max(r["span"][1] for r in sweeps[-1]):
            sweeps[-1].append(run)
        else:
            sweeps.append([run])
    seconds = {id(s): (max(r["span"][1] for r in s) - min(r["span"][0] for r in s)).total_seconds() for s in sweeps}
    kept = [s for s in sweeps if seconds[id(s)] <= longest * 60]
    chosen = [run["record"] for s in kept for run in s]
    if not chosen:
        return None
    wall = sum(seconds[id(s)] for s in kept)
    machines = {m for record in chosen for m in record["provenance"]["machines"]}
    return SweepRate(
        flops_per_second=sum(record["petaflops"] for record in chosen) * 1e15 / wall,
        runs=len(chosen),
        sweeps=len(kept),
        minutes=wall / 60,
        folders=tuple(sorted({run["folder"] for s in kept for run in s})),
        precisions=tuple(sorted({m.group(1) for m in map(PRECISION.search, machines) if m})),
        validations=int(statistics.median(len(record.get("curve", [])) for record in chosen)),
    )


# A run's machine as provenance names it, with its precision: "NVIDIA H200 (fp32)"
PRECISION = re.compile(r"\((fp32|bf16|fp16)\)$")


def queue_table(folder: Path = RECORDS.parent) -> str:
    """docs/tuning.md's account of the converged queue (nmt.study.design): each part's runs recorded under
    folder/runs, and its GPU-minutes expected in all and left at the measured single-run rate."""
    found = gpu_sweep_rate(folder / "runs")
    sweep = None
    if found is not None:
        what = (
            f"at the rate the recorded GPU sweeps trained, many runs at once ({found.flops_per_second / 1e12:.1f} "
            f"TFLOP/s: {found.runs} runs of {', '.join(found.folders)} in {found.sweeps} sweeps, "
            f"{found.minutes:.1f} minutes, {'/'.join(found.precisions) or 'precision not recorded'}, "
            f"{found.validations} validations a run, where the queue's runs make up to {design.VALIDATIONS}), "
            "validations, start-up and test decoding counted"
        )
        sweep = (found.flops_per_second, what)
    done = recorded_queue(folder / "runs")
    return design.cost_table(folder / "measured" / "benchmark_cuda.json", done, sweep) + "\n"
