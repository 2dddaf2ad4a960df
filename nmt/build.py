"""Where Hydra stops: turn the composed config into a corpus, a vocabulary and a model.

`train`, `evaluate` and `translate` all rebuild a model the same way, from the config stored in a checkpoint.
"""

from __future__ import annotations

import os

import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from nmt import UserError
from nmt.config import DataConfig
from nmt.data import PAD_ID, Splits, Vocabulary, build_vocabulary, load_files, load_multi30k
from nmt.sample import generate

CORPORA = ("multi30k", "sample", "files")


def load_corpus(data: DataConfig | DictConfig) -> Splits:
    """The corpus a data config names (one of the dataclasses of nmt/config.py, or the same as a DictConfig)."""
    if data.corpus == "multi30k":
        folder = data.dir or os.environ.get("NMT_DATA_DIR") or None
        return load_multi30k(data.src_lang, data.tgt_lang, folder, data.url, data.cache)
    if data.corpus == "sample":
        if (data.src_lang, data.tgt_lang) != ("de", "en"):
            raise UserError(f"data.src_lang/tgt_lang={data.src_lang}/{data.tgt_lang}: the sample corpus is de -> en")
        return generate(data.sizes.train, data.sizes.valid, data.sizes.test, data.sample_seed)
    if data.corpus == "files":
        return load_files(data.train, data.valid, data.test)
    raise UserError(f"data.corpus={data.corpus!r}: use one of {', '.join(CORPORA)}")


def vocabulary(data: DataConfig | DictConfig, splits: Splits) -> Vocabulary:
    return build_vocabulary(
        splits.train, data.vocab_size, data.joint_vocab, data.subword, data.character_coverage, data.spm_cache
    )


POSITIVE_MODEL_KEYS = ("size", "layers", "heads", "window", "d_model", "max_len")  # key names that end so


def check_model_config(config: DictConfig, prefix: str = "model") -> None:
    """Sizes must be positive whole numbers and dropouts in [0, 1): said before anything is built, naming the key."""
    for key, value in config.items():
        name = f"{prefix}.{key}"
        if isinstance(value, DictConfig):
            check_model_config(value, name)
        elif str(key).endswith(POSITIVE_MODEL_KEYS) and (not isinstance(value, int) or isinstance(value, bool)):
            raise UserError(f"{name}={value!r}: must be a whole number of at least 1")
        elif str(key).endswith(POSITIVE_MODEL_KEYS) and value < 1:
            raise UserError(f"{name}={value}: must be at least 1")
        elif "dropout" in str(key) and not (isinstance(value, (int, float)) and 0 <= value < 1):
            raise UserError(f"{name}={value!r}: a dropout probability must be in [0, 1)")


def model(model_config: DictConfig | dict, vocab: Vocabulary) -> torch.nn.Module:
    config = OmegaConf.create(model_config) if isinstance(model_config, dict) else model_config
    check_model_config(config)
    try:
        return instantiate(
            config, source_vocab_size=vocab.source_size, target_vocab_size=vocab.target_size, pad_id=PAD_ID
        )
    except InstantiationException as error:
        raise UserError(f"model: cannot build {config.get('_target_')}: {error}") from None
