"""`make results`: train what README.md and docs/results.md report, 3 seeds each, then write results/*.json (every
figure, with the commit, config, seed and machine of each run) and the tables between markers in those files.

python -m nmt_study results [--parts main,claims,lab,others] [--seeds 3] [--jobs 2] [--runs multirun/results]
python -m nmt_study results --render      # only the tables again, from the committed results/*.json
python -m nmt_study results --parts main --record   # no training: record the runs finished so far, then the tables
python -m nmt_study results --parts lab --record    # the lab's tables on the seeds every variant has so far
python -m nmt_study results --parts main --only luong,transformer   # train only these (share runs out over machines)
python -m nmt_study results --parts claims,main --earlier   # the earlier protocol's reports again, from their records

The parts, in this order (each resumable: a rerun keeps finished runs with today's settings and continues the rest):
  main    the four families' (tuned) defaults, as `python train.py model=X` trains them, under the final runs'
          protocol (published.PROTOCOL: up to the cap, stopped earlier by patience on valid BLEU), greedy and beam 5
          (results/main.json)
  claims  the claims' own converged runs (nmt_study/design.py's CLAIM_RUNS: the arms the main table does not hold),
          trained as `python train.py variant=X` trains them under the same protocol, then the claims' report on
          them and the main table's runs together, each run trained once for both (results/claims.json); the claims
          they cannot test keep the earlier protocol's verdicts (results/claims_5e14.json)
  lab     the alignment lab, `python -m nmt_study lab`, with fp32 and one thread pinned, 8 seeds of the variants its
          claims compare (--claim-seeds) (results/lab.json; its runs' records in results/runs/lab)
  others  the comparison of every variant at `make compare`'s budget (1e14 FLOPs each: early training, not the
          claims), then its report (results/compare.json)
Runs go to RUNS/<part>/runs/<variant>/seed<N> (others: RUNS/compare/runs/...); NMT_DATA_DIR or --extra data.dir=...
points at Multi30k offline. Each run that finishes is recorded in results/runs/<part>/<variant>/seed<N>.record.json
(figures, curves, attention, provenance, sacreBLEU's statistics per test sentence) and committed: a later invocation,
on any machine, trains only the runs without a record and reports from the records (a GPU: scripts/device_check.sh).
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import torch

from nmt import UserError
from nmt.paths import read_json, write_text
from nmt.runs.folder import RunFolder
from nmt.runs.provenance import loaded_code
from nmt_study import published, tables
from nmt_study.cli import compare, lab
from nmt_study.design import CLAIM_RUNS
from nmt_study.lab_plan import CLAIM_SEEDS
from nmt_study.published import EARLIER, PARTS, PINNED, PROTOCOL
from nmt_study.records import record_runs, recorded_sweep
from nmt_study.sweep import ROOT, chosen, from_root, launcher_options
from nmt_study.variants import FAMILIES, VARIANTS

MAIN_BEAM = 5  # the main table's beam: its test BLEU beam 5 beside greedy
COMPARE_BEAM = 5  # the comparison's headline beam (nmt_study compare's default)
# An --extra that points at the Multi30k files: the lab, which writes its own corpus, is run without it
MULTI30K_DIR = "data.dir="


def at_least_one(text: str) -> int:
    """An argparse type: a whole number of at least 1, checked whatever else the command line asks (--render too)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"--seeds {value}: at least 1")
    return value


def part_variants(part: str) -> list[str]:
    """What `part` (claims, main or others; the lab's are nmt_study lab's) trains, each with 3 seeds."""
    return {"claims": list(CLAIM_RUNS), "main": FAMILIES, "others": VARIANTS}[part]


