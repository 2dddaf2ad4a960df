"""The comparison's variants and how runs are compared: seeds of one variant grouped (runs whose configs differ only
in the seed, named from the config: `luong (general, local_p)`), mean curves at equal compute, updates and epochs,
intervals and paired tests against a reference variant, and the power of the seed-level tests.

Runs are described and recorded by nmt_study/records.py and reported on by nmt_study/report.py (`summarise`), which
`python -m nmt_study compare` (make compare) and `python -m nmt_study lab` (make lab) call.
"""

from __future__ import annotations

import statistics

from nmt import UserError
from nmt.config import flatten
from nmt.runs.resume import BUDGET, changes
from nmt_study.significance import MIN_SEEDS, Evidence, detectable, pooled_sd, seeded_tests
from nmt_study.sweep import as_trained

# A finished run's record (RECORD_SUFFIX): what `describe` says of it, with its test output as sufficient statistics
# per sentence (no text of the corpus), its attention on the figure's sentence and where it was trained. make results
# keeps the records under results/runs/, so that a part's report is made again on a machine that holds none of its runs.


def budget(trainer: dict) -> str:
    """What stops a run, from its trainer options: "1e+14 FLOPs", "8 minutes (wall clock)", "300 updates"..."""
    parts = [
        f"{trainer['max_flops']:g} FLOPs" if trainer.get("max_flops") else "",
        f"{trainer['max_steps']} updates" if trainer.get("max_steps") else "",
        f"{trainer['max_epochs']} epochs" if trainer.get("max_epochs") else "",
        f"{trainer['max_minutes']:g} minutes (wall clock)" if trainer.get("max_minutes") else "",
    ]
    return " or ".join(p for p in parts if p) or "early stopping alone"


def stopped_by(run: dict) -> str:
    """What stopped a finished run, read from its record (`stop_kind`)."""
    after_best = sum(1 for _, update, _ in run.get("curve") or [] if update > run["best_step"])
    return stop_kind(run["config"]["trainer"], run["petaflops"], run["updates"], after_best)


def stop_kind(trainer: dict, petaflops: float, updates: int, after_best: int) -> str:
    """ "cap" where a run trained its compute or update budget, "patience" where valid `trainer.select` had not
    improved for trainer.patience validations (`after_best`: those after the best), else "other" (a clock or epoch
    budget, or a run ended by hand)."""
    if trainer.get("max_flops") and petaflops * 1e15 >= trainer["max_flops"] * 0.999:
        return "cap"
    if trainer.get("max_steps") and updates >= trainer["max_steps"]:
        return "cap"
    return "patience" if trainer.get("patience") and after_best >= trainer["patience"] else "other"


def stops(runs: list[dict]) -> str:
    """How a variant's runs stopped: "cap 2, patience 1"."""
    counts = {kind: [stopped_by(r) for r in runs].count(kind) for kind in ("cap", "patience", "other")}
    return ", ".join(f"{kind} {count}" for kind, count in counts.items() if count)


def spread(values: list[float], digits: int = 2) -> str:
    """`mean ± sd` over seeds, or the one value, to `digits` places."""
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def twice(run: str, other: str, name: str, seed) -> UserError:
    return UserError(f"{run} and {other} are both {name} with seed {seed}: compare one of them")


def differences(config: dict, other: dict) -> list[str]:
    """The options that make two runs' resolved configs different runs, the seed aside (nmt.runs.resume.changes: the
    corpus, the model, the recipe; and here the budget too)."""
    changed, breaking = changes(as_trained(config), as_trained(other))
    return sorted({*breaking, *(BUDGET & changed.keys())} - {"seed", "trainer.resume"})


def kinds(runs: list[dict]) -> list[list[dict]]:
    """`runs` split into sets whose configs are equal but for the seed (and options that change nothing)."""
    found: list[list[dict]] = []
    for run in runs:
        same = next((k for k in found if not differences(k[0].get("config", {}), run.get("config", {}))), None)
        if same is None:
            found.append([run])
        else:
            same.append(run)
    return found


def group(runs: list[dict]) -> dict[str, list[dict]]:
    """{variant name: its runs by seed}. Runs are seeds of one variant only when their configs are equal but for the
    seed: runs that share a name but differ in an option (dropout, sizes, budget, corpus...) get names of their own
    that say which option tells them apart. Two runs of one variant with the same seed are refused."""
    by_name: dict[str, list[dict]] = {}
    for run in runs:
        by_name.setdefault(run["name"], []).append(run)
    groups: dict[str, list[dict]] = {}
    for name, named in by_name.items():
        sets = kinds(named)
        for members in sets:
            config = members[0].get("config", {})
            telling = sorted(
                {
                    key
                    for other in sets
                    if other is not members
                    for key in differences(config, other[0].get("config", {}))
                }
            )
            values = flatten({k: config.get(k) for k in ("data", "model", "trainer")})
            shown = [
                f"{k}={values[k]:g}" if isinstance(values.get(k), float) else f"{k}={values.get(k)}" for k in telling
            ]
            label = f"{name} [{', '.join(shown)}]" if telling else name
            for run in members:
                same = [r for r in groups.get(label, []) if r["seed"] == run["seed"]]
                if same:
                    raise twice(run["run"], same[0]["run"], label, run["seed"])
                groups.setdefault(label, []).append({**run, "name": label})
    return {name: sorted(g, key=lambda r: r["seed"]) for name, g in groups.items()}


