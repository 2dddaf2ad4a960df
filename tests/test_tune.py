"""The tuning part of the study (nmt/study/tune.py, python -m nmt.study tune): equal effort for every family, the
final runs' protocol, each trial recorded as it ends, continued where it stopped, the choice made on valid BLEU."""

import json
from types import SimpleNamespace

import pytest
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
    assert tune.chosen(trials)["number"] == 0  # a tie goes to the defaults
    table = tune.table(tmp_path / "records")
    assert "chosen trial 5" in table and "| 5 **chosen** | 0.25 |" in table and "no trials recorded yet" in table