def only(given: str | None, parts: list[str]) -> dict[str, list[str]]:
    """`--only`: the variants each chosen part trains (all of them without it). A machine may train a share of a part
    (its records are committed; the report, made after each share, covers every record so far); the lab's report needs
    all its variants at once, so `--only` leaves it out."""
    if given is None:
        return {part: (part_variants(part) if part != "lab" else []) for part in parts}
    known = sorted({v for part in parts if part != "lab" for v in part_variants(part)})
    names = chosen("--only", given, known) if known else []  # a name no part trains is named as such first
    if "lab" in parts:
        raise UserError(
            "--only: the lab trains and reports on all its variants together; leave lab out of --parts, "
            "or share the lab out with `python -m nmt_study lab --variants ... --records results/runs/lab`"
        )
    return {part: [v for v in part_variants(part) if v in names] for part in parts}


def train_comparison(variants: list[str], args: argparse.Namespace, runs: Path) -> None:
    """`variants` trained as `make compare` does, each finished run recorded in results/runs/compare (those with a
    record are not trained again), then the report on every variant recorded so far."""
    records = str(published.RECORDS / "compare")
    compare.main(
        [
            "--train",
            "--output",
            str(runs / "compare"),
            "--variants",
            ",".join(variants),
            "--seeds",
            str(args.seeds),
            "--launcher",
            args.launcher,
            "--jobs",
            str(args.jobs),
            "--no-report",
            "--records",
            records,
            "--extra",
            *args.extra,
        ]
    )
    report_on("compare", runs, COMPARE_BEAM)


def report_on(part: str, runs: Path, beam: int) -> None:
    """A part's report (RUNS/<part>: report.md, compare.json, figures) on every run in its records; the claims' on
    the main table's records too (their arms trained once for both: nmt_study/design.py)."""
    folders = report_folders(part)
    found = [str(folder) for folder in folders if folder.is_dir()] or [str(folders[0])]
    compare.main([*found, "--output", str(runs / part), "--beam", str(beam)])


def report_folders(part: str) -> list[Path]:
    """The records a part's report covers: its own; the claims' also main's (their arms trained once for both)."""
    return [published.RECORDS / p for p in ((part, "main") if part == "claims" else (part,))]


def lab_seeds_recorded() -> int:
    """How many seeds (1234, 1235, ...) every lab variant has recorded: what the lab's report covers without
    training (--record); refuses where a variant has none."""
    have = published.finished(published.RECORDS / "lab")
    counts = []
    for variant in VARIANTS:
        seeds = set(have.get(f"lab_{variant}", []))
        counts.append(next(n for n in range(len(seeds) + 1) if 1234 + n not in seeds))
    if min(counts) == 0:
        lacking = [v for v, n in zip(VARIANTS, counts) if n == 0]
        raise UserError(
            f"--parts lab --record: {published.RECORDS / 'lab'} has no record of seed 1234 of "
            f"{', '.join(lacking)}; the lab's report needs every variant: train them first "
            "(without --record)"
        )
    return min(counts)


def train_recorded(part: str, variants: list[str], overrides: list[str], args: argparse.Namespace, runs: Path) -> None:
    """`variants` as `python train.py variant=X seed=N OVERRIDES` trains them (OVERRIDES: the final runs' protocol),
    each finished run recorded in results/runs/<part> (committed, from any machine; those with a record are not trained
    again), then the part's report from its records."""
    seeds = list(range(1234, 1234 + args.seeds))
    recorded_sweep(
        variants,
        seeds,
        ["trainer.progress=false", *overrides, *args.extra],
        runs / part / "runs",
        published.RECORDS / part,
        MAIN_BEAM,
        args.launcher,
        args.jobs,
    )
    report_on(part, runs, MAIN_BEAM)


def nothing_to_record(part: str, runs: Path) -> None:
    """Refuses --record where the part's report would have no run: none finished here (`runs`) and none recorded
    in the folders it reports on (results/runs/<part>; the claims' also main's), naming them and how to train them."""
    folders = report_folders(part)
    if not any(any(published.finished(folder).values()) for folder in folders):
        raise UserError(
            f"--record: no finished {part} run in {runs} and no record in {' or '.join(map(str, folders))}: nothing "
            f"to report yet; train them first (`make results PARTS={part}`, or `make queue` for the design's runs)"
        )


