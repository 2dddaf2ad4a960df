"""The tuning part of the study (nmt_study/tune.py, nmt_study/tuning.py, python -m nmt_study tune): equal effort in
fact for every target, only knobs that act, a tuning seed that is no final seed, Optuna driven directly with its study
in a journal file (pruned by successive halving, continued with its sampler's state), the choice made on valid BLEU."""

import json
import shutil
import sys
from pathlib import Path

import optuna
import pytest
import torch
from conftest import compose_config
from omegaconf import OmegaConf

from nmt import UserError, build
from nmt.runs.folder import RunFolder
from nmt.training.optim import make_optimizer, make_schedule, steps_on_validation
from nmt_study import design, progress, published, tables, tune, tuning
from nmt_study.cli import tune as program
from nmt_study.variants import FAMILIES, VARIANTS

LOW_HIGH = {"low": lambda d: d.low, "high": lambda d: d.high}


def composed(target: str, key: str, value) -> OmegaConf:
    return compose_config(tune.selects(target), f"{key}={tune.option(value)}", "size=tiny")


def schedule_trace(config) -> list[float]:
    """The learning rate over 3000 updates as the trainer's schedule moves it (valid BLEU flat at each 200th)."""
    from nmt.config import TrainerConfig

    trainer = TrainerConfig(**OmegaConf.to_container(config.trainer, resolve=True))
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = make_optimizer(torch.nn.ParameterList([parameter]), trainer)
    schedule, trace = make_schedule(optimizer, trainer), []
    for step in range(1, 3001):
        if steps_on_validation(schedule):
            if step % 200 == 0:
                schedule.step(10.0)
        else:
            optimizer.step(), schedule.step()
        if step % 100 == 0:
            trace.append(optimizer.param_groups[0]["lr"])
    return trace


def model_settings(config) -> dict[str, object]:
    """Every plain setting the built model's modules hold (dropout probabilities among them)."""
    from types import SimpleNamespace

    model = build.model(config.model, SimpleNamespace(source_size=32, target_size=32))
    return {
        f"{name}.{key}": value
        for name, module in model.named_modules()
        for key, value in vars(module).items()
        if isinstance(value, (int, float, bool, str)) and not key.startswith("_")
    }


# Knobs read by code that never asks which family it trains: the loss (label smoothing) and the batches (tokens)
UNIVERSAL = {"trainer.label_smoothing", "data.max_tokens"}


@pytest.mark.parametrize("target", sorted(tune.SPACE))
def test_each_targets_space_holds_only_knobs_that_act_on_its_model_or_schedule(target):
    """A config-level check: each knob at its range's two ends gives another model (a module's setting) or another
    learning-rate schedule; warm-up on a recurrent family (whose plateau schedule has none) fails it."""
    for key, distribution in tune.SPACE[target].items():
        if key in UNIVERSAL:
            continue
        ends = [composed(target, key, pick(distribution)) for pick in LOW_HIGH.values()]
        if key.startswith("model."):
            assert model_settings(ends[0]) != model_settings(ends[1]), (target, key)
        else:
            assert schedule_trace(ends[0]) != schedule_trace(ends[1]), (target, key)
    assert UNIVERSAL <= tune.SPACE[target].keys()
    if target != "transformer":  # the check has teeth: warm-up does nothing to the plateau schedule
        ends = [composed(target, "trainer.warmup_steps", value) for value in (200, 4000)]
        assert schedule_trace(ends[0]) == schedule_trace(ends[1])


