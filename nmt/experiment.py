"""One training run from the command line's config: build, resume, train, test the reported checkpoint, write results.

`train(cfg, run_dir)` is what `python train.py` calls; each stage is a short function of its own.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

# The models are built from names in the config (Hydra's _target_), which would import their modules at the first
# build. They are loaded with the rest instead (train.py loads this module as its first run starts): a process that
# trains many runs (a sweep's joblib worker) then runs one version of the code from its first run on, the version
# whose commit it records (`loaded_code`), whatever is edited in the checkout meanwhile. (Loaded lazily, a worker once
# mixed an older attention.py with a newer transformer.py.)
import nmt.rnn  # noqa: F401
import nmt.transformer  # noqa: F401
from nmt import Interrupted, UserError, averaging, build, checkpoint, distributed
from nmt.config import TrainConfig, check_options
from nmt.corpus import Splits
from nmt.data import Vocabulary
from nmt.decoding import check_input_lengths, decode_split
from nmt.device import Precision, place
from nmt.multirun import in_sweep, rerun_advice
from nmt.optim import set_lr
from nmt.provenance import loaded_code, record_provenance
from nmt.resume import LOCATIONS, plan, same_run_options, saved_locations
from nmt.run_folder import own_files, run_lock
from nmt.runlog import RunLog, user_options
from nmt.trainer import Trainer
from nmt.validation import continue_from

log = logging.getLogger(__name__)


def train(cfg: DictConfig, run_dir: str | Path) -> dict[str, float]:
    """Build everything from the composed config, train, and report test BLEU of the reported checkpoint (best.pt,
    or an average: trainer.average_last)."""
    loaded_code()  # the commit of the code this process runs, found as its first run starts
    settings: TrainConfig = OmegaConf.to_object(cfg)  # typed dataclasses, validated by Hydra already
    resolved = OmegaConf.to_container(cfg, resolve=True)  # what checkpoints store
    check_options(settings.trainer, settings.seed)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    set_seed(settings.seed)
    if settings.trainer.threads:  # several jobs side by side on one machine: jobs x threads = cores
        torch.set_num_threads(settings.trainer.threads)
    where, precision = place(settings.trainer.device, settings.trainer.precision, settings.trainer.deterministic)
    log.info("device %s; precision %s", where, precision.reason)
    run_dir = Path(distributed.share(str(run_dir)))  # under torchrun, every process works in rank 0's run directory
    if distributed.is_main():
        own_files(run_dir)  # links, FIFOs, folders in a run file's place refused; hard links broken
    with run_lock(run_dir) if distributed.is_main() else contextlib.nullcontext():  # one run folder, one writer
        return train_in(settings, resolved, run_dir, where, precision)


def train_in(settings: TrainConfig, resolved: dict, run_dir: Path, where: torch.device, precision: Precision) -> dict:
    """`train` once this process holds the run directory: keep a finished run, or continue or start one."""
    decided = plan(run_dir, settings.trainer.resume, resolved, precision.name, in_sweep())  # before it is written
    if (kept := decided.kept) is not None:
        log.info("%s holds this run, finished with these settings: kept (test BLEU %s)", run_dir, kept.get("test/bleu"))
        return kept
    if decided.checkpoint:  # where the corpus lies: the checkpoint's, unless given on this command line
        read_where_it_was(settings, resolved, decided.checkpoint[1]["config"], decided.changes)
    splits, vocabulary = corpus_and_vocabulary(settings, run_dir)
    if settings.trainer.test_at_end:
        check_test_split(splits.test, vocabulary, settings.trainer.decode_max_input_len)
    trainer = make_trainer(settings, resolved, run_dir, splits, vocabulary, (where, precision))
    if decided.checkpoint:
        trainer.restore_payload(*decided.checkpoint)
        if "trainer.lr" in decided.changes:
            set_lr(trainer.optimizer, trainer.schedule, settings.trainer.lr)
    if distributed.is_main():  # every check passed: this invocation trains
        open_records(trainer, resolved, run_dir, where)
    if trainer.train() == "interrupted":
        trainer.log.close()
        how = rerun_advice(settings.trainer.resume) if in_sweep() else f"run {resume_command(run_dir)}"
        raise Interrupted(
            f"interrupted at step {trainer.step}; {run_dir / 'last.pt'} holds the run. To continue, {how}",
            trainer.stop_signal,
        )
    if not replicas_agree(trainer):
        distributed.barrier()  # the other processes end with rank 0, after its test: none leaves the group early
        return {}
    results = summary(trainer)
    reported = averaging.reported_model(run_dir, resolved["trainer"])  # best.pt, or the last validations' average
    if reported.name != "best.pt":
        score_average(trainer, run_dir, results)
    if settings.trainer.test_at_end:
        score_test_split(trainer, splits.test, reported, results)
    trainer.log.close()
    if distributed.is_main() and not in_sweep():
        print(written(run_dir, settings.trainer))
    distributed.barrier()
    return results


def make_trainer(
    settings: TrainConfig, resolved: dict, run_dir: Path, splits: Splits, vocabulary: Vocabulary, placed: tuple
) -> Trainer:
    """The model of the resolved config and its trainer, on the device and in the precision decided (`placed`)."""
    model = build.model(resolved["model"], vocabulary)
    log.info("model %s: %s parameters", resolved["model"]["_target_"], f"{parameter_count(model):,}")
    return Trainer(
        model,
        vocabulary,
        splits.train,
        splits.valid,
        run_dir,
        settings.trainer,
        max_tokens=settings.data.max_tokens,
        max_len=settings.data.max_len,
        seed=settings.seed,
        run_config=resolved,
        valid_alignments=splits.alignments["valid"] if splits.alignments else None,
        placed=placed,
    )


def score_average(trainer: Trainer, run_dir: Path, results: dict[str, float]) -> None:
    """With trainer.average_last=k > 1: the average of the run's last k validations' weights written
    (`averaging.average_last`) and decoded greedily on the valid split as validations are, its BLEU in `results` as
    valid/averaged_bleu."""
    trainer.writer.wait()  # the newest step<N>.pt is on disk
    path, payload = averaging.average_last(run_dir, trainer.config.average_last)
    trainer.model.load_state_dict(payload["model"])
    progress = "validating the averaged weights" if trainer.config.progress else ""
    model, valid, where = trainer.model, trainer.validator.pairs, (trainer.device, trainer.dtype)
    _, _, scores = decode_split(model, trainer.vocabulary, valid, trainer.search, *where, progress)
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
    """The reported checkpoint's scores on the test split added to the run's `results`, and logged with them; Ctrl-C
    while decoding says that training is done and how to score it."""
    try:
        results.update(evaluate_best(trainer, test_pairs, reported, results))
    except KeyboardInterrupt:
        raise Interrupted(
            f"interrupted while decoding the test split; training is done and saved. Score the reported "
            f"checkpoint with: python evaluate.py checkpoint={reported}",
            2,
        ) from None
    trainer.log.results(results, trainer.step)


def open_records(trainer: Trainer, resolved: dict, run_dir: Path, where: torch.device) -> None:
    """validations.jsonl as the update this run starts from left it (`continue_from`), this invocation in
    provenance.json, and TensorBoard's log opened with the run's options in HParams."""
    continue_from(run_dir, trainer.step)
    record_provenance(run_dir, where, trainer.precision.name)
    trainer.log = RunLog(run_dir)
    trainer.log.hparams(user_options(resolved, same_run_options()))


def written(run_dir: Path, config) -> str:
    """What a finished run left in its folder, for the console's last line."""
    files = [f"best.pt (best valid {config.select})", "last.pt"]
    files += [f"{averaging.averaged_name(config.average_last)} (the run's model)"] if config.average_last > 1 else []
    files += ["best.test.hyp", "results.json"] if config.test_at_end else []
    files += ["validations.jsonl", "train.log", "TensorBoard's events"]
    runs = run_dir.parent.parent if run_dir.parent.parent.name == "outputs" else run_dir.parent  # every model's runs
    return f"saved in {run_dir}: {', '.join(files)}; compare runs with: tensorboard --logdir {runs}"


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


