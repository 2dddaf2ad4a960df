"""Where Hydra stops: turn the composed config into a corpus, a vocabulary and a model.

`train`, `evaluate` and `translate` all rebuild a model the same way, from the config stored in a checkpoint.
"""

from __future__ import annotations

import inspect
import os
import typing

import torch
from hydra.errors import InstantiationException
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from nmt import UserError
from nmt.config import DataConfig, GrammarOptions
from nmt.corpus import Splits, load_files, load_multi30k
from nmt.data import PAD_ID, Vocabulary, build_vocabulary
from nmt.sample import generate_aligned

CORPORA = ("multi30k", "sample", "files")


def load_corpus(data: DataConfig | DictConfig) -> Splits:
    """The corpus a data config names (one of the dataclasses of nmt/config.py, or the same as a DictConfig)."""
    if data.corpus == "multi30k":
        folder = data.dir or os.environ.get("NMT_DATA_DIR") or None
        return load_multi30k(data.src_lang, data.tgt_lang, folder, data.url, data.cache)
    if data.corpus == "sample":
        if (data.src_lang, data.tgt_lang) != ("de", "en"):
            raise UserError(f"data.src_lang/tgt_lang={data.src_lang}/{data.tgt_lang}: the sample corpus is de -> en")
        grammar = data.get("grammar") if isinstance(data, DictConfig) else data.grammar  # older runs have none
        grammar = grammar if isinstance(grammar, GrammarOptions) else GrammarOptions(**(grammar or {}))
        return generate_aligned(data.sizes.train, data.sizes.valid, data.sizes.test, data.sample_seed, grammar)[0]
    if data.corpus == "files":
        return load_files(data.train, data.valid, data.test)
    raise UserError(f"data.corpus={data.corpus!r}: use one of {', '.join(CORPORA)}")


def vocabulary(data: DataConfig | DictConfig, splits: Splits) -> Vocabulary:
    return build_vocabulary(
        splits.train, data.vocab_size, data.joint_vocab, data.subword, data.character_coverage, data.spm_cache
    )


POSITIVE_MODEL_KEYS = ("size", "layers", "heads", "window", "d_model", "max_len")  # key names that end so
KINDS = {bool: "true or false", int: "a whole number", float: "a number", str: "text"}


def constructor_types(target: str | None) -> dict[str, type]:
    """The plain types (bool, int, float, str) of the constructor arguments of the class `target` names."""
    try:
        hints = typing.get_type_hints(get_class(target).__init__) if target else {}
    except Exception:  # an unknown class: instantiate says so, naming it
        return {}
    return {name: kind for name, kind in hints.items() if kind in KINDS}


def is_kind(value, kind: type) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, kind) and (kind is bool or not isinstance(value, bool))


def constructor_defaults(target: str | None) -> dict[str, object]:
    """The default values of the constructor arguments of the class `target` names (those that have one)."""
    try:
        parameters = inspect.signature(get_class(target).__init__).parameters if target else {}
    except Exception:
        return {}
    return {name: p.default for name, p in parameters.items() if p.default is not inspect.Parameter.empty}


def switched_off_by_zero(target: str | None) -> set[str]:
    """Constructor arguments of `target` whose default is 0: for them 0 means "off" (the Transformer's window)."""
    return {name for name, d in constructor_defaults(target).items() if d == 0 and not isinstance(d, bool)}


def check_model_config(config: DictConfig, prefix: str = "model") -> None:
    """Each option has the type its constructor argument declares, sizes are at least 1 (or 0 where 0 is the
    constructor's default, meaning off) and dropouts in [0, 1): said before anything is built, naming the key."""
    types = constructor_types(config.get("_target_"))
    zero_allowed = switched_off_by_zero(config.get("_target_"))
    for key, value in config.items():
        name, kind = f"{prefix}.{key}", types.get(str(key))
        low = 0 if str(key) in zero_allowed else 1
        if isinstance(value, DictConfig):
            check_model_config(value, name)
        elif str(key).endswith(POSITIVE_MODEL_KEYS) and not is_kind(value, int):
            raise UserError(f"{name}={value!r}: must be a whole number of at least {low}")
        elif str(key).endswith(POSITIVE_MODEL_KEYS) and value < low:
            raise UserError(f"{name}={value}: must be at least {low}")
        elif "dropout" in str(key) and kind is not bool and not (is_kind(value, float) and 0 <= value < 1):
            raise UserError(f"{name}={value!r}: a dropout probability must be in [0, 1)")
        elif kind is not None and not is_kind(value, kind):
            raise UserError(f"{name}={value!r}: must be {KINDS[kind]}")


def check_score(config: DictConfig) -> None:
    """The attention score (`model/attention=`) must be one the model's paper defines: the model class's SCORES."""
    try:
        scores = getattr(get_class(config.get("_target_")), "SCORES", None)
    except Exception:  # an unknown class: instantiate says so, naming it
        return
    attention = config.get("attention")
    if scores is None or not isinstance(attention, DictConfig) or "_target_" not in attention:
        return
    name = str(attention["_target_"]).rsplit(".", 1)[-1].removesuffix("Attention").lower()
    if name not in scores:
        model = config["_target_"].rsplit(".", 1)[-1]
        takes = f"takes {', '.join(scores)}" if scores else "has no attention: leave out model/attention"
        raise UserError(f"model/attention={name}: {model} {takes}")


def model(model_config: DictConfig | dict, vocab: Vocabulary) -> torch.nn.Module:
    config = OmegaConf.create(model_config) if isinstance(model_config, dict) else model_config
    check_score(config)
    check_model_config(config)
    try:
        return instantiate(
            config, source_vocab_size=vocab.source_size, target_vocab_size=vocab.target_size, pad_id=PAD_ID
        )
    except InstantiationException as error:
        cause = error.__cause__ or error  # the constructor's own message, without Hydra's wrapping
        raise UserError(f"model: cannot build {config.get('_target_')} with these options: {cause}") from None