def export(report: Path, name: str, runs: Path | None = None) -> None:
    """results/<name>.json from a report's compare.json, with each run's provenance and paths from the repository,
    and the seeds each variant (config name) has finished under `runs` (default: the report's runs folder), for the
    README's account of what is complete."""
    remedy = "make the report again (python -m nmt_study compare, or this command with --record)"
    record = read_json(report / "compare.json", remedy, {"variants": dict, "command": str})
    record["finished"] = published.finished(runs or report / "runs")
    commits: set[str] = set()
    for variant in record["variants"].values():
        for run in variant["runs"]:
            run.setdefault("provenance", RunFolder(run["run"]).provenance())
            run["run"] = shown(from_root(Path(run["run"])), report)
            commits.update(run["provenance"].get("commits", []))
    record["command"] = shown(shown(record["command"], report), published.RECORDS)
    record.update(commits=sorted(commits), training_code_changed=published.training_code_changed(sorted(commits)))
    record.update(rules=published.rules_commit())  # the claims' rules these verdicts follow
    record.update(
        torch=torch.__version__, python=platform.python_version(), analysis=loaded_code()
    )  # the report's code
    write(name, record)


def export_lab(folder: Path) -> None:
    record = read_json(folder / "lab.json", "make it again: python -m nmt_study lab (make lab)", {"results": list})
    commits = set()
    for result in record["results"]:
        for run in result["seeds"]:
            provenance = run.get("provenance") or RunFolder(run["run"]).provenance()  # a record's, or its folder's
            commits.update(c[:7] for c in provenance["commits"])
            run["run"] = shown(from_root(Path(run["run"])), folder)
    record["command"] = shown(shown(record["command"], folder), published.RECORDS)
    record.update(commits=sorted(commits), torch=torch.__version__, analysis=loaded_code())
    write("lab", record)
    # docs/alignment.md's figures: BLEU by length and valid AER (the lab's report), the attention of each model on
    # one test sentence (its comparison's)
    published.copy_figures(folder, "lab", names=("bleu_by_length.png", "valid_aer.png"))
    published.copy_figures(folder / "comparison", "lab", names=("attention.png",))


def shown(text: str, folder: Path) -> str:
    """`text` (a path or a command) with `folder` as given from the repository, where it held the folder's real
    path: a report written through a linked runs folder (another checkout's) names that checkout's folder."""
    return text.replace(str(folder.resolve()), from_root(folder))


def write(name: str, record: dict) -> None:
    published.RESULTS.mkdir(exist_ok=True)
    path = published.RESULTS / f"{name}.json"
    write_text(path, json.dumps(record, indent=1, default=float) + "\n")
    print(f"wrote {path}", flush=True)


