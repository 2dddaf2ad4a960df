"""How far the study's queue is, from the committed records: the tuning trials and final runs recorded
(nmt_study/design.py's RUNS), and what is left of it in machine-hours at the measured CPU rate (and GPU-minutes, where
a GPU is lent again). docs/tuning.md's queue table (nmt_study.tables) is rendered from them."""

from __future__ import annotations

import json
from pathlib import Path

from nmt_study import design
from nmt_study.published import RECORDS, finished


def trial_path(records: Path, target: str, number: int) -> Path:
    """Where a tuning trial is recorded (nmt_study.tune.record): records/<target>/trial<N>.json."""
    return records / target / f"trial{number:03d}.json"


def trials_of(records: Path, target: str) -> list[dict]:
    """A target's recorded trials, by number."""
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted((records / target).glob("trial*.json"))]


def ended_trials(records: Path, target: str) -> list[dict]:
    """A target's trials that ended as the design counts them: finished or pruned (a failed trial is asked again)."""
    return [trial for trial in trials_of(records, target) if trial.get("stopped_by") != "failed"]


def recorded_queue(records: Path = RECORDS) -> dict[str, dict[str, int]]:
    """How far the converged queue is (nmt_study.design.RUNS): each tuned target's trials recorded (finished or
    pruned) and each final run's seeds recorded (FIRST_SEED ...) of the main table's and the claims' targets."""
    seeds = set(range(design.FIRST_SEED, design.FIRST_SEED + design.SEEDS))
    done = {"tune": {target: len(ended_trials(records / "tune", target)) for target in design.RUNS["tune"]}}
    for part in ("main", "claims"):
        have = finished(records / part)
        done[part] = {target: len(seeds & set(have.get(target, []))) for target in design.RUNS[part]}
    return done


def cpu_rates(measured: Path) -> dict[str, float] | None:
    """Each arm's training rate at the design's thread count (results/measured/cpu_rate.json), FLOPs per second."""
    if not measured.is_file():
        return None
    values = json.loads(measured.read_text(encoding="utf-8"))["values"]
    return {target: values[target][str(design.THREADS)]["flops_per_second"] for target in design.PRIMARY}


def queue_table(folder: Path = RECORDS.parent) -> str:
    """docs/tuning.md's table of the queue (nmt_study.design): each part's runs recorded under folder/runs, FLOPs
    expected and at most, machine-hours expected in all and for what is left on a 2-core CPU at the measured rate
    (folder/measured/cpu_rate.json), and GPU-minutes left at the single-run rate of a GPU
    (folder/measured/benchmark_cuda.json) where a GPU is lent again."""
    measured = folder / "measured"
    cpu, gpu = cpu_rates(measured / "cpu_rate.json"), design.rates(measured / "benchmark_cuda.json")
    parts = design.queue(recorded_queue(folder / "runs"))

    def row(name: str, runs: str, done: int, wanted: int, chosen: list[design.Part], bold: str = "") -> str:
        expected, bound = sum(p.expected for p in chosen), sum(p.bound for p in chosen)
        hours = [design.machine_hours(_summed(p.flops for p in chosen), cpu) if cpu else None]
        hours.append(design.machine_hours(_summed(p.left for p in chosen), cpu) if cpu else None)
        gpu_left = sum(design.minutes(p, gpu, left=True) for p in chosen)
        shown = [f"{bold}{h:.1f}{bold}" if h is not None else "-" for h in hours] + [f"{gpu_left:.1f}"]
        return f"| {name} | {runs} | {done} of {wanted} | {expected:.2e} | {bound:.2e} | " + " | ".join(shown) + " |"

    lines = [
        "| part | runs | recorded | FLOPs expected | FLOPs at most | machine-hours expected | left | GPU-min. left |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in parts:
        runs = f"{len(p.runs)} x {max(p.runs.values())} {'trials' if p.name == 'tune' else 'seeds'}"
        lines.append(row(p.name, runs, sum(p.done.values()), sum(p.runs.values()), [p]))
    done, wanted = (sum(sum(getattr(p, key).values()) for p in parts) for key in ("done", "runs"))
    lines.append(row("**all**", "", done, wanted, parts, bold="**"))
    record = json.loads((measured / "cpu_rate.json").read_text(encoding="utf-8")) if cpu else None
    rates = ", ".join(f"{target} {rate / 1e9:.0f}" for target, rate in (cpu or {}).items())
    lines += [
        "",
        f"Machine-hours: a 2-core CPU training one run at a time at {design.THREADS} threads in fp32 (GFLOP/s: "
        + (f"{rates}; results/measured/cpu_rate.json: {record['machine']}" if cpu else "not measured yet")
        + f"), a validation every {design.SPACING:.0e} FLOPs at {design.VALIDATION_SECONDS:.0f} s; expected: each run "
        f"to its expected stop (FLOPs: {', '.join(f'{t} {f:.1e}' for t, f in design.EXPECTED_STOP.items())}), each "
        "trial past rung 0 with its chance of promotion. GPU-minutes left: at one run's training rate on the GPU "
        "(results/measured/benchmark_cuda.json), validations and start-up not counted. Recorded: the trials in "
        "results/runs/tune (finished or pruned; a failed trial is asked again) and the final seeds' records in "
        "results/runs/main and results/runs/claims; a run a session left unfinished counts as not run.",
    ]
    return "\n".join(lines) + "\n"


def _summed(mappings) -> dict[str, float]:
    total: dict[str, float] = {}
    for mapping in mappings:
        for key, value in mapping.items():
            total[key] = total.get(key, 0.0) + value
    return total
