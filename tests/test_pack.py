"""Runs trained together in one process (nmt.launch.pack) end as they end alone: on a CPU in fp32, the same weights bit
for bit, the same validations and results; a job that fails ends alone."""

import json

import pytest
import torch
from conftest import compose_config

from nmt import UserError
from nmt.launch import experiment
from nmt.launch.pack import train_packed
from nmt.runs import checkpoint

TINY = [
    "data=sample",
    "data.sizes.train=300",
    "data.sizes.valid=20",
    "data.sizes.test=20",
    "size=tiny",
    "trainer.max_steps=12",
    "trainer.valid_every=6",
    "trainer.precision=fp32",
    "trainer.threads=1",
    "trainer.progress=false",
    "trainer.num_plots=0",
]
JOBS = [("model=bahdanau", "seed=1"), ("model=transformer", "seed=2"), ("model=luong", "seed=3")]


def configs(tmp_path):
    return [compose_config(*TINY, *job, f"data.spm_cache={tmp_path / 'spm'}") for job in JOBS]


def weights(folder) -> dict:
    return checkpoint.load(folder / "last.pt")["model"]


@pytest.mark.parametrize("slots", [0, 2], ids=["all-at-once", "two-slots"])
def test_packed_runs_end_bit_for_bit_where_each_ends_alone(tmp_path, slots):
    """Every job at once, or two at a time (the third starts in the slot the first to end frees)."""
    alone = [experiment.train(config, tmp_path / "alone" / str(n)) for n, config in enumerate(configs(tmp_path))]
    jobs = [(config, tmp_path / "packed" / str(n)) for n, config in enumerate(configs(tmp_path))]
    packed = train_packed(jobs, slots)
    for n, (one, together) in enumerate(zip(alone, packed, strict=True)):
        assert isinstance(together, dict), together
        same = {key: value for key, value in one.items() if key not in ("train/minutes", "train/tokens_per_second")}
        assert same == {key: together[key] for key in same}, JOBS[n]
        mine, theirs = weights(tmp_path / "alone" / str(n)), weights(tmp_path / "packed" / str(n))
        assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine), JOBS[n]
        lines = [
            (tmp_path / kind / str(n) / "validations.jsonl").read_text().splitlines() for kind in ("alone", "packed")
        ]
        drop = ("seconds", "train_minutes", "tokens_per_second")
        assert [{k: v for k, v in json.loads(x).items() if k not in drop} for x in lines[0]] == [
            {k: v for k, v in json.loads(x).items() if k not in drop} for x in lines[1]
        ]
    for config, _ in jobs:  # the pack again, as a sweep's rerun: each job finished with these settings, kept
        config.trainer.resume = "auto"
    again = train_packed(jobs)
    assert all(again[n][key] == packed[n][key] for n in range(len(jobs)) for key in packed[n])


def test_a_job_that_fails_ends_alone_and_the_others_finish(tmp_path):
    good = configs(tmp_path)[0]
    # a model without attention selecting on AER: it fails at its first validation, midway through the pack
    bad = compose_config(*TINY, "model=sutskever", "trainer.select=aer", f"data.spm_cache={tmp_path / 'spm'}")
    outcomes = train_packed([(good, tmp_path / "good"), (bad, tmp_path / "bad")])
    assert isinstance(outcomes[0], dict) and 0 <= outcomes[0]["test/bleu"] <= 100
    assert isinstance(outcomes[1], UserError) and "trainer.select=aer" in str(outcomes[1])
    assert (tmp_path / "good" / "results.json").is_file() and not (tmp_path / "bad" / "results.json").exists()


