"""Hydra composes every option of every config group, and the command-line contract's keys exist."""

import pytest
from conftest import CONFIGS, MODELS, compose_config
from hydra import compose, initialize_config_dir
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
    assert cfg.trainer.precision in ("auto", "fp32", "bf16", "fp16")


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
    assert cfg.model._target_ == "nmt.models.rnn.BahdanauSeq2Seq"
    assert (cfg.data.corpus, cfg.data.src_lang, cfg.data.tgt_lang) == ("multi30k", "de", "en")


def test_slurm_launcher_config_composes_with_the_submitit_plugin():
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose("train", overrides=["hydra/launcher=slurm"], return_hydra_config=True)
    assert "SlurmLauncher" in cfg.hydra.launcher._target_
    assert cfg.hydra.launcher.gpus_per_node == 1


@pytest.mark.parametrize(
    "dropped, override, refused",
    [
        (["model.attention.hard", "model.attention.temperature"], [], None),  # options newer than the checkpoint
        (["model.attention.hard"], ["model.attention.hard=reinforce"], "model.attention.hard: None in the checkpoint"),
        (["trainer.plateau_patience"], [], None),
        (["trainer.plateau_patience"], ["trainer.plateau_patience=9"], "trainer.plateau_patience: None"),
        (["model.window"], [], None),
    ],
)
def test_a_checkpoint_that_predates_an_option_resumes_when_the_option_keeps_its_default(dropped, override, refused):
    """A run saved by an older nmt lacks the options added since; at their defaults the model and recipe are the
    ones it was trained with, so it continues. At another value it would be another run, and is refused."""
    from pathlib import Path

    from nmt import UserError
    from nmt.runs.resume import check_changes

    model = "transformer" if "model.window" in dropped else "luong"
    new = OmegaConf.to_container(compose_config(f"model={model}", *override), resolve=True)
    saved = OmegaConf.to_container(compose_config(f"model={model}"), resolve=True)
    for key in dropped:
        *parents, name = key.split(".")
        node = saved
        for parent in parents:
            node = node[parent]
        del node[name]
    if refused is None:
        assert check_changes(saved, new, Path("last.pt")) == {}
    else:
        with pytest.raises(UserError, match=refused):
            check_changes(saved, new, Path("last.pt"))


@pytest.mark.parametrize("model", MODELS)
def test_the_quick_multi30k_recipe_is_each_familys_multi30k_run_at_the_lab_size_on_a_small_compute_budget(model):
    """experiment=quick changes the corpus nothing and the recipe only in size and budget: Multi30k, each family's
    lab sizes (configs/family_size/lab_<model>.yaml), a FLOPs budget with two validations, no clock."""
    quick = compose_config("experiment=quick", f"model={model}")
    full = compose_config(f"model={model}", "size=lab")
    assert quick.data == full.data and quick.data.corpus == "multi30k"
    assert quick.model == full.model  # the lab's sizes, the family's own recipe otherwise
    assert quick.trainer.max_flops > 0 and quick.trainer.max_minutes == 0 and quick.trainer.validations == 2
    assert quick.trainer.lr == full.trainer.lr and quick.trainer.schedule == full.trainer.schedule


def test_every_variant_composes_with_the_lab_size_of_its_family():
    """size=lab (which experiment=lab sets) gives any variant its family's lab sizes, configs/family_size/
    lab_<model>.yaml, which win over the variant's and the lab recipe's (the Transformer's learning rate); the
    variants are one list, with no lab_* copies of them."""
    from omegaconf import OmegaConf

    from nmt_study.variants import VARIANTS

    variants = sorted(p.stem for p in (CONFIGS / "variant").glob("*.yaml"))
    assert not [name for name in variants if name.startswith("lab_")]
    assert VARIANTS == variants  # what the comparison and the lab train, and make results counts
    for name in variants:
        lab = compose_config("experiment=lab", f"variant={name}")
        plain = compose_config("experiment=lab", f"variant={name}", "size=default")
        family = lab.model._target_.rsplit(".", 1)[-1].replace("Seq2Seq", "").lower()
        sizes = OmegaConf.load(CONFIGS / "family_size" / f"lab_{family}.yaml")
        expected = OmegaConf.merge(plain, sizes)
        assert OmegaConf.to_container(lab, resolve=True) == OmegaConf.to_container(expected, resolve=True), name
        assert lab.data.corpus == "sample" and lab.trainer.lr == expected.trainer.lr
        if name in MODELS:  # size=default is no change: each family's plain variant
            assert compose_config(f"variant={name}").model == compose_config(f"variant={name}", "size=default").model


