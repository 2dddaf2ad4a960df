"""Hydra composes every option of every config group, and the command-line contract's keys exist."""

import pytest
from conftest import CONFIGS, MODELS, compose_config
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

GROUPS = {
    group: sorted(p.stem for p in (CONFIGS / group).glob("*.yaml")) for group in ("data", "trainer", "experiment")
}
CONTRACT = [
    "data.dir",
    "data.url",
    "data.src_lang",
    "data.tgt_lang",
    "data.vocab_size",
    "data.max_tokens",
    "data.max_len",
    "trainer.max_steps",
    "trainer.max_epochs",
    "trainer.max_minutes",
    "trainer.valid_every",
    "trainer.precision",
    "trainer.device",
    "trainer.resume",
    "seed",
]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("data", GROUPS["data"])
def test_every_model_and_data_option_composes(model, data):
    cfg = compose_config(f"model={model}", f"data={data}")
    assert cfg.model._target_.startswith("nmt.")
    assert cfg.data.corpus == data


@pytest.mark.parametrize("trainer", GROUPS["trainer"])
def test_every_trainer_option_composes(trainer):
    cfg = compose_config(f"trainer={trainer}")
    assert cfg.trainer.precision in ("fp32", "bf16", "fp16")


@pytest.mark.parametrize("experiment", GROUPS["experiment"])
def test_every_experiment_composes(experiment):
    cfg = compose_config(f"experiment={experiment}")
    OmegaConf.to_container(cfg.model, resolve=True)


def test_the_command_line_contract_keys_exist():
    cfg = compose_config("data=multi30k")
    for key in CONTRACT:
        assert OmegaConf.select(cfg, key, throw_on_missing=False, default="absent") != "absent", key


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(ConfigCompositionException, match="Available options in 'model'"):
        compose_config("model=rnnsearch")


def test_default_is_bahdanau_on_multi30k_de_en():
    cfg = compose_config()
    assert cfg.model._target_ == "nmt.rnn.BahdanauSeq2Seq"
    assert (cfg.data.corpus, cfg.data.src_lang, cfg.data.tgt_lang) == ("multi30k", "de", "en")
