"""Where Hydra stops: turn the composed config into a corpus, a vocabulary and a model.

`train`, `evaluate` and `translate` all rebuild a model the same way, from the config stored in a checkpoint.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path

import torch
from hydra.errors import InstantiationException
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from nmt import UserError
from nmt.config import DataConfig, FilesConfig, GrammarOptions, Multi30kConfig, SampleConfig
from nmt.models import options as schemas
from nmt.models.attention import Attention
from nmt.models.model import FAMILY_MODULES, Seq2Seq
from nmt.text.corpus import SHARED_COPY, Splits, load_files, load_multi30k, with_text
from nmt.text.data import PAD_ID, Vocabulary, build_vocabulary
from nmt.text.sample import generate_aligned

CORPORA = {"multi30k": Multi30kConfig, "sample": SampleConfig, "files": FilesConfig}  # data.corpus -> its schema


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


def with_subwords(splits: Splits, vocabulary: Vocabulary, data: DataConfig | DictConfig) -> Splits:
    """Each split's pairs that keep text once sentencepiece has normalised them (a line of zero-width or control
    characters has none left): `corpus.with_text` over their subwords, naming the split's files. Training applies
    it, and evaluate too (translate treats such a line as blank)."""
    kept, alignments = {}, dict(splits.alignments or {})
    for name in ("train", "valid", "test"):
        pairs = splits.split(name)
        sources, targets = (
            vocabulary.encode_source([s for s, _ in pairs]),
            vocabulary.encode_target([t for _, t in pairs]),
        )
        if all(sources) and all(targets):
            kept[name] = pairs
            continue
        files = f"the {data.corpus} corpus"
        if data.corpus == "files":
            files = f"data.{name}.src={getattr(data, name).src} and data.{name}.tgt={getattr(data, name).tgt}"
        marked = [(s if a else "", t if b else "") for (s, t), a, b in zip(pairs, sources, targets)]
        kept[name] = with_text(marked, name, f"{files} (after sentencepiece's normalisation)")
        if name in alignments:
            alignments[name] = [g for g, a, b in zip(alignments[name], sources, targets) if a and b]
    return Splits(kept["train"], kept["valid"], kept["test"], alignments or None)


# --- what a config may name ------------------------------------------------------------------------------------


@cache
def buildable() -> tuple[dict[str, type], dict[str, type]]:
    """nmt's own model classes and attention classes, each by the dotted name a `_target_` gives it: the only classes
    nmt builds from a config. Found in the package, not listed: every class of the family modules
    (`nmt.models.model.FAMILY_MODULES`) that declares the model contract `Seq2Seq`, and every subclass of `Attention`. A
    checkpoint's config is data that anyone may have written, and building the `_target_` it names runs that
    callable, whatever it is."""

    for module in FAMILY_MODULES:
        importlib.import_module(module)

    def named(base: type) -> dict[str, type]:
        found, stack = {}, list(base.__subclasses__())
        while stack:
            cls = stack.pop()
            stack.extend(cls.__subclasses__())
            if cls.__module__.startswith("nmt.") and not inspect.isabstract(cls):
                found[f"{cls.__module__}.{cls.__qualname__}"] = cls
        return found

    return named(Seq2Seq), named(Attention)


# Hydra's instantiation keys a model config may hold: the class, and `_partial_` (the attention, which the model
# completes with its own sizes); `_args_`, `_recursive_`, `_convert_` would pass or build more than options
SAFE_KEYS = ("_target_", "_partial_")


def check_targets(config: Mapping, prefix: str = "model") -> None:
    """Refuses, naming the key, a model config that would build anything but nmt's own classes (`buildable`): a
    `_target_` at the top that is not a model, one further down that is not an attention, Hydra's other
    instantiation keys but `_partial_` (`_args_`, ...) anywhere, and interpolations (`${...}`), whose resolvers could
    make a `_target_` appear after this check. Nothing named is imported before it passes."""
    models, attentions = buildable()
    if (
        not isinstance(config, Mapping)
        or not isinstance(config.get("_target_"), str)
        or config["_target_"] not in models
    ):
        target = config.get("_target_") if isinstance(config, Mapping) else config
        raise UserError(
            f"{prefix}._target_={target!r}: not one of nmt's models ({', '.join(sorted(models))}); "
            "nmt builds no other class from a config"
        )

    def walk(node, where: str, allowed: dict[str, type]) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                name = f"{where}.{key}"
                if key == "_target_" and (not isinstance(value, str) or value not in allowed):
                    raise UserError(
                        f"{name}={value!r}: not one of nmt's attentions ({', '.join(sorted(allowed))}); "
                        "nmt builds no other class from a config"
                    )
                if key == "_partial_" and not isinstance(value, bool):
                    raise UserError(f"{name}={value!r}: must be true or false")
                if key not in SAFE_KEYS and str(key).startswith("_") and str(key).endswith("_"):
                    raise UserError(f"{name}: a model config holds constructor arguments only, not Hydra's {key}")
                walk(value, name, attentions)
        elif isinstance(node, (list, tuple)):
            for index, value in enumerate(node):
                walk(value, f"{where}[{index}]", attentions)
        else:
            check_plain(node, where)

    walk(config, prefix, models)


def check_plain(node, where: str) -> None:
    """Refuses a saved config value that OmegaConf would resolve (`${...}`), naming its key."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            check_plain(value, f"{where}.{key}")
    elif isinstance(node, (list, tuple)):
        for index, value in enumerate(node):
            check_plain(value, f"{where}[{index}]")
    elif isinstance(node, str) and "${" in node:
        raise UserError(f"{where}={node!r}: an interpolation; a saved config holds resolved values only")


