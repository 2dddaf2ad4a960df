"""A finished run described for the study, and its record: what a report needs of a run (scores, its test output as
sufficient statistics per sentence, curves from its validations.jsonl, attention on the figure's sentence, where it
was trained), made once, so that a report is made again on a machine that holds none of the runs.

`recorded_sweep` trains what has no record yet and records each run as its job ends (the `RecordRun` callback).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import sacrebleu
from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from nmt import UserError, build, paths
from nmt.config import DecodeOptions
from nmt.decoding.alignment import attention_report, choose_map, parse_key, word_attention
from nmt.decoding.evaluate import bleu_by_length
from nmt.decoding.translator import Translator
from nmt.launch.multirun import skip_job
from nmt.metrics import VALIDATED
from nmt.paths import derived_from, read_json, stamp, write_text
from nmt.runs import checkpoint
from nmt.runs.folder import RunFolder
from nmt_study.comparison import budget, differences, twice
from nmt_study.significance import Scored
from nmt_study.sweep import (
    TEST_SHA256,
    from_root,
    precision_of,
    refuse_stale,
    run_folder,
    saved_settings,
    stale,
    sweep,
)
from nmt_study.variants import Variant

# A finished run's record (save_record): records/<variant>/seed<N>.record.json
RECORD_SUFFIX = ".record.json"


def record_path(records: Path, run_dir: Path) -> Path:
    """Where the run trained in `run_dir` (<variant>/seed<N>) is recorded under `records`."""
    return records / run_dir.parent.name / f"{run_dir.name}{RECORD_SUFFIX}"


def recorded(
    records: Path, variants: list[str], seeds: list[int], overrides: list[str], prefix: str = ""
) -> set[tuple[str, int]]:
    """The (variant, seed) runs that have a record under `records` (<variant>/seed<N>.record.json, written by
    `nmt_study.records.save_record` when the run finished, wherever that was); a record of a run trained with
    other settings than `overrides` give today is refused, as a stale finished run is."""

    found, reasons = set(), []
    for variant in variants:
        for seed in seeds:
            path = record_path(records, run_folder(Path(), prefix, variant, seed))
            if path.is_file():
                record = read_json(path, "delete it (or restore it from git) and rerun: its run trains again")
                reasons.append(
                    stale(
                        f"{variant} seed {seed} ({path})",
                        [f"variant={variant}", *overrides, f"seed={seed}"],
                        checkpoint.upgrade(record["config"]),
                        precision_of(record.get("provenance", {})),
                    )
                )
                found.add((variant, seed))
    refuse_stale([r for r in reasons if r], "Move these records away or delete them, and rerun to train the runs again")
    return found


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
        runs += sorted(p.parent for p in folder.rglob(paths.BEST) if RunFolder(p.parent).hypotheses.is_file())
        runs += sorted(folder.rglob(f"*{RECORD_SUFFIX}"))
    if not runs:
        raise UserError(
            f"no finished runs (best.pt with best.test.hyp, or *{RECORD_SUFFIX}) under {', '.join(map(str, folders))}"
        )
    return runs


def beam_hypotheses(run: Path, sources: list[str], beam: int, best: Path) -> list[str]:
    """The reported checkpoint's (`best`: best.pt, or an average, RunFolder.reported) beam-search test output,
    `best.test.beam<N>.hyp`, in the precision the run trained in: decoded here unless the file there was made from
    this very checkpoint with these settings (its `.source` note says so; one that evaluate.py wrote with its own
    settings, or for an earlier best.pt, is decoded again)."""
    path = run / f"best.test.beam{beam}.hyp"
    settings = f"beam={beam} precision=trained"
    if not derived_from(path, best, settings):
        translator = Translator.load(best, DecodeOptions(beam=beam, precision="trained"))
        write_text(path, "".join(h + "\n" for h in translator.translate(sources)))
        stamp(path, best, settings)
    return path.read_text(encoding="utf-8").split("\n")[: len(sources)]


def attention_shape(translator: Translator, pairs: list[tuple[str, str]]) -> tuple[str, dict] | None:
    """The alignment map (the RNNs' one attention, the Transformer's last layer) and its entropy and diagonality
    (`nmt.decoding.alignment`), force-decoding the test references; None without attention."""
    report = attention_report(translator.model, translator.vocabulary, pairs, translator.device, translator.dtype)
    if not report:
        return None
    chosen = choose_map(list(report), None)
    return chosen, report[chosen]


# Where a corpus lies, is downloaded from and cached: the training machine's, never part of a record. A record names
# its corpus by its options and the checksum of its test split (`TEST_SHA256`), and is read on any machine from where
# that machine keeps the corpus (data.dir there, or $NMT_DATA_DIR, or a download).
MACHINE_KEYS = ("dir", "url", "cache", "spm_cache")


def test_checksum(pairs: list[tuple[str, str]]) -> str:
    """sha256 of a test split as read: each pair's source and target, tab-separated, a line each."""
    return hashlib.sha256("".join(f"{s}\t{t}\n" for s, t in pairs).encode("utf-8")).hexdigest()