def render() -> None:
    for document in published.DOCUMENTS:
        if tables.update_file(ROOT / document):
            print(f"updated the tables of {document}", flush=True)


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m nmt_study results", description=" ".join(__doc__.split("\n\n")[0].split())
    )
    parser.add_argument("--parts", default=",".join(PARTS), help=f"any of {', '.join(PARTS)}, in that order")
    parser.add_argument("--seeds", type=at_least_one, default=3, help="seeds per variant (1234, 1235, ...)")
    parser.add_argument("--runs", type=Path, default=ROOT / "multirun" / "results", help="where the runs go")
    launcher_options(parser, "joblib", 2)
    parser.add_argument("--extra", nargs="*", default=[], help="more train.py overrides (data.dir=...)")
    parser.add_argument(
        "--only",
        default=None,
        help="train only these of the parts' variants (claims, main, others: "
        "a share of the runs for this machine); the reports cover every record",
    )
    parser.add_argument("--render", action="store_true", help="only render the tables from results/*.json")
    parser.add_argument(
        "--earlier",
        action="store_true",
        help="no training: the earlier protocol's reports of the claims and main parts again, from their records "
        f"(results/runs/{{{','.join(EARLIER.values())}}}), then the tables",
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help="no training: record each part's runs finished here "
        "(results/runs/<part>), then its report and tables from every record; the lab's on the "
        "seeds every variant has",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = arguments(argv)
    loaded_code()  # the commit of the analysis: the code this invocation started with
    if args.render:
        return render()
    parts = chosen("--parts", args.parts, PARTS)
    if args.earlier:
        return remake_earlier([p for p in parts if p in EARLIER], args.runs.resolve())
    if args.seeds < 1 or args.jobs < 1:
        raise UserError("--seeds and --jobs must be at least 1")
    runs = args.runs.resolve()
    trained = only(args.only, parts)
    for part in (p for p in PARTS if p in parts):
        if args.only is not None and not args.record and not trained[part]:
            print(f"== make results: {part}: none of --only {args.only}", flush=True)
            continue
        print(f"== make results: {part}", flush=True)
        if part in ("claims", "main"):  # trained as train.py trains them
            if args.record:  # no training: the records so far, and the report on them
                record_runs(runs / part / "runs", published.RECORDS / part, MAIN_BEAM)
                nothing_to_record(part, runs / part / "runs")
                report_on(part, runs, MAIN_BEAM)
            else:
                train_recorded(part, trained[part], list(PROTOCOL), args, runs)  # to convergence, as tuned
            export(runs / part, part, published.RECORDS / part)
            if part == "main" and published.complete((published.load("main") or {}).get("finished", {}), FAMILIES):
                published.copy_figures(runs / "main", "main")  # README's figures: all seeds or none
        elif part == "others":
            if args.record:  # no training: the runs finished here recorded, then the report on every record
                record_runs(runs / "compare" / "runs", published.RECORDS / "compare", COMPARE_BEAM)
                report_on("compare", runs, COMPARE_BEAM)
            else:
                train_comparison(trained[part], args, runs)
            export(runs / "compare", "compare", published.RECORDS / "compare")
            published.copy_figures(runs / "compare", "compare")
        else:
            train_lab(args, runs)
        render()


def remake_earlier(parts: list[str], runs: Path) -> None:
    """The earlier protocol's reports of `parts` (claims, main) from their records (results/runs/<part>_5e14), as
    results/<part>_5e14.json, then the tables."""
    if not parts:
        raise UserError(f"--earlier: the earlier reports are those of {' and '.join(EARLIER)}; name one in --parts")
    for part in parts:
        name = EARLIER[part]
        if not (published.RECORDS / name).is_dir():
            raise UserError(f"--earlier: no records in {published.RECORDS / name}; restore them from git")
        report_on(name, runs, MAIN_BEAM)
        export(runs / name, name, published.RECORDS / name)
    render()


def train_lab(args: argparse.Namespace, runs: Path) -> None:
    """The lab's part: `python -m nmt_study lab` with its records in results/runs/lab (--record: no training, the
    seeds every variant has), then results/lab.json."""
    seeds = lab_seeds_recorded() if args.record else args.seeds
    # the lab writes its own corpus; its runs pin precision and threads as the claims' do
    lab_extra = [*PINNED, *(e for e in args.extra if not e.startswith(MULTI30K_DIR))]
    lab_options = ["--output", str(runs / "lab"), "--seeds", str(seeds), "--launcher", args.launcher]
    lab_options += ["--claim-seeds", str(0 if args.record else CLAIM_SEEDS)]
    lab_options += ["--jobs", str(args.jobs), "--records", str(published.RECORDS / "lab")]
    lab.main([*lab_options, *(["--extra", *lab_extra] if lab_extra else [])])
    export_lab(runs / "lab")
