"""One training run from the command line's config: build, resume, train, test the best checkpoint, write results.

`train(cfg, run_dir)` is what `python train.py` calls; each stage is a short function of its own.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from nmt import UserError, build, checkpoint, distributed
from nmt.config import TrainConfig
from nmt.corpus import Splits
from nmt.data import Vocabulary
from nmt.decoding import decode_split
from nmt.device import device as find_device
from nmt.trainer import Trainer

log = logging.getLogger(__name__)


def train(cfg: DictConfig, run_dir: str | Path) -> dict[str, float]:
    """Build everything from the composed config, train, and report test BLEU of the best checkpoint."""
    settings: TrainConfig = OmegaConf.to_object(cfg)  # typed dataclasses, validated by Hydra already
    resolved = OmegaConf.to_container(cfg, resolve=True)  # what checkpoints store
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    set_seed(settings.seed)
    distributed.setup(find_device(settings.trainer.device))
    run_dir = Path(distributed.share(str(run_dir)))  # under torchrun, every process works in rank 0's run directory
    splits, vocabulary = corpus_and_vocabulary(settings, run_dir)
    model = build.model(resolved["model"], vocabulary)
    log.info("model %s: %s parameters", resolved["model"]["_target_"], f"{parameter_count(model):,}")
    trainer = Trainer(model, vocabulary, splits.train, splits.valid, run_dir, settings.trainer,
                      settings.data.max_tokens, settings.data.max_len, settings.seed, resolved)  # fmt: skip
    resume(trainer, settings.trainer.resume, run_dir)
    reason = trainer.train()
    if not replicas_agree(trainer):
        return {}
    results = summary(trainer)
    if reason != "interrupted" and settings.trainer.test_at_end:
        results.update(evaluate_best(trainer, splits.test, run_dir))
        trainer.log.hparams(resolved, results)
    trainer.log.close()
    return results


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
        len(splits.train), len(splits.valid), len(splits.test), vocabulary.source_size, vocabulary.target_size,
    )  # fmt: skip
    return splits, vocabulary


def resume(trainer: Trainer, option, run_dir: Path) -> None:
    """`trainer.resume`: false starts afresh; true continues this run directory's last.pt (or previous.pt, one
    validation older, when last.pt is missing or unreadable); a path continues that checkpoint."""
    if option is False or option in ("false", "False", None, ""):
        return
    if option is True or option in ("true", "True"):
        if (run_dir / "last.pt").is_file() or (run_dir / "previous.pt").is_file():
            restore_latest_good(trainer, run_dir)
        else:
            log.info("trainer.resume=true but %s has no last.pt yet; starting a new run", run_dir)
        return
    trainer.restore(Path(str(option)).expanduser())


def restore_latest_good(trainer: Trainer, run_dir: Path) -> None:
    """Resume from `last.pt`, or from `previous.pt` (one validation older) when `last.pt` is missing or unreadable."""
    try:
        trainer.restore(run_dir / "last.pt")
    except UserError as error:
        if not (run_dir / "previous.pt").is_file():
            raise
        log.warning("%s; resuming from %s instead", error, run_dir / "previous.pt")
        trainer.restore(run_dir / "previous.pt")


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


def evaluate_best(trainer: Trainer, test_pairs, run_dir: Path) -> dict[str, float]:
    """Greedy test BLEU and chrF of the best checkpoint: `best.test.hyp` and `results.json` in the run directory."""
    best = checkpoint.load(run_dir / "best.pt")
    trainer.model.load_state_dict(best["model"])
    texts, _, scores = decode_split(trainer.model, trainer.vocabulary, test_pairs, trainer.search, trainer.device,
                                    trainer.dtype)  # fmt: skip
    (run_dir / "best.test.hyp").write_text("".join(h + "\n" for h in texts), encoding="utf-8")
    results = {"test/bleu": scores.bleu, "test/chrf": scores.chrf, "best/step": best["progress"]["step"]}
    report = {**summary(trainer), **results, "model": trainer.run_config["model"]["_target_"],
              "signature": scores.bleu_signature}  # fmt: skip
    (run_dir / "results.json").write_text(json.dumps(report, indent=2) + "\n")
    log.info("test (best checkpoint, greedy): BLEU %.2f chrF %.2f  [%s]", scores.bleu, scores.chrf,
             scores.bleu_signature)  # fmt: skip
    print(f"test BLEU {scores.bleu:.2f} chrF {scores.chrf:.2f} (best checkpoint, greedy; {scores.bleu_signature})")
    return results


def set_seed(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)


def parameter_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