def test_equal_effort_no_two_targets_draw_the_same_configurations_and_no_tuning_seed_is_a_final_seed(tmp_path):
    assert set(design.TUNED) == set(design.PRIMARY) == {"transformer", "luong_feeding"} and "luong_feeding" in VARIANTS
    assert set(tune.SPACE) == {*FAMILIES, "luong_feeding"}
    assert len({design.TRIALS}) == 1 and design.TRIALS >= 6 and "trainer.test_at_end=false" in tune.PROTOCOL
    finals = range(design.FIRST_SEED, design.FIRST_SEED + 8)  # the main table's 3, the lab's claims' 8
    assert tune.SEED not in finals
    drawn = {}
    for target in tune.SPACE:
        settings = tuning.Settings(design.CAP, design.VALIDATIONS, tmp_path / target, tmp_path)
        study = tuning.open_study(target, settings)
        points = []
        for _ in range(design.TRIALS):
            trial = study.ask(tune.SPACE[target])
            points.append(tuple(sorted(trial.params.items())))
            study.tell(trial, 1.0)
        drawn[target] = points[1:]  # trial 0: the target's defaults
        assert points[0] == tuple(sorted(tuning.defaults(target).items()))
    for a in design.TUNED:
        for b in design.TUNED:
            if a < b:
                common = {key for key, _ in drawn[a][0]} & {key for key, _ in drawn[b][0]}
                shared = [{k: v for k, v in p if k in common} for p in drawn[a]]
                assert not any({k: v for k, v in p if k in common} in shared for p in drawn[b]), (a, b)


def test_a_study_stopped_after_k_trials_continues_at_trial_k_plus_1_with_its_samplers_state(tmp_path, capsys):
    """The journal holds the sampler's place: a new process opening it proposes what the uninterrupted study would."""

    def proposals(records, stops):
        settings = tuning.Settings(design.CAP, design.VALIDATIONS, records, tmp_path)
        found = []
        for stop in stops:  # each stop: a fresh study object over the same file (a new process, a new window)
            study = tuning.open_study("bahdanau", settings)
            while len(study.trials) < stop:
                trial = study.ask(tune.SPACE["bahdanau"])
                found.append(trial.params)
                study.tell(trial, float(len(found)))
        return found

    assert proposals(tmp_path / "once", [5]) == proposals(tmp_path / "twice", [2, 5])
    record = tune.trial_path(tmp_path / "once", "bahdanau", 7)  # a trial the records hold and the journal lacks
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"number": 7}))
    tuning.open_study("bahdanau", tuning.Settings(design.CAP, design.VALIDATIONS, tmp_path / "once", tmp_path))
    assert "bahdanau.journal: lacks trials 7, which" in capsys.readouterr().out
    journal = tuning.journal(tmp_path / "twice", "bahdanau")
    other = tuning.Settings(3e14, design.VALIDATIONS, tmp_path / "twice", tmp_path)
    with pytest.raises(UserError, match="bahdanau.journal: a study of another protocol"):
        tuning.open_study("bahdanau", other)  # another cap: refused by name
    journal.rename(tmp_path / "twice" / "luong.journal")
    with pytest.raises(UserError, match="holds the study tune_bahdanau, not tune_luong"):
        tuning.open_study("luong", tuning.Settings(design.CAP, design.VALIDATIONS, tmp_path / "twice", tmp_path))
    with tuning.locked(tmp_path / "twice" / "luong.journal"):
        with pytest.raises(UserError, match="another tuning is writing this study"):
            tuning.locked(tmp_path / "twice" / "luong.journal")


