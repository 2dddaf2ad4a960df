"""The trainer end to end: it learns, it resumes exactly, its checkpoints are safe, and the CLIs behave."""

import copy
import json
import os
import pickle
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import commands
import pytest
import torch
import torch.nn.functional as F
from conftest import MODELS, ROOT
from helpers import Exploit, make_trainer
from helpers import run_python as run
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import nmt.decoding.translator
from nmt import UserError
from nmt.config import DecodeOptions
from nmt.decoding.evaluate import evaluate as evaluate_checkpoint
from nmt.decoding.search import beam_search
from nmt.decoding.translator import Search, score, translate
from nmt.device import cpu_capability
from nmt.runs import averaging, checkpoint
from nmt.runs.folder import RunFolder
from nmt.text.aer import parse_links
from nmt.text.data import PAD_ID
from nmt_study import tune


@pytest.mark.slow
@pytest.mark.parametrize("model_name", [*MODELS, "bahdanau model/attention=none"])
def test_training_learns_a_few_sentences_and_translates_them_back(
    tmp_path, sample_splits, sample_vocabulary, model_name
):
    pairs = [pair for pair in sample_splits.train if len(pair[0].split()) <= 8][:8]  # 3 to 8 words
    name, *overrides = model_name.split()
    steps = 160 if name == "sutskever" else 80  # below 0.05 by then: Sutskever's 0.024 at 140, the others 0.007 at 80
    trainer = make_trainer(
        tmp_path, sample_vocabulary, pairs, name, overrides=overrides, max_steps=steps, valid_every=steps
    )
    trainer.train()
    assert trainer.last_metrics["loss"] < 0.05
    hypotheses, _ = translate(
        trainer.model, sample_vocabulary, [s for s, _ in pairs], Search(max_tokens=1000), trainer.device, torch.float32
    )
    assert hypotheses == [t for _, t in pairs]
    assert trainer.last_metrics["bleu"] == pytest.approx(100.0)
    assert (tmp_path / "best.pt").is_file() and (tmp_path / "last.pt").is_file()


@pytest.mark.skipif(not cpu_capability().bf16_kernels, reason="this CPU has no bf16 kernels (test_device.py)")
def test_bf16_autocast_trains_on_cpu(tmp_path, sample_splits, sample_vocabulary):
    trainer = make_trainer(
        tmp_path, sample_vocabulary, sample_splits.train[:8], "bahdanau", max_steps=3, valid_every=3, precision="bf16"
    )
    trainer.train()
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())  # master weights stay fp32
    assert torch.isfinite(torch.tensor(trainer.last_metrics["loss"]))