def saved_options(saved, schema: type, prefix: str) -> DictConfig:
    """`saved` (a section of a checkpoint's config) checked against the dataclass `schema`: each option of the type it
    declares, named when not; options the schema no longer has are left out (an older checkpoint's)."""
    check_plain(saved, prefix)
    defaults = OmegaConf.structured(schema)
    kept = {key: value for key, value in (saved or {}).items() if key in defaults}
    try:
        return OmegaConf.merge(defaults, kept)
    except OmegaConfBaseException as error:
        key = getattr(error, "full_key", None) or "?"
        raise UserError(f"{prefix}.{key}: {str(error).splitlines()[0]}") from None


def saved_data_config(saved) -> DictConfig:
    """The data config a checkpoint holds, checked against today's schema for its corpus: every option of the type it
    declares (options removed since are left out). Where a corpus is downloaded from and cached is this machine's
    choice, never a checkpoint's: `url` and `cache` take today's defaults (`data_dir=` points at local files)."""
    corpus = saved.get("corpus") if isinstance(saved, Mapping) else None
    if corpus not in CORPORA:
        raise UserError(f"data.corpus={corpus!r}: use one of {', '.join(CORPORA)}")
    return saved_options({k: v for k, v in saved.items() if k not in ("url", "cache")}, CORPORA[corpus], "data")


def constructor_defaults(target: str | None) -> dict[str, object]:
    """The default values of the constructor arguments of the class `target` names (those that have one)."""
    try:
        parameters = inspect.signature(get_class(target).__init__).parameters if target else {}
    except Exception:
        return {}
    return {name: p.default for name, p in parameters.items() if p.default is not inspect.Parameter.empty}


def typed(plain: Mapping, prefix: str = "model") -> DictConfig:
    """A model config (composed, or a checkpoint's) merged onto its schema (nmt/models/options.py), its attention onto
    the attention's: each option of the type the schema declares, then in its range (`model_config.check`); refused
    naming the option. Options a checkpoint has that the schema does not are refused too."""
    schema = schemas.schema_of(plain.get("_target_"))
    node = dict(plain)
    if isinstance(plain.get("attention"), Mapping):
        node["attention"] = typed(plain["attention"], f"{prefix}.attention")
    try:
        config = OmegaConf.merge(OmegaConf.structured(schema), node) if schema else OmegaConf.create(node)
    except OmegaConfBaseException as error:
        key = getattr(error, "full_key", None) or "?"
        raise UserError(f"{prefix}.{key}: {str(error).splitlines()[0]}") from None
    return config