def test_every_model_and_attention_schema_holds_its_class_constructor_arguments():
    """nmt/models/options.py: each schema's options are its class's constructor arguments, but for those the model
    gives at build time (vocabulary sizes, padding id; an attention's query and key sizes)."""
    import dataclasses
    import inspect

    from hydra.utils import get_class

    from nmt.models.options import ATTENTIONS, MODELS

    given_at_build = {"self", "source_vocab_size", "target_vocab_size", "pad_id", "query_size", "key_size"}
    for schema in (*MODELS.values(), *ATTENTIONS.values()):
        parameters = set(inspect.signature(get_class(schema._target_).__init__).parameters) - given_at_build
        options = {f.name for f in dataclasses.fields(schema)} - {"_target_", "_partial_"}
        assert options == parameters, schema.__name__


def test_a_score_the_models_paper_does_not_define_is_refused_naming_the_ones_it_does(sample_vocabulary):
    from nmt import UserError, build

    cfg = compose_config("model=luong", "model/attention=additive")
    with pytest.raises(UserError, match="model/attention=additive: LuongSeq2Seq takes dot, general, concat, location"):
        build.model(cfg.model, sample_vocabulary)


@pytest.mark.parametrize(
    "model, before, after, other",
    [
        ("luong", [], ["model.window=40"], []),  # global attention reads no window: the same run
        ("luong", ["model.alignment=local_p"], ["model.alignment=local_p", "model.window=40"], ["model.window"]),
        ("luong", [], ["model.alignment=local_m", "model.window=40"], ["model.alignment", "model.window"]),
        ("transformer", [], ["model.window=4"], ["model.window"]),  # the Transformer's own window
    ],
)
def test_a_window_no_attention_reads_makes_no_other_run(model, before, after, other):
    from nmt.runs.resume import another_run
    from nmt_study.sweep import settings

    saved, new = (settings([f"model={model}", *overrides]) for overrides in (before, after))
    assert another_run(saved, new)[1] == other


@pytest.mark.parametrize("model", MODELS)
def test_the_debug_trainer_is_a_tiny_model_of_each_family_on_a_step_budget(model, sample_vocabulary):
    """trainer=debug: the chosen family at size=tiny (configs/family_size/tiny_<model>.yaml), 20 updates and two
    validations whatever the machine (no wall-clock or compute limit), so it finishes in seconds; a size the user
    names wins."""
    from nmt import build

    cfg = compose_config(f"model={model}", "trainer=debug", "data=sample")
    parameters = sum(p.numel() for p in build.model(cfg.model, sample_vocabulary).parameters())
    default = sum(
        p.numel() for p in build.model(compose_config(f"model={model}").model, sample_vocabulary).parameters()
    )
    assert parameters < 200_000 and parameters < default / 10
    assert (cfg.trainer.max_steps, cfg.trainer.valid_every, cfg.trainer.max_minutes, cfg.trainer.max_flops) == (
        20,
        10,
        0,
        0,
    )
    lab = compose_config(f"model={model}", "trainer=debug", "size=lab").model
    assert lab == compose_config(f"model={model}", "size=lab").model != cfg.model


def test_every_option_of_evaluate_and_translate_reaches_its_function():
    """The commands hand their own options to their functions by name (SearchOptions.task): each one is a keyword of
    the function, and together with the checkpoint and the decoding options they are all of the command's options."""
    import dataclasses
    import inspect

    from nmt.config import DecodeOptions, EvaluateConfig, TranslateConfig
    from nmt.decoding.evaluate import evaluate, translate_file

    decoding = {f.name for f in dataclasses.fields(DecodeOptions)}
    for name, schema, function in (
        ("evaluate", EvaluateConfig, evaluate),
        ("translate", TranslateConfig, translate_file),
    ):
        cfg = compose_config("checkpoint=x.pt", config_name=name)
        task = schema.task(cfg)
        assert set(task) <= set(inspect.signature(function).parameters) - {"checkpoint_path", "decoding"}, name
        renamed = {schema.RENAMED.get(key, key) for key in cfg if key not in decoding | {"checkpoint"}}
        assert set(task) == renamed, name
    assert (
        TranslateConfig.task(compose_config("checkpoint=x.pt", "input=a.txt", config_name="translate"))["source"]
        == "a.txt"
    )