def test_the_tuning_command_prunes_records_and_refuses_bad_options_before_anything_starts(tmp_path, capsys):
    """Through the real command on the sample corpus: 3 trials, the defaults first; a trial behind at rung 0 is
    pruned and recorded with its rung; the records render; --trials 0, negative or non-numeric options are refused
    (by the study's entry in this process: a refusal starts nothing, so nothing a process of its own would add)."""
    import commands

    from nmt_study.__main__ import main as study

    extra = [
        "data=sample",
        "size=tiny",
        "data.sizes.train=300",
        "data.sizes.valid=20",
        "data.sizes.test=20",
        "trainer.num_plots=0",
        f"data.spm_cache={tmp_path / 'spm'}",
    ]
    records, runs = tmp_path / "records", tmp_path / "runs"
    line = [
        "-m",
        "nmt_study",
        "tune",
        "--families",
        "bahdanau",
        "--flops",
        "1e11",
        "--validations",
        "3",
        "--threads",
        "1",
    ]
    line += ["--records", str(records), "--runs", str(runs)]
    refusals = {
        "--trials=0": "--trials 0: at least 1",
        "--trials=x": "--trials 'x': a whole number",
        "--flops=-1": "--flops -1: a positive compute cap",
    }
    for bad, said in refusals.items():
        with pytest.raises(SystemExit) as refused:
            study([*line[2:], bad])
        assert refused.value.code == 2 and said in capsys.readouterr().err and not records.exists()
    done = commands.run([sys.executable, *line, "--trials", "3", "--extra", *extra], cwd=program.ROOT, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    trials = tune.trials_of(records, "bahdanau")
    assert [t["number"] for t in trials] == [0, 1, 2] and trials[0]["options"]["trainer.lr"] == "0.001"
    study = optuna.load_study(
        study_name="tune_bahdanau",
        storage=tuning.JournalStorage(tuning.JournalFileBackend(str(tuning.journal(records, "bahdanau")))),
    )
    states = {t.number: t.state.name for t in study.trials}
    for t in trials:  # each record says what the study was told
        assert states[t["number"]] == {"pruned": "PRUNED", "failed": "FAIL"}.get(t["stopped_by"], "COMPLETE")
        if t["stopped_by"] == "pruned":
            assert t["rung"] == 1 and "pruned at validation 1" in done.stdout
    assert "**bahdanau**: 3 trials" in done.stdout and states[0] == "COMPLETE"
    assert tune.chosen(trials)[0]["stopped_by"] != "pruned"
    # A tuning killed mid-write leaves its journal's last record cut short: removed and said, its trial continued
    # from its run (finished: kept, not trained again), the study whole again
    path = tuning.journal(records, "bahdanau")
    whole = path.read_bytes()
    path.write_bytes(whole[:-10])
    again = commands.run([sys.executable, *line, "--trials", "3", "--extra", *extra], cwd=program.ROOT, text=True)
    assert again.returncode == 0 and "were a record cut short (a write stopped midway): removed" in again.stdout
    assert [t["number"] for t in tune.trials_of(records, "bahdanau")] == [0, 1, 2]
    assert not (runs / "bahdanau" / "trial003").exists()  # no trial run twice or added
    path.write_text("# notes of mine\n")  # a file of another shape in the journal's place: refused by name
    other = commands.run([sys.executable, *line, "--trials", "3", "--extra", *extra], cwd=program.ROOT, text=True)
    assert other.returncode == 1 and "bahdanau.journal: not a readable Optuna journal" in other.stderr
    assert "Traceback" not in other.stderr


def test_a_trial_is_recorded_from_its_validations_and_the_best_finished_on_valid_is_chosen(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    curve = [(1, 0.2, 20.0), (2, 0.4, 31.5), (3, design.CAP / 1e15 * 0.9999, 30.0)]
    lines = [{"step": s, "petaflops": p, "bleu": b, "loss": 1.0, "epochs": s, "train_minutes": s} for s, p, b in curve]
    (run / "validations.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    trial = tune.Trial.of(run, "luong", 5, {"model.dropout": "0.25"}, design.CAP)
    tune.record(trial, tmp_path / "records")
    saved = json.loads((tmp_path / "records" / "luong" / "trial005.json").read_text())
    assert saved["options"] == {"model.dropout": "0.25"} and saved["valid_bleu"] == 31.5
    assert saved["stopped_by"] == "cap" and "commit" in saved["code"] and saved["number"] == 5
    pruned = {"number": 6, "valid_bleu": 40.0, "stopped_by": "pruned", "rung": 10, "options": {}, "petaflops": 0.2}
    trials = [{"number": 0, "valid_bleu": 31.5, "stopped_by": "patience"}, saved, pruned]
    assert tune.chosen(trials)[0]["number"] == 0  # a tie goes to the defaults; a pruned trial is never chosen
    tune.record(
        tune.Trial(**{k: v for k, v in pruned.items()}, family="luong", curve=[], provenance={}), tmp_path / "records"
    )
    table = tune.table(tmp_path / "records")
    assert "chosen trial 5" in table and "| 5 **chosen** | 0.25 |" in table and "pruned at validation 10" in table
    assert "no finished trials recorded yet" in table


def test_a_choice_is_adopted_only_past_the_margin_fixed_in_advance():
    """design.ADOPT_MARGIN (0.5 valid BLEU): a trial that beats the defaults by less leaves them as they are."""
    assert design.ADOPT_MARGIN == 0.5
    defaults = {"number": 0, "valid_bleu": 30.0, "stopped_by": "patience", "averaging": {"2": 30.4}}
    close = {"number": 1, "valid_bleu": 30.45, "stopped_by": "patience"}
    assert tune.chosen([defaults, close]) == (defaults, 1)  # neither the trial nor the average gains 0.5
    past = close | {"valid_bleu": 30.5}
    assert tune.chosen([defaults, past]) == (past, 1)
    assert tune.chosen([close]) == (close, 1)  # no finished defaults to beat: the best finished trial


def test_averaging_is_a_choice_among_windows_that_end_at_the_best_checkpoint(tmp_path, monkeypatch):
    from nmt.runs import averaging, checkpoint

    trials = [
        {"number": 0, "options": {}, "valid_bleu": 30.0, "averaging": {"2": 30.5, "3": 31.0, "5": 31.0}},
        {"number": 1, "options": {"model.dropout": "0.3"}, "valid_bleu": 30.9, "averaging": {"2": 30.0}},
        {"number": 2, "options": {"model.dropout": "0.4"}, "valid_bleu": 31.0},  # recorded before averaging was
    ]
    trials = [t | {"petaflops": 2.0, "stopped_by": "cap"} for t in trials]
    best, count = tune.chosen(trials)
    assert (best["number"], count) == (0, 3)  # of equals: the earliest trial, then the fewest checkpoints
    rows = "\n".join(tune.trial_rows(trials, best))
    assert "| 0 **chosen** | default | 30.00 | 30.50 | 31.00 | 31.00 |" in rows
    # A run stopped by patience: its best validation (step 3) is kept with the 1 before it, though 4 came after it
    run = tmp_path / "run"
    run.mkdir()
    folder = RunFolder(run)
    bleus = [10.0, 20.0, 30.0, 25.0, 24.0, 23.0, 22.0]
    for step, bleu in enumerate(bleus, 1):
        best = bleus.index(max(bleus[:step])) + 1
        weights = {"model": {"w": torch.full((2,), float(step))}, "config": {"model": {}}, "vocabulary": {}}
        folder.write_weights(weights | {"progress": {"step": step}}, step, 2, None if best == step else best)
        with open(run / "validations.jsonl", "a") as handle:
            handle.write(json.dumps({"step": step, "bleu": bleu, "best": best == step, "petaflops": 0.1}) + "\n")
    assert sorted(p.name for p in run.glob("step*.pt")) == [f"step{s:08d}.pt" for s in (2, 3, 6, 7)]
    monkeypatch.setattr(averaging, "average", lambda paths: {"averaged": [p.name for p in paths]})
    monkeypatch.setattr(checkpoint, "save", lambda payload, path: None)
    assert averaging.average_last(folder, 2)[1]["averaged"] == ["step00000002.pt", "step00000003.pt"]


def test_the_choice_becomes_the_targets_defaults_on_multi30k_and_only_there_once_every_trial_ended(tmp_path, capsys):
    for target, tried in (
        (
            "luong",
            [(0, 30.0, {}, {"2": 29.0}), (1, 32.0, {"trainer.lr": "0.0007", "model.dropout": "0.4"}, {"5": 32.5})],
        ),
        ("luong_feeding", [(0, 33.0, {"trainer.lr": "0.002", "model.dropout": "0.2"}, {}), (1, 31.0, {}, {})]),
    ):
        (tmp_path / "records" / target).mkdir(parents=True)
        for number, bleu, options, averaging in tried:
            trial = {"number": number, "options": options, "valid_bleu": bleu, "petaflops": 1.0, "stopped_by": "cap"}
            path = tmp_path / "records" / target / f"trial{number:03d}.json"
            path.write_text(json.dumps(trial | {"averaging": averaging}))
    folder = tmp_path / "configs" / "tuned"
    folder.mkdir(parents=True)
    (folder / "multi30k_luong.yaml").write_text("trainer:\n  warmup_steps: 800\n  lr: 0.002\n  average_last: 3\n")
    records = ["--records", str(tmp_path / "records"), "--tuned", str(folder)]
    program.main(["--report", "--apply", *records, "--families", "luong,luong_feeding", "--trials", "3"])
    assert "lr: 0.002" in (folder / "multi30k_luong.yaml").read_text()  # 2 of 3 trials: not yet a choice
    assert "luong: 2 of its 3 trials ended; its choice is written once they all have" in capsys.readouterr().out
    program.main(["--report", "--apply", *records, "--families", "luong,bahdanau,luong_feeding", "--trials", "2"])
    text = (folder / "multi30k_luong.yaml").read_text()
    assert text.startswith("# @package _global_\n") and "trial 1 of 2, valid BLEU 32.50" in text
    assert not (folder / "multi30k_bahdanau.yaml").exists()  # no trials: its defaults stay
    searchpath = f"hydra.searchpath=[file://{tmp_path / 'configs'}]"
    config = compose_config("model=luong", searchpath)
    # the chosen trial's options over those its trial 0 ran with (warm-up), and the average it was chosen with
    assert (config.trainer.lr, config.model.dropout, config.trainer.warmup_steps) == (0.0007, 0.4, 800)
    assert config.trainer.average_last == 5
    # the other arm of the input-feeding claim: its own choice, not luong's
    feeding = compose_config("variant=luong_feeding", searchpath)
    assert (feeding.trainer.lr, feeding.model.dropout, feeding.trainer.average_last) == (0.002, 0.2, 1)
    assert compose_config("variant=luong_feeding", "trainer.lr=0.003", searchpath).trainer.lr == 0.003  # yours win
    for other in ("model=luong data=sample", "experiment=lab", "experiment=demo", "model=bahdanau"):
        assert compose_config(*other.split(), searchpath).trainer.average_last == 1, other  # not tuned there


def test_the_design_costs_what_docs_tuning_md_says_and_fits_two_cores():
    """The design as issue 84 fixes it, costed at the measured CPU rate: at most 26 machine-hours expected in fp32
    (results/measured/cpu_rate.json), docs/tuning.md's table rendered from it."""
    assert design.PRIMARY == ("transformer", "luong_feeding") and design.TUNED == design.PRIMARY
    assert (design.CAP, design.SPACING, design.VALIDATIONS, design.PATIENCE) == (1e15, 2e13, 50, 5)
    assert (design.RUNG_FLOPS, design.RUNG, design.TRIALS, design.SEEDS) == (2e14, 10, 6, 5)
    assert (design.ADOPT_MARGIN, design.EQUIVALENCE) == (0.5, 1.0) and "trainer.precision=fp32" in design.PINNED
    assert published.FINAL["max_flops"] == design.CAP and published.FINAL["validations"] == design.VALIDATIONS
    assert tables.render("queue") in program.DOCUMENT.read_text(encoding="utf-8")
    rates = progress.cpu_rates(published.RESULTS / "measured" / "cpu_rate.json")
    whole: dict[str, float] = {}
    for part in design.queue():
        for target, flops in part.flops.items():
            whole[target] = whole.get(target, 0.0) + flops
    # The review planned 26 at one thread and two runs at once; two threads (a run must end inside its session) cost
    # about 32 at the rates measured here, as docs/tuning.md says
    assert design.machine_hours(whole, rates) <= 34, design.machine_hours(whole, rates)
    stop = design.EXPECTED_STOP["luong_feeding"]  # each trial's expectation sums to the target's
    trials = sum(design.trial_flops(n, stop) for n in range(1, design.TRIALS + 1))
    assert whole["luong_feeding"] == pytest.approx(trials + design.SEEDS * stop)
    assert design.expected_promotions(1) == 1.0 and design.trial_flops(1, stop) == stop  # the first always goes on


def test_what_is_left_of_the_queue_counts_the_trials_and_final_seeds_recorded(tmp_path):
    """docs/tuning.md's queue table says how much of each part is recorded and the machine-hours its other runs are
    expected to take: pruned and finished trials count, a failed one does not (its point is asked again), nor a
    final run of a seed outside the final seeds."""
    records = tmp_path / "runs"
    for number, stopped in enumerate(("cap", "pruned", "failed", "patience")):
        path = progress.trial_path(records / "tune", "transformer", number)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"number": number, "stopped_by": stopped}))
    for seed in (1234, 1235, 1299):  # 1299: no final seed
        path = records / "main" / "transformer" / f"seed{seed}.record.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    done = progress.recorded_queue(records)
    assert done == {
        "tune": {"transformer": 3, "luong_feeding": 0},
        "main": {"transformer": 2},
        "claims": {"luong_feeding": 0},
    }
    tune_part, main_part, _ = design.queue(done)
    stop = design.EXPECTED_STOP["transformer"]
    left = tune_part.left["transformer"]  # the 4th to 6th trials' expectation
    assert left == pytest.approx(sum(design.trial_flops(n, stop) for n in (4, 5, 6)))
    assert main_part.left["transformer"] == 3 * stop
    (tmp_path / "measured").mkdir()
    for name in ("benchmark_cuda.json", "cpu_rate.json"):
        shutil.copy(published.RESULTS / "measured" / name, tmp_path / "measured")
    rows = {
        line.split(" | ")[0].strip("| *"): line.split(" | ") for line in tables.render("queue", tmp_path).splitlines()
    }
    assert rows["tune"][2] == "3 of 12" and rows["main"][2] == "2 of 5" and rows["all"][2] == "5 of 22"
    rates = progress.cpu_rates(tmp_path / "measured" / "cpu_rate.json")
    assert float(rows["main"][-2]) == round(design.machine_hours({"transformer": 3 * stop}, rates), 1)


