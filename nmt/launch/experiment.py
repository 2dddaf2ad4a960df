"""One training run from the command line's config: build, resume, train, test the reported checkpoint, write results.

`train(cfg, run_dir)` is what `python train.py` calls; each stage is a short function of its own. The run's folder is
one `RunFolder`, built here and passed on: it names, writes and reads every file in it.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import logging
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from nmt import Interrupted, UserError, build, distributed
from nmt.config import TrainConfig, check_options
from nmt.decoding.translator import check_input_lengths
from nmt.device import place
from nmt.launch.multirun import in_sweep, rerun_advice
from nmt.models.model import FAMILY_MODULES
from nmt.paths import command_again
from nmt.runs import averaging, checkpoint
from nmt.runs.folder import RunFolder
from nmt.runs.provenance import loaded_code
from nmt.runs.resume import LOCATIONS, plan, same_run_options, saved_locations
from nmt.text.corpus import Pairs, Splits
from nmt.text.data import Vocabulary
from nmt.training.meters import StopRequests
from nmt.training.optim import set_lr
from nmt.training.runlog import user_options
from nmt.training.trainer import Trainer, drained

log = logging.getLogger(__name__)
# The models are built from names in the config (Hydra's _target_), which would import their modules at the first
# build. They are loaded with the rest instead (train.py loads this module as its first run starts): a process that
# trains many runs (a sweep's joblib worker) then runs one version of the code from its first run on, the version
# whose commit it records (`loaded_code`), whatever is edited in the checkout meanwhile. (Loaded lazily, a worker once
# mixed an older attention.py with a newer transformer.py.) The families are those nmt.models.model.FAMILY_MODULES
# names.
for family in FAMILY_MODULES:
    importlib.import_module(family)


@dataclass
class Started:
    """A run that trains: its settings, resolved config, folder, trainer (restored where it continues) and test
    split; `updates` gives its updates one at a time, `finish` reports it."""

    settings: TrainConfig
    resolved: dict
    folder: RunFolder
    trainer: Trainer
    test: Pairs

    def updates(self, stop: StopRequests | None = None) -> Generator[None, None, str]:
        """The run's training, one update per `next` (Trainer.steps; `stop`: requests shared with the runs trained
        beside it), ending with why it stopped."""
        return self.trainer.steps(user_options(self.resolved, same_run_options(), tuple(given_options())), stop)


def train(cfg: DictConfig, run_dir: str | Path) -> dict[str, float]:
    """Build everything from the composed config, train, and report test BLEU of the reported checkpoint (best.pt,
    or an average: trainer.average_last)."""
    with contextlib.ExitStack() as held:
        started = start(cfg, run_dir, held)
        if not isinstance(started, Started):
            return started  # a finished run, kept
        return finish(started, drained(started.updates()))


def start(
    cfg: DictConfig, run_dir: str | Path, held: contextlib.ExitStack, on_held: Callable | None = None
) -> Started | dict:
    """Everything before the first update: the options checked, the seed set, the device and precision placed, the
    run folder held (its lock in `held`, released when `held` closes; then `on_held(folder)`, where runs packed in
    one process open the run's own log) and planned (a finished run's results, kept), the corpus, vocabulary and
    trainer built, a checkpoint restored where the run continues."""
    loaded_code()  # the commit of the code this process runs, found as its first run starts
    settings: TrainConfig = OmegaConf.to_object(cfg)  # typed dataclasses, validated by Hydra already
    resolved = OmegaConf.to_container(cfg, resolve=True)  # what checkpoints store
    check_options(settings.trainer, settings.seed)
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    set_seed(settings.seed)
    if settings.trainer.threads:  # several jobs side by side on one machine: jobs x threads = cores
        torch.set_num_threads(settings.trainer.threads)
    where, precision = place(settings.trainer.device, settings.trainer.precision, settings.trainer.deterministic)
    folder = RunFolder(distributed.share(str(run_dir)))  # under torchrun, every process works in rank 0's folder
    if distributed.is_main():
        folder.own_files()  # links, FIFOs, folders in a run file's place refused; hard links broken
        held.enter_context(folder.lock())  # one run folder, one writer
        if on_held is not None:
            on_held(folder)
    log.info("device %s; precision %s", where, precision.reason)
    decided = plan(folder, settings.trainer.resume, resolved, precision.name, in_sweep())  # before it is written
    if (kept := decided.kept) is not None:
        log.info("%s holds this run, finished with these settings: kept (test BLEU %s)", folder, kept.get("test/bleu"))
        return kept
    if decided.checkpoint:  # where the corpus lies: the checkpoint's, unless given on this command line
        read_where_it_was(settings, resolved, decided.checkpoint[1]["config"], decided.changes)
    splits, vocabulary = corpus_and_vocabulary(settings, folder)
    if distributed.is_main():
        folder.check_corpus(*corpus_digests(splits, settings), resuming=decided.checkpoint is not None)
    if settings.trainer.test_at_end:
        check_test_split(splits.test, vocabulary, settings.trainer.decode_max_input_len)
    trainer = make_trainer(settings, resolved, folder, splits, vocabulary, (where, precision))
    if decided.checkpoint:
        trainer.restore_payload(*decided.checkpoint)
        if "trainer.lr" in decided.changes:
            set_lr(trainer.optimizer, trainer.schedule, settings.trainer.lr)
    return Started(settings, resolved, folder, trainer, splits.test)


def finish(started: Started, reason: str) -> dict:
    """A run whose updates ended (`reason`): interrupted, said with how to continue; else its report, the average of
    its last validations where asked, its test scores, its TensorBoard log closed and the saved-files line."""
    settings, folder, trainer = started.settings, started.folder, started.trainer
    if reason == "interrupted":
        trainer.close()
        how = rerun_advice(settings.trainer.resume) if in_sweep() else f"run {resume_command(folder)}"
        raise Interrupted(
            f"interrupted at step {trainer.step}; {folder.last} holds the run. To continue, {how}", trainer.stop_signal
        )
    if not replicas_agree(trainer):
        distributed.barrier()  # the other processes end with rank 0, after its test: none leaves the group early
        return {}
    results = trainer.report()
    reported = folder.reported(started.resolved["trainer"])  # best.pt, or the average of the validations ending at it
    if reported != folder.best:
        score_average(trainer, folder, results)
    if settings.trainer.test_at_end:
        score_test_split(trainer, started.test, reported, results)
    trainer.close(results if settings.trainer.test_at_end else None)
    if distributed.is_main() and not in_sweep():
        print(folder.saved_line(settings.trainer))
    distributed.barrier()
    return results


def make_trainer(
    settings: TrainConfig, resolved: dict, folder: RunFolder, splits: Splits, vocabulary: Vocabulary, placed: tuple
) -> Trainer:
    """The model of the resolved config and its trainer, on the device and in the precision decided (`placed`)."""
    model = build.model(resolved["model"], vocabulary)
    log.info("model %s: %s parameters", resolved["model"]["_target_"], f"{parameter_count(model):,}")
    return Trainer(
        model,
        vocabulary,
        splits.train,
        splits.valid,
        folder,
        settings.trainer,
        max_tokens=settings.data.max_tokens,
        max_len=settings.data.max_len,
        seed=settings.seed,
        run_config=resolved,
        valid_alignments=splits.alignments["valid"] if splits.alignments else None,
        placed=placed,
    )


def score_average(trainer: Trainer, folder: RunFolder, results: dict[str, float]) -> None:
    """With trainer.average_last=k > 1: the average of the weights of the run's k validations ending at the best
    written (`averaging.average_last`) and decoded greedily on the valid split as validations are, its BLEU in
    `results` as valid/averaged_bleu."""
    path, payload = averaging.average_last(folder, trainer.config.average_last)
    _, _, scores = trainer.decode(trainer.validator.pairs, payload["model"], "validating the averaged weights")
    results["valid/averaged_bleu"] = scores.bleu
    steps = payload["progress"]["averaged_steps"]
    log.info(
        "%s: the average of the weights at steps %s: valid BLEU %.2f (the best checkpoint's %.2f)",
        path.name,
        ", ".join(map(str, steps)),
        scores.bleu,
        trainer.progress.best_bleu,
    )


def score_test_split(trainer: Trainer, test_pairs, reported: Path, results: dict[str, float]) -> None:
    """The reported checkpoint's scores on the test split added to the run's `results`; Ctrl-C
    while decoding says that training is done and how to score it."""
    try:
        results.update(evaluate_best(trainer, test_pairs, reported, results))
    except KeyboardInterrupt:
        raise Interrupted(
            f"interrupted while decoding the test split; training is done and saved. Score the reported "
            f"checkpoint with: python evaluate.py checkpoint={reported}",
            2,
        ) from None


def read_where_it_was(settings: TrainConfig, resolved: dict, saved: dict, changed: dict[str, tuple]) -> None:
    """A resumed run's corpus and subword models read from the checkpoint's folders (`saved_locations`), said."""
    kept = saved_locations(saved, changed, given_options())
    for key in LOCATIONS:
        if key in kept:
            setattr(settings.data, key, kept[key])
            resolved["data"][key] = kept[key]
            log.info("data.%s=%r: the checkpoint's (give data.%s=... to read it elsewhere)", key, kept[key], key)
        elif f"data.{key}" in changed:
            old, new = changed[f"data.{key}"]
            log.info("resuming with data.%s=%r (the checkpoint had %r)", key, new, old)


def given_options() -> list[str]:
    """The overrides of this command line (Hydra's), [] outside Hydra."""
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def resume_command(folder: RunFolder) -> str:
    """The command that continues the run in `folder`, word for word: this command line's options (so the run is
    the same run), with trainer.resume=true and the run's folder."""
    kept = [o for o in given_options() if o.split("=", 1)[0].lstrip("+") not in ("trainer.resume", "hydra.run.dir")]
    return command_again("train.py", [*kept, "trainer.resume=true", f"hydra.run.dir={folder}"])


def corpus_digests(splits: Splits, settings: TrainConfig) -> tuple[dict[str, str], dict[str, str]]:
    """The sha256 of each split's pairs as the run reads them, and where each split is read from (its files)."""
    digests = {
        name: hashlib.sha256(json.dumps(splits.split(name), ensure_ascii=False).encode()).hexdigest()
        for name in ("train", "valid", "test")
    }
    data = settings.data
    files = {}
    if data.corpus == "files":
        files = {
            name: f"{getattr(data, name).src} and {getattr(data, name).tgt}" for name in ("train", "valid", "test")
        }
    return digests, files


def corpus_and_vocabulary(settings: TrainConfig, folder: RunFolder) -> tuple[Splits, Vocabulary]:
    """The corpus and its subword models, saved into the run folder. Under torchrun, rank 0 downloads the corpus
    and trains the subword models first; the other processes then reuse them from the cache."""
    if not distributed.is_main():
        distributed.barrier()
    splits = build.load_corpus(settings.data)
    vocabulary = build.vocabulary(settings.data, splits)
    splits = build.with_subwords(splits, vocabulary, settings.data)  # no pair left without a subword on a side
    if distributed.is_main():
        vocabulary.save(folder.subword_model("source"), folder.subword_model("target"))
        distributed.barrier()
    log.info(
        "corpus: %d train / %d valid / %d test pairs; vocabulary %d source / %d target subwords",
        len(splits.train),
        len(splits.valid),
        len(splits.test),
        vocabulary.source_size,
        vocabulary.target_size,
    )
    return splits, vocabulary


def check_test_split(pairs, vocabulary: Vocabulary, limit: int) -> None:
    """The test split is decoded after training: say now, not after hours, if it cannot be."""
    if not pairs:
        raise UserError(
            "the test split is empty: give data.test files with at least one pair, or trainer.test_at_end=false"
        )
    lengths = [len(ids) for ids in vocabulary.encode_source([s for s, _ in pairs])]
    check_input_lengths(lengths, range(1, len(pairs) + 1), limit, "trainer.decode_max_input_len", "test line")


def replicas_agree(trainer: Trainer) -> bool:
    """Under torchrun: check that every replica ends with the same weights; only rank 0 goes on to test."""
    if trainer.world == 1:
        return True
    if not distributed.replicas_agree(trainer.model):
        raise RuntimeError("the data-parallel replicas ended with different weights")
    log.info("all %d replicas hold the same weights", trainer.world)
    return distributed.is_main()


def evaluate_best(trainer: Trainer, test_pairs, reported: Path, before: dict[str, float]) -> dict[str, float]:
    """Greedy test BLEU and chrF of the reported checkpoint (best.pt, or the average of the validations ending at the
    best: RunFolder.reported): the hypotheses and the results, with the figures `before` it, in the run folder."""
    folder, tested = trainer.folder, checkpoint.load(reported)
    best = checkpoint.load(folder.best) if reported != folder.best else tested
    what = (
        "best checkpoint"
        if tested is best
        else f"average of the {trainer.config.average_last} validations ending at the best"
    )
    texts, _, scores = trainer.decode(test_pairs, tested["model"], f"testing the {what}")
    folder.write_hypotheses(texts)
    results = {"test/bleu": scores.bleu, "test/chrf": scores.chrf, "best/step": best["progress"]["step"]}
    report = {
        **before,
        **results,
        "model": trainer.run_config["model"]["_target_"],
        "tested": reported.name,
        "precision": trainer.precision.name,
        "signature": scores.bleu_signature,
    }
    folder.write_results(report)
    log.info("test (%s, greedy): BLEU %.2f chrF %.2f  [%s]", what, scores.bleu, scores.chrf, scores.bleu_signature)
    print(f"test BLEU {scores.bleu:.2f} chrF {scores.chrf:.2f} ({what}, greedy; {scores.bleu_signature})")
    return results


def set_seed(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)


def parameter_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
