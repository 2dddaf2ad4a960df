"""The tuning part of the study (nmt/study/tune.py, python -m nmt.study tune): equal effort for every family, the
final runs' protocol, each trial recorded as it ends, continued where it stopped, the choice made on valid BLEU."""

import json
from types import SimpleNamespace

import pytest
from conftest import compose_config
from omegaconf import OmegaConf

from nmt import UserError
from nmt.study import tune
from nmt.study.cli import tune as program
from nmt.study.variants import FAMILIES


def test_every_family_is_tuned_over_the_same_kinds_of_knobs_under_one_protocol():
    assert set(tune.SPACE) == set(FAMILIES) == {"sutskever", "bahdanau", "luong", "transformer"}
    for family, space in tune.SPACE.items():
        assert tune.COMMON.items() <= space.items(), family  # dropout, lr, warm-up, smoothing, batch for each
    assert {"model.attention_dropout", "model.activation_dropout"} <= tune.SPACE["transformer"].keys()
    assert tune.TRIALS >= 8 and "trainer.test_at_end=false" in tune.PROTOCOL  # valid only: the test split unread


def test_a_familys_command_runs_its_defaults_then_the_proposed_trials_still_to_run(tmp_path, monkeypatch):
    (tmp_path / "records" / "luong").mkdir(parents=True)
    for number in (0, 1, 2):
        (tmp_path / "records" / "luong" / f"trial{number:03d}.json").write_text(json.dumps({"number": number}))
    args = program.arguments(["--trials", "8", "--records", str(tmp_path / "records"), "--runs", str(tmp_path)])
    ran = []
    monkeypatch.setattr(program, "run", lambda line, family: ran.append(line))
    program.tune_family("luong", args)
    (line,) = ran  # trial 0 is recorded: only the proposed trials still to run
    assert "hydra.sweeper.n_trials=6" in line and "+hydra.callbacks.trial.first=3" in line
    assert "model=luong" in line and "trainer.max_flops=2e+15" in line and all(p in line for p in tune.PROTOCOL)
    assert f"model.dropout={tune.COMMON['model.dropout']}" in line and "hydra/sweeper=optuna" in line
    defaults = program.command("luong", args, 0, 0)
    assert "hydra/sweeper=optuna" not in defaults and not any(o.startswith("model.dropout") for o in defaults)
    with pytest.raises(UserError, match="--trials 0"):
        program.arguments(["--trials", "0"])


def test_a_trial_is_recorded_as_its_job_ends_and_the_best_on_valid_is_chosen(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    curve = [(1, 0.5, 20.0), (2, 1.0, 31.5), (3, 1.9995, 30.0)]
    lines = [{"step": s, "petaflops": p, "bleu": b, "loss": 1.0, "epochs": s, "train_minutes": s} for s, p, b in curve]
    (run / "validations.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    config = OmegaConf.create(
        {
            "hydra": {
                "runtime": {"output_dir": str(run)},
                "overrides": {"task": ["model=luong", "model.dropout=0.25", "seed=1234"]},
                "job": {"num": 1},
            }
        }
    )
    callback = tune.RecordTrial(str(tmp_path / "records"), "luong", 4, 2e15, "model.dropout,trainer.lr")
    callback.on_job_end(config, SimpleNamespace())
    saved = json.loads((tmp_path / "records" / "luong" / "trial005.json").read_text())
    assert saved["options"] == {"model.dropout": "0.25"} and saved["valid_bleu"] == 31.5
    assert saved["stopped_by"] == "cap" and "commit" in saved["code"] and saved["number"] == 5
    trials = [{"number": 0, "valid_bleu": 31.5}, saved, {"number": 7, "valid_bleu": 29.0}]
    assert tune.chosen(trials)[0]["number"] == 0  # a tie goes to the defaults
    table = tune.table(tmp_path / "records")
    assert "chosen trial 5" in table and "| 5 **chosen** | 0.25 |" in table and "no trials recorded yet" in table


def test_averaging_the_last_checkpoints_is_one_more_choice_made_on_valid():
    trials = [
        {"number": 0, "options": {}, "valid_bleu": 30.0, "averaging": {"2": 30.5, "3": 31.0, "5": 31.0}},
        {"number": 1, "options": {"model.dropout": "0.3"}, "valid_bleu": 30.9, "averaging": {"2": 30.0}},
        {"number": 2, "options": {"model.dropout": "0.4"}, "valid_bleu": 31.0},  # recorded before averaging was
    ]
    trials = [t | {"petaflops": 2.0, "stopped_by": "cap"} for t in trials]
    best, count = tune.chosen(trials)
    assert (best["number"], count) == (0, 3)  # of equals: the earliest trial, then the fewest checkpoints
    assert tune.chosen(trials[1:2]) == (trials[1], 1)  # its best checkpoint beats its average
    rows = "\n".join(tune.trial_rows(trials, best))
    assert "| 0 **chosen** | default | 30.00 | 30.50 | 31.00 | 31.00 |" in rows
    assert "| 2 | 0.4 | 31.00 | - | - | - |" in rows


def test_the_choice_becomes_the_familys_defaults_on_multi30k_and_only_there(tmp_path):
    (tmp_path / "records" / "luong").mkdir(parents=True)
    tried = [(0, 30.0, {}, {"2": 29.0}), (1, 32.0, {"trainer.lr": "0.0007", "model.dropout": "0.4"}, {"5": 32.5})]
    for number, bleu, options, averaging in tried:
        trial = {"number": number, "options": options, "valid_bleu": bleu, "petaflops": 1.0, "stopped_by": "cap"}
        path = tmp_path / "records" / "luong" / f"trial{number:03d}.json"
        path.write_text(json.dumps(trial | {"averaging": averaging}))
    folder = tmp_path / "configs" / "tuned"
    folder.mkdir(parents=True)
    (folder / "multi30k_luong.yaml").write_text("trainer:\n  warmup_steps: 800\n  lr: 0.002\n  average_last: 3\n")
    records = ["--records", str(tmp_path / "records"), "--tuned", str(folder), "--families", "luong,bahdanau"]
    program.main(["--report", "--apply", *records])
    text = (folder / "multi30k_luong.yaml").read_text()
    assert text.startswith("# @package _global_\n") and "trial 1 of 2, valid BLEU 32.50" in text
    assert not (folder / "multi30k_bahdanau.yaml").exists()  # no trials: its defaults stay
    searchpath = f"hydra.searchpath=[file://{tmp_path / 'configs'}]"
    config = compose_config("model=luong", searchpath)
    # the chosen trial's options over those its trial 0 ran with (warm-up), and the average it was chosen with
    assert (config.trainer.lr, config.model.dropout, config.trainer.warmup_steps) == (0.0007, 0.4, 800)
    assert config.trainer.average_last == 5
    assert compose_config("variant=luong_feeding", "trainer.lr=0.003", searchpath).trainer.lr == 0.003  # yours win
    for other in ("model=luong data=sample", "experiment=lab", "experiment=demo", "model=bahdanau"):
        assert compose_config(*other.split(), searchpath).trainer.average_last == 1, other  # not tuned there
    (tmp_path / "records" / "luong" / "trial001.json").unlink()  # now the defaults, unaveraged, are the choice
    program.main(["--report", "--apply", *records])
    config = compose_config("model=luong", searchpath)  # trial 0 ran with the tuned file: it stays, unaveraged
    assert (config.trainer.lr, config.model.dropout, config.trainer.average_last) == (0.0007, 0.4, 1)