def test_a_signal_stops_every_job_of_a_pack_and_the_rerun_ends_each_where_it_would_have(tmp_path, monkeypatch):
    """SIGTERM midway (here at the first job's first validation): every job saves last.pt at its next update and
    says how to continue; the same jobs with trainer.resume=auto end with the weights of an uninterrupted run."""
    import os
    import signal

    from nmt import Interrupted
    from nmt.training.trainer import Trainer

    first = configs(tmp_path)[:2]
    alone = [experiment.train(config, tmp_path / "alone" / str(n)) for n, config in enumerate(first)]
    validate = Trainer.validate_and_save

    def signalled(self):
        validate(self)
        os.kill(os.getpid(), signal.SIGTERM)  # caught by the pack's stop requests: a flag, read between updates

    monkeypatch.setattr(Trainer, "validate_and_save", signalled)
    jobs = [(config, tmp_path / "packed" / str(n)) for n, config in enumerate(configs(tmp_path)[:2])]
    stopped = train_packed(jobs)
    assert all(isinstance(outcome, Interrupted) and "holds the run" in str(outcome) for outcome in stopped)
    assert all((folder / "last.pt").is_file() and not (folder / "results.json").exists() for _, folder in jobs)
    monkeypatch.setattr(Trainer, "validate_and_save", validate)
    for config, _ in jobs:
        config.trainer.resume = "auto"
    resumed = train_packed(jobs)
    for n, (_, folder) in enumerate(jobs):
        assert resumed[n]["test/bleu"] == alone[n]["test/bleu"]
        mine, theirs = weights(tmp_path / "alone" / str(n)), weights(folder)
        assert all(torch.equal(mine[k], theirs[k]) for k in mine), JOBS[n]


def test_a_second_pack_into_the_same_folders_is_refused_before_it_trains(tmp_path):
    """Each job of a pack holds its run folder's lock from its start: a pack (or train.py) into a folder another one
    trains in is refused at that job's start, naming the first, and nothing of the folder changes."""
    from nmt.runs.folder import RunFolder

    folder = tmp_path / "busy"
    folder.mkdir()
    with RunFolder(folder).lock():  # another process's pack, training there
        (outcome,) = train_packed([(configs(tmp_path)[0], folder)])
    assert isinstance(outcome, UserError) and "is being trained by process" in str(outcome)
    assert sorted(p.name for p in folder.iterdir()) == [".lock"]


def test_a_sweep_packed_by_its_launcher_trains_each_job_as_the_basic_launcher_does(tmp_path):
    """`train.py -m ... hydra/launcher=packed`, through the real command: every job's folder, records and weights as
    under the basic launcher, bit for bit (CPU, fp32); a job that fails is named by the sweep's summary (exit 1), its
    failed.txt written, and the others finish."""
    import sys

    import commands
    from conftest import ROOT

    def sweep(launcher: str, folder: str, *options: str):
        spm, subdir = f"data.spm_cache={tmp_path / 'spm'}", "hydra.sweep.subdir=${hydra:job.num}"
        line = ["train.py", "-m", *TINY, spm, subdir, *options, f"hydra/launcher={launcher}"]
        return commands.run([sys.executable, *line, f"hydra.sweep.dir={tmp_path / folder}"], cwd=ROOT, text=True)

    for launcher in ("basic", "packed"):
        done = sweep(launcher, launcher, "model=bahdanau,transformer")
        assert done.returncode == 0, done.stderr[-2000:]
    for job in ("0", "1"):
        mine, theirs = weights(tmp_path / "basic" / job), weights(tmp_path / "packed" / job)
        assert all(torch.equal(mine[k], theirs[k]) for k in mine), job
        assert list((tmp_path / "packed" / job).glob(".hydra/*/config.yaml"))  # Hydra's record of the job
        logged = (tmp_path / "packed" / job / "train.log").read_text()  # its own lines, not the other job's
        assert "validation at step 12" in logged and logged.count("stopped: reached trainer.max_steps=12") == 1
    # one job at a time (hydra.launcher.slots=1); the first has no AER to select on
    done = sweep("packed", "mixed", "trainer.select=aer", "model=sutskever,bahdanau", "hydra.launcher.slots=1")
    assert done.returncode == 1 and "error: 1 job of this sweep failed" in done.stderr, done.stderr[-2000:]
    assert "trainer.select=aer" in (tmp_path / "mixed" / "0" / "failed.txt").read_text()
    assert (tmp_path / "mixed" / "1" / "results.json").is_file() and "Traceback" not in done.stderr