def portable(data: dict, pairs: list[tuple[str, str]] | None = None) -> dict:
    """A run's data config as a record keeps it: no machine's paths, and the checksum of the test split it was
    scored on (kept from `data`, or of `pairs`)."""
    kept = {k: v for k, v in data.items() if k not in MACHINE_KEYS}
    if pairs is not None and TEST_SHA256 not in kept:
        kept[TEST_SHA256] = test_checksum(pairs)
    return kept


def test_pairs(data: dict, cache: dict, origin: Path | str = "the run") -> list[tuple[str, str]]:
    """The test pairs of a run's corpus (its config's `data`, or a record's portable one), read once per corpus into
    `cache`, from where this machine keeps that corpus (a training machine's folder in an old record is not
    followed); a record's checksum is checked, naming `origin` when the corpus here differs."""
    options = {k: v for k, v in portable(data).items() if k != TEST_SHA256}
    key = OmegaConf.to_yaml(OmegaConf.create(options))
    if key not in cache:
        cache[key] = build.load_corpus(build.saved_data_config(options)).test
    expected = data.get(TEST_SHA256)
    if expected and test_checksum(cache[key]) != expected:
        raise UserError(
            f"{origin}: was scored on a test split of {options.get('corpus')} whose checksum is {expected[:12]}..., "
            f"and the one read here is {test_checksum(cache[key])[:12]}...: point data.dir or $NMT_DATA_DIR at the "
            "same corpus"
        )
    return cache[key]


def reported_valid_bleu(run: Path, reported: Path, best: dict) -> float:
    """The valid BLEU of the model a run reports: its best checkpoint's, or the average's (results.json's
    valid/averaged_bleu, scored as training ended)."""
    if reported == RunFolder(run).best:
        return best["progress"]["best_bleu"]
    remedy = "a run with trainer.average_last > 1 writes it as its training ends, with the average's valid BLEU"
    return read_json(RunFolder(run).results, remedy, {"valid/averaged_bleu": float})["valid/averaged_bleu"]


def how_trained(best: dict, last: dict) -> dict:
    """A run's size and training from its best and last checkpoints: parameters (tied ones once), the best update,
    the updates, minutes, compute and speed it trained, and the budget it trained for."""
    progress = last["progress"]
    return {
        "parameters": sum({t.data_ptr(): t.numel() for t in best["model"].values()}.values()),
        "best_step": best["progress"]["step"],
        "updates": progress["step"],
        "minutes": progress["train_seconds"] / 60,
        "petaflops": progress.get("flops", 0) / 1e15,
        "budget": budget(best["config"].get("trainer", {})),
        "tokens_per_second": progress["tokens_trained"] / max(progress["train_seconds"], 1e-9),
    }