def headline(run: dict) -> float:
    return run["test_bleu_beam"] if run["test_bleu_beam"] is not None else run["test_bleu"]


def mean_curve(runs: list[dict]) -> list[tuple[float, int, float]]:
    """(minutes, update, valid BLEU) averaged over seeds at the updates every seed validated at."""
    steps = set.intersection(*({step for _, step, _ in r["curve"]} for r in runs)) if runs[0]["curve"] else set()
    points = []
    for step in sorted(steps):
        at = [next(p for p in r["curve"] if p[1] == step) for r in runs]
        points.append((statistics.mean(p[0] for p in at), step, statistics.mean(p[2] for p in at)))
    return points


def mean_compute_curve(runs: list[dict]) -> list[tuple[float, float, float]]:
    """(petaFLOPs, epochs, valid BLEU) averaged over seeds at each validation every seed made (the k-th of each)."""
    points = min(len(r["compute_curve"]) for r in runs)
    return [tuple(statistics.mean(r["compute_curve"][k][i] for r in runs) for i in range(3)) for k in range(points)]


def equal_compute(curves: dict[str, list[tuple[float, float, float]]], columns: int = 5) -> tuple[list[float], dict]:
    """Valid BLEU at the same compute: the k-th validation of every variant, for up to `columns` k spread to the
    last that all of them made (their compute differs by at most the last update's: validations fall at the same
    fractions of one budget); ([petaFLOPs at each, the mean over variants], {variant: [BLEU at each]})."""
    shared = min((len(c) for c in curves.values()), default=0)
    if not shared:
        return [], {}
    chosen = sorted({round(i * (shared - 1) / max(columns - 1, 1)) for i in range(columns)})
    at = [statistics.mean(c[k][0] for c in curves.values()) for k in chosen]
    return at, {name: [c[k][2] for k in chosen] for name, c in curves.items()}


def equal_updates(curves: dict[str, list[tuple[float, int, float]]], columns: int = 5) -> tuple[list[int], dict]:
    """Valid BLEU at the same numbers of updates: up to `columns` updates that every variant validated at, spread up
    to the largest; ({variant: [BLEU at each]}, the updates)."""
    shared = set.intersection(*({step for _, step, _ in c} for c in curves.values())) if curves else set()
    shared = sorted(shared)
    if not shared:
        return [], {}
    chosen = sorted({shared[round(i * (len(shared) - 1) / max(columns - 1, 1))] for i in range(columns)})
    return chosen, {n: [next(b for _, s, b in c if s == step) for step in chosen] for n, c in curves.items()}


def significance(groups: dict[str, list[dict]], references: list[str], against: str, samples: int, trials: int):
    """sacrebleu's paired tests, seed by seed, of every variant against `against`."""
    outputs = {name: {r["seed"]: r["scored"] for r in runs} for name, runs in groups.items()}
    return seeded_tests(outputs, references, against, samples, trials)


def intervals(evidence: Evidence, against: str) -> dict[str, dict]:
    """{variant: {metric: Interval of it minus `against`}} over seeds and sentences."""
    return {
        name: {metric: evidence.compare(name, against, metric) for metric in ("BLEU", "chrF")}
        for name in evidence.names
        if name != against
    }


def power_text(groups: dict[str, list[dict]]) -> str:
    """What the seeds can tell apart, from the spread over seeds measured here."""
    seeds = min(len(runs) for runs in groups.values())
    sd = pooled_sd([[headline(r) for r in runs] for runs in groups.values()])
    if seeds < MIN_SEEDS:
        start = (
            f"These runs have {seeds} seed{'s' * (seeds != 1)} per variant at the fewest: the tables give "
            f"figures, and no claim gets a verdict under {MIN_SEEDS} seeds (`--seeds {MIN_SEEDS}`). "
        )
    else:
        start = ""
    if sd is None:
        return start + "With one seed per variant the spread between training runs is not measured."
    planned = max(seeds, MIN_SEEDS)  # what these runs' seeds can tell apart, or the verdicts' minimum's
    return start + (
        f"Test BLEU moves by {sd:.2f} from one seed to the next (standard deviation over seeds, pooled "
        f"over the variants with several): where seeds are the noise, {planned} seeds per variant find "
        f"a true difference of {detectable(sd, planned):.2f} BLEU 80% of the time at the 0.05 level; "
        "each claim's own test says what it detects."
    )
