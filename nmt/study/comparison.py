"""A comparison of finished training runs: seeds grouped, significance, equal-compute (or equal-time), equal-update
and equal-epoch views, the papers' claims, attention side by side; written as report.md, figures, compare.json and
TensorBoard.

`scripts/compare.py` (make compare) and `scripts/lab.py` (make lab) train the runs and call `summarise`. Runs whose
configs differ only in the seed are seeds of one variant, named from the config (`luong (general, local_p)`).
"""

from __future__ import annotations

import json
import logging
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import sacrebleu
from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.tensorboard import SummaryWriter

from nmt import UserError, build, checkpoint
from nmt.alignment import attention_report, choose_map, parse_key, word_attention
from nmt.config import flatten
from nmt.decoding import Translator
from nmt.evaluate import LENGTH_BUCKETS, bleu_by_length
from nmt.experiment import read_provenance
from nmt.multirun import skip_job
from nmt.paths import derived_from, stamp, write_text
from nmt.plot import legend_beside, lines_figure, panels_figure
from nmt.resume import BUDGET, changes
from nmt.study.claims import BASELINE, check_claims, last_third_gain, power_line, still_improving
from nmt.study.significance import MIN_SEEDS, Evidence, Scored, detectable, p_value, pooled_sd, seeded_tests
from nmt.study.sweep import RECORD_SUFFIX, record_path, recorded, saved_settings, sweep
from nmt.trainer import VALIDATIONS

# The variants of `scripts/compare.py --train`, in the order they train: configs/variant/<name>.yaml, each a few
# train.py overrides.
VARIANTS = [
    "sutskever",
    "bahdanau",
    "bahdanau_fixed",
    "luong",
    "luong_feeding",
    "luong_paper",
    "luong_dot",
    "luong_concat",
    "luong_location",
    "luong_local_m",
    "luong_local_p",
    "transformer",
    # the rest of the attention family (docs/attention.md): sparse and hard attention, the window
    "bahdanau_sparsemax",
    "bahdanau_entmax15",
    "bahdanau_reinforce",
    "bahdanau_gumbel",
    "transformer_window",
]

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def find_runs(folders: list[Path]) -> list[Path]:
    """The finished runs under `folders`: run directories (best.pt with best.test.hyp) and runs' records
    (`*.record.json`, `save_record`)."""
    runs = []
    for folder in folders:
        if folder.is_file() and folder.name.endswith(RECORD_SUFFIX):
            runs.append(folder)
            continue
        if not folder.is_dir():
            raise UserError(f"{folder}: not a folder")
        runs += sorted(p.parent for p in folder.rglob("best.pt") if (p.parent / "best.test.hyp").is_file())
        runs += sorted(folder.rglob(f"*{RECORD_SUFFIX}"))
    if not runs:
        raise UserError(f"no finished runs (best.pt with best.test.hyp, or *{RECORD_SUFFIX}) under "
                        f"{', '.join(map(str, folders))}")  # fmt: skip
    return runs


def beam_hypotheses(run: Path, sources: list[str], beam: int) -> list[str]:
    """The best checkpoint's beam-search test output, `best.test.beam<N>.hyp`, in the precision the run trained in:
    decoded here unless the file there was made from this very best.pt with these settings (its `.source` note says
    so; one that evaluate.py wrote with its own settings, or for an earlier best.pt, is decoded again)."""
    path, best = run / f"best.test.beam{beam}.hyp", run / "best.pt"
    settings = f"beam={beam} precision=trained"
    if not derived_from(path, best, settings):
        translator = Translator.load(best, beam=beam, precision="trained")
        write_text(path, "".join(h + "\n" for h in translator.translate(sources)))
        stamp(path, best, settings)
    return path.read_text(encoding="utf-8").split("\n")[: len(sources)]


def variant_name(model: dict) -> str:
    """A readable name from a checkpoint's model config: `luong (general, local_p)`, `bahdanau (additive)`,
    `bahdanau (additive, sparsemax)`, `bahdanau (additive, hard reinforce)`, `luong (general, global, bidirectional)`,
    `transformer (window 4)`."""
    name = model["_target_"].rsplit(".", 1)[-1].replace("Seq2Seq", "").lower()
    if "attention" in model:
        attention = model["attention"]
        score = build.score_name(attention["_target_"]).replace("none", "fixed context")
        if attention.get("scaled"):
            score = "scaled " + score
        details = [score] + ([model["alignment"]] if "alignment" in model else [])
        if model.get("input_feeding") is False:
            details.append("no feeding")
        if model.get("bidirectional"):
            details.append("bidirectional")
        if attention.get("normalizer", "softmax") != "softmax":
            details.append(attention["normalizer"])
        if attention.get("hard", "none") != "none":
            details.append(f"hard {attention['hard']}")
        name += f" ({', '.join(details)})"
    elif model.get("window"):  # the Transformer's sliding-window self-attention
        name += f" (window {model['window']})"
    return name