def test_one_trial_asked_runs_the_defaults_and_a_failed_trial_keeps_no_place(tmp_path, capsys):
    """`--trials 1` on a new study runs trial 0 (its defaults were queued and counted as held, so it ran none); a
    trial that failed (no corpus, a full disk) is never counted, and its point is asked again by the next tuning."""
    settings = tuning.Settings(design.CAP, design.VALIDATIONS, tmp_path, tmp_path)
    study = tuning.open_study("transformer", settings)
    first = tuning.next_trial(study, "transformer", 1, set(), [])
    assert first is not None and first.number == 0 and first.params == tuning.defaults("transformer")
    study.tell(first, state=optuna.trial.TrialState.FAIL)
    assert tuning.counted(study) == 0
    assert tuning.next_trial(study, "transformer", 1, set(), ["failed"]) is None  # not again in the same tuning
    again = tuning.open_study("transformer", settings)  # the next tuning
    assert "transformer trial 0 failed before: its point is asked again" in capsys.readouterr().out
    retry = tuning.next_trial(again, "transformer", 1, set(), [])
    assert retry.number == 1 and retry.params == first.params
    again.tell(retry, 30.0)
    assert tuning.counted(again) == 1 and tuning.next_trial(again, "transformer", 1, set(), []) is None
    tuning.open_study("transformer", settings)  # held by a finished trial now: not asked a third time
    assert "asked again" not in capsys.readouterr().out