def test_a_job_whose_folder_cannot_be_written_fails_alone_and_its_last_good_checkpoint_stays(tmp_path, monkeypatch):
    """A full disk under one job's folder (its checkpoint write fails): that job ends with the write's message and
    keeps the checkpoint it had, the other finishes, as if each trained alone."""
    import errno
    from pathlib import Path

    from nmt.runs import checkpoint as checkpoints

    full = tmp_path / "full"
    save, written = checkpoints.torch.save, []

    def disk(payload, handle):  # torch.save into the temporary file beside the checkpoint (checkpoint.save)
        target = Path(handle.name)
        if target.parent == full and target.name == ".last.pt.tmp" and target in written:  # its second last.pt
            raise OSError(errno.ENOSPC, "No space left on device")
        written.append(target)
        save(payload, handle)

    monkeypatch.setattr(checkpoints.torch, "save", disk)
    good, other = configs(tmp_path)[:2]
    outcomes = train_packed([(good, tmp_path / "fine"), (other, full)])
    assert isinstance(outcomes[0], dict) and (tmp_path / "fine" / "results.json").is_file()
    assert isinstance(outcomes[1], UserError) and "No space left on device" in str(outcomes[1])
    assert checkpoints.load(full / "last.pt")["progress"]["step"] == 6  # the last good one, whole


@pytest.mark.slow
def test_a_pack_killed_with_sigkill_then_resumed_ends_each_job_bit_for_bit_where_it_would_have(tmp_path):
    """kill -9 of a packed sweep (no handler runs: no last.pt written at the kill, every lock left behind), then the
    same command with trainer.resume=auto: every job takes its folder back and ends with the weights of the job
    trained alone."""
    import random
    import signal
    import sys
    import time

    import commands
    from conftest import ROOT

    def line(folder: str, *extra: str) -> list[str]:
        spm, subdir = f"data.spm_cache={tmp_path / 'spm'}", "hydra.sweep.subdir=${hydra:job.num}"
        options = [*TINY, "trainer.max_steps=24", "trainer.valid_every=4", spm, subdir, "model=bahdanau,transformer"]
        return [sys.executable, "train.py", "-m", *options, f"hydra.sweep.dir={tmp_path / folder}", *extra]

    alone = commands.run(line("alone"), cwd=ROOT, text=True)
    assert alone.returncode == 0, alone.stderr[-2000:]
    process = commands.start(line("packed", "hydra/launcher=packed"), cwd=ROOT)
    deadline = time.monotonic() + 120
    while not all((tmp_path / "packed" / job / "last.pt").is_file() for job in "01") and time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[1][-2000:]
        time.sleep(0.02)
    time.sleep(random.Random().uniform(0.0, 0.3))  # anywhere in the next stretch of updates
    assert process.poll() is None, "the pack ended before it was killed"
    process.kill()
    assert process.wait() == -signal.SIGKILL
    steps = [checkpoint.load(tmp_path / "packed" / job / "last.pt")["progress"]["step"] for job in "01"]
    assert all(step < 24 for step in steps) and all((tmp_path / "packed" / job / ".lock").exists() for job in "01")
    resumed = commands.run(line("packed", "hydra/launcher=packed", "trainer.resume=auto"), cwd=ROOT, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    for job in "01":
        mine, theirs = weights(tmp_path / "alone" / job), weights(tmp_path / "packed" / job)
        assert all(torch.equal(mine[k], theirs[k]) for k in mine), job
        results = [json.loads((tmp_path / kind / job / "results.json").read_text()) for kind in ("alone", "packed")]
        assert results[0]["test/bleu"] == results[1]["test/bleu"]


def test_a_job_out_of_memory_midway_ends_alone_with_its_message_and_the_others_finish(tmp_path, monkeypatch):
    """torch's out-of-memory error in one job's update (a GPU's, or the CPU allocator's): that job ends with the
    error and keeps its last whole checkpoint; the others end bit for bit as alone."""
    from nmt.training.trainer import Trainer

    first, second = configs(tmp_path)[:2]
    alone = experiment.train(second, tmp_path / "alone")
    validate = Trainer.validate_and_save

    def exhausted(self):
        validate(self)
        if self.folder.path.name == "short" and self.progress.step >= 6:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(Trainer, "validate_and_save", exhausted)
    outcomes = train_packed([(first, tmp_path / "short"), (second, tmp_path / "whole")])
    assert isinstance(outcomes[0], torch.OutOfMemoryError) and "Tried to allocate" in str(outcomes[0])
    assert checkpoint.load(tmp_path / "short" / "last.pt")["progress"]["step"] == 6
    assert not (tmp_path / "short" / "results.json").exists()
    assert outcomes[1]["test/bleu"] == alone["test/bleu"]
    mine, theirs = weights(tmp_path / "alone"), weights(tmp_path / "whole")
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)


