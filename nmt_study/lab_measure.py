"""The alignment lab's measurement of one finished run (nmt_study lab): BLEU by length on a test set of sentences up to
80 words, AER against the sample grammar's gold links, the valid AER curve; kept as the run's lab record beside its
comparison record (`nmt_study.records.save_record`), so that the lab's report is made from records alone.

Each job of the lab's sweep measures its own run as it ends (`MeasureRun`, a Hydra callback), as `RecordRun` records
it: a lab spread over several machines keeps every run finished on each. The sentences are the sample grammar's, which
are ours, so a lab record keeps the translations of the length test set.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import sacrebleu

from nmt import UserError
from nmt.build import corpus_of
from nmt.config import DecodeOptions, GrammarOptions
from nmt.decoding.alignment import attention_report
from nmt.decoding.evaluate import alignment_map_of
from nmt.decoding.translator import Translator
from nmt.paths import read_json, write_text
from nmt.runs import checkpoint
from nmt.runs.folder import RunFolder
from nmt.text.aer import read_gold
from nmt.text.corpus import read_parallel
from nmt.text.sample import generate_aligned, write_aligned
from nmt_study.lab_plan import BUCKETS
from nmt_study.records import OnFinishedRun
from nmt_study.sweep import from_root

LAB_SUFFIX = ".lab.json"
REMEDY = "delete it and rerun: the run is measured again from its checkpoint, or trained again"


def length_test_set(folder: Path, per_bucket: int, train: set[str], seed: int) -> tuple[Path, Path, Path]:
    """Sentences of every length bucket, none of them in the training split, with their gold links. Kept in `folder`
    with what they were drawn for (long.json: the training sentences' digest, buckets, seed); drawn again where that
    differs, so that no lab reads the set another protocol's training left there."""
    paths = folder / "long.de", folder / "long.en", folder / "long.align"
    drawn_for = {
        "train": hashlib.sha256("\n".join(sorted(train)).encode("utf-8")).hexdigest(),
        "per_bucket": per_bucket,
        "buckets": [list(bucket) for bucket in BUCKETS],
        "seed": seed,
    }
    try:
        drawn = json.loads((folder / "long.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        drawn = None
    if drawn == drawn_for and all(p.is_file() for p in paths):
        return paths
    pairs, gold = [], []
    for number, (low, high) in enumerate(BUCKETS):
        options = GrammarOptions(clauses=12, phrases=1, min_words=low, max_words=high)
        splits, links = generate_aligned(0, 0, per_bucket + len(train) // 50, seed + number, options)
        kept = [(pair, g) for pair, g in zip(splits.test, links["test"]) if pair[0] not in train][:per_bucket]
        pairs += [pair for pair, _ in kept]
        gold += [g for _, g in kept]
    folder.mkdir(parents=True, exist_ok=True)
    write_aligned(paths, pairs, gold)
    write_text(folder / "long.json", json.dumps(drawn_for) + "\n")
    return paths


def set_digest(long_set: tuple[Path, Path, Path]) -> str:
    """What identifies a length test set: the digest of its files (a lab record names the set it was measured on)."""
    digest = hashlib.sha256()
    for path in long_set:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def valid_aer_curve(run_dir: Path) -> list[tuple[int, float]]:
    """(update, valid AER) at each validation that measured AER, from the run's validations.jsonl."""
    return [(e["step"], e["aer"]) for e in RunFolder(run_dir).validations() if e.get("aer") is not None]


def measure(run_dir: Path, long_set: tuple[Path, Path, Path]) -> dict:
    """BLEU by length on the length test set, AER on the sample test split and on the length test set."""
    folder = RunFolder(run_dir)
    trainer = checkpoint.load(folder.last)["config"].get("trainer", {})  # as the run ended
    translator = Translator.load(folder.reported(trainer), DecodeOptions(device="cpu", precision="trained"))
    splits = corpus_of(translator.config, None)
    pairs = read_parallel(long_set[0], long_set[1])
    gold = read_gold(long_set[2], pairs)
    hypotheses = translator.translate([s for s, _ in pairs])
    by_length = {}
    for low, high in BUCKETS:
        chosen = [i for i, (s, _) in enumerate(pairs) if low <= len(s.split()) <= high]
        if chosen:
            bleu = sacrebleu.corpus_bleu([hypotheses[i] for i in chosen], [[pairs[i][1] for i in chosen]])
            by_length[f"{low}-{high}"] = {"bleu": bleu.score, "sentences": len(chosen)}
    result = {
        "run": from_root(run_dir),
        "provenance": folder.provenance(),
        "by_length": by_length,
        "valid_aer": valid_aer_curve(run_dir),
        "test_bleu": json.loads(folder.results.read_text())["test/bleu"],
        "seed": translator.config.get("seed"),
        "long_hypotheses": hypotheses,
        "long_set": set_digest(long_set),
    }
    chosen_map = alignment_map_of(translator, None, None)
    if chosen_map is not None:
        test = attention_report(
            translator.model,
            translator.vocabulary,
            splits.test,
            translator.device,
            translator.dtype,
            splits.alignments["test"],
            counts=True,
        )[chosen_map]
        long = attention_report(
            translator.model, translator.vocabulary, pairs, translator.device, translator.dtype, gold
        )[chosen_map]
        result.update(alignment_map=chosen_map, test_alignment=test, long_alignment=long)
    return result


def lab_record_path(records: Path, run: Path) -> Path:
    """records/<variant>/seed<N>.lab.json for the run in <variant>/seed<N>."""
    return records / run.parent.name / f"{run.name}{LAB_SUFFIX}"


def measure_one(run: Path, records: Path, long_set: tuple[Path, Path, Path]) -> Path:
    """The lab record of the finished run in `run`, measured and written unless it is there."""
    path = lab_record_path(records, run)
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps(measure(run, long_set), default=float) + "\n")
        print(f"measured {run} in {path}", flush=True)
    return path


class MeasureRun(OnFinishedRun):
    """The callback the lab's `train.py -m` gets: each job measures its finished run (`measure_one`) as it ends."""

    done = "measured"

    def __init__(self, records: str, long_set: list[str]):
        self.records, self.long_set = Path(records), tuple(Path(p) for p in long_set)

    def keep(self, run: Path) -> None:
        measure_one(run, self.records, self.long_set)


def measure_callback(records: Path, long_set: tuple[Path, Path, Path]) -> list[str]:
    """The Hydra options that give the lab's `train.py -m` the `MeasureRun` callback."""
    paths = ",".join(f"'{p.resolve()}'" for p in long_set)
    return [
        "+hydra.callbacks.measure._target_=nmt_study.lab_measure.MeasureRun",
        f"+hydra.callbacks.measure.records='{records.resolve()}'",
        f"+hydra.callbacks.measure.long_set=[{paths}]",
    ]


def measured_seeds(folder: Path, seeds: range) -> range:
    """The seeds of a variant the report covers: those trained now (`seeds`) and the ones after them that are
    measured too, without a gap (the alignment claim's variants have more seeds than the others: where seeds are the
    noise, a verdict needs them)."""
    last = seeds.stop
    while (folder / f"seed{last}{LAB_SUFFIX}").is_file():
        last += 1
    return range(seeds.start, last)


def read_measured(
    records: Path, variants: dict[str, tuple[str, str]], seeds: range, long_set: tuple[Path, Path, Path], output: Path
) -> dict[str, list[dict]]:
    """Each variant's lab records (`variants`: key -> its records folder's name and its readable name), for the
    seeds every variant has; a record measured on another length test set than today's is refused by name."""
    measured = {
        key: [
            {**read_json(records / folder / f"seed{seed}{LAB_SUFFIX}", REMEDY), "name": name}
            for seed in measured_seeds(records / folder, seeds)
        ]
        for key, (folder, name) in variants.items()
    }
    digest = set_digest(long_set)
    other_set = [
        f"{variants[key][0]}/seed{run['seed']}{LAB_SUFFIX}"
        for key, runs in measured.items()
        for run in runs
        if run.get("long_set") != digest
    ]
    if other_set:  # its BLEU by length would be read against other sentences' references
        raise UserError(
            f"{records}: {', '.join(other_set)} measured on another length test set than {output / 'data'}'s (drawn "
            f"for today's training sentences), or before records named theirs: {REMEDY}"
        )
    return measured