def test_the_journals_identity_holds_what_changes_a_trial_and_extra_cannot_set_the_protocol(tmp_path):
    tuning.open_study(
        "transformer", tuning.Settings(design.CAP, design.VALIDATIONS, tmp_path, tmp_path, ["data=sample"])
    )
    elsewhere = ["data=sample", "data.dir=/elsewhere", "trainer.progress=true"]  # where files are: the same study
    tuning.open_study("transformer", tuning.Settings(design.CAP, design.VALIDATIONS, tmp_path, tmp_path, elsewhere))
    with pytest.raises(UserError, match="a study of another protocol"):  # another corpus: another study
        tuning.open_study("transformer", tuning.Settings(design.CAP, design.VALIDATIONS, tmp_path, tmp_path, []))
    for option in ("trainer.threads=4", "seed=7", "trainer.max_flops=1e12", "+trainer.precision=bf16", "model=luong"):
        with pytest.raises(UserError, match=f"--extra {option.replace('+', '[+]')}: .* the tuning's protocol"):
            tuning.check_extra([option])
    tuning.check_extra(["data.dir=/d", "model.dropout=0.3"])


def test_a_journal_or_records_that_are_not_regular_files_and_folders_are_refused_by_name(tmp_path):
    import os

    target = tmp_path / "mine.txt"
    target.write_text("a file of mine, no newline")
    records = tmp_path / "records"
    records.mkdir()
    (records / "transformer.journal").symlink_to(target)
    settings = tuning.Settings(design.CAP, design.VALIDATIONS, records, tmp_path)
    with pytest.raises(UserError, match="transformer.journal: is a link; the study's journal must be a regular file"):
        tuning.tune_target("transformer", 1, 1, settings)
    assert target.read_text() == "a file of mine, no newline"  # not followed, not truncated
    (records / "transformer.journal").unlink()
    os.mkfifo(records / "transformer.journal")
    with pytest.raises(UserError, match="transformer.journal: is not a regular file"):  # a FIFO: no hang
        tuning.tune_target("transformer", 1, 1, settings)
    with pytest.raises(UserError, match="--records .*mine.txt is a file, not a folder"):
        program.folders(program.arguments(["--records", str(target / "sub")]))
    for option in ("--records", "--tuned"):  # --report and --apply read and write them too: no empty report
        with pytest.raises(UserError, match=f"{option} .*mine.txt is a file, not a folder"):
            program.main(["--report", "--apply", option, str(target)])
    assert target.read_text() == "a file of mine, no newline"