@pytest.mark.slow
def test_a_second_packed_sweep_into_the_same_folder_is_refused_before_it_trains_and_the_first_finishes(tmp_path):
    """Two `train.py -m ... hydra/launcher=packed` given one sweep folder, through the real commands: while the first
    trains, every job of the second is refused at its start naming the process that holds the folder (exit 1, each
    job's refusal in the summary), nothing of the first's folders changes, and the first finishes as it would alone."""
    import sys
    import time

    import commands
    from conftest import ROOT

    spm, subdir = f"data.spm_cache={tmp_path / 'spm'}", "hydra.sweep.subdir=${hydra:job.num}"
    line = [sys.executable, "train.py", "-m", *TINY, "trainer.max_steps=60", spm, subdir, "model=bahdanau,transformer"]
    line += [f"hydra.sweep.dir={tmp_path / 'sweep'}", "hydra/launcher=packed"]
    first = commands.start(line, cwd=ROOT, text=True)
    deadline = time.monotonic() + 120
    while not all((tmp_path / "sweep" / job / "step00000006.pt").is_file() for job in "01"):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()[1][-2000:]
        time.sleep(0.02)
    second = commands.run(line, cwd=ROOT, text=True)
    assert first.poll() is None, "the first sweep ended before the second was refused"
    assert second.returncode == 1 and second.stderr.count("is being trained by process") >= 2, second.stderr[-2000:]
    assert "Traceback" not in second.stderr
    _, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr[-2000:]
    assert all((tmp_path / "sweep" / job / "results.json").is_file() for job in "01")
    assert not list((tmp_path / "sweep").glob("*/failed.txt"))  # the second wrote no failure into the first's folders


@pytest.mark.parametrize(
    "sweep, said",
    [
        (["trainer.threads=1,2"], "these jobs ask for trainer.threads=1, 2, and a pack trains its jobs in one process"),
        (["seed=1,2", "hydra.sweep.subdir=same"], "jobs 0 and 1 of this pack both train in"),
    ],
)
def test_a_pack_refuses_what_it_cannot_give_each_job_as_alone_before_any_trains(tmp_path, sweep, said):
    """Through the real command (issue 83): jobs asking for different torch threads (one setting of the process:
    each would train with the last one's, unlike its run alone) or naming one folder are refused before training."""
    import sys

    import commands
    from conftest import ROOT

    line = [sys.executable, "train.py", "-m", "data=sample", "trainer=debug", "hydra/launcher=packed", *sweep]
    done = commands.run([*line, f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=ROOT, text=True)
    assert done.returncode == 1 and done.stderr.strip().splitlines()[-1].startswith(f"error: {said}")
    assert not list((tmp_path / "sweep").rglob("*.pt")) and not list((tmp_path / "sweep").rglob("failed.txt"))


def test_a_packed_job_with_an_option_that_is_none_fails_with_train_pys_own_line(tmp_path):
    """One outcome for a sweep's job whatever launches it (nmt.cli.train.job_outcome): `+trainer.bogus=1` is refused
    in every job, as the one line train.py gives, by the basic launcher and by the packed one alike."""
    import subprocess
    import sys

    from conftest import ROOT

    said = {}
    for launcher in ("basic", "packed"):
        sweep = tmp_path / launcher
        command = [sys.executable, "train.py", "-m", *TINY, "seed=1,2", "+trainer.bogus=1", f"hydra.sweep.dir={sweep}"]
        command += [f"data.spm_cache={tmp_path / 'spm'}", f"hydra/launcher={launcher}"]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 1 and not any(sweep.rglob("*.pt")), done.stderr[-2000:]
        said[launcher] = [
            line.replace(str(sweep), "SWEEP") for line in done.stderr.splitlines() if line.startswith(f"  {sweep}")
        ]
    expected = (
        "  SWEEP/0_bahdanau: +trainer.bogus=1: trainer.bogus is no option; `--help` lists every option with its default"
    )
    assert said["basic"] == said["packed"] and expected in said["basic"], said
