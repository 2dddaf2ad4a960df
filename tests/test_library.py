"""nmt as a library: the dataclasses of nmt.config are the command line's defaults, and plain Python (no Hydra
composition) trains exactly what `python train.py` trains."""

from dataclasses import asdict, replace
from functools import partial

import pytest
import torch
from conftest import compose_config, tiny_model_overrides
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from nmt import build
from nmt.config import Multi30kConfig, SampleConfig, SampleSizes, TrainConfig, TrainerConfig
from nmt.launch.experiment import set_seed, train
from nmt.models.attention import AdditiveAttention
from nmt.models.rnn import BahdanauSeq2Seq
from nmt.runs import checkpoint
from nmt.runs.folder import RunFolder
from nmt.text.data import PAD_ID
from nmt.training.trainer import Trainer


def test_the_library_defaults_are_the_command_line_defaults():
    settings = OmegaConf.to_object(compose_config())
    assert isinstance(settings, TrainConfig)
    assert settings.trainer == TrainerConfig() and settings.data == Multi30kConfig()
    assert OmegaConf.to_object(compose_config("data=sample")).data == SampleConfig()
    assert TrainerConfig().precision == "auto" and TrainerConfig().max_flops == 5e14  # the tuned values


@pytest.mark.parametrize(
    "override, key",
    [
        ("trainer.lr=abc", "trainer.lr"),
        ("trainer.lrr=0.1", "trainer.lrr"),
        ("seed=abc", "seed"),
        ("data=sample", None),
        ("data.max_tokens=many", "data.max_tokens"),
        ("trainer.progress=maybe", "trainer.progress"),
    ],
)
def test_a_wrong_type_or_unknown_key_is_refused_when_composing(override, key):
    if key is None:  # a valid override composes
        compose_config(override)
        return
    with pytest.raises(ConfigCompositionException) as error:
        compose_config(override)
    assert key in str(error.value) + str(error.value.__cause__)


SIZES = dict(embedding_size=32, hidden_size=48, encoder_layers=1, readout_size=32, dropout=0.3, cell="gru")


def test_the_command_line_and_plain_python_train_bit_identical_weights(tmp_path, sample_vocabulary):
    """20 updates with dropout on the CPU: `train(cfg)` from composed configs, and the same run built by hand from
    the dataclasses and the model's constructor, end with the same weights bit for bit."""
    data = SampleConfig(sizes=SampleSizes(300, 12, 12), spm_cache=str(tmp_path / "spm"))
    trainer = TrainerConfig(
        max_steps=20,
        max_minutes=0,
        valid_every=10,
        precision="fp32",
        device="cpu",
        progress=False,
        test_at_end=False,
        keep_checkpoints=0,
        num_plots=0,
    )
    overrides = [f"data.{k}={v}" for k, v in (("sizes.train", 300), ("sizes.valid", 12), ("sizes.test", 12))]
    overrides += [f"trainer.{k}={v}" for k, v in asdict(trainer).items() if v != getattr(TrainerConfig(), k)]
    overrides += [f"data.spm_cache={data.spm_cache}", "model.attention.attention_size=40"]
    cfg = compose_config(*tiny_model_overrides("bahdanau"), "data=sample", *overrides)
    train(cfg, tmp_path / "cli")

    set_seed(1234)  # what train() does first, with the default seed
    splits = build.load_corpus(data)
    vocabulary = build.vocabulary(data, splits)
    attention = partial(AdditiveAttention, attention_size=40)
    model = BahdanauSeq2Seq(vocabulary.source_size, vocabulary.target_size, PAD_ID, attention=attention, **SIZES)
    Trainer(
        model,
        vocabulary,
        splits.train,
        splits.valid,
        tmp_path / "library",
        trainer,
        max_tokens=data.max_tokens,
        max_len=data.max_len,
    ).train()

    cli, library = (checkpoint.load(tmp_path / run / "last.pt") for run in ("cli", "library"))
    assert cli["progress"]["step"] == library["progress"]["step"] == 20
    for name, weight in cli["model"].items():
        assert torch.equal(weight, library["model"][name]), name


def test_a_trainer_built_in_python_trains_and_saves(tmp_path, sample_splits, sample_vocabulary):
    torch.manual_seed(0)
    attention = partial(AdditiveAttention, attention_size=40)
    model = BahdanauSeq2Seq(
        sample_vocabulary.source_size,
        sample_vocabulary.target_size,
        PAD_ID,
        attention=attention,
        **{**SIZES, "dropout": 0.0},
    )
    config = replace(
        TrainerConfig(), max_steps=4, max_minutes=0, valid_every=2, device="cpu", progress=False, num_plots=0
    )
    trainer = Trainer(model, sample_vocabulary, sample_splits.train[:50], sample_splits.valid[:5], tmp_path, config)
    assert trainer.train() == "reached trainer.max_steps=4"
    assert trainer.progress.step == 4 and trainer.last_metrics["step"] == 4
    saved = checkpoint.load(tmp_path / "last.pt")
    assert saved["config"]["trainer"]["max_steps"] == 4 and saved["progress"]["step"] == 4