def attention_shape(translator: Translator, pairs: list[tuple[str, str]]) -> tuple[str, dict] | None:
    """The alignment map (the RNNs' one attention, the Transformer's last layer) and its entropy and diagonality
    (`nmt.alignment`), force-decoding the test references; None without attention."""
    report = attention_report(translator.model, translator.vocabulary, pairs, translator.device, translator.dtype)
    if not report:
        return None
    chosen = choose_map(list(report), None)
    return chosen, report[chosen]


def test_pairs(data: dict, cache: dict) -> list[tuple[str, str]]:
    """The test pairs of a run's corpus (its config's `data`), read once per corpus into `cache`."""
    key = OmegaConf.to_yaml(OmegaConf.create(data))
    if key not in cache:
        cache[key] = build.load_corpus(OmegaConf.create(data)).test
    return cache[key]


def describe(run: Path, test_cache: dict, beam: int) -> dict:
    best, last = checkpoint.load(run / "best.pt"), checkpoint.load(run / "last.pt")
    config = best["config"]
    pairs = test_pairs(config["data"], test_cache)
    hypotheses = (run / "best.test.hyp").read_text(encoding="utf-8").split("\n")[: len(pairs)]
    references = [t for _, t in pairs]
    progress = last["progress"]
    sources = [s for s, _ in pairs]
    beam_output = beam_hypotheses(run, sources, beam) if beam > 1 else None
    scored = beam_output or hypotheses  # the headline's output: BLEU, chrF, lengths and the tests all read it
    translator = Translator.load(run / "best.pt", precision="trained")
    shape = attention_shape(translator, pairs)
    return {
        "run": str(run),
        "provenance": read_provenance(run),
        "name": variant_name(config["model"]),
        "seed": config.get("seed"),
        "config": {k: config[k] for k in ("data", "model", "trainer", "seed") if k in config},
        "parameters": sum({t.data_ptr(): t.numel() for t in best["model"].values()}.values()),  # tied ones once
        "best_step": best["progress"]["step"],
        "updates": progress["step"],
        "minutes": progress["train_seconds"] / 60,
        "petaflops": progress.get("flops", 0) / 1e15,
        "budget": budget(config.get("trainer", {})),
        "tokens_per_second": progress["tokens_trained"] / max(progress["train_seconds"], 1e-9),
        "valid_bleu": best["progress"]["best_bleu"],
        "test_bleu": sacrebleu.corpus_bleu(hypotheses, [references]).score,
        "test_chrf": sacrebleu.corpus_chrf(scored, [references]).score,
        "test_bleu_beam": sacrebleu.corpus_bleu(beam_output, [references]).score if beam_output else None,
        "by_length": {
            f"{low}-{high}": value for (low, high), value in bleu_by_length(sources, scored, references).items()
        },  # fmt: skip
        "curve": valid_curve(run),
        "compute_curve": compute_curve(run),
        "alignment_map": shape[0] if shape else None,
        "attention": shape[1] if shape else None,
        "panel": attention_panel(translator, shape[0], pairs) if shape else None,
        "beam": beam if beam_output else 1,  # the headline output's
        "scored": Scored.of(scored, references),  # what the significance tests compare
    }


def attention_panel(translator: Translator, alignment_map: str, pairs: list[tuple[str, str]]) -> dict:
    """The run's word attention on the sentence the comparison's figure shows (`shown_pair`), force-decoding it:
    {source: words, target: words, weights: (target words, source words)}."""
    source, target = shown_pair(translator.config["data"], pairs)
    key = parse_key(alignment_map)
    matrices = word_attention(translator.model, translator.vocabulary, [(source, target)], translator.device,
                              translator.dtype, [key[0]], (key[1],))  # fmt: skip
    return {"source": source.split(), "target": target.split(), "weights": matrices[key][0].tolist()}


# A finished run's record (RECORD_SUFFIX): what `describe` says of it, with its test output as sufficient statistics
# per sentence (no text of the corpus), its attention on the figure's sentence and where it was trained. make results
# keeps the records under results/runs/, so that a part's report is made again on a machine that holds none of its runs.


def save_record(run: dict, path: Path) -> None:
    """Write `run` (a `describe` result) to `path` (atomically)."""
    record = {k: v for k, v in run.items() if k != "scored"} | {"statistics": run["scored"].statistics}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(record, separators=(",", ":"), default=float) + "\n")