def test_a_tuning_whose_trial_fails_exits_non_zero_and_the_rerun_asks_its_point_again(tmp_path):
    """Through the real command: a trial that cannot train (here: a corpus of the user's files not given) is named,
    recorded as failed and not counted; the tuning exits 1; the rerun asks the same point again (and fails again,
    named, while the cause is there)."""
    import commands

    line = [sys.executable, "-m", "nmt_study", "tune", "--families", "transformer", "--trials", "1"]
    line += ["--flops", "1e11", "--validations", "3", "--threads", "1"]
    line += ["--records", str(tmp_path / "r"), "--runs", str(tmp_path / "u")]
    line += ["--extra", "data=files"]
    done = commands.run(line, cwd=program.ROOT, text=True)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "transformer trial 0 failed: " in done.stdout and "error: 1 trial failed" in done.stderr
    assert "transformer: 0 of 1 trials" in done.stdout
    assert progress.ended_trials(tmp_path / "r", "transformer") == []
    assert [t["stopped_by"] for t in tune.trials_of(tmp_path / "r", "transformer")] == ["failed"]
    again = commands.run(line, cwd=program.ROOT, text=True)
    assert again.returncode == 1 and "transformer trial 0 failed before: its point is asked again" in again.stdout
    assert "transformer trial 1 failed: " in again.stdout