def test_a_process_loads_every_model_at_once_and_records_the_commit_it_loaded(tmp_path, monkeypatch):
    """A sweep's worker trains run after run: the code it runs, and the commit it records, are those of its start."""
    import json
    import subprocess
    import sys

    from conftest import ROOT

    from nmt.runs import provenance

    probe = "import sys, nmt.launch.experiment, nmt.runs.provenance as p; "
    probe += "print(sorted(sys.modules), p.loaded_code.cache_info())"
    loaded = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "'nmt.models.transformer'" in loaded and "'nmt.models.rnn'" in loaded and "'nmt.models.attention'" in loaded
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert "currsize=0" in loaded  # the commit is not found at import: when a run starts
    assert provenance.loaded_code()["commit"] == (head or None)
    monkeypatch.setattr(provenance, "code_version", lambda: {"commit": "checked out later"})
    folder = RunFolder(tmp_path)
    folder.record_provenance(torch.device("cpu"), "bf16")
    assert json.loads((tmp_path / "provenance.json").read_text())[0]["commit"] == (head or None)
    assert folder.provenance()["machines"] == [f"{provenance.cpu_name()} (bf16)"]  # its precision
    assert folder.provenance()["kernels"] == [torch.backends.cpu.get_cpu_capability()]  # AVX2...
    assert "finished" not in folder.provenance()
    (tmp_path / "results.json").write_text("{}")
    finished = folder.provenance()["finished"]  # when the run ended, for the tables' dates
    assert finished >= json.loads((tmp_path / "provenance.json").read_text())[0]["started"]


def test_the_code_version_counts_changes_to_code_not_to_results_or_their_markdown(tmp_path):
    import subprocess

    from nmt.runs import provenance

    def git(*args):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True, capture_output=True
        )

    for name in ("nmt/models/model.py", "README.md", "docs/results.md", "results/compare.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("before\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "c")
    for name in ("README.md", "docs/results.md", "results/compare.json"):  # what make results rewrites
        (tmp_path / name).write_text("after\n")
    version = provenance.code_version(tmp_path)
    assert len(version["commit"]) == 40 and version["uncommitted_changes"] is False
    (tmp_path / "nmt" / "models" / "model.py").write_text("after\n")
    assert provenance.code_version(tmp_path)["uncommitted_changes"] is True


def test_a_copy_of_the_tree_without_git_takes_its_commit_from_nmt_commit(tmp_path, monkeypatch):
    """scripts/device_check.sh runs a copy of the tree on a GPU machine, where there may be no .git: the figures it
    records name the commit that `prepare` read here."""
    from nmt.runs import provenance

    monkeypatch.delenv("NMT_COMMIT", raising=False)
    assert provenance.code_version(tmp_path) == {"commit": None, "uncommitted_changes": False}
    monkeypatch.setenv("NMT_COMMIT", "a" * 40)
    assert provenance.code_version(tmp_path)["commit"] == "a" * 40
    assert provenance.code_version()["commit"] != "a" * 40  # a checkout's own commit wins


def test_a_checkpoint_and_every_record_written_before_the_wings_load_as_todays_classes():
    """Checkpoints and committed records name their model and attention classes by dotted paths of their day
    (nmt.rnn.BahdanauSeq2Seq before the move into wings): a tiny checkpoint written at 3586822 loads and translates
    as today's classes, and every committed record's classes are today's once loaded (nmt.runs.checkpoint.MOVED)."""
    from conftest import ROOT

    from nmt.build import buildable
    from nmt.config import DecodeOptions
    from nmt.decoding.translator import Translator
    from nmt.models.attention import AdditiveAttention
    from nmt.models.rnn import BahdanauSeq2Seq
    from nmt_study.records import load_record

    fixture = ROOT / "tests" / "fixtures" / "bahdanau_3586822.pt"
    assert torch.load(fixture, weights_only=True)["config"]["model"]["_target_"] == "nmt.rnn.BahdanauSeq2Seq"
    translator = Translator.load(fixture, DecodeOptions())
    assert isinstance(translator.model, BahdanauSeq2Seq) and isinstance(translator.model.attention, AdditiveAttention)
    assert translator.translate(["ein hund läuft"]) == ["rrrrrrrrrrrrrrrrrrrrrrrrrrrr"]  # as decoded at 3586822
    models, attentions = buildable()
    records = sorted((ROOT / "results" / "runs").rglob("*.record.json"))
    assert records
    for path in records:
        model = load_record(path)["config"]["model"]
        assert model["_target_"] in models, path
        assert "attention" not in model or model["attention"]["_target_"] in attentions, path