def record_runs(folder: Path, records: Path, beam: int) -> list[Path]:
    """A record (records/<variant>/seed<N>.record.json) of every run finished under the sweep `folder` that has none:
    what the report needs of it, made once, so that the run's folder (checkpoints) need not be kept or committed.
    Returns every record of a run under `folder`."""
    cache: dict = {}
    return [record_one(result.parent, records, beam, cache) for result in sorted(folder.glob("*/seed*/results.json"))]


def recorded_sweep(variants: list[str], seeds: list[int], overrides: list[str], folder: Path, records: Path,
                   beam: int, launcher: str = "basic", jobs: int = 1, hydra: list[str] = ()) -> list[Path]:  # fmt: skip
    """`sweep` into `folder` of the runs that have no record in `records`, each finished run recorded there (beam
    `beam` as the headline output) by its own job as it ends (`RecordRun`), and a record made on another machine
    kept; `hydra`: more of Hydra's options for the sweep (another callback). Returns every run's record."""
    record_runs(folder, records, beam)  # what an interrupted invocation finished here
    done = recorded(records, variants, seeds, overrides)
    if done:
        print(f"kept from {records}: {', '.join(f'{v} seed {s}' for v, s in sorted(done))}", flush=True)
    sweep(variants, seeds, overrides, folder, launcher, jobs, done, [*record_callback(records, beam), *hydra], records)
    record_runs(folder, records, beam)  # any run its job's callback could not record
    return [records / variant / f"seed{seed}{RECORD_SUFFIX}" for seed in seeds for variant in variants]


def record_one(run: Path, records: Path, beam: int, cache: dict | None = None) -> Path:
    """The record of the finished run in `run` (<variant>/seed<N>), written to records/<variant>/seed<N>.record.json
    unless it is there."""
    path = record_path(records, run)
    if not path.is_file():
        save_record(describe(run, {} if cache is None else cache, beam), path)
        print(f"recorded {run} in {path}", flush=True)
    return path


class OnFinishedRun(Callback):
    """A Hydra callback that keeps something of each job's finished run (`keep`), in the job's own process, as the job
    ends: what it cannot keep is left to the sweep's end, with a warning (the run itself is safe)."""

    done = "kept"  # for the warning

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs) -> None:
        run = Path(config.hydra.runtime.output_dir)
        if job_return.status != JobStatus.COMPLETED or not (run / "results.json").is_file():
            return
        try:
            self.keep(run)
        except Exception as error:  # noqa: BLE001
            logging.getLogger(__name__).warning("%s: not %s yet (%s)", run, self.done, error)

    def keep(self, run: Path) -> None:
        raise NotImplementedError


class RecordRun(OnFinishedRun):
    """The callback `recorded_sweep` gives its `train.py -m`: each job records its finished run (`record_one`), so
    that a run finished on a machine is kept in `records` even if the sweep never ends there."""

    done = "recorded"

    def __init__(self, records: str, beam: int):
        self.records, self.beam = Path(records), beam

    def on_job_start(self, config: DictConfig, **kwargs) -> None:
        """A job whose run is recorded already (the rectangle a joblib sweep trains around the runs left) does not
        train again: it says so to train.py (`nmt.multirun.skip_job`)."""
        record = record_path(self.records, Path(config.hydra.runtime.output_dir))
        if record.is_file():
            skip_job(f"recorded already in {record}")

    def keep(self, run: Path) -> None:
        record_one(run, self.records, self.beam)


def record_callback(records: Path, beam: int) -> list[str]:
    """The Hydra options that give a `train.py -m` the `RecordRun` callback."""
    return ["+hydra.callbacks.record._target_=nmt.study.comparison.RecordRun",
            f"+hydra.callbacks.record.records='{records.resolve()}'",
            f"+hydra.callbacks.record.beam={beam}"]  # fmt: skip


