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


# A run's machine as provenance names it, with its precision: "NVIDIA H200 (fp32)"
PRECISION = re.compile(r"\((fp32|bf16|fp16)\)$")


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
    timed = [(s, (max(r["span"][1] for r in s) - min(r["span"][0] for r in s)).total_seconds()) for s in sweeps]
    kept = [(s, seconds) for s, seconds in timed if seconds <= longest * 60]
    chosen = [run for s, _ in kept for run in s]
    if not chosen:
        return None
    wall = sum(seconds for _, seconds in kept)
    machines = {m for run in chosen for m in run["record"]["provenance"]["machines"]}
    return SweepRate(
        flops_per_second=sum(run["record"]["petaflops"] for run in chosen) * 1e15 / wall,
        runs=len(chosen),
        sweeps=len(kept),
        minutes=wall / 60,
        folders=tuple(sorted({run["folder"] for run in chosen})),
        precisions=tuple(sorted({m.group(1) for m in map(PRECISION.search, machines) if m})),
        validations=int(statistics.median(len(run["record"].get("curve", [])) for run in chosen)),
    )


def queue_table(folder: Path = RECORDS.parent) -> str:
    """docs/tuning.md's table of the queue (nmt.study.design): each part's runs recorded under folder/runs, FLOPs
    expected and at most, GPU-minutes expected in all and for what is left at the single-run training rate
    (folder/measured/benchmark_cuda.json), and for what is left at the end-to-end rate of the recorded GPU sweeps."""
    measured = folder / "measured" / "benchmark_cuda.json"
    rate, record = design.rates(measured), json.loads(measured.read_text(encoding="utf-8"))
    parts, sweep = design.queue(recorded_queue(folder / "runs")), gpu_sweep_rate(folder / "runs")

    def row(name: str, runs: str, done: int, wanted: int, chosen: list[design.Part], bold: str = "") -> str:
        expected, bound = sum(p.expected for p in chosen), sum(p.bound for p in chosen)
        total, left = (sum(design.minutes(p, rate, left) for p in chosen) for left in (False, True))
        swept = sum(sum(p.left.values()) for p in chosen) / sweep.flops_per_second / 60 if sweep else None
        minutes = [f"{bold}{m:.1f}{bold}" if m is not None else "-" for m in (total, left, swept)]
        return f"| {name} | {runs} | {done} of {wanted} | {expected:.2e} | {bound:.2e} | " + " | ".join(minutes) + " |"

    lines = [
        "| part | runs | recorded | FLOPs expected | FLOPs at most | GPU-minutes expected | left | left, end to end |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in parts:
        runs = f"{len(p.runs)} x {max(p.runs.values())} {'trials' if p.name == 'tune' else 'seeds'}"
        lines.append(row(p.name, runs, sum(p.done.values()), sum(p.runs.values()), [p]))
    done, wanted = (sum(sum(getattr(p, key).values()) for p in parts) for key in ("done", "runs"))
    lines.append(row("**all**", "", done, wanted, parts, bold="**"))
    shown = ", ".join(f"{family} {rate[family] / 1e12:.1f}" for family in design.FAMILIES)
    swept = (
        f"at the rate the recorded GPU sweeps trained, many runs at once ({sweep.flops_per_second / 1e12:.1f} TFLOP/s: "
        f"{sweep.runs} runs of {', '.join(sweep.folders)} in {sweep.sweeps} sweeps, {sweep.minutes:.1f} minutes, "
        f"{'/'.join(sweep.precisions) or 'precision not recorded'}, {sweep.validations} validations a run, where the "
        f"queue's runs make up to {design.VALIDATIONS}), validations, start-up and test decoding counted"
        if sweep
        else "no sweep recorded on a GPU yet"
    )
    lines += [
        "",
        f"GPU-minutes expected and left: at the training rate of one run alone, every update a CUDA graph (TFLOP/s: "
        f"{shown}; results/measured/benchmark_cuda.json, {record['date'][:10]}: {record['note'].split(':')[0]}), "
        f"validations and start-up not counted. Left, end to end: {swept}. Recorded: the trials in results/runs/tune "
        "(finished or pruned) and the final seeds' records in results/runs/main and results/runs/claims; a trial or "
        "run a window left unfinished counts as not run.",
    ]
    return "\n".join(lines) + "\n"