def resume_command(run_dir: Path) -> str:
    """The command that continues the run in `run_dir`, word for word: this command line's options (so the run is
    the same run), with trainer.resume=true and the run's folder."""
    kept = [o for o in given_options() if o.split("=", 1)[0].lstrip("+") not in ("trainer.resume", "hydra.run.dir")]
    return " ".join(["python train.py", *kept, "trainer.resume=true", f"hydra.run.dir={run_dir}"])


def corpus_and_vocabulary(settings: TrainConfig, run_dir: Path) -> tuple[Splits, Vocabulary]:
    """The corpus and its subword models, saved into the run directory. Under torchrun, rank 0 downloads the corpus
    and trains the subword models first; the other processes then reuse them from the cache."""
    if not distributed.is_main():
        distributed.barrier()
    splits = build.load_corpus(settings.data)
    vocabulary = build.vocabulary(settings.data, splits)
    if distributed.is_main():
        vocabulary.save(run_dir)
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


def summary(trainer: Trainer) -> dict[str, float]:
    progress = trainer.progress
    return {
        "valid/best_bleu": progress.best_bleu,
        "train/minutes": progress.train_seconds / 60,
        "train/steps": progress.step,
        "train/tokens_per_second": trainer.tokens_per_second,
        "parameters": parameter_count(trainer.model),
    }


def evaluate_best(trainer: Trainer, test_pairs, reported: Path, before: dict[str, float]) -> dict[str, float]:
    """Greedy test BLEU and chrF of the reported checkpoint (best.pt, or the average of the validations ending at the
    best: `averaging.reported_model`): `best.test.hyp`, and `results.json` in the run directory with the figures
    `before` it."""
    run_dir, tested = reported.parent, checkpoint.load(reported)
    best = checkpoint.load(run_dir / "best.pt") if reported.name != "best.pt" else tested
    trainer.model.load_state_dict(tested["model"])
    what = (
        "best checkpoint"
        if tested is best
        else f"average of the {trainer.config.average_last} validations ending at the best"
    )
    progress = f"testing the {what}" if trainer.config.progress else ""
    texts, _, scores = decode_split(
        trainer.model, trainer.vocabulary, test_pairs, trainer.search, trainer.device, trainer.dtype, progress
    )
    (run_dir / "best.test.hyp").write_text("".join(h + "\n" for h in texts), encoding="utf-8")
    results = {"test/bleu": scores.bleu, "test/chrf": scores.chrf, "best/step": best["progress"]["step"]}
    report = {
        **before,
        **results,
        "model": trainer.run_config["model"]["_target_"],
        "tested": reported.name,
        "precision": trainer.precision.name,
        "signature": scores.bleu_signature,
    }
    (run_dir / "results.json").write_text(json.dumps(report, indent=2) + "\n")
    log.info("test (%s, greedy): BLEU %.2f chrF %.2f  [%s]", what, scores.bleu, scores.chrf, scores.bleu_signature)
    print(f"test BLEU {scores.bleu:.2f} chrF {scores.chrf:.2f} ({what}, greedy; {scores.bleu_signature})")
    return results


def set_seed(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)


def parameter_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