def load_record(path: Path) -> dict:
    """A run described from its record (`save_record`)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        record["scored"] = Scored(record.pop("statistics"))
    except (OSError, ValueError, KeyError) as error:
        raise UserError(f"{path}: not a run's record ({error}); `make results` writes them") from error
    return record


def recorded_validations(run: Path) -> list[dict] | None:
    """The run's record of its validations (`validations.jsonl`, the trainer's), the last line of each update (a
    resumed run may repeat one), in order; None for a run from before the trainer wrote it, or where it is damaged
    (the curves then come from TensorBoard's event files)."""
    path = run / VALIDATIONS
    if not path.is_file():
        return None
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
            found[entry["step"]] = entry
        except (ValueError, KeyError, TypeError):  # a line cut short by a crash: the others still hold
            continue
    return [found[step] for step in sorted(found)] or None


def valid_curve(run: Path) -> list[tuple[float, int, float]]:
    """(minutes, update, valid BLEU) at each validation: minutes trained (validation excluded) from the run's
    validations.jsonl; for an older run, minutes it had been running from its event files (each process of a run
    writes its own; the time between one file's last event and the next one's first, while the run was stopped, is
    not counted)."""
    if (entries := recorded_validations(run)) is not None:
        return [(e["train_minutes"], e["step"], e["bleu"]) for e in entries]
    processes = []  # (first event's time, last event's time, validations) of each event file
    for path in run.glob("events.out.tfevents.*"):
        events = EventAccumulator(str(path))
        events.Reload()
        tags = events.Tags()["scalars"]
        times = [e.wall_time for tag in tags for e in events.Scalars(tag)]
        if times:
            processes.append((min(times), max(times), events.Scalars("valid/bleu") if "valid/bleu" in tags else []))
    points, elapsed = [], 0.0
    for start, end, validations in sorted(processes, key=lambda process: process[0]):
        points += [(elapsed + (e.wall_time - start) / 60, e.step, e.value) for e in validations]
        elapsed += (end - start) / 60
    return points


def compute_curve(run: Path) -> list[tuple[float, float, float]]:
    """(petaFLOPs trained, epochs trained, valid BLEU) at each validation, for runs that log them (trained with a
    compute count); with trainer.validations, the k-th point of every run of one budget is at the same k/N of it.
    From validations.jsonl; from the event files for an older run."""
    if (entries := recorded_validations(run)) is not None:
        return [(e["petaflops"], e["epochs"], e["bleu"]) for e in entries]
    tags = ("valid/petaflops", "valid/epochs", "valid/bleu")
    found: dict[str, dict[int, float]] = {tag: {} for tag in tags}
    for path in run.glob("events.out.tfevents.*"):
        events = EventAccumulator(str(path))
        events.Reload()
        for tag in set(tags) & set(events.Tags()["scalars"]):
            found[tag].update({e.step: e.value for e in events.Scalars(tag)})
    steps = sorted(set.intersection(*(set(values) for values in found.values())))
    return [tuple(found[tag][step] for tag in tags) for step in steps]


def budget(trainer: dict) -> str:
    """What stops a run, from its trainer options: "1e+14 FLOPs", "8 minutes (wall clock)", "300 updates"..."""
    parts = [f"{trainer['max_flops']:g} FLOPs" if trainer.get("max_flops") else "",
             f"{trainer['max_steps']} updates" if trainer.get("max_steps") else "",
             f"{trainer['max_epochs']} epochs" if trainer.get("max_epochs") else "",
             f"{trainer['max_minutes']:g} minutes (wall clock)" if trainer.get("max_minutes") else ""]  # fmt: skip
    return " or ".join(p for p in parts if p) or "early stopping alone"


def spread(values: list[float]) -> str:
    """`mean ± sd` over seeds, or the one value."""
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def _twice(run: str, other: str, name: str, seed) -> UserError:
    return UserError(f"{run} and {other} are both {name} with seed {seed}: compare one of them")


def differences(config: dict, other: dict) -> list[str]:
    """The options that make two runs' resolved configs different runs, the seed aside (nmt.resume.changes: the
    corpus, the model, the recipe; and here the budget too)."""
    changed, breaking = changes(config, other)
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
            telling = sorted({key for other in sets if other is not members
                              for key in differences(config, other[0].get("config", {}))})  # fmt: skip
            values = flatten({k: config.get(k) for k in ("data", "model", "trainer")})
            shown = [f"{k}={values[k]:g}" if isinstance(values.get(k), float) else f"{k}={values.get(k)}"
                     for k in telling]  # fmt: skip
            label = f"{name} [{', '.join(shown)}]" if telling else name
            for run in members:
                same = [r for r in groups.get(label, []) if r["seed"] == run["seed"]]
                if same:
                    raise _twice(run["run"], same[0]["run"], label, run["seed"])
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
    return {name: {metric: evidence.compare(name, against, metric) for metric in ("BLEU", "chrF")}
            for name in evidence.names if name != against}  # fmt: skip


def power_text(groups: dict[str, list[dict]]) -> str:
    """What the seeds can tell apart, from the spread over seeds measured here."""
    seeds = min(len(runs) for runs in groups.values())
    sd = pooled_sd([[headline(r) for r in runs] for runs in groups.values()])
    if seeds < MIN_SEEDS:
        start = (f"These runs have {seeds} seed{'s' * (seeds != 1)} per variant at the fewest: the tables give "
                 f"figures, and no claim gets a verdict under {MIN_SEEDS} seeds (`--seeds {MIN_SEEDS}`). ")  # fmt: skip
    else:
        start = ""
    if sd is None:
        return start + "With one seed per variant the spread between training runs is not measured."
    planned = max(seeds, MIN_SEEDS)  # what these runs' seeds can tell apart, or the verdicts' minimum's
    return start + (f"Test BLEU moves by {sd:.2f} from one seed to the next (standard deviation over seeds, pooled "
                    f"over the variants with several): where seeds are the noise, {planned} seeds per variant find "
                    f"a true difference of {detectable(sd, planned):.2f} BLEU 80% of the time at the 0.05 level; "
                    "each claim's own test says what it detects.")  # fmt: skip


# The sentence the attention figure shows for Multi30k runs, in each of its languages: ours, written for this figure,
# so that no sentence of the corpus is published with a report's figures (README shows them)
OWN_SENTENCE = {
    "de": "Ein kleiner Junge wirft einen roten Ball über den hohen Zaun.",
    "en": "A little boy throws a red ball over the high fence.",
    "fr": "Un petit garçon lance un ballon rouge par-dessus la haute clôture.",
    "cs": "Malý chlapec hází červený míč přes vysoký plot.",
}


def shown_pair(data: dict, pairs: list[tuple[str, str]]) -> tuple[str, str]:
    """The pair the attention figure shows: our own sentence for Multi30k; elsewhere (the sample grammar, which is
    ours, or a user's own corpus) the first test pair of 10-14 words."""
    if data.get("corpus") == "multi30k":
        return OWN_SENTENCE[data["src_lang"]], OWN_SENTENCE[data["tgt_lang"]]
    return next((p for p in pairs if 10 <= len(p[0].split()) <= 14), pairs[0])


def heatmaps(groups: dict[str, list[dict]]) -> Figure | None:
    """One sentence (`shown_pair`), each attention model's word alignment (first seed) side by side, force-decoding
    the reference (`attention_panel`)."""
    panels, titles, pair = [], [], None
    for name, runs in groups.items():
        if runs[0]["alignment_map"] is None:
            continue
        panel = runs[0]["panel"]
        pair = pair or (" ".join(panel["source"]), " ".join(panel["target"]))
        panels.append(np.asarray(panel["weights"]))
        titles.append(name)
    if not panels:
        return None
    return panels_figure(panels, titles, pair[0].split(), pair[1].split(), "attention of each model, one sentence")


def line_figure(lines: dict[str, tuple[list, list]], xlabel: str, ylabel: str, title: str, path: Path):
    """One line per variant: {name: (x values, y values)}."""
    figure, axes = lines_figure()
    for name, (x, y) in lines.items():
        axes.plot(x, y, marker="o", markersize=3, label=name)
    axes.set(xlabel=xlabel, ylabel=ylabel, title=title)
    axes.grid(alpha=0.3)
    legend_beside(axes)
    figure.savefig(path)
    return figure


def figures(groups: dict[str, list[dict]], curves: dict, compute: dict, pairs: list, output: Path) -> dict:
    labels = [f"{low}-{high}" for low, high in LENGTH_BUCKETS]
    by_length = {}
    for name, runs in groups.items():
        kept = [label for label in labels if all(label in r["by_length"] for r in runs)]
        by_length[name] = ([k.replace("-1000", "+") for k in kept],
                           [statistics.mean(r["by_length"][k][0] for r in runs) for k in kept])  # fmt: skip
    made = {
        "bleu_by_length": line_figure(by_length, "source sentence length (words)", "test BLEU (headline output)",
                                      "BLEU by source length", output / "bleu_by_length.png"),
        "bleu_by_time": line_figure({n: ([p[0] for p in c], [p[2] for p in c]) for n, c in curves.items() if c},
                                    "wall-clock minutes (training and validation)", "valid BLEU (greedy)",
                                    "Equal time: valid BLEU against minutes", output / "bleu_by_time.png"),
        "bleu_by_updates": line_figure({n: ([p[1] for p in c], [p[2] for p in c]) for n, c in curves.items() if c},
                                       "updates", "valid BLEU (greedy)", "Equal updates: valid BLEU against updates",
                                       output / "bleu_by_updates.png"),
    }  # fmt: skip
    if any(compute.values()):
        made["bleu_by_compute"] = line_figure(
            {n: ([p[0] for p in c], [p[2] for p in c]) for n, c in compute.items() if c},
            "training compute (petaFLOPs)",
            "valid BLEU (greedy)",
            "Equal compute: valid BLEU against FLOPs",
            output / "bleu_by_compute.png",
        )
        made["bleu_by_epochs"] = line_figure(
            {n: ([p[1] for p in c], [p[2] for p in c]) for n, c in compute.items() if c},
            "epochs",
            "valid BLEU (greedy)",
            "Equal epochs: valid BLEU against epochs",
            output / "bleu_by_epochs.png",
        )
    # fmt: skip
    attention = heatmaps(groups)
    if attention is not None:
        attention.savefig(output / "attention.png")
        made["attention"] = attention
    return made


def interval_cell(interval) -> str:
    if interval is None:
        return "-"
    return f"{interval.delta:+.2f} [{interval.low:+.2f}, {interval.high:+.2f}] p {p_value(interval.p)}"


def seeds_cell(difference) -> str:
    """Each seed's paired tests against the best: the largest p over seeds of bootstrap and randomization."""
    if difference is None:
        return "-"
    return f"{p_value(difference.p_bootstrap)}, {p_value(difference.p_randomization)}"


def equal_compute_table(compute: dict[str, list[tuple[float, float, float]]]) -> list[str]:
    at, table = equal_compute(compute) if compute and all(compute.values()) else ([], {})
    if not at:
        return []
    lines = ["## Equal compute and equal epochs\n", "Valid BLEU (greedy, mean over seeds) at the same training compute "
             "(the same fractions of the budget, petaFLOPs in the header); against epochs in the second figure.\n",
             "| variant | " + " | ".join(f"{p:.3g} PFLOP" for p in at) + " |", "|---|" + "---|" * len(at)]  # fmt: skip
    for name in sorted(table, key=lambda n: -table[n][-1]):
        lines.append(f"| {name} | " + " | ".join(f"{b:.2f}" for b in table[name]) + " |")
    return [
        *lines,
        "",
        "![valid BLEU against compute](bleu_by_compute.png)",
        "![valid BLEU against epochs](bleu_by_epochs.png)",
        "",
    ]


def budget_section(groups: dict[str, list[dict]]) -> list[str]:
    """The headline table's title and what it holds equal, from the runs' budgets."""
    budgets = sorted({r["budget"] for runs in groups.values() for r in runs})
    if any("wall clock" in b for b in budgets):
        return ["## Equal time\n", f"Each run trains for {'; '.join(budgets)}. A wall-clock budget depends on the "
                "machine and on what else ran on it, so these runs are **not reproducible**: the same seed gives "
                "another model elsewhere (a compute budget, `--flops`, does not). "]  # fmt: skip
    if len(budgets) == 1 and budgets[0].endswith("FLOPs"):
        return ["## Equal compute\n", f"Each run trains for the same compute, {budgets[0]} of matrix products "
                "(nmt/flops.py): the same updates on any machine, idle or busy. "]  # fmt: skip
    return ["## Budgets\n", f"The runs' budgets: {'; '.join(budgets)}. "]


def report(groups, tests, claims, curves, compute, signatures, output: Path, beam: int, command: str,
           best: str) -> str:  # fmt: skip
    """report.md: the claims, then the tables behind them; figures beside it."""
    resamples = next((i.resamples for t in tests["intervals"].values() for m in t.values() for i in m.values()), 0)
    lines = [f"# Comparison\n\n`{command}`\n", "## The papers' claims\n",
             "Each claim's primary comparison is fixed in advance (nmt/study/claims.py): a difference, its 95% "
             "interval and p-value over seeds and test sentences together (a t interval from the seeds' variance "
             f"and the sentences', these from {resamples:,} shared resamples); supported or contradicted when p is "
             "below 0.05, mixed when significant comparisons point both ways, inconclusive otherwise; secondary "
             "comparisons with Holm's correction (the method: docs/comparison.md, \"The statistics\"). Detects: "
             "the true difference the primary test finds 80% of the time.\n",
             "| claim | paper | these runs | evidence | detects |", "|---|---|---|---|---|"]  # fmt: skip
    lines += [f"| {c.claim} | {c.source} | **{c.verdict}** | {c.evidence} | {power_line(c) or '-'} |"
              for c in claims]  # fmt: skip
    lines += ["", power_text(groups)]
    title, budget_text = budget_section(groups)
    lines += ["", "![attention of each model](attention.png)", "", title,
              budget_text + "Test BLEU of the best checkpoint by valid BLEU ("
              + (f"beam {beam}, length penalty 0.6" if beam > 1 else "greedy")
              + "), mean ± standard deviation over seeds with each seed's figure; rows in order of valid BLEU "
              f"(greedy, the best checkpoint's), which also chooses the best variant ({best}). Δ: the difference in "
              "test BLEU against the baseline and against the best, with its 95% interval and p-value over seeds and "
              "sentences; per seed: the largest p over seeds of sacrebleu's paired bootstrap and approximate "
              "randomization against the best (how far another test set would move it, not another training run).\n",
              f"| variant | seeds | valid BLEU | test BLEU | each seed | chrF | Δ {BASELINE} | Δ best | "
              "per seed (p bs, p ar) | updates | PFLOP | minutes | tok/s | entropy | diagonality |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    ranked = sorted(groups, key=lambda n: -statistics.mean(r["valid_bleu"] for r in groups[n]))
    for name in ranked:
        runs = groups[name]
        shape = [r["attention"] for r in runs if r["attention"]]
        attention = (f"{statistics.mean(s['entropy'] for s in shape):.2f} | "
                     f"{statistics.mean(s['diagonality'] for s in shape):.2f}") if shape else "- | -"  # fmt: skip
        against = {k: tests["intervals"][k].get(name, {}).get("BLEU") for k in ("baseline", "best")}
        lines.append(
            f"| {name} | {len(runs)} | {spread([r['valid_bleu'] for r in runs])} | "
            f"{spread([headline(r) for r in runs])} | "
            f"{', '.join(f'{headline(r):.2f}' for r in runs)} | {spread([r['test_chrf'] for r in runs])} | "
            f"{interval_cell(against['baseline'])} | {interval_cell(against['best'])} | "
            f"{seeds_cell(tests['best'].get(name, {}).get('BLEU'))} | "
            f"{statistics.mean(r['updates'] for r in runs):.0f} | "
            f"{statistics.mean(r['petaflops'] for r in runs):.3g} | "
            f"{statistics.mean(r['minutes'] for r in runs):.1f} | "
            f"{statistics.mean(r['tokens_per_second'] for r in runs):,.0f} | {attention} |"
        )  # fmt: skip
    lines += [
        "",
        "Minutes and tokens/s are measurements of the machine the runs shared, not what stopped them "
        "(unless the budget above is in minutes).",
        "",
        "![valid BLEU against time](bleu_by_time.png)",
        "",
    ]
    lines += equal_compute_table(compute)
    steps, at_steps = equal_updates(curves)
    lines += ["## Equal updates\n", "Valid BLEU (greedy, mean over seeds) after the same number of updates, "
              "whatever each took in time.\n"]  # fmt: skip
    if steps:
        lines += ["| variant | " + " | ".join(f"{s} updates" for s in steps) + " |", "|---|" + "---|" * len(steps)]
        for name in sorted(at_steps, key=lambda n: -at_steps[n][-1]):
            lines.append(f"| {name} | " + " | ".join(f"{b:.2f}" for b in at_steps[name]) + " |")
    else:
        lines.append("No update count that every variant validated at (use `--train`, or one trainer.valid_every).")
    lines += ["", "![valid BLEU against updates](bleu_by_updates.png)", "", "## chrF\n",
              "chrF of the same output as the BLEU above, with its intervals over seeds and sentences.\n",
              f"| variant | chrF | Δ chrF {BASELINE} | Δ chrF best |", "|---|---|---|---|"]  # fmt: skip
    for name in ranked:
        lines.append(f"| {name} | {spread([r['test_chrf'] for r in groups[name]])} | "
                     f"{interval_cell(tests['intervals']['baseline'].get(name, {}).get('chrF'))} | "
                     f"{interval_cell(tests['intervals']['best'].get(name, {}).get('chrF'))} |")  # fmt: skip
    header = [f"{low}-{high}" for low, high in LENGTH_BUCKETS]
    labels = " | ".join(h.replace("-1000", "+") for h in header)
    lines += ["", "## BLEU by source length\n", "Test BLEU (the headline's output, mean over seeds) by source "
              "length in words, "
              "sentences per bucket in brackets; the figure Bahdanau et al. (2015, Figure 2) drew.\n",
              f"| variant | {labels} |", "|---|" + "---|" * len(header)]  # fmt: skip
    for name in ranked:
        runs = groups[name]
        cells = [f"{statistics.mean(r['by_length'][h][0] for r in runs):.1f} ({runs[0]['by_length'][h][1]})"
                 if all(h in r["by_length"] for r in runs) else "-" for h in header]  # fmt: skip
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "![BLEU by source length](bleu_by_length.png)", "", "## Signatures\n",
              *[f"- {key}: `{value}`" for key, value in sorted(signatures.items())], "",
              "Entropy (nats; lower is sharper) and diagonality (1: target words attend in source order) of each "
              "best checkpoint's attention force-decoding the test references (the Transformer: its last layer "
              "averaged over heads). Runs: " + ", ".join(f"`{r['run']}`" for n in ranked for r in groups[n]),
              ]  # fmt: skip
    text = "\n".join(lines) + "\n"
    (output / "report.md").write_text(text, encoding="utf-8")
    return text


# What a comparison's report writes into its folder (scripts/compare.py --output refuses a folder where a user's
# files have these names)
REPORT_FILES = ("report.md", "compare.json", "tensorboard", "attention.png", "bleu_by_length.png", "bleu_by_time.png",
                "bleu_by_updates.png", "bleu_by_compute.png", "bleu_by_epochs.png")  # fmt: skip
HELD_APART = ("scored", "alignment_counts", "panel")  # what compare.json leaves out of a run (its record has it)


def summarise(runs: list[dict], pairs: list, output: Path, beam: int, command: str, lab: dict | None, samples: int,
              trials: int, length_note: str = "") -> str:  # fmt: skip
    """The report of finished runs on the test `pairs`: intervals over seeds and sentences, sacrebleu's paired tests
    per seed, claims, figures, report.md, compare.json and TensorBoard. The best variant is the one with the best
    mean valid BLEU; the test split only reports."""
    groups = group(runs)
    references = [t for _, t in pairs]
    bleu = {name: statistics.mean(headline(r) for r in g) for name, g in groups.items()}
    valid = {name: statistics.mean(r["valid_bleu"] for r in g) for name, g in groups.items()}
    best = max(valid, key=valid.get)
    alignments = {name: {r["seed"]: r["alignment_counts"] for r in g} for name, g in groups.items()
                  if all(r.get("alignment_counts") is not None for r in g)}  # fmt: skip
    evidence = Evidence({name: {r["seed"]: r["scored"] for r in g} for name, g in groups.items()}, references,
                        [len(s.split()) for s, _ in pairs], alignments, samples)  # fmt: skip
    tests = {"intervals": {"baseline": intervals(evidence, BASELINE) if BASELINE in groups else {},
                           "best": intervals(evidence, best)}}  # fmt: skip
    tests["best"], signatures = significance(groups, references, best, samples, trials)
    for name, metric in (("BLEU", sacrebleu.BLEU()), ("chrF", sacrebleu.CHRF())):  # the scores' own signatures
        metric.corpus_score(references, [references])  # a signature describes the metric, not the output
        signatures[name] = str(metric.get_signature())
    improving = {name for name, g in groups.items() if still_improving(g)}
    claims = check_claims(evidence, valid, lab, length_note, improving)
    curves = {name: mean_curve(g) for name, g in groups.items()}
    compute = {name: mean_compute_curve(g) for name, g in groups.items()}
    made = figures(groups, curves, compute, pairs, output)
    text = report(groups, tests, claims, curves, compute, signatures, output, beam, command, best)
    record = {
        "command": command,
        "signatures": signatures,
        "resamples": samples,
        "power": power_text(groups),
        "claims": [vars(c) for c in claims],
        "variants": {name: {"mean_bleu": bleu[name], "mean_valid_bleu": valid[name],
                            "still_improving": name in improving,
                            "runs": [{**{k: v for k, v in r.items() if k not in HELD_APART},
                                      "last_third_gain": last_third_gain(r.get("curve") or [])}
                                     for r in g]} for name, g in groups.items()},
        "intervals": {against: {name: {m: vars(i) for m, i in by_metric.items()} for name, by_metric in t.items()}
                      for against, t in tests["intervals"].items()},
        "per_seed_tests": {name: {m: vars(d) for m, d in by_metric.items()}
                           for name, by_metric in tests["best"].items()},
        "best": best,
    }  # fmt: skip
    (output / "compare.json").write_text(json.dumps(record, indent=1, default=float), encoding="utf-8")
    with SummaryWriter(str(output / "tensorboard")) as writer:  # the same figures and text in TensorBoard
        for key, figure in made.items():
            writer.add_figure(f"compare/{key}", figure)
        writer.add_text("compare/report", text)
    return text


def describe_runs(run_dirs: list[Path], beam: int) -> tuple[list[dict], list[tuple[str, str]]]:
    """`describe` of every run (a run's record as it was saved), and the test pairs they share (runs tested on
    different test sets are refused)."""
    records = {run: load_record(run) for run in run_dirs if run.is_file()}
    seen: dict[tuple, list[tuple[Path, dict]]] = {}
    for run in run_dirs:  # before decoding anything: the runs' Hydra records name each variant and seed
        if (config := records[run]["config"] if run in records else saved_settings(run)) is not None:
            key = variant_name(config["model"]), config.get("seed")
            twin = next((other for other, saved in seen.get(key, []) if not differences(saved, config)), None)
            if twin is not None:
                raise _twice(str(run), str(twin), *key)
            seen.setdefault(key, []).append((run, config))
    cache: dict = {}
    runs = [records[run] if run in records else describe(run, cache, beam) for run in run_dirs]
    for path, record in records.items():
        if record["beam"] != (beam if beam > 1 else 1):
            raise UserError(f"{path}: the record holds the output of beam {record['beam']}, and the report asks "
                            f"for beam {beam}; report with --beam {record['beam']}")  # fmt: skip
        pairs = test_pairs(record["config"]["data"], cache)
        if len(record["scored"]) != len(pairs):
            raise UserError(f"{path}: scores {len(record['scored'])} test sentences, and its corpus has "
                            f"{len(pairs)} today")  # fmt: skip
    if len({tuple(pairs) for pairs in cache.values()}) > 1:
        raise UserError("the runs were tested on different test sets; compare runs of one corpus at a time")
    return runs, next(iter(cache.values()))