def describe(run: Path, test_cache: dict, beam: int) -> dict:
    folder = RunFolder(run)
    best, last = checkpoint.load(folder.best), checkpoint.load(folder.last)
    config = best["config"]
    reported = folder.reported(last["config"].get("trainer", {}))  # best.pt, or an average; as the run ended
    pairs = test_pairs(config["data"], test_cache)
    hypotheses = folder.hypotheses.read_text(encoding="utf-8").split("\n")[: len(pairs)]
    references = [t for _, t in pairs]
    sources = [s for s, _ in pairs]
    beam_output = beam_hypotheses(run, sources, beam, reported) if beam > 1 else None
    scored = beam_output or hypotheses  # the headline's output: BLEU, chrF, lengths and the tests all read it
    translator = Translator.load(reported, DecodeOptions(precision="trained"))
    shape, variant = attention_shape(translator, pairs), Variant.of(config["model"])
    return {
        "run": from_root(run),
        "provenance": folder.provenance(),
        "name": variant.name,
        "variant": variant.as_record(),
        "seed": config.get("seed"),
        "config": {k: config[k] for k in ("model", "trainer", "seed") if k in config}
        | {"data": portable(config["data"], pairs)},
        **how_trained(best, last),
        "reported": reported.name,
        "valid_bleu": reported_valid_bleu(run, reported, best),
        "best_validation": validation_at(run, best["progress"]["step"]),
        "test_bleu": sacrebleu.corpus_bleu(hypotheses, [references]).score,
        "test_chrf": sacrebleu.corpus_chrf(scored, [references]).score,
        "test_bleu_beam": sacrebleu.corpus_bleu(beam_output, [references]).score if beam_output else None,
        "by_length": {
            f"{low}-{high}": value for (low, high), value in bleu_by_length(sources, scored, references).items()
        },
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
    matrices = word_attention(
        translator.model,
        translator.vocabulary,
        [(source, target)],
        translator.device,
        translator.dtype,
        [key[0]],
        (key[1],),
    )
    return {"source": source.split(), "target": target.split(), "weights": matrices[key][0].tolist()}


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
    finished = sorted(result.parent for result in folder.glob(f"*/seed*/{paths.RESULTS}"))
    return [record_one(run, records, beam, cache) for run in finished]


def recorded_sweep(
    variants: list[str],
    seeds: list[int],
    overrides: list[str],
    folder: Path,
    records: Path,
    beam: int,
    launcher: str = "basic",
    jobs: int = 1,
    hydra: list[str] = (),
    prefix: str = "",
) -> list[Path]:
    """`sweep` into `folder` of the runs that have no record in `records`, each finished run recorded there (beam
    `beam` as the headline output) by its own job as it ends (`RecordRun`), and a record made on another machine
    kept; `hydra`: more of Hydra's options for the sweep (another callback); `prefix`: of the runs' folder names.
    Returns every run's record."""
    record_runs(folder, records, beam)  # what an interrupted invocation finished here
    done = recorded(records, variants, seeds, overrides, prefix)
    if done:
        print(f"kept from {records}: {', '.join(f'{v} seed {s}' for v, s in sorted(done))}", flush=True)
    callbacks = [*record_callback(records, beam), *hydra]
    sweep(variants, seeds, overrides, folder, launcher, jobs, done, callbacks, records, prefix)
    record_runs(folder, records, beam)  # any run its job's callback could not record
    return [record_path(records, run_folder(folder, prefix, v, seed)) for seed in seeds for v in variants]


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
        if job_return.status != JobStatus.COMPLETED or not RunFolder(run).finished():
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
        train again: it says so to train.py (`nmt.launch.multirun.skip_job`)."""
        record = record_path(self.records, Path(config.hydra.runtime.output_dir))
        if record.is_file():
            skip_job(f"recorded already in {record}")

    def keep(self, run: Path) -> None:
        record_one(run, self.records, self.beam)


def record_callback(records: Path, beam: int) -> list[str]:
    """The Hydra options that give a `train.py -m` the `RecordRun` callback."""
    return [
        "+hydra.callbacks.record._target_=nmt_study.records.RecordRun",
        f"+hydra.callbacks.record.records='{records.resolve()}'",
        f"+hydra.callbacks.record.beam={beam}",
    ]


def load_record(path: Path) -> dict:
    """A run described from its record (`save_record`)."""
    remedy = "not a run's record: `make results` writes them (restore it from git, or delete it to train the run again)"
    record = read_json(path, remedy, {"statistics": dict, "config": dict, "seed": int})
    try:
        record["scored"] = Scored(record.pop("statistics"))
        record["config"]["data"] = portable(record["config"]["data"])  # a record from before: no machine's path
        checkpoint.current_names(record["config"].get("model"))  # a record from before the wings: today's classes
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise UserError(f"{path}: {remedy} ({type(error).__name__}: {error})") from None
    return record


def validation_at(run: Path, step: int) -> dict:
    """The figures of the validation at update `step` (loss, BLEU, chrF, AER where measured) from validations.jsonl:
    the best checkpoint's, whichever figure chose it; empty where it was not recorded."""
    entry = next((e for e in RunFolder(run).validations() if e["step"] == step), {})
    return {k: entry[k] for k in VALIDATED if k in entry}


def valid_curve(run: Path) -> list[tuple[float, int, float]]:
    """(minutes trained, validation excluded; update; valid BLEU) at each validation, from validations.jsonl."""
    return [(e["train_minutes"], e["step"], e["bleu"]) for e in RunFolder(run).validations() if "train_minutes" in e]


def compute_curve(run: Path) -> list[tuple[float, float, float]]:
    """(petaFLOPs trained, epochs trained, valid BLEU) at each validation, from validations.jsonl; with
    trainer.validations, the k-th point of every run of one budget is at the same k/N of it."""
    return [
        (e["petaflops"], e["epochs"], e["bleu"])
        for e in RunFolder(run).validations()
        if {"petaflops", "epochs"} <= set(e)
    ]


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


def describe_runs(run_dirs: list[Path], beam: int) -> tuple[list[dict], list[tuple[str, str]]]:
    """`describe` of every run (a run's record as it was saved), and the test pairs they share (runs tested on
    different test sets are refused)."""
    records = {run: load_record(run) for run in run_dirs if run.is_file()}
    seen: dict[tuple, list[tuple[Path, dict]]] = {}
    for run in run_dirs:  # before decoding anything: the runs' Hydra records name each variant and seed
        if (config := records[run]["config"] if run in records else saved_settings(run)) is not None:
            key = Variant.of(config["model"]).name, config.get("seed")
            twin = next((other for other, saved in seen.get(key, []) if not differences(saved, config)), None)
            if twin is not None:
                raise twice(str(run), str(twin), *key)
            seen.setdefault(key, []).append((run, config))
    cache: dict = {}
    runs = [records[run] if run in records else describe(run, cache, beam) for run in run_dirs]
    for path, record in records.items():
        if record["beam"] != (beam if beam > 1 else 1):
            raise UserError(
                f"{path}: the record holds the output of beam {record['beam']}, and the report asks "
                f"for beam {beam}; report with --beam {record['beam']}"
            )
        pairs = test_pairs(record["config"]["data"], cache, path)
        if len(record["scored"]) != len(pairs):
            raise UserError(
                f"{path}: scores {len(record['scored'])} test sentences, and its corpus has {len(pairs)} today"
            )
    if len({tuple(pairs) for pairs in cache.values()}) > 1:
        raise UserError("the runs were tested on different test sets; compare runs of one corpus at a time")
    return runs, next(iter(cache.values()))