def test_a_tuning_killed_with_sigkill_leaves_no_trial_running_and_the_rerun_finishes_it(tmp_path):
    """Through the real command: kill -9 of the tuning takes its trial's training process with it (no orphan goes on
    writing the run), and the rerun continues the same trial to its end, recorded as finished, not failed."""
    import signal
    import subprocess
    import time

    line = [sys.executable, "-m", "nmt_study", "tune", "--families", "bahdanau", "--trials", "1"]
    line += ["--flops", "3e11", "--validations", "3", "--threads", "1"]
    line += ["--records", str(tmp_path / "r"), "--runs", str(tmp_path / "u"), "--extra", "data=sample", "size=tiny"]
    line += ["data.sizes.train=300", "data.sizes.valid=20", "data.sizes.test=20", "trainer.num_plots=0"]
    line += [f"data.spm_cache={tmp_path / 'spm'}"]
    tuning = subprocess.Popen(line, cwd=program.ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def trainers() -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            try:
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if entry.name.isdigit() and b"nmt.cli.train" in command and str(tmp_path / "u").encode() in command:
                found.append(int(entry.name))
        return found

    deadline = time.monotonic() + 40
    while not trainers() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert trainers(), "the trial never started"
    time.sleep(2)
    tuning.send_signal(signal.SIGKILL)
    tuning.wait()
    deadline = time.monotonic() + 10
    while trainers() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not trainers(), "the trial went on without its tuning"
    again = subprocess.run(line, cwd=program.ROOT, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    assert [t["stopped_by"] for t in tune.trials_of(tmp_path / "r", "bahdanau")] not in ([], ["failed"])