@pytest.mark.parametrize("model_name", ["bahdanau", "transformer"])
def test_deterministic_mode_turns_on_deterministic_kernels_and_trains(
    tmp_path, sample_splits, sample_vocabulary, model_name, monkeypatch
):
    """trainer.deterministic: every op of a training step has a deterministic kernel (none is refused), and the
    switches a CUDA run needs are set; on the CPU the run is the same as without it."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    pairs = sample_splits.train[:8]
    plain = make_trainer(tmp_path / "plain", sample_vocabulary, pairs, model_name, max_steps=3, valid_every=3)
    plain.train()
    try:
        strict = make_trainer(
            tmp_path / "strict", sample_vocabulary, pairs, model_name, max_steps=3, valid_every=3, deterministic=True
        )
        assert torch.are_deterministic_algorithms_enabled() and torch.backends.cudnn.deterministic
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8" and not torch.backends.cudnn.benchmark
        strict.train()
    finally:
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.deterministic = False
    for name, weight in plain.model.state_dict().items():
        assert torch.equal(weight, strict.model.state_dict()[name]), name


def test_resumed_run_equals_an_uninterrupted_one(tmp_path, sample_splits, sample_vocabulary):
    pairs = sample_splits.train[:60]
    # With dropout, so the random state must be restored exactly too.
    straight = make_trainer(tmp_path / "a", sample_vocabulary, pairs, "luong", 0.3, max_steps=12, valid_every=5)
    straight.train()
    first = make_trainer(tmp_path / "b", sample_vocabulary, pairs, "luong", 0.3, max_steps=5, valid_every=5)
    first.train()  # stops after step 5, mid-epoch, having saved last.pt
    torch.manual_seed(999)  # resuming must not depend on the process's RNG
    second = make_trainer(tmp_path / "b", sample_vocabulary, pairs, "luong", 0.3, max_steps=12, valid_every=5)
    second.restore(tmp_path / "b" / "last.pt")
    second.train()
    assert second.step == straight.step == 12
    for (name, a), (_, b) in zip(straight.model.state_dict().items(), second.model.state_dict().items()):
        assert torch.equal(a, b), name
    assert second.last_metrics["bleu"] == straight.last_metrics["bleu"]


def test_accumulated_update_has_the_gradient_of_one_large_batch(tmp_path, sample_splits, sample_vocabulary):
    pairs = sample_splits.train[:60]
    trainer = make_trainer(tmp_path, sample_vocabulary, pairs, "bahdanau", accumulate=3, clip_norm=0.0)
    reference = copy.deepcopy(trainer.model)
    batches, tokens, local_tokens, count, _ = next(trainer.updates())
    assert count == len(batches) == 3 and tokens == local_tokens == sum(b.target_tokens for b in batches)
    trainer.update(batches, tokens)
    total = sum(
        F.cross_entropy(
            reference(b.source, b.source_mask, b.target_in)[0].flatten(0, 1),
            b.target_out.flatten(),
            ignore_index=PAD_ID,
            reduction="sum",
        )
        for b in batches
    )
    (total / tokens).backward()
    for (name, ours), theirs in zip(trainer.model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_an_epoch_of_accumulated_updates_uses_every_batch_once(tmp_path, sample_splits, sample_vocabulary):
    trainer = make_trainer(tmp_path, sample_vocabulary, sample_splits.train[:200], "sutskever", accumulate=2)
    seen, updates = [], trainer.updates()
    while trainer.progress.epoch == 0:
        batches, _, _, count, _ = next(updates)
        seen += [i for b in batches for i in b.indices.tolist()]
        trainer.progress.batch_in_epoch += count
        if trainer.progress.batch_in_epoch == trainer.batches_in_epoch:
            break
    assert sorted(seen) == sorted(i for b in trainer.sampler.batches() for i in b)


def test_checkpoint_is_written_atomically_and_loads_safely(tmp_path):
    checkpoint.save({"model": {"w": torch.ones(2)}, "config": {}}, tmp_path / "x.pt")
    assert [p.name for p in tmp_path.iterdir()] == ["x.pt"]  # no temporary file left behind
    assert torch.equal(checkpoint.load(tmp_path / "x.pt")["model"]["w"], torch.ones(2))


def test_checkpoint_that_would_run_code_is_refused(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"model": {}, "config": {}, "payload": Exploit()}, path)
    with pytest.raises(UserError, match=r"refused: besides tensors it holds Python objects \(posix.system\)") as error:
        checkpoint.load(path)
    assert "weights_only" not in str(error.value)  # never the advice to turn the safety off
    plain = tmp_path / "plain.pt"
    plain.write_bytes(pickle.dumps({"model": Exploit()}))
    with pytest.raises(UserError, match=r"plain\.pt: not a checkpoint: unknown bytes"):
        checkpoint.load(plain)


def test_truncated_checkpoint_names_the_file(tmp_path):
    checkpoint.save({"model": {"w": torch.ones(1000)}, "config": {}}, tmp_path / "x.pt")
    data = (tmp_path / "x.pt").read_bytes()
    (tmp_path / "x.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError, match=r"x\.pt: a truncated or damaged checkpoint"):
        checkpoint.load(tmp_path / "x.pt")


def test_our_bleu_equals_the_sacrebleu_command_line(tmp_path):
    hypotheses = ["the small dog runs in the park .", "a woman reads a blue book", "two cats sleep"]
    references = ["The small dog runs in the park.", "A woman reads the blue book.", "Two cats are sleeping."]
    (tmp_path / "ref").write_text("\n".join(references) + "\n")
    scores = score(hypotheses, references)
    result = subprocess.run(
        [sys.executable, "-m", "sacrebleu", str(tmp_path / "ref"), "-b", "-w", "4", "-m", "bleu", "chrf"],
        input="\n".join(hypotheses) + "\n",
        capture_output=True,
        text=True,
        check=True,
    )
    cli_bleu, cli_chrf = json.loads(result.stdout)
    assert round(scores.bleu, 4) == cli_bleu and round(scores.chrf, 4) == cli_chrf
    assert scores.bleu_signature.startswith("nrefs:1|case:mixed")


@pytest.mark.slow
def test_train_and_evaluate_command_lines_end_to_end(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    small_demo = [
        "experiment=demo",
        "data.sizes.train=300",
        "data.sizes.valid=20",
        "data.sizes.test=20",
        "trainer=debug",
        "trainer.valid_every=3",
        "trainer.progress=false",
        "trainer.keep_checkpoints=2",
        f"data.spm_cache={tmp_path / 'spm'}",
        f"hydra.run.dir={run_dir}",
    ]
    train = run("train.py", *small_demo, "trainer.max_steps=6")
    assert train.returncode == 0, train.stderr
    assert "test BLEU" in train.stdout
    for name in ("best.pt", "last.pt", "spm.src.model", "spm.tgt.model", "best.test.hyp", "results.json"):
        assert (run_dir / name).is_file(), name
    assert list(run_dir.glob("events.out.tfevents.*"))
    evaluate = run("evaluate.py", f"checkpoint={run_dir / 'best.pt'}", "split=valid")
    assert evaluate.returncode == 0, evaluate.stderr
    assert "BLEU" in evaluate.stdout and "nrefs:1|case:mixed" in evaluate.stdout
    assert "valid: 20 sentences of the sample corpus's valid split (data.sample_seed=" in evaluate.stdout
    assert "TER" in evaluate.stdout and "BLEU by source length (words): 1-10:" in evaluate.stdout
    assert len((run_dir / "best.valid.beam1.hyp").read_text().splitlines()) == 20
    assert "alignment (argmax" in evaluate.stdout and "alignment " in evaluate.stdout  # the sample corpus's own gold
    events = EventAccumulator(str(run_dir))
    events.Reload()
    scalars = {"curves/valid_aer", "validation/entropy/alignment", "validation/diagonality/alignment"}
    assert scalars <= set(events.Tags()["scalars"])
    assert {"heatmaps/alignment/0", "heatmaps/alignment/2"} <= set(events.Tags()["images"])  # 3 plots
    searched = []
    monkeypatch.setattr(
        nmt.decoding.translator, "beam_search", lambda *a, **k: searched.append(a[3]) or beam_search(*a, **k)
    )
    evaluate_checkpoint(str(run_dir / "best.pt"), DecodeOptions(beam=3, device="cpu"), split="valid")
    assert searched and set(searched) == {3}  # beam=3 really decodes with a beam of 3
    translate = run(
        "translate.py",
        f"checkpoint={run_dir / 'best.pt'}",
        "beam=3",
        f"attention={tmp_path / 'maps'}",
        stdin="Der Hund läuft.\n\nDie Frau liest ein Buch, weil das Kind schläft.\n",
    )
    assert translate.returncode == 0, translate.stderr
    lines = translate.stdout.split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[0] and lines[2]  # line for line, an empty line stays empty
    assert sorted(p.name for p in (tmp_path / "maps").glob("*.png")) == ["line1.png", "line3.png"]
    assert f"wrote 2 attention heatmaps to {tmp_path / 'maps'}/line<N>.png" in translate.stderr  # said, once
    aligned = run(
        "translate.py",
        f"checkpoint={run_dir / 'best.pt'}",
        f"alignments={tmp_path / 'links.txt'}",
        stdin="Der Hund läuft.\n\nDie Frau liest ein Buch.\n",
    )
    assert aligned.returncode == 0, aligned.stderr
    links = (tmp_path / "links.txt").read_text().split("\n")
    translations = aligned.stdout.split("\n")
    assert len(links) == 4 and links[1] == "" and links[0] and links[2]
    for line, translation, text in zip(["Der Hund läuft.", "", "Die Frau liest ein Buch."], translations, links):
        parsed = parse_links(text)
        assert len(parsed.sure) == len(translation.split())  # one link per translated word
        assert all(i < len(line.split()) and j < len(translation.split()) for i, j in parsed.sure)
    plotted = run(
        "scripts/plot_attention.py",
        f"checkpoint={run_dir / 'best.pt'}",
        "text=Der Hund, der läuft.",
        f"output={tmp_path / 'a.png'}",
    )
    assert plotted.returncode == 0 and (tmp_path / "a.png").stat().st_size > 1000, plotted.stderr
    # resumed, it reports the average of the 2 validations ending at its best (a safe change): scored on valid, tested
    resumed = run("train.py", *small_demo, "trainer.max_steps=9", "trainer.resume=true", "trainer.average_last=2")
    assert resumed.returncode == 0, resumed.stderr
    assert (
        "(average of the 2 validations ending at the best, greedy;" in resumed.stdout
        and "averaged_last2.pt" in resumed.stdout
    )
    last = checkpoint.load(run_dir / "last.pt")
    assert last["progress"]["step"] == 9
    kept = [p.name for p in sorted(run_dir.glob("step*.pt"))]
    best = RunFolder(run_dir).best_step()  # the newest 2 kept, and the 2 ending at the best
    assert kept[-2:] == ["step00000006.pt", "step00000009.pt"] and f"step{best:08d}.pt" in kept
    results = json.loads((run_dir / "results.json").read_text())
    assert results["tested"] == "averaged_last2.pt" and 0 <= results["valid/averaged_bleu"] <= 100
    assert RunFolder(run_dir).reported(last["config"]["trainer"]) == run_dir / "averaged_last2.pt"
    assert tune.averaged_valid_bleu(run_dir, (2,)) == {"2": results["valid/averaged_bleu"]}  # tuning measures the same
    compare = run("-m", "nmt_study", "compare", str(run_dir), "--output", str(tmp_path / "report"))
    assert compare.returncode == 0, compare.stderr
    assert "| bahdanau (additive) |" in (tmp_path / "report" / "report.md").read_text()
    assert (tmp_path / "report" / "bleu_by_length.png").is_file()
    (described,) = json.loads((tmp_path / "report" / "compare.json").read_text())["variants"]["bahdanau (additive)"][
        "runs"
    ]
    assert described["reported"] == "averaged_last2.pt" and described["valid_bleu"] == results["valid/averaged_bleu"]
    window = checkpoint.load(run_dir / "averaged_last2.pt")["progress"]["averaged_steps"]
    # the window holds the best checkpoint and what was kept before it (fewer where the best came first)
    assert window[-1] == best and window == [int(n[4:12]) for n in kept if int(n[4:12]) <= best][-2:]
    average = run("scripts/average_checkpoints.py", *(str(run_dir / f"step{s:08d}.pt") for s in window))
    assert average.returncode == 0, average.stderr
    assert checkpoint.load(run_dir / "averaged.pt")["progress"]["averaged_steps"] == window
    ours, tools = (checkpoint.load(run_dir / name)["model"] for name in ("averaged_last2.pt", "averaged.pt"))
    assert all(torch.equal(ours[name], tools[name]) for name in tools)  # the run's average is the tool's
    scored = run("evaluate.py", f"checkpoint={run_dir / 'averaged.pt'}", "split=valid", "beam=2")
    assert scored.returncode == 0 and "TER" in scored.stdout, scored.stderr


def test_averaged_checkpoint_holds_the_mean_of_the_weights(tmp_path, sample_vocabulary):
    config = {"model": {"_target_": "nmt.models.rnn.BahdanauSeq2Seq"}}  # the weights are made up; the config is read
    vocabulary = {"source": sample_vocabulary.source_model, "target": sample_vocabulary.target_model}
    for step, value in [(1, 1.0), (2, 2.0), (3, 6.0)]:
        weights = {"w": torch.full((2, 2), value), "count": torch.tensor(step)}
        payload = {"model": weights, "config": config, "vocabulary": vocabulary, "progress": {"step": step}}
        checkpoint.save(payload, tmp_path / f"step{step}.pt")
    averaged = averaging.average(sorted(tmp_path.glob("step*.pt")))
    torch.testing.assert_close(averaged["model"]["w"], torch.full((2, 2), 3.0))
    assert averaged["model"]["count"] == 3 and averaged["progress"]["averaged_steps"] == [1, 2, 3]
    other = {"model": {"v": torch.zeros(1)}, "config": config, "vocabulary": vocabulary, "progress": {"step": 4}}
    checkpoint.save(other, tmp_path / "other.pt")
    with pytest.raises(UserError, match="other.pt: holds a different model"):
        averaging.average([tmp_path / "step1.pt", tmp_path / "other.pt"])


@pytest.mark.slow
def test_torchrun_trains_two_cpu_processes_with_identical_replicas(tmp_path):
    run_dir = tmp_path / "run"
    small_demo = [
        "experiment=demo",
        "data.sizes.train=300",
        "data.sizes.valid=20",
        "data.sizes.test=20",
        "trainer=debug",
        "trainer.valid_every=3",
        "trainer.progress=false",
        "trainer.num_plots=0",
        "trainer.max_steps=4",
        "trainer.device=cpu",
        f"data.spm_cache={tmp_path / 'spm'}",
        f"hydra.run.dir={run_dir}",
    ]
    launched = run("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py", *small_demo)
    assert launched.returncode == 0, launched.stderr[-3000:]
    assert "all 2 replicas hold the same weights" in launched.stdout + launched.stderr
    assert checkpoint.load(run_dir / "last.pt")["progress"]["step"] == 4
    assert (run_dir / "results.json").is_file()


@pytest.mark.slow
def test_kill_9_then_resume_ends_bit_for_bit_where_an_uninterrupted_run_ends(tmp_path):
    def command(run_dir, *extra):
        return [
            "train.py",
            "experiment=demo",
            "data.sizes.train=300",
            "data.sizes.valid=20",
            "data.sizes.test=20",
            "trainer=debug",
            "trainer.max_steps=20",
            "trainer.max_minutes=0",
            "trainer.valid_every=5",
            "trainer.progress=false",
            "trainer.num_plots=0",
            "trainer.device=cpu",
            f"data.spm_cache={tmp_path / 'spm'}",
            f"hydra.run.dir={run_dir}",
            *extra,
        ]

    straight = run(*command(tmp_path / "straight"))
    assert straight.returncode == 0, straight.stderr
    killed_dir = tmp_path / "killed"
    process = commands.start([sys.executable, *command(killed_dir)], cwd=ROOT)
    deadline = time.monotonic() + 120
    while not (killed_dir / "last.pt").is_file() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(random.Random().uniform(0.0, 0.5))  # anywhere in the next stretch of steps
    process.kill()  # SIGKILL: no handler runs
    assert process.wait() == -signal.SIGKILL
    at_kill = checkpoint.load(killed_dir / "last.pt")["progress"]["step"]
    assert at_kill < 20
    resumed = run(*command(killed_dir, "trainer.resume=true"))
    assert resumed.returncode == 0, resumed.stderr
    for name in ("last.pt", "best.pt"):
        a, b = checkpoint.load(tmp_path / "straight" / name), checkpoint.load(killed_dir / name)
        assert a["progress"]["step"] == b["progress"]["step"]
        for key in a["model"]:
            assert torch.equal(a["model"][key], b["model"][key]), (name, key)
    results = [json.loads((d / "results.json").read_text()) for d in (tmp_path / "straight", killed_dir)]
    assert results[0]["test/bleu"] == results[1]["test/bleu"]
    invocations = json.loads((killed_dir / "provenance.json").read_text())  # make results reads the commits
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert len(invocations) == 2 and all(i["commit"] == head and i["torch"] == torch.__version__ for i in invocations)


def test_resume_falls_back_to_the_previous_checkpoint_when_the_last_is_damaged(
    tmp_path, sample_splits, sample_vocabulary
):
    pairs = sample_splits.train[:60]
    make_trainer(tmp_path, sample_vocabulary, pairs, "sutskever", max_steps=6, valid_every=3).train()
    assert checkpoint.load(tmp_path / "previous.pt")["progress"]["step"] == 3
    damaged = (tmp_path / "last.pt").read_bytes()
    (tmp_path / "last.pt").write_bytes(damaged[: len(damaged) // 2])  # a copy cut short
    resumed = make_trainer(tmp_path, sample_vocabulary, pairs, "sutskever", max_steps=6, valid_every=3)
    resumed.restore_payload(*RunFolder(tmp_path).latest_good())
    assert resumed.step == 3


@pytest.mark.parametrize(
    "args, message",
    [
        (
            [
                "data=files",
                "data.train.src=/nonexistent/train.de",
                "data.train.tgt=x",
                "data.valid.src=x",
                "data.valid.tgt=x",
                "data.test.src=x",
                "data.test.tgt=x",
            ],
            "/nonexistent/train.de: no such file",
        ),
        (["data=sample", "trainer.precision=fp8"], "trainer.precision='fp8'"),
        (["data=sample", "data.max_tokens=4"], "data.max_tokens=4 is smaller"),
        (["data=sample", "data.src_lang=xx"], "data.src_lang"),
        (["model=nonexistent"], "error: model=nonexistent: no such option of model; choose one of bahdanau, luong"),
        (["data=sample", "model.hidden_size=-5"], "model.hidden_size=-5: must be at least 1"),
        (
            ["data=sample", "model=transformer", "model.heads=2.5"],
            "error: model.heads=2.5: Value '2.5' of type 'float' could not be converted to Integer",
        ),
        (["data=sample", "model.dropout=1.5"], "model.dropout=1.5: a dropout probability"),
        (["data=sample", "trainer.accumulate=0"], "trainer.accumulate=0"),
        (["data=sample", "trainer.lr=abc"], "error: trainer.lr=abc: "),
        (["data=sample", "seed=abc"], "error: seed=abc: "),
        (["data=sample", "trainer.lrr=0.1"], "error: trainer.lrr: no such option"),
        (["data=sample", "model=luong", "model.input_feeding=abc"], "error: model.input_feeding=abc: "),
    ],
)
def test_user_errors_exit_nonzero_with_a_message_not_a_traceback(tmp_path, args, message):
    result = run("train.py", *args, f"hydra.run.dir={tmp_path}", "trainer.progress=false")
    assert result.returncode != 0
    assert message in result.stderr
    assert (
        "Traceback" not in result.stderr and "full_key" not in result.stderr and "HYDRA_FULL_ERROR" not in result.stderr
    )


def test_a_job_that_a_stopped_sweep_reached_in_its_setup_saves_at_its_first_update(
    tmp_path, sample_splits, sample_vocabulary, monkeypatch
):
    """The sweep's stop signal came while this job loaded its data (before the trainer listens for one): it stops at
    its first update with its run saved, instead of training to its budget."""
    from nmt import SweepStop

    monkeypatch.setattr(SweepStop, "signal_number", signal.SIGTERM)
    trainer = make_trainer(tmp_path, sample_vocabulary, sample_splits.train[:8], "sutskever", max_steps=50)
    assert trainer.train() == "interrupted" and trainer.stop_signal == signal.SIGTERM
    assert checkpoint.load(tmp_path / "last.pt")["progress"]["step"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "scheduler-sigterm"])
def test_ctrl_c_or_sigterm_saves_last_checkpoint_and_exits_with_the_signal(tmp_path, stop):
    command = [
        sys.executable,
        "train.py",
        "experiment=demo",
        "data.sizes.train=300",
        "data.sizes.valid=10",
        "data.sizes.test=10",
        "trainer.max_minutes=0",
        "trainer.max_steps=100000",
        "trainer.valid_every=2",
        "trainer.precision=fp32",
        "trainer.progress=false",
        "trainer.num_plots=0",
        f"data.spm_cache={tmp_path / 'spm'}",
        f"hydra.run.dir={tmp_path}",
    ]
    process = commands.start(command, cwd=ROOT, text=True)
    deadline = time.monotonic() + 120
    while not (tmp_path / "last.pt").exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.2)
    time.sleep(1.0)
    process.send_signal(stop)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + stop, stderr  # non-zero, as a shell reports a signal
    assert "interrupted at step" in stderr and "trainer.resume=true" in stderr and "Traceback" not in stderr
    saved = checkpoint.load(tmp_path / "last.pt")
    assert saved["progress"]["step"] >= 2
    assert not list(tmp_path.glob(".*.tmp"))


def test_each_validation_is_a_line_of_the_runs_plain_record(tmp_path, sample_splits, sample_vocabulary):
    """validations.jsonl: one JSON line per validation with its update, compute, minutes, loss, BLEU and chrF, which
    the study's curves read (TensorBoard is for looking); a line repeated by a resumed run counts once, and a line cut
    short by a crash is skipped."""
    from nmt_study.records import compute_curve, valid_curve

    trainer = make_trainer(
        tmp_path, sample_vocabulary, sample_splits.train[:40], "sutskever", max_steps=6, valid_every=2
    )
    trainer.train()
    lines = [json.loads(line) for line in (tmp_path / "validations.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [2, 4, 6]
    assert {"epochs", "petaflops", "train_minutes", "loss", "bleu", "chrf", "seconds", "best"} <= set(lines[0])
    assert lines[-1]["bleu"] == pytest.approx(trainer.last_metrics["bleu"])
    with open(tmp_path / "validations.jsonl", "a") as handle:  # a resumed run's repeat, then a line cut short
        handle.write(json.dumps({**lines[-1], "bleu": 99.0}) + "\n" + '{"step": 8, "bl')
    assert [step for _, step, _ in valid_curve(tmp_path)] == [2, 4, 6] and valid_curve(tmp_path)[-1][2] == 99.0
    assert [epochs for _, epochs, _ in compute_curve(tmp_path)] == [line["epochs"] for line in lines]


def test_batches_made_by_worker_processes_as_on_a_gpu_are_the_ones_made_in_process(
    tmp_path, sample_vocabulary, sample_splits
):
    """On a GPU worker processes collate the next batches (nmt.text.batches.loading); they must give the batches, in the
    order, that the training process makes itself on a CPU: the dataset and collate travel to a worker intact, the
    static shapes' collate (a captured update's batches, nmt.training.update) too, and a batch sent as numpy arrays
    (Shipped) is the same batch again."""
    from nmt.text.batches import Shipped, Shipping, StaticShapes, loading
    from nmt.text.data import collate

    trainer = make_trainer(tmp_path, sample_vocabulary, sample_splits.train[:300], "sutskever", max_steps=1)
    assert loading(torch.device("cpu")) == {"num_workers": 0, "pin_memory": False}
    assert loading(torch.device("cuda"))["num_workers"] > 0 and loading(torch.device("cuda"))["pin_memory"]
    for static in (None, StaticShapes(512)):
        trainer.sampler.static = static
        trainer.sampler.set_epoch(0)
        order = trainer.sampler.batches()[:12]

        def made(workers: int) -> list:
            made_by = static.collate if static else collate  # noqa: B023 (used at once)
            loader = torch.utils.data.DataLoader(
                trainer.dataset,
                batch_sampler=order,  # noqa: B023
                collate_fn=Shipping(made_by) if workers else made_by,
                num_workers=workers,
            )
            batches = list(loader)
            assert all(isinstance(b, Shipped) == bool(workers) for b in batches)
            return [b.to(torch.device("cpu")) for b in batches]

        for own, theirs in zip(made(0), made(2), strict=True):
            pairs = zip(vars(own).values(), vars(theirs).values(), strict=True)
            assert all(a is b is None or torch.equal(a, b) for a, b in pairs)


def test_one_loader_serves_every_epoch_its_workers_running_ahead_across_an_epochs_end(
    tmp_path, sample_vocabulary, sample_splits, monkeypatch
):
    """trainer.updates makes one DataLoader for the whole run (on a GPU a new one each epoch would fork its workers
    and wait for its first batches every few seconds). Its workers draw the next epoch's plan before training gets
    there; the updates are the same as made in process, epoch after epoch, and a run resumed in the middle of an
    epoch goes on with the same ones."""
    import multiprocessing

    loaders = []
    made = torch.utils.data.DataLoader

    def counted(*args, **kwargs):
        loaders.append(kwargs.get("num_workers", 0))
        return made(*args, **kwargs)

    monkeypatch.setattr(torch.utils.data, "DataLoader", counted)
    pairs = sample_splits.train[:60]

    def drawn(workers: int, epoch: int = 0, batch: int = 0, count: int = 14) -> list:
        trainer = make_trainer(tmp_path / f"{workers}-{epoch}-{batch}", sample_vocabulary, pairs, "luong", max_steps=1)
        trainer.progress.epoch, trainer.progress.batch_in_epoch = epoch, batch
        fork = multiprocessing.get_context("fork")
        options = {
            "num_workers": workers,
            **({"prefetch_factor": 4, "multiprocessing_context": fork} if workers else {}),
        }
        monkeypatch.setattr("nmt.text.batches.loading", lambda device: options)
        updates, seen = trainer.updates(), []
        for _ in range(count):
            batches, tokens, _, number, _ = next(updates)
            seen.append((trainer.progress.epoch, trainer.progress.batch_in_epoch, tokens, batches[0].source.tolist()))
            trainer.progress.batch_in_epoch += number  # as the training loop counts
        return seen

    in_process = drawn(0)
    assert len({epoch for epoch, *_ in in_process}) >= 3 and loaders == [0]  # epochs of 4-5 batches, one loader
    assert drawn(2) == in_process and loaders == [0, 2]
    epoch, batch = in_process[6][:2]
    assert batch > 0 and drawn(2, epoch, batch, count=8) == in_process[6:]


def test_the_best_checkpoint_is_the_validation_best_by_the_selected_score(tmp_path, sample_vocabulary, sample_splits):
    """trainer.select=loss keeps as best.pt the validation with the lowest valid loss (validations.jsonl marks it),
    and patience counts validations without a lower one; AER needs gold links, and a model with attention."""
    pairs = sample_splits.train[:64]
    trainer = make_trainer(tmp_path, sample_vocabulary, pairs, "luong", 0.1, max_steps=24, valid_every=3, select="loss")
    trainer.train()
    lines = [json.loads(line) for line in (tmp_path / "validations.jsonl").read_text().splitlines()]
    best = min(lines, key=lambda line: line["loss"])
    marked = [line["step"] for line in lines if line["best"]]
    assert marked[-1] == best["step"] and all(line["loss"] >= best["loss"] for line in lines)
    saved = checkpoint.load(tmp_path / "best.pt")["progress"]
    assert saved["step"] == best["step"] and saved["best_score"] == best["loss"] and saved["best_bleu"] == best["bleu"]
    with pytest.raises(UserError, match="trainer.select=aer: the valid split has no gold links"):
        make_trainer(tmp_path / "aer", sample_vocabulary, pairs, "luong", select="aer")


@pytest.mark.parametrize("links, background", [(True, False), (False, False), (True, True)])
def test_best_pt_is_last_pt_written_once_and_keeps_its_state_when_a_later_validation_is_worse(
    tmp_path, sample_vocabulary, sample_splits, monkeypatch, links, background
):
    """A validation that improves writes last.pt and names the same file best.pt (a hard link: a GPU run's
    validation is not held up by a second write of the same hundreds of MB); a later, worse one replaces last.pt
    by renaming, so best.pt keeps its state. Where the file system refuses links, best.pt is a copy. Written on a
    thread (a GPU run's), a checkpoint holds the state of its validation, whatever training does meanwhile."""
    if not links:
        monkeypatch.setattr(checkpoint.os, "link", lambda *a: (_ for _ in ()).throw(OSError(1, "links refused")))
    trainer = make_trainer(tmp_path, sample_vocabulary, sample_splits.train[:32], "luong", max_steps=10**4)
    trainer.writer = checkpoint.Writer(background=background)
    scores = iter([20.0, 10.0, 30.0])
    figures = {"loss": 1.0, "perplexity": 2.7, "chrf": 1.0, "seconds": 0.1}
    monkeypatch.setattr(trainer, "validator", lambda *a, **k: {**figures, "bleu": next(scores)})
    steps = {}
    for step in (1, 2, 3):
        trainer.progress.step = step
        weights = [p.detach().clone() for p in trainer.model.parameters()]
        trainer.validate_and_save()
        with torch.no_grad():  # training goes on while a background write may still be under way
            for parameter in trainer.model.parameters():
                parameter.add_(1.0)
        trainer.writer.wait()
        steps[step] = {n: checkpoint.load(tmp_path / n)["progress"]["step"] for n in ("best.pt", "last.pt")}
        same = (tmp_path / "best.pt").samefile(tmp_path / "last.pt")
        assert same == (links and step != 2)
        saved = checkpoint.load(tmp_path / f"step{step:08d}.pt")["model"].values()
        assert all(torch.equal(a, b) for a, b in zip(saved, weights, strict=True))
    assert steps == {1: {"best.pt": 1, "last.pt": 1}, 2: {"best.pt": 1, "last.pt": 2}, 3: {"best.pt": 3, "last.pt": 3}}
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize("links", [True, False])
def test_last_pt_is_on_disk_at_every_instant_of_the_next_write(tmp_path, monkeypatch, links):
    """A `kill -9` while a validation writes must leave a last.pt: the one replaced becomes previous.pt by a second
    name (a link, or a copy where links are refused), never by moving it away before the new one is complete."""
    if not links:
        monkeypatch.setattr(checkpoint.os, "link", lambda *a: (_ for _ in ()).throw(OSError(1, "links refused")))
    folder = RunFolder(tmp_path)
    folder.write_last({"progress": {"step": 1}}, best=True)
    present = []
    real_save = torch.save

    def watched_save(payload, handle):  # the moment a kill would interrupt: the new file half written
        present.append(sorted(p.name for p in tmp_path.glob("*.pt")))
        real_save(payload, handle)

    monkeypatch.setattr(checkpoint.torch, "save", watched_save)
    folder.write_last({"progress": {"step": 2}})
    assert present == [["best.pt", "last.pt", "previous.pt"]]
    steps = {p.name: torch.load(p, weights_only=True)["progress"]["step"] for p in tmp_path.glob("*.pt")}
    assert steps == {"best.pt": 1, "previous.pt": 1, "last.pt": 2}
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_background_checkpoint_write_that_fails_is_raised_by_the_next_write_or_the_wait(tmp_path):
    """On a GPU checkpoints are written on a thread: a full disk there must still stop the run with its message."""

    def fail():
        raise UserError("last.pt: could not be written (No space left on device)")

    writer = checkpoint.Writer(background=True)
    writer.write(fail)
    with pytest.raises(UserError, match="No space left"):
        writer.wait()
    written = []
    writer.write(fail)
    writer.pending[0].exception()  # finished (failed) before the next write is given
    with pytest.raises(UserError, match="No space left"):
        writer.write(lambda: written.append(0))
    for number in range(5):  # at most PENDING writes queued; each runs, in order
        writer.write(lambda number=number: written.append(number))
    writer.wait()
    assert written == [0, 1, 2, 3, 4] and not writer.pending
    payload = {"w": torch.ones(3), "steps": [torch.zeros(1)], "name": "x"}
    own = writer.own(payload)
    payload["w"].add_(1)
    assert own["w"].tolist() == [1, 1, 1] and own["name"] == "x" and isinstance(own["steps"], list)


def _batches_in_a_job(options: dict) -> list:
    return [batch.tolist() for batch in torch.utils.data.DataLoader(range(6), batch_size=2, **options)]


def test_worker_processes_of_the_gpu_loader_start_inside_a_joblib_job():
    """make results and the sweeps run each training in a joblib (loky) job, whose default start method cannot start
    a DataLoader's workers ('Process' object has no attribute 'env', as on the first GPU run of the claims): the
    loader's options name their own."""
    import joblib

    from nmt.text.batches import loading

    options = {**loading(torch.device("cuda")), "pin_memory": False}
    made = joblib.Parallel(n_jobs=2, backend="loky")(joblib.delayed(_batches_in_a_job)(options) for _ in range(2))
    assert made == [[[0, 1], [2, 3], [4, 5]]] * 2


def test_heatmaps_drawn_on_their_own_thread_are_the_ones_drawn_at_once(tmp_path, sample_vocabulary, sample_splits):
    """On a GPU RunLog draws a validation's heatmaps on a thread of its own (the host is idle while a captured update
    runs): the same images reach TensorBoard as when drawn at once, all of them by the time the log is closed."""
    from nmt.decoding.search import Hypothesis
    from nmt.training.runlog import RunLog

    trainer = make_trainer(tmp_path, sample_vocabulary, sample_splits.train[:64], "bahdanau", max_steps=1)
    sources = [s for s, _ in sample_splits.valid[:2]]
    decoded = [Hypothesis(sample_vocabulary.encode_target([t])[0], 0.0, None) for _, t in sample_splits.valid[:2]]
    images = {}
    for background in (False, True):
        folder = tmp_path / f"log_{background}"
        run_log = RunLog(folder)
        for step in (1, 2):
            run_log.attention(trainer.model, sample_vocabulary, sources, decoded, 2, trainer.device, torch.float32,
                              step, background=background)  # fmt: skip
        assert (run_log.drawing is not None) == background
        run_log.close()
        events = EventAccumulator(str(folder), size_guidance={"images": 0})
        events.Reload()
        images[background] = {
            tag: [e.encoded_image_string for e in events.Images(tag)] for tag in events.Tags()["images"]
        }
    assert len(images[True]) == 2 and all(len(v) == 2 for v in images[True].values())  # 2 sentences, 2 steps each
    assert images[True] == images[False]


def test_a_resumed_run_reads_its_corpus_where_the_checkpoint_did_unless_told_otherwise(tmp_path):
    """The resume hint, word for word or without data.dir, works offline: where the corpus and subword models lie
    is the checkpoint's when the command line leaves them at their defaults and the folder is there; a folder the user
    names wins, and a checkpoint's folder that is gone is not followed."""
    from nmt.runs.resume import saved_locations

    folder = tmp_path / "corpus"
    folder.mkdir()
    saved = {"data": {"dir": str(folder), "spm_cache": str(tmp_path / "gone")}}
    changed = {"data.dir": (str(folder), None), "data.spm_cache": (str(tmp_path / "gone"), "data/spm")}
    assert saved_locations(saved, changed, ["model=luong", "trainer.resume=true"]) == {"dir": str(folder)}
    assert saved_locations(saved, changed, ["data.dir=/elsewhere"]) == {}
    assert saved_locations(saved, {}, []) == {}  # the same folder: nothing to change


def test_the_resume_hint_repeats_the_command_lines_options_runnable_as_pasted(monkeypatch, tmp_path):
    from nmt.launch import experiment
    from nmt.paths import shell_word

    given = ["model=luong", "trainer.resume=false", "+hydra.run.dir=x", "data.dir=/d", "data.url=a b"]
    monkeypatch.setattr(experiment, "given_options", lambda: given)
    monkeypatch.setattr(sys, "argv", ["train.py"])
    here = Path(os.path.abspath(sys.executable))
    if here.name == "python":  # an activated environment: its python is the shell's
        monkeypatch.setenv("PATH", f"{here.parent}{os.pathsep}{os.environ['PATH']}")
        assert experiment.resume_command(tmp_path) == (
            f"python train.py model=luong data.dir=/d 'data.url=a b' trainer.resume=true hydra.run.dir={tmp_path}"
        )
    monkeypatch.setenv("PATH", str(tmp_path))  # make's .venv/bin/python, never activated: its path, not `python`
    assert experiment.resume_command(tmp_path).startswith(f"{shell_word(sys.executable)} train.py model=luong ")


def test_help_lists_the_users_option_groups_not_the_internal_ones():
    shown = run("train.py", "--help")
    assert shown.returncode == 0, shown.stderr
    groups = shown.stdout.split("== Every option")[0]
    assert "model: bahdanau, luong, sutskever, transformer" in groups and "model/attention: additive," in groups
    assert "size: default, lab, tiny" in groups and "experiment: demo" in groups
    assert "schema" not in groups and "family_size" not in groups and "hydra" not in groups


def test_a_command_composes_its_config_once_and_takes_hydra_mode_from_wherever_it_is_set(tmp_path, monkeypatch):
    """Hydra composes a config a first time only to read hydra.mode; our commands skip that where nothing could set
    it, and still follow hydra.mode from the command line or from a config file of another folder (--config-dir).
    joblib with n_jobs=0 is refused as a sweep starts, trainer.log_every=0 as a single run starts: the refusal tells
    which mode the command took."""
    from hydra._internal.hydra import Hydra

    import nmt.cli.train

    composed = []
    compose = Hydra.compose_config
    monkeypatch.setattr(Hydra, "compose_config", lambda self, *a, **k: composed.append(1) or compose(self, *a, **k))
    monkeypatch.setattr(sys, "argv", ["train.py", "trainer.log_every=0", f"hydra.run.dir={tmp_path / 'run'}"])
    with pytest.raises(SystemExit, match="trainer.log_every=0: must be at least 1"):
        nmt.cli.train.main()
    assert len(composed) == 1
    refusals = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=0", "trainer.log_every=0"]
    refusals.append(f"hydra.sweep.dir={tmp_path}")
    sweep_refused, run_refused = "hydra.launcher.n_jobs=0: runs no job", "trainer.log_every=0: must be at least 1"
    single = run("train.py", *refusals, f"hydra.run.dir={tmp_path / 'run'}")
    assert single.returncode == 1 and run_refused in single.stderr and sweep_refused not in single.stderr
    said = run("train.py", *refusals, "hydra.mode=MULTIRUN")
    assert said.returncode == 1 and sweep_refused in said.stderr, said.stderr
    (tmp_path / "mine" / "mode").mkdir(parents=True)
    (tmp_path / "mine" / "mode" / "sweep.yaml").write_text("# @package _global_\nhydra:\n  mode: MULTIRUN\n")
    from_file = run("train.py", "--config-dir", str(tmp_path / "mine"), "+mode=sweep", *refusals)
    assert from_file.returncode == 1 and sweep_refused in from_file.stderr, from_file.stderr


def test_help_lists_config_groups_through_hydra_only_where_its_template_shows_them(monkeypatch, capsys):
    """Hydra lists every group's options for any help template (3 of --help's 4 seconds); train.py's template lists
    the groups itself, so its --help skips Hydra's listing, and --hydra-help, whose template shows it, keeps it."""
    from hydra._internal.hydra import Hydra

    import nmt.cli.train

    listed = []
    groups = Hydra.format_config_groups
    monkeypatch.setattr(Hydra, "format_config_groups", lambda self, *a, **k: listed.append(1) or groups(self, *a, **k))
    monkeypatch.setattr(Hydra, "list_all_config_groups", lambda self, *a, **k: [])  # the listing itself: not timed here
    for flag, lists in (("--help", False), ("--hydra-help", True)):
        listed.clear()
        monkeypatch.setattr(sys, "argv", ["train.py", flag])
        with pytest.raises(SystemExit) as ended:
            nmt.cli.train.main()
        assert ended.value.code in (0, None) and bool(listed) == lists, flag
    assert "== Option groups (group=option) ==" in capsys.readouterr().out
