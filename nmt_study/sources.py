"""Where a table's figures come from, in words: the runs' commits, dates, machines and torch (`trained`), a report's
line under its table (`runs_line`), a measurement's (`provenance_line`), and what a table says before its part has
run (`missing`)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def trained(provenances: list[dict]) -> str:
    """When, at which commits, on which machines and with which torch runs were trained (from the first start to the
    last end, where the runs recorded when they ended), from their provenance; a machine named before runs recorded
    their precision says so. The torch that analysed them is the report's own (runs_line)."""
    from nmt.device import PRECISIONS  # read_provenance names a machine "<name> (<precision>)"

    recorded = tuple(f"({name})" for name in PRECISIONS)
    # a commit shortened, keeping the mark of a run started with uncommitted changes (nmt.launch.experiment)
    commits = sorted({c[:7] + "+changes" * c.endswith("+changes") for p in provenances for c in p["commits"]})
    dates = sorted(d for p in provenances for d in [*p["dates"], p.get("finished")] if d)
    machines = sorted(
        {m if m.endswith(recorded) else f"{m} (precision not recorded)" for p in provenances for m in p["machines"]}
    )
    torches = sorted({t for p in provenances for t in p.get("torch", [])})
    kernels = sorted({k for p in provenances for k in p.get("kernels", [])})  # recorded since 2026-11-27
    first, last = (d[:16].replace("T", " ") for d in (dates[0], dates[-1])) if dates else ("", "")
    span = f"{first} to {last} UTC" if dates else "at dates not recorded"
    return (
        f"trained {span} at commit{'s' * (len(commits) != 1)} "
        f"{', '.join(commits) or 'not recorded'} "
        f"on {'; '.join(machines) or 'a machine not recorded'}"
        + (f", ATen {', '.join(kernels)}" if kernels else "")
        + (" (where recorded)" if kernels and not all(p.get("kernels") for p in provenances) else "")
        + (f" with torch {', '.join(torches)}" if torches else "")
        + (" (not recorded by some)" if torches and not all(p.get("torch") for p in provenances) else "")
    )


def runs_line(record: dict) -> str:
    """Where the figures come from: the command, the runs' commits and dates, the machine; the variants whose seeds
    were trained on machines, CPU kernels or precisions of different kinds, named (their seeds are pooled all the
    same)."""
    runs = [r for v in record["variants"].values() for r in v["runs"]]
    when = trained([r["provenance"] for r in runs])
    mixed = []
    for name, variant in record["variants"].items():
        machines = sorted({m for r in variant["runs"] for m in r["provenance"]["machines"]})
        kernels = sorted({k for r in variant["runs"] for k in r["provenance"].get("kernels", [])})  # AVX2 or AVX512
        if len(machines) > 1 or len(kernels) > 1:  # each rounds fp32 sums its own way: other bits from one seed
            mixed.append(f"{name} ({'; '.join(machines + [f'ATen {k}' for k in kernels])})")
    pooled = f" Seeds pooled across machine kinds, CPU kernels or precisions: {', '.join(mixed)}." if mixed else ""
    analysis = record.get("analysis", {})
    changes = "+changes" if analysis.get("uncommitted_changes") else ""
    code = f" Analysed at commit {analysis['commit'][:7]}{changes}." if analysis.get("commit") else ""
    return (
        f"{len(runs)} run{'s' * (len(runs) != 1)}, {as_run(record['command'])}, {when}, "
        f"analysed with torch {record['torch']}, sacreBLEU `{record['signatures'].get('BLEU', '')}`.{pooled}{code}"
    )


def missing(part: str) -> str:
    return f"Not run yet: `make results` writes results/{part}.json, then this table.\n"


def provenance_line(record: dict) -> str:
    """Where a measurement comes from: its command, when, the commit, the machine."""
    commit = (record["commit"] or "not recorded")[:7] + ("+changes" if record["uncommitted_changes"] else "")
    return (
        f"{as_run(record['command'])}, {record['date'][:16].replace('T', ' ')} UTC at commit {commit} on "
        f"{record['machine']} ({record['threads']} threads), torch {record['torch']}."
    )


def current_command(command: str) -> str:
    """A recorded command as it is typed today: the study ran as `python -m nmt.study` before it moved beside the
    toolkit (nmt_study), and as its file's path where Python gave that (python .../nmt/study/__main__.py)."""
    command = re.sub(r"python \S*nmt[/_]study/__main__\.py", "python -m nmt_study", command)
    return re.sub(r"python -m nmt\.study\b", "python -m nmt_study", command)


def as_run(command: str) -> str:
    """A recorded command as a code span, as typed today (`current_command`). One that ran a script since made a
    program of the study (scripts/X.py, before `python -m nmt_study`) is shown as today's program with the same
    options, and says what it ran as."""
    command = current_command(command)
    found = re.search(r"python scripts/(\w+)\.py", command)
    if found is None or (ROOT / "scripts" / f"{found[1]}.py").is_file():
        return f"`{command}`"
    name = found[1]
    program = "compare" if name == "compare" else f"measure {'speed' if name == 'benchmark' else name}"
    today = command.replace(found[0], f"python -m nmt_study {program}")
    return f"`{today}` (run then as scripts/{name}.py, which that program replaced)"