def option_name(target: str) -> str:
    """The name a user gives one of nmt's classes on the command line (`model=`, `model/attention=`): its NAME, or its
    class name without "Seq2Seq" or "Attention", in lower case (nmt.models.rnn.BahdanauSeq2Seq: bahdanau)."""
    default = str(target).rsplit(".", 1)[-1].removesuffix("Seq2Seq").removesuffix("Attention").lower()
    models, attentions = buildable()
    return getattr({**models, **attentions}.get(target), "NAME", default)


def check_score(config: DictConfig) -> None:
    """The attention score (`model/attention=`) must be one the model's paper defines: the model class's SCORES."""
    try:
        scores = getattr(get_class(config.get("_target_")), "SCORES", None)
    except Exception:  # an unknown class: instantiate says so, naming it
        return
    attention = config.get("attention")
    if scores is None or not isinstance(attention, DictConfig) or "_target_" not in attention:
        return
    name = option_name(attention["_target_"])
    if name not in scores:
        model = config["_target_"].rsplit(".", 1)[-1]
        takes = f"takes {', '.join(scores)}" if scores else "has no attention: leave out model/attention"
        raise UserError(f"model/attention={name}: {model} {takes}")


def checked_model(plain: Mapping) -> DictConfig:
    """A model config as plain containers, checked as a build checks it (nmt's own classes, each option's type and
    range, a score the model's paper defines) and typed by its schema; a checkpoint's is checked at its load."""
    check_targets(plain)
    config = typed(plain)
    check_score(config)
    schemas.check(config)
    return config


def model(model_config, vocab: Vocabulary) -> torch.nn.Module:
    """The model a config describes (a composed one, or one a checkpoint saved), built only from nmt's own classes
    (`check_targets`) after its options are checked."""
    if dataclasses.is_dataclass(model_config):  # a schema's object (OmegaConf.to_object of a composed config)
        model_config = OmegaConf.structured(model_config)
    plain = OmegaConf.to_container(model_config, resolve=True) if isinstance(model_config, DictConfig) else model_config
    config = checked_model(plain)
    try:
        return instantiate(
            config, source_vocab_size=vocab.source_size, target_vocab_size=vocab.target_size, pad_id=PAD_ID
        )
    except InstantiationException as error:
        cause = error.__cause__ or error  # the constructor's own message, without Hydra's wrapping
        raise UserError(f"model: cannot build {config.get('_target_')} with these options: {cause}") from None


def corpus_files(config: dict, data_dir: str | None = None) -> list[Path]:
    """The files a checkpoint's corpus is read from (the user's files of data=files; Multi30k's in data_dir, its
    data.dir, $NMT_DATA_DIR, the download cache and the shared copy): inputs no command may write over."""

    data = saved_data_config(config["data"])
    if data.corpus == "files":
        return [Path(data[split][side]) for split in ("train", "valid", "test") for side in ("src", "tgt")]
    if data.corpus == "multi30k":
        folders = [data_dir, data.dir, os.environ.get("NMT_DATA_DIR"), data.cache, SHARED_COPY]
        return [path for folder in folders if folder for path in Path(folder).glob("*.gz")]
    return []


def corpus_of(config: dict, data_dir: str | None) -> Splits:
    """The corpus a checkpoint was trained on, read from `data_dir` when given."""
    data = saved_data_config(config["data"])  # checked, fetched and cached where this machine says
    if data_dir and data.corpus == "multi30k":
        data.dir = data_dir
    return load_corpus(data)
