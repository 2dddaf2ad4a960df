"""What a user can do wrong, through the real commands: each case stops with a message that names the option, file
or line, prints no traceback, and changes no file the user had. And nothing a user trained is ever lost."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from helpers import SMALL, refused, snapshot
from helpers import run_cli as run

from nmt import UserError
from nmt.cli import imports_whole
from nmt.config import TrainerConfig
from nmt.models.attention import AdditiveAttention
from nmt.models.rnn import BahdanauSeq2Seq
from nmt.runs import checkpoint
from nmt.text.data import PAD_ID
from nmt.training.trainer import Trainer


def unchanged(before: dict, after: dict) -> bool:
    """Every file that was there is as it was; the run's log may only have grown."""
    return all(
        after.get(name, b"").startswith(data) if name.endswith(".log") else after.get(name) == data
        for name, data in before.items()
    )


def train_again(trained, *extra):
    run_dir, spm = trained
    before = snapshot(run_dir)
    result = run("train.py", *SMALL, f"data.spm_cache={spm}", f"hydra.run.dir={run_dir}", *extra)
    return result, before, snapshot(run_dir)


def test_a_new_run_into_a_run_directory_that_holds_one_is_refused(trained):
    result, before, after = train_again(trained)
    refused(result, "already holds a run (last.pt)")
    assert "trainer.resume=true" in result.stderr.decode() and unchanged(before, after)


@pytest.mark.parametrize(
    "change, message",
    [
        ("data.vocab_size=200", "data.vocab_size: 250 in the checkpoint, 200 now"),
        ("model.hidden_size=48", "model.hidden_size: 32 in the checkpoint, 48 now"),
        ("seed=7", "seed: 1234 in the checkpoint, 7 now"),
        (
            "model/attention=none",
            "model.attention._target_: 'nmt.models.attention.AdditiveAttention' in the checkpoint",
        ),
    ],
)
def test_resuming_with_settings_that_make_another_run_is_refused_naming_them(trained, change, message):
    result, before, after = train_again(trained, "trainer.resume=true", "trainer.max_steps=6", change)
    refused(result, message)
    assert unchanged(before, after)  # sentencepiece models, checkpoints and Hydra's record untouched


def test_resuming_from_a_weights_only_checkpoint_is_refused(trained, tmp_path):
    step = sorted(trained[0].glob("step*.pt"))[-1]
    result = run(
        "train.py",
        *SMALL,
        f"data.spm_cache={trained[1]}",
        f"hydra.run.dir={tmp_path / 'new'}",
        f"trainer.resume={step}",
    )
    refused(result, "holds weights only")


def test_resuming_applies_a_new_learning_rate_and_budget(trained, tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in trained[0].iterdir():
        if path.is_file():
            (copy / path.name).write_bytes(path.read_bytes())
    result = run(
        "train.py",
        *SMALL,
        f"data.spm_cache={trained[1]}",
        f"hydra.run.dir={copy}",
        "trainer.resume=true",
        "trainer.max_steps=6",
        "trainer.lr=0.0005",
    )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert "resuming with trainer.lr=0.0005 (the checkpoint had 0.003)" in result.stdout.decode()
    last = checkpoint.load(copy / "last.pt")
    assert last["progress"]["step"] == 6 and last["config"]["trainer"]["lr"] == 0.0005
    assert last["optimizer"]["param_groups"][0]["lr"] == pytest.approx(0.0005)


@pytest.mark.parametrize(
    "options, message",
    [
        (["data.max_len=2"], "no training pair is left"),
        (["data.vocab_size=-1"], "error: data.vocab_size=-1: a vocabulary holds the 4 special pieces"),
        (["data.character_coverage=0"], "error: data.character_coverage=0.0: a share of the characters"),
        (
            ["+trainer.max_step=5"],
            "error: +trainer.max_step=5: trainer.max_step is no option (did you mean trainer.max_steps?)",
        ),
        (["hydra.run.dir="], "error: hydra.run.dir=: empty; give the folder"),
        (["trainer.log_every=0"], "trainer.log_every=0: must be at least 1"),
        (["trainer.keep_checkpoints=abc"], "error: trainer.keep_checkpoints=abc: "),
        (["trainer.clip_norm=-1"], "trainer.clip_norm=-1.0: must be at least 0"),
        (["trainer.max_steps=0", "trainer.max_minutes=0", "trainer.max_flops=0"], "nothing would stop training"),
        (["data.sizes.train=-5"], "data.sizes: train=-5; a number of sentence pairs cannot be negative"),
        (["data.sizes.train=10000000000"], "the sample grammar gives at most 200,000"),
        (["data.grammar.clauses=100000"], "at most 16 clauses and 4 phrases"),
        (["data.grammar.phrases=100000"], "at most 16 clauses and 4 phrases"),
        (["data.grammar.max_words=1"], "the grammar's shortest sentence has 3 words"),
        (["data.grammar.min_words=1000"], "(0 of the 320 asked for in 2,000 drawn; the longest had"),  # in seconds
        (["trainer.valid_every=-3"], "trainer.valid_every=-3: must be at least 0"),
        (["trainer.max_flops=nan"], "trainer.max_flops=nan: must be at least 0"),
        (["trainer.max_flops=inf"], "trainer.max_flops=inf: must be a finite number (0: no limit of this kind)"),
        (["trainer.max_minutes=inf"], "trainer.max_minutes=inf: must be a finite number"),
        (["trainer.optimizer=sgd"], "trainer.optimizer='sgd': use one of adam, adamw"),
        (["trainer.resume=/nowhere/last.pt"], "/nowhere/last.pt: no such checkpoint"),
        (["model/attention=dot"], "model/attention=dot: BahdanauSeq2Seq takes additive"),
        (["model.cell=rnn"], "model.cell='rnn': use one of gru, lstm"),
        (["data.max_len=2"], "all 300 are longer than data.max_len=2 subwords on one side or the other. Raise"),
        (["data.sizes.valid=0"], "the valid split is empty: validation needs at least one pair (data.sizes.valid)"),
        (["trainer.resume=yes"], "trainer.resume=yes: use true (continue this run directory), false"),
        (["data.vocab_size=5"], "raise data.vocab_size to at least"),
        (["data.vocab_size=100000"], "lower data.vocab_size to 250 or less"),
        (["trainer.lr=1e30", "trainer.precision=fp32"], "Lower trainer.lr (trainer.lr=1e+30)."),
    ],
)
def test_option_values_that_make_no_sense_stop_before_training(tmp_path, options, message):
    result = run(
        "train.py",
        *SMALL,
        f"data.spm_cache={tmp_path / 'spm'}",
        f"hydra.run.dir={tmp_path / 'run'}",
        *options,
        timeout=60,
    )
    refused(result, message)
    assert not list((tmp_path / "run").glob("*.pt"))


def test_decoding_output_paths_are_checked_before_decoding(trained, tmp_path):
    best = trained[0] / "best.pt"
    refused(
        run("translate.py", f"checkpoint={best}", "output=/missing/dir/x", stdin=b"Der Hund.\n"),
        "output=/missing/dir/x: the folder /missing/dir does not exist",
    )
    refused(run("evaluate.py", f"checkpoint={best}", "split=valid", "output=/missing/y.hyp"), "/missing")
    refused(
        run("evaluate.py", f"checkpoint={best}", "split=valid", "alignments=/missing/gold.align"),
        "alignments=/missing/gold.align: no such file",
    )
    refused(
        run("translate.py", f"checkpoint={best}", "alignments=/missing/dir/x", stdin=b"Der Hund.\n"),
        "alignments=/missing/dir/x: the folder /missing/dir does not exist",
    )
    (tmp_path / "a.png").mkdir()
    refused(
        run("scripts/plot_attention.py", f"checkpoint={best}", "text=Der Hund.", f"output={tmp_path / 'a.png'}"),
        "is a folder",
    )
    refused(run("scripts/average_checkpoints.py", trained[0], "--output", "/missing/averaged.pt"), "does not exist")
    for name, message in (("a.txt", ".txt is no image format"), ("a", "a name without a suffix")):
        refused(
            run("scripts/plot_attention.py", f"checkpoint={best}", "text=Der Hund.", f"output={tmp_path / name}"),
            f"output={tmp_path / name}: {message}",
        )
        assert not (tmp_path / name).exists()
    helped = run("scripts/plot_attention.py", "--help")  # as every other command: what it takes, exit 0
    assert helped.returncode == 0 and b"checkpoint=" in helped.stdout and b"text=" in helped.stdout


def test_no_command_replaces_a_trained_model_whatever_its_name(trained, tmp_path):
    """A checkpoint is known by its contents, not its name or folder: evaluate's and translate's outputs never
    replace one, overwrite=true or not; the averaging tool replaces its own averaged.pt when told to."""
    best = trained[0] / "best.pt"
    mine = tmp_path / "averaged.pt"
    shutil.copyfile(best, mine)
    message = f"output={mine}: is a checkpoint (a trained model), which this command must not replace"
    refused(run("evaluate.py", f"checkpoint={best}", "split=valid", f"output={mine}", "overwrite=true"), message)
    refused(
        run("translate.py", f"checkpoint={best}", f"output={mine}", "overwrite=true", stdin=b"Der Hund.\n"), message
    )
    assert mine.read_bytes() == best.read_bytes()
    done = run("scripts/average_checkpoints.py", trained[0], "--last", "2", "--output", mine, "--overwrite")
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert mine.read_bytes() != best.read_bytes()


def test_a_folder_option_where_nothing_can_be_written_is_refused_naming_it(tmp_path, monkeypatch):
    """hydra.run.dir, hydra.sweep.dir, compare's --records and --output: a read-only folder, or one that would be made
    under one, is refused by name before anything is made (os.access as a user sees it: the suite may run as root,
    which writes anywhere)."""
    from nmt import paths

    read_only = tmp_path / "read-only"
    read_only.mkdir()
    monkeypatch.setattr(paths.os, "access", lambda path, mode: Path(path) != read_only)
    with pytest.raises(UserError, match=f"hydra.run.dir={read_only}: cannot write there: permission denied"):
        paths.folder_option(read_only, "hydra.run.dir")
    with pytest.raises(UserError, match=f"cannot write there \\(it would be made in {read_only}\\)"):
        paths.folder_option(read_only / "runs" / "a", "hydra.sweep.dir")
    paths.folder_option(tmp_path / "mine", "hydra.run.dir")  # a folder that can be made


def another_user() -> list[str]:
    """The prefix that runs a command as a user who cannot write everywhere: this one where it is not root; where it
    is, nobody (setpriv, util-linux); [] where neither is there."""
    if os.geteuid() != 0:
        return []
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if shutil.which("setpriv") else None


@pytest.mark.skipif(another_user() is None, reason="root without setpriv: no other user to run as")
def test_a_read_only_run_folder_is_refused_through_the_real_command_as_a_user_meets_it():
    """As a user without root's right to write anywhere: train.py into a read-only folder, or one to be made under
    it, is refused by name before anything is made, without a traceback."""
    base = Path(tempfile.mkdtemp(prefix="nmt-read-only-"))  # under /tmp, which the other user can enter
    folder = base / "runs"
    folder.mkdir()
    base.chmod(0o755)
    folder.chmod(0o555)
    environment = {**os.environ, "HOME": str(base), "HYDRA_FULL_ERROR": "0"}
    try:
        if subprocess.run([*another_user(), sys.executable, "-c", "import nmt"], cwd=ROOT, env=environment).returncode:
            pytest.skip("the other user cannot read this checkout")
        for target, said in [
            (folder, f"hydra.run.dir={folder}: cannot write there: permission denied"),
            (folder / "run", f"hydra.run.dir={folder / 'run'}: cannot write there (it would be made in {folder})"),
        ]:
            command = [*another_user(), sys.executable, "train.py", "data=sample", f"hydra.run.dir={target}"]
            refused(subprocess.run(command, cwd=ROOT, env=environment, capture_output=True), said)
        assert not list(folder.iterdir())  # nothing made there
    finally:
        folder.chmod(0o755)
        shutil.rmtree(base)


def test_hydras_saved_config_of_another_shape_is_refused_naming_it(tmp_path):
    from nmt_study.sweep import saved_settings

    saved = tmp_path / ".hydra" / "2026-11-28_10-00-00" / "config.yaml"
    saved.parent.mkdir(parents=True)
    for data in (b"- a\n- list\n", b"model: [1\n", b"\xff\xfe\x00 not text", b"model: 3\ntrainer: {}\n"):
        saved.write_bytes(data)
        with pytest.raises(UserError, match="not the config Hydra saved for a train.py run") as refusal:
            saved_settings(tmp_path)
        assert str(saved) in str(refusal.value)


@pytest.mark.parametrize(
    "command, target",
    [
        (["evaluate.py", "split=valid"], "output=RUN/last.pt"),
        (["evaluate.py", "split=valid", "overwrite=true"], "output=RUN/results.json"),
        (["translate.py", "overwrite=true"], "output=RUN/results.json"),
        (["translate.py"], "output=RUN/spm.src.model"),
        (["translate.py"], "alignments=RUN/provenance.json"),
    ],
)
def test_no_output_option_replaces_a_file_of_a_training_run(trained, command, target, tmp_path):
    run_dir = trained[0]
    before = snapshot(run_dir)
    elsewhere = tmp_path / "model.pt"  # read from outside the run (its best.pt may be last.pt's file, an input)
    shutil.copyfile(run_dir / "best.pt", elsewhere)
    result = run(
        command[0],
        f"checkpoint={elsewhere}",
        *command[1:],
        target.replace("RUN", str(run_dir)),
        stdin=b"Der Hund.\n",
    )
    refused(result, "a file of the training run in")
    assert unchanged(before, snapshot(run_dir))


def test_an_existing_file_is_replaced_only_when_the_user_says_so(trained, tmp_path):
    best, mine = trained[0] / "best.pt", tmp_path / "mine.txt"
    mine.write_text("my notes\n")
    refused(
        run("translate.py", f"checkpoint={best}", f"output={mine}", stdin=b"Der Hund.\n"),
        f"output={mine}: exists, and this command would replace it",
    )
    refused(
        run(
            "translate.py",
            f"checkpoint={best}",
            f"output={tmp_path / 'a'}",
            f"alignments={tmp_path / 'a'}",
            stdin=b"Der Hund.\n",
        ),
        "writes another file there too",
    )
    assert mine.read_text() == "my notes\n" and not (tmp_path / "a").exists()
    replaced = run("translate.py", f"checkpoint={best}", f"output={mine}", "overwrite=true", stdin=b"Der Hund.\n")
    assert replaced.returncode == 0 and mine.read_text() != "my notes\n"
    refused(
        run("scripts/average_checkpoints.py", trained[0], "--last", "2", "--output", trained[0] / "last.pt"),
        "a file of the training run in",
    )
    refused(run("scripts/average_checkpoints.py", trained[0], "--last", "2", "--output", mine), "exists")
    assert (
        run("scripts/average_checkpoints.py", trained[0], "--last", "2", "--output", mine, "--overwrite").returncode
        == 0
    )
    text = tmp_path / "notes.pt"
    text.write_text("not weights\n")
    refused(run("evaluate.py", f"checkpoint={text}", "split=valid"), "not a checkpoint: a text file")


def test_the_sample_writer_keeps_existing_files_and_refuses_impossible_sizes(tmp_path):
    (tmp_path / "train.de").write_text("mine\n")
    refused(run("-m", "nmt.text.sample", "--sizes", "10", "5", "5", tmp_path), "train.de: exists")
    assert (tmp_path / "train.de").read_text() == "mine\n" and not (tmp_path / "valid.de").exists()
    assert run("-m", "nmt.text.sample", "--sizes", "10", "5", "5", tmp_path, "--overwrite").returncode == 0
    assert len((tmp_path / "train.de").read_text().splitlines()) == 10
    refused(run("-m", "nmt.text.sample", "--sizes", "-5", "10", "10", tmp_path / "x"), "cannot be negative")
    refused(
        run("-m", "nmt.text.sample", "--sizes", "10000000000", "5", "5", tmp_path / "y", timeout=20), "at most 200,000"
    )


def test_evaluate_never_overwrites_its_own_inputs(trained, tmp_path):
    (tmp_path / "my.de").write_text("Der Hund läuft.\n")
    (tmp_path / "my.en").write_text("The dog runs.\n")
    result = run(
        "evaluate.py",
        f"checkpoint={trained[0] / 'best.pt'}",
        f"source={tmp_path / 'my.de'}",
        f"reference={tmp_path / 'my.en'}",
        f"output={tmp_path / 'my.en'}",
    )
    refused(result, "is one of this command's inputs and would be overwritten")
    assert (tmp_path / "my.en").read_text() == "The dog runs.\n"


@pytest.mark.parametrize(
    "options, message",
    [
        (["beam=abc"], "error: beam=abc: "),
        (["beam=0"], "beam=0: the beam size must be 1"),
        (["split=dev"], "split='dev' is not a split"),
        (["beam=1000000"], "tokens, more than a batch holds (max_tokens=8,000); lower the beam, or raise max_tokens"),
        (["max_tokens=0"], "max_tokens=0: must be at least 1"),
        (["alpha=nan"], "alpha=nan: the length penalty's"),
        (["max_input_len=-1"], "max_input_len=-1: must be at least 1"),
        (["device=gpu"], "error: device='gpu': use auto, cpu or cuda"),
        (["beam=null"], "error: beam=null: this option needs a value; leave it out for its default"),
    ],
)
def test_evaluate_options_are_checked(trained, options, message):
    refused(run("evaluate.py", f"checkpoint={trained[0] / 'best.pt'}", *options), message)


def test_evaluate_on_empty_files_says_so(trained, tmp_path):
    (tmp_path / "empty.de").write_text("")
    (tmp_path / "empty.en").write_text("")
    result = run(
        "evaluate.py",
        f"checkpoint={trained[0] / 'best.pt'}",
        f"source={tmp_path / 'empty.de'}",
        f"reference={tmp_path / 'empty.en'}",
    )
    refused(result, "no sentences to score")


@pytest.mark.parametrize(
    "gold, options, message",
    [
        ("0-0 1-1\n1:2\n", [], "gold.align:2: '1:2' is not a link: write i-j (sure) or i?j / ipj (possible)"),
        ("0-0\n", [], "gold.align: 1 lines of links, 2 sentence pairs: write one line per pair"),
        ("0-0\n0-9\n", [], "gold.align:2: link 0-9 is past the sentence"),
        ("\n0?1\n", [], "no sure link in any of its 2 lines, so AER (which divides by the sure links) is undefined"),
        ("0-0\n0-0\n", ["alignment_map=cross_layer_9"], "alignment_map='cross_layer_9': this model has alignment"),
    ],
)
def test_gold_alignments_are_checked_before_decoding_naming_the_line(trained, tmp_path, gold, options, message):
    (tmp_path / "my.de").write_text("Der Hund läuft.\nDie Katze schläft.\n")
    (tmp_path / "my.en").write_text("The dog runs.\nThe cat sleeps.\n")
    (tmp_path / "gold.align").write_text(gold)
    result = run(
        "evaluate.py",
        f"checkpoint={trained[0] / 'best.pt'}",
        f"source={tmp_path / 'my.de'}",
        f"reference={tmp_path / 'my.en'}",
        f"alignments={tmp_path / 'gold.align'}",
        *options,
    )
    refused(result, message)
    assert not list(tmp_path.glob("*.hyp"))


def test_gold_alignments_of_your_own_files_are_scored(trained, tmp_path):
    (tmp_path / "my.de").write_text("Der Hund läuft.\nDie Katze schläft.\n")
    (tmp_path / "my.en").write_text("The dog runs.\nThe cat sleeps.\n")
    (tmp_path / "gold.align").write_text("0-0 1-1 2-2\n0-0 1-1 2-2\n")
    result = run(
        "evaluate.py",
        f"checkpoint={trained[0] / 'best.pt'}",
        f"source={tmp_path / 'my.de'}",
        f"reference={tmp_path / 'my.en'}",
        f"alignments={tmp_path / 'gold.align'}",
    )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert "alignment (argmax" in result.stdout.decode() and " <" in result.stdout.decode()
    said = f"my.de: 2 sentences of {tmp_path / 'my.de'} against {tmp_path / 'my.en'}, greedy decoding"
    assert said in result.stdout.decode()  # which text was scored, named


def test_a_checkpoint_of_your_own_files_is_scored_on_them_and_says_which(trained, tmp_path):
    """A data=files run's checkpoint scores the files its config names: evaluate prints which they are."""
    (tmp_path / "my.de").write_text("Der Hund läuft.\nDie Katze schläft.\nEin Mann liest.\n")
    (tmp_path / "my.en").write_text("The dog runs.\nThe cat sleeps.\nA man reads.\n")
    payload = torch.load(trained[0] / "best.pt", weights_only=True)
    pair = {"src": str(tmp_path / "my.de"), "tgt": str(tmp_path / "my.en")}
    payload["config"]["data"].update(corpus="files", train=pair, valid=pair, test=pair)
    torch.save(payload, tmp_path / "files.pt")
    result = run("evaluate.py", f"checkpoint={tmp_path / 'files.pt'}", "split=test")
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    said = f"test: 3 sentences of the run's data.test files, {tmp_path / 'my.de'} against {tmp_path / 'my.en'}"
    assert said in result.stdout.decode()


def test_no_output_option_writes_over_the_corpus_the_model_was_trained_on(trained, tmp_path):
    """evaluate's and translate's output= (and translate's alignments=) naming a file of the checkpoint's corpus (a
    data=files run's test reference or train source), or evaluate's output= naming the gold alignments it scores
    against, are refused with overwrite=true too; every file stays as it was (issue 83: evaluate replaced a run's
    test reference with hypotheses)."""
    corpus = {name: tmp_path / name for name in ("train.de", "train.en", "test.de", "test.en", "gold.txt")}
    corpus["train.de"].write_text("Der Hund läuft.\nDie Katze schläft.\n")
    corpus["train.en"].write_text("The dog runs.\nThe cat sleeps.\n")
    corpus["test.de"].write_text("Der Hund läuft.\n")
    corpus["test.en"].write_text("The dog runs.\n")
    corpus["gold.txt"].write_text("0-0 1-1 2-2\n")
    before = {name: path.read_bytes() for name, path in corpus.items()}
    payload = torch.load(trained[0] / "best.pt", weights_only=True)
    train = {"src": str(corpus["train.de"]), "tgt": str(corpus["train.en"])}
    test = {"src": str(corpus["test.de"]), "tgt": str(corpus["test.en"])}
    payload["config"]["data"].update(corpus="files", train=train, valid=test, test=test)
    torch.save(payload, tmp_path / "files.pt")
    checkpoint = f"checkpoint={tmp_path / 'files.pt'}"
    for command, option in [
        (("evaluate.py", checkpoint), f"output={corpus['test.en']}"),
        (("evaluate.py", checkpoint), f"output={corpus['train.de']}"),
        (("evaluate.py", checkpoint, f"alignments={corpus['gold.txt']}"), f"output={corpus['gold.txt']}"),
        (("translate.py", checkpoint), f"output={corpus['train.en']}"),
        (("translate.py", checkpoint, f"output={tmp_path / 'out.en'}"), f"alignments={corpus['test.de']}"),
    ]:
        result = run(*command, option, "overwrite=true", stdin=b"Der Hund.\n")
        assert result.returncode == 1 and b"Traceback" not in result.stderr, (option, result.stderr[-1500:])
        said = result.stderr.decode().strip().splitlines()[-1]
        assert said.startswith(f"error: {option.split('=')[0]}=") and (
            "a file of the corpus this model was trained on" in said or "this command's inputs" in said
        ), said
    assert {name: path.read_bytes() for name, path in corpus.items()} == before


def test_an_output_that_appears_while_a_command_decodes_is_kept_and_named(trained, tmp_path, monkeypatch):
    """The output is checked when it is put in place, not only at the start (issue 83): a file a user or another
    process writes at output= while translate decodes is kept as it is, and the command says so, writing nothing."""
    import nmt.decoding.evaluate
    from nmt.decoding.translator import Translator

    target = tmp_path / "out.en"
    search = Translator.search_lines

    def meanwhile(self, lines):
        target.write_text("written by someone else meanwhile\n")
        return search(self, lines)

    monkeypatch.setattr(Translator, "search_lines", meanwhile)
    monkeypatch.setattr(nmt.decoding.evaluate, "lines_to_translate", lambda source: ["Der Hund läuft."])
    with pytest.raises(UserError, match="out.en: a file appeared there while this command ran .*: kept"):
        nmt.decoding.evaluate.translate_file(str(trained[0] / "best.pt"), output=str(target))
    assert target.read_text() == "written by someone else meanwhile\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.en"]  # no temporary left behind


def test_invalid_utf8_on_stdin_names_the_line(trained):
    result = run("translate.py", f"checkpoint={trained[0] / 'best.pt'}", stdin=b"Der Hund.\nkaputt \xff\xfe\n")
    refused(result, "standard input, line 2: not valid UTF-8")


def test_a_nan_loss_never_reaches_a_checkpoint(tmp_path, sample_splits, sample_vocabulary):
    torch.manual_seed(0)
    model = BahdanauSeq2Seq(
        sample_vocabulary.source_size,
        sample_vocabulary.target_size,
        PAD_ID,
        attention=partial(AdditiveAttention, attention_size=16),
        embedding_size=16,
        hidden_size=16,
        encoder_layers=1,
        readout_size=16,
        dropout=0.0,
        cell="gru",
    )
    config = TrainerConfig(
        max_steps=4,
        max_minutes=0,
        valid_every=2,
        log_every=50,
        precision="fp32",
        device="cpu",
        progress=False,
        schedule="constant",
        num_plots=0,
    )
    trainer = Trainer(model, sample_vocabulary, sample_splits.train[:100], sample_splits.valid[:4], tmp_path, config)
    trainer.train()
    trainer.config.max_steps = 30
    for group in trainer.optimizer.param_groups:
        group["lr"] = 1e30  # the next updates overflow
    with pytest.raises(UserError, match=f"the last good checkpoint is {tmp_path / 'last.pt'}"):
        trainer.train()
    for name in ("best.pt", "last.pt", "previous.pt", *(p.name for p in tmp_path.glob("step*.pt"))):
        weights = checkpoint.load(tmp_path / name)["model"]
        assert all(torch.isfinite(w).all() for w in weights.values() if w.is_floating_point()), name
    assert checkpoint.load(tmp_path / "last.pt")["progress"]["step"] == 4


@pytest.mark.parametrize("delay", [0.3, 1.2])
@pytest.mark.parametrize("command", [["train.py", "data=sample", "trainer=debug"], ["-m", "nmt_study", "results"]])
def test_ctrl_c_while_a_command_still_starts_ends_in_one_line_not_a_traceback(tmp_path, command, delay):
    """Ctrl-C as a command starts (Python importing torch, numpy, scipy; Hydra composing): Python's KeyboardInterrupt
    traceback, or an ImportError/RecursionError from a module the interrupt left half imported, became one line."""
    import signal
    import time

    if command[0] == "train.py":
        command = [*command, f"hydra.run.dir={tmp_path / 'run'}"]
    else:
        command = [*command, "--render"]
    process = subprocess.Popen(
        [sys.executable, *command],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as a terminal's job, not a background one
    )
    time.sleep(delay)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode in (130, -signal.SIGINT) and "Traceback" not in stderr, stderr[-3000:]
    assert stderr.strip().splitlines()[-1].startswith("stopped by Ctrl-C"), stderr[-1000:]


def test_ctrl_c_while_the_commands_package_still_imports_hydra_ends_in_one_line():
    """A sweep's job process (`python -m nmt.cli.train`) interrupted while runpy still imports the package nmt.cli,
    which imports Hydra: the one line, not runpy's traceback (a Ctrl-C that landed there, made here every time)."""
    program = (
        "import importlib.abc, runpy, sys\n"
        "class Interrupting(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'hydra':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Interrupting())\n"
        "runpy.run_module('nmt.cli.train', run_name='__main__', alter_sys=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode in (130, -signal.SIGINT) and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.strip().startswith("stopped by Ctrl-C as the command started"), done.stderr


def test_a_ctrl_c_held_while_imports_finish_reaches_the_handler_it_would_have_reached():
    """imports_whole holds Ctrl-C until the imports are whole, then gives it to the handler that was there: Python's
    (KeyboardInterrupt, after the block), or a sweep's own (called once, no exception: its jobs save and stop)."""
    import signal

    calls = []
    previous = signal.signal(signal.SIGINT, lambda number, frame: calls.append(number))
    try:
        with imports_whole():
            os.kill(os.getpid(), signal.SIGINT)
            assert calls == []  # held while the block runs
        assert calls == [signal.SIGINT]
        signal.signal(signal.SIGINT, signal.default_int_handler)
        with pytest.raises(KeyboardInterrupt):
            with imports_whole():
                os.kill(os.getpid(), signal.SIGINT)
                finished = True  # the block ran to its end first
        assert finished
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_in_translate_stops_without_a_traceback_and_writes_nothing(trained, tmp_path):
    import signal
    import time

    output = tmp_path / "out.txt"
    command = [sys.executable, "translate.py", f"checkpoint={trained[0] / 'best.pt'}", f"output={output}"]
    # A job a shell starts in the background (`bash .ci/run &`) has Ctrl-C ignored, and so has every process it
    # starts, unless it sets a handler of its own: Python then installs none, and this SIGINT would do nothing
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    process.stdin.write(b"Der Hund.\n")
    process.stdin.flush()  # the input stays open: translate.py waits for the rest, the model loaded
    wchan = Path(f"/proc/{process.pid}/wchan")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "pipe_read" not in (wchan.read_text() if wchan.exists() else ""):
        time.sleep(0.2)  # a fixed sleep fails on a busy machine: Ctrl-C during imports is another case
    time.sleep(0.5 if wchan.exists() else 8)  # without /proc: a guess
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130 and "stopped by Ctrl-C; no translations were written" in stderr.decode()
    assert "Traceback" not in stderr.decode() and not output.exists()


def test_benchmark_options_are_checked_before_anything_is_measured(tmp_path):
    refused(
        run("-m", "nmt_study", "measure", "speed", "--steps", "0", "--output", tmp_path / "b"),
        "--steps 0: must be at least 1",
    )
    (tmp_path / "file").write_text("mine\n")
    refused(run("-m", "nmt_study", "measure", "speed", "--output", tmp_path / "file"), "is a file, not a folder")
    assert (tmp_path / "file").read_text() == "mine\n" and not (tmp_path / "b").exists()
    # the measurement is named first; options alone (the benchmark's command line before it was `measure speed`)
    refused(run("-m", "nmt_study", "measure", "--record"), "--record: no such measurement; name one first: speed,")


def test_a_folder_given_as_a_text_file_is_named_as_one(trained, tmp_path):
    refused(
        run("translate.py", f"checkpoint={trained[0] / 'best.pt'}", f"input={tmp_path}"),
        f"{tmp_path}: a folder, not a text file",
    )


# --- a checkpoint runs no code --------------------------------------------------------------------------------------


def hostile_checkpoint(trained, tmp_path, change) -> Path:
    """The trained run's best.pt with its saved config changed by `change(config, canary)`: plain containers only, so
    `weights_only=True` loads it; what a command must refuse is what the config names."""
    payload = torch.load(trained[0] / "best.pt", map_location="cpu", weights_only=True)
    canary = tmp_path / "canary.txt"
    canary.write_text("a user's file\n")
    change(payload["config"], str(canary))
    path = tmp_path / "hostile.pt"
    torch.save(payload, path)
    return path


def logging_target(config, canary):  # empties the canary when called
    config["model"] = {"_target_": "logging.basicConfig", "filename": canary, "filemode": "w"}


def os_target(config, canary):
    config["model"]["_target_"] = "os.remove"
    config["model"]["_args_"] = [canary]


def subprocess_target(config, canary):
    config["model"] = {"_target_": "subprocess.run", "args": ["sh", "-c", f"echo owned > {canary}"]}


def nested_attention_target(config, canary):
    config["model"]["attention"] = {"_target_": "os.truncate", "path": canary, "length": 0}


def positional_arguments(config, canary):
    config["model"]["attention"]["_args_"] = [canary]


def interpolated_target(config, canary):  # a resolver would decode this into a nested `_target_` after any check
    config["model"]["attention"] = "${oc.decode:'{_target_: os.remove, path: " + canary + "}'}"


def data_url(config, canary):  # a type a schema refuses, in a section the model never sees
    config["data"]["sizes"] = {"train": "all of them"}


@pytest.mark.parametrize(
    "change, message",
    [
        (logging_target, "model._target_='logging.basicConfig': not one of nmt's models"),
        (os_target, "model._target_='os.remove': not one of nmt's models"),
        (subprocess_target, "model._target_='subprocess.run': not one of nmt's models"),
        (nested_attention_target, "model.attention._target_='os.truncate': not one of nmt's attentions"),
        (positional_arguments, "model.attention._args_: a model config holds constructor arguments only"),
        (interpolated_target, 'config.model.attention="${oc.decode'),
        (data_url, "data.sizes.train"),
    ],
)
@pytest.mark.parametrize("command", ["evaluate.py", "translate.py"])
def test_a_checkpoint_whose_config_names_other_code_is_refused_and_nothing_happens(
    trained, tmp_path, change, message, command
):
    path = hostile_checkpoint(trained, tmp_path, change)
    extra = ["split=valid"] if command == "evaluate.py" else []
    result = run(command, f"checkpoint={path}", *extra, stdin=b"Der Hund.\n")
    refused(result, f"{path}: refused: its saved config is not one nmt writes")
    assert message in result.stderr.decode(), result.stderr.decode()[-2000:]
    assert (tmp_path / "canary.txt").read_text() == "a user's file\n"  # nothing ran
    assert sorted(p.name for p in tmp_path.iterdir()) == ["canary.txt", "hostile.pt"]  # nothing written


def test_only_nmts_own_model_and_attention_classes_are_buildable():
    """The allow-list holds every model and attention class in nmt and nothing else: each config's `_target_` is in
    it, and no module of nmt defines a model outside the family modules it is derived from."""
    import importlib
    import inspect
    import pkgutil

    import nmt
    from nmt.build import buildable
    from nmt.models.attention import Attention
    from nmt.models.model import Seq2Seq

    models, attentions = buildable()
    for info in pkgutil.walk_packages(nmt.__path__, "nmt."):
        importlib.import_module(info.name)
    everywhere = {
        f"{c.__module__}.{c.__qualname__}"
        for base in (Seq2Seq, Attention)
        for c in all_subclasses(base)
        if c.__module__.startswith("nmt.") and not inspect.isabstract(c)
    }
    assert everywhere == set(models) | set(attentions)
    assert {"nmt.models.rnn.BahdanauSeq2Seq", "nmt.models.transformer.Transformer"} <= set(models)
    assert "nmt.models.attention.AdditiveAttention" in attentions and not set(models) & set(attentions)
    from nmt.models.options import ATTENTIONS, MODELS, schema_of

    assert {schema._target_ for schema in MODELS.values()} == set(models)  # every model has its schema
    assert {schema._target_ for schema in ATTENTIONS.values()} == set(attentions)
    assert all(schema_of(target) for target in (*models, *attentions))


def all_subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    return found.union(*(all_subclasses(c) for c in found)) if found else found


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--train", "--flops", "inf"], "--flops must be a finite number above 0"),
        (["--train", "--minutes", "inf"], "--minutes (a wall-clock budget instead) a finite number"),
        (["RUNS", "--samples", "0"], "--samples 0: at least 20"),
        (["RUNS", "--samples", "1"], "--samples 1: at least 20"),
        (["RUNS", "--trials", "5"], "--trials 5: at least 20"),
    ],
)
def test_a_comparison_with_no_end_or_no_statistics_is_refused_at_once(trained, tmp_path, arguments, message):
    arguments = [str(trained[0]) if a == "RUNS" else a for a in arguments]
    result = run("-m", "nmt_study", "compare", *arguments, "--output", str(tmp_path / "report"), timeout=30)
    refused(result, message)
    assert not (tmp_path / "report").exists()


# --- "kept" means the same run --------------------------------------------------------------------------------------


def rerun_auto(trained, tmp_path, *options):
    """train.py with trainer.resume=auto (what a sweep's rerun does) on a copy of the finished run."""
    import shutil

    copy = tmp_path / "run"
    if not copy.exists():
        shutil.copytree(trained[0], copy)
    before = snapshot(copy)
    result = run(
        "train.py", *SMALL, f"data.spm_cache={trained[1]}", f"hydra.run.dir={copy}", "trainer.resume=auto", *options
    )
    return result, before, copy


@pytest.mark.parametrize(
    "option, key",
    [
        ("trainer.lr=0.5", "trainer.lr"),
        ("trainer.label_smoothing=0.2", "trainer.label_smoothing"),
        ("trainer.clip_norm=5", "trainer.clip_norm"),
        ("trainer.deterministic=true", "trainer.deterministic"),
        ("trainer.max_steps=5", "trainer.max_steps"),
        ("PRECISION", "trainer.precision"),
    ],
)
def test_a_finished_run_is_kept_only_for_the_run_it_is(trained, tmp_path, option, key):
    """trainer.resume=auto keeps a finished run only when every option that changes what it trains matches; another
    learning rate, smoothing, clipping, precision, determinism or budget is another run: refused, named, nothing
    changed. Threads, logging and paths are the same run: kept."""
    if option == "PRECISION":  # the precision the run did not train in, among those this CPU runs
        from nmt.device import cpu_capability

        trained_in = json.loads((trained[0] / "provenance.json").read_text())[-1]["precision"]
        if trained_in == "fp32" and not cpu_capability().bf16_kernels:
            pytest.skip("this CPU runs fp32 alone (no bf16 kernels): no other precision to ask for")
        option = f"trainer.precision={'bf16' if trained_in == 'fp32' else 'fp32'}"
    result, before, copy = rerun_auto(trained, tmp_path, option)
    refused(result, f"holds a finished run trained with other settings than asked for ({key}:")
    assert unchanged(before, snapshot(copy))
    kept, before, copy = rerun_auto(
        trained, tmp_path, "trainer.threads=1", "trainer.log_every=7", "trainer.num_plots=1"
    )
    output = kept.stdout.decode() + kept.stderr.decode()
    assert kept.returncode == 0 and "finished with these settings: kept" in output, output[-2000:]
    assert unchanged(before, snapshot(copy))


def test_a_damaged_results_file_leaves_the_run_unfinished_not_broken(trained, tmp_path):
    """A results.json cut short (a full disk, a killed process) is named, and the run counts as unfinished: resume=auto
    continues it from its checkpoint and writes its results again."""
    result, _, copy = rerun_auto(trained, tmp_path)  # the copy, kept
    assert result.returncode == 0
    for damaged in ('{"test/bleu": 1', "[]", "\x00\xff garbage"):  # cut short; another shape; not text
        (copy / "results.json").write_bytes(damaged.encode("latin-1"))
        result, _, copy = rerun_auto(trained, tmp_path)
        assert result.returncode == 0, result.stderr.decode()[-2000:]
        output = result.stdout.decode() + result.stderr.decode()
        assert "results.json is damaged" in output and "Traceback" not in output
        assert "test/bleu" in json.loads((copy / "results.json").read_text())


def test_a_finished_run_with_a_damaged_last_checkpoint_is_judged_by_the_one_resume_would_take(trained, tmp_path):
    """resume=auto reads a finished run's settings from the checkpoint resume=true would continue: previous.pt where
    last.pt is damaged (named), not a refusal."""
    result, _, copy = rerun_auto(trained, tmp_path, "--help")  # only the copy
    last = copy / "last.pt"
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])
    result, before, copy = rerun_auto(trained, tmp_path)
    output = result.stdout.decode() + result.stderr.decode()
    assert result.returncode == 0 and "Traceback" not in output, output[-2000:]
    assert f"reading the run's settings from {copy / 'previous.pt'} instead" in output
    assert "finished with these settings: kept" in output
    assert unchanged(before, snapshot(copy))


# --- every file nmt reads has a shape it checks -----------------------------------------------------------------


@pytest.mark.parametrize(
    "text, field",
    [
        ("[]", "holds a JSON list"),
        ("{}", "field 'statistics' is missing"),
        ('{"statistics": 3}', "'statistics' is a int"),
    ],
)
def test_a_record_of_another_shape_is_refused_naming_the_file_and_field(tmp_path, text, field):
    from nmt_study.records import load_record

    path = tmp_path / "seed1.record.json"
    path.write_text(text)
    with pytest.raises(UserError, match=field) as refusal:
        load_record(path)
    assert str(path) in str(refusal.value) and "make results" in str(refusal.value)


@pytest.mark.parametrize("text", ["[]", "{}", '{"variants": []}', "\ufeff{"])
def test_a_report_of_another_shape_is_refused_naming_the_file(tmp_path, text):
    from nmt_study.cli.results import export

    (tmp_path / "compare.json").write_text(text)
    with pytest.raises(UserError, match="compare.json") as refusal:
        export(tmp_path, "main")
    assert "make the report again" in str(refusal.value)


def test_validations_that_are_not_records_are_skipped_and_named_once(tmp_path, caplog):
    """validations.jsonl's lines are read by one reader: a line cut short, of another shape (no bleu, a word for a
    number, a list), or not text is skipped with one warning naming the file and lines; the others hold."""
    from nmt_study.records import compute_curve, valid_curve

    good = {"step": 10, "bleu": 5.0, "train_minutes": 1.0, "petaflops": 0.1, "epochs": 0.5}
    lines = [json.dumps(good).encode(), b'{"step": 20, "bleu": "high", "train_minutes": 2.0}', b"[1, 2]",
             b'{"step": 30, "train_minutes": 3.0}', b"\xff\xfe\x00 random bytes", b'{"step": 40, "bl',
             json.dumps({**good, "step": 50, "bleu": 7.0}).encode()]  # fmt: skip
    (tmp_path / "validations.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    with caplog.at_level("WARNING"):
        assert valid_curve(tmp_path) == [(1.0, 10, 5.0), (1.0, 50, 7.0)]
    assert compute_curve(tmp_path) == [(0.1, 0.5, 5.0), (0.1, 0.5, 7.0)]
    warning = [r.getMessage() for r in caplog.records if "validations.jsonl" in r.getMessage()]
    assert len(warning) == 2 and "line 2, 3, 4, 5, 6 not a validation record" in warning[0]  # once a reading


# --- one run folder, one writer -------------------------------------------------------------------------------------


def wait_for(condition, seconds: float = 60) -> bool:
    import time

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.2)
    return False


def test_a_second_writer_into_a_run_folder_is_refused_naming_the_first_and_a_killed_ones_lock_is_taken_over(tmp_path):
    """Two train.py processes into one folder: the second is refused while the first trains, naming its process;
    after `kill -9` (no chance to clean up) the lock is released with the process, and the run resumes there."""
    import signal

    run_dir = tmp_path / "run"
    options = [
        *SMALL,
        f"data.spm_cache={tmp_path / 'spm'}",
        f"hydra.run.dir={run_dir}",
        "trainer.max_steps=100000",
        "trainer.valid_every=2",
    ]
    environment = {**os.environ, "HYDRA_FULL_ERROR": "0", "LC_ALL": "C.UTF-8"}
    first = subprocess.Popen(
        [sys.executable, "train.py", *options],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        lock = run_dir / ".lock"
        # generous: under a loaded machine (CI beside other work) the first writer's start alone takes a minute
        assert wait_for(lambda: (run_dir / "last.pt").is_file() and lock.is_file() and lock.read_text().strip(), 240)
        second = run("train.py", *options, "trainer.resume=true", "seed=7", timeout=240)
        refused(second, f"{run_dir} is being trained by process {first.pid} on ")
        assert first.poll() is None  # the first trains on
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert lock.read_text().strip()  # killed: its note stays, its lock does not
    saved = checkpoint.load(run_dir / "last.pt")["progress"]["step"]
    resumed = run("train.py", *options, "trainer.resume=true", f"trainer.max_steps={saved + 4}", timeout=240)
    assert resumed.returncode == 0, resumed.stderr.decode()[-2000:]
    assert checkpoint.load(run_dir / "last.pt")["progress"]["step"] == saved + 4 and lock.read_text() == ""


# --- one writer rule everywhere; damaged state named ----------------------------------------------------------------


@pytest.mark.parametrize(
    "target",
    [
        "records/bahdanau/seed1234.record.json",
        "records/lab_luong/seed1234.lab.json",
        "run/.hydra/2026-11-27_01-02-03/config.yaml",
    ],
)
def test_overwrite_never_reaches_a_runs_records_or_hydras(trained, tmp_path, target):
    path = tmp_path / target
    path.parent.mkdir(parents=True)
    path.write_text("{}")
    for command in (["evaluate.py", "split=valid"], ["translate.py"]):
        result = run(
            command[0],
            f"checkpoint={trained[0] / 'best.pt'}",
            *command[1:],
            f"output={path}",
            "overwrite=true",
            stdin=b"Der Hund.\n",
        )
        refused(result, "which this command must not replace")
        assert path.read_text() == "{}"


def test_checkpoints_of_another_run_are_not_averaged(trained, tmp_path):
    import shutil

    other = tmp_path / "other"
    result = run("train.py", *SMALL, f"data.spm_cache={trained[1]}", f"hydra.run.dir={other}", "seed=99")
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(sorted(trained[0].glob("step*.pt"))[-1], mixed / "step00000001.pt")
    shutil.copy(sorted(other.glob("step*.pt"))[-1], mixed / "step00000002.pt")
    refused(
        run("scripts/average_checkpoints.py", mixed, "--output", tmp_path / "averaged.pt"),
        "another run's checkpoint than",
    )
    assert not (tmp_path / "averaged.pt").exists()


def test_a_full_disk_gives_one_message_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    def full(payload, handle):
        handle.write(b"PK" * 100)
        raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 64 vs 0")

    monkeypatch.setattr(torch, "save", full)
    (tmp_path / "last.pt").write_bytes(b"the last complete checkpoint")
    with pytest.raises(UserError, match=r"last.pt: could not be written \(.*unexpected pos.*MiB free on its disk\)"):
        checkpoint.save({"model": {}}, tmp_path / "last.pt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]
    assert (tmp_path / "last.pt").read_bytes() == b"the last complete checkpoint"


def test_translations_are_reused_only_from_the_checkpoint_and_settings_that_made_them(trained, tmp_path):
    """The comparison reuses a run's best.test.beam<N>.hyp only when its note (`.source`) says this very best.pt made
    it with the comparison's settings: not evaluate.py's output with its own, not one made before best.pt changed."""
    import shutil

    from nmt.paths import derived_from
    from nmt_study.records import beam_hypotheses

    copy = tmp_path / "run"
    shutil.copytree(trained[0], copy)
    evaluated = run("evaluate.py", f"checkpoint={copy / 'best.pt'}", "split=test", "beam=2")
    assert evaluated.returncode == 0, evaluated.stderr.decode()[-2000:]
    hyp = copy / "best.test.beam2.hyp"
    assert derived_from(hyp, copy / "best.pt", "beam=2 alpha=0.6 precision=auto")
    hyp.write_text("stale\n" * 10)  # as if from another best.pt, or other settings
    sources = ["Der Hund läuft.", "Die Katze schläft."]
    fresh = beam_hypotheses(copy, sources, 2, copy / "best.pt")
    assert "stale" not in fresh and derived_from(hyp, copy / "best.pt", "beam=2 precision=trained")
    assert beam_hypotheses(copy, sources, 2, copy / "best.pt") == fresh  # its own, reused
    shutil.copy(sorted(copy.glob("step*.pt"))[0], copy / "best.pt")  # the run resumed: another best.pt
    assert not derived_from(hyp, copy / "best.pt", "beam=2 precision=trained")


def test_damaged_records_and_reports_are_named_with_what_to_do(tmp_path, monkeypatch):
    """A record cut short stops the study's readers with its path and a remedy, never a JSONDecodeError."""
    from nmt_study import tables
    from nmt_study.records import recorded

    damaged = tmp_path / "bahdanau" / "seed1234.record.json"
    damaged.parent.mkdir()
    damaged.write_text('{"config": {"model"')
    with pytest.raises(UserError, match=r"seed1234.record.json: damaged or unreadable .*delete it .* and rerun"):
        recorded(tmp_path, ["bahdanau"], [1234], ["trainer.progress=false"])
    (tmp_path / "claims.json").write_text("{")
    with pytest.raises(UserError, match=r"claims.json: damaged or unreadable .*restore it from git"):
        tables.render("claims_short", tmp_path)
    report = run("-m", "nmt_study", "compare", damaged.parent, "--output", tmp_path / "report", timeout=60)
    refused(report, "seed1234.record.json: damaged or unreadable")
    assert "not a run's record: `make results` writes them" in report.stderr.decode()


def test_messages_name_what_was_given(trained, tmp_path):
    """A folder given as a checkpoint is named as one, with the checkpoints in it; a binary file given as gold
    alignments is named, not a UnicodeDecodeError."""
    refused(
        run("evaluate.py", f"checkpoint={trained[0]}", "split=valid"),
        f"{trained[0]}: is a folder; name a checkpoint file in it (best.pt, ",
    )
    binary = tmp_path / "gold.align"
    binary.write_bytes(bytes(range(128, 256)))
    refused(
        run("evaluate.py", f"checkpoint={trained[0] / 'best.pt'}", "split=valid", f"alignments={binary}"),
        f"alignments={binary}: not a text file of links",
    )


@pytest.mark.parametrize(
    "script, arguments, name",
    [
        (["-m", "nmt_study", "compare"], ["RUNS"], "report.md"),
        (["-m", "nmt_study", "compare"], ["RUNS"], "compare.json"),
        (["-m", "nmt_study", "measure", "speed"], ["--train-only", "--models", "sutskever"], "benchmark.md"),
        (["-m", "nmt_study", "measure", "attention_kernels"], [], "attention_kernels.json"),
    ],
)
def test_an_output_folder_holding_a_users_files_is_refused_before_any_work(trained, tmp_path, script, arguments, name):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / name).write_text("my own notes\n")
    arguments = [str(trained[0]) if a == "RUNS" else a for a in arguments]
    result = run(*script, *arguments, "--output", folder, timeout=60)
    refused(result, f"--output={folder}: holds {name}, which this command would replace and no nmt command wrote")
    assert (folder / name).read_text() == "my own notes\n"


def test_attention_heatmaps_never_replace_a_users_file_of_their_name(trained, tmp_path):
    """translate.py attention=DIR writes DIR/line<N>.png: a user's line1.png there is refused before decoding and
    kept; the command's own heatmaps, from an earlier run into the folder, are replaced."""
    checkpoint_option = f"checkpoint={trained[0] / 'best.pt'}"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "line1.png").write_bytes(b"my own picture")
    refused(
        run("translate.py", checkpoint_option, f"attention={mine}", stdin=b"Der Hund.\n"),
        f"attention={mine}: holds line1.png",
    )
    assert (mine / "line1.png").read_bytes() == b"my own picture"
    for _ in range(2):  # the second run replaces the first run's own heatmaps
        done = run(
            "translate.py", checkpoint_option, f"attention={tmp_path / 'maps'}", stdin=b"Der Hund.\n\nEin Mann.\n"
        )
        assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert sorted(p.name for p in (tmp_path / "maps").glob("*.png")) == ["line1.png", "line3.png"]


def test_an_unexpected_exception_in_a_sweep_job_is_a_named_failure_not_a_traceback(tmp_path):
    """A job that fails with any exception (here, the trainer patched to raise) is named in the sweep's summary and
    its failed.txt, its traceback kept in its train.log; the other jobs run."""
    (tmp_path / "patch").mkdir()
    (tmp_path / "patch" / "sitecustomize.py").write_text(
        "import os\nif os.environ.get('NMT_TEST_BOOM'):\n    import nmt.training.trainer\n"
        "    def boom(self, *options):\n        raise RuntimeError('boom at ' + str(self.seed))\n"
        "    nmt.training.trainer.Trainer.steps = boom\n"
    )
    sweep = tmp_path / "sweep"
    path = os.pathsep.join([str(tmp_path / "patch"), os.environ.get("PYTHONPATH", "")])
    environment = {**os.environ, "HYDRA_FULL_ERROR": "0", "NMT_TEST_BOOM": "1", "PYTHONPATH": path}
    result = subprocess.run(
        [
            sys.executable,
            "train.py",
            "-m",
            *SMALL,
            "seed=1,2",
            f"data.spm_cache={tmp_path / 'spm'}",
            f"hydra.sweep.dir={sweep}",
            "hydra.sweep.subdir=seed${seed}",
        ],
        cwd=ROOT,
        capture_output=True,
        env=environment,
        timeout=120,
    )
    stderr = result.stderr.decode()
    assert result.returncode == 1 and "error: 2 jobs of this sweep failed" in stderr, stderr[-2000:]
    assert "Fix the cause, then rerun the sweep's command with trainer.resume=auto: finished jobs are kept" in stderr
    assert "failed with RuntimeError: boom at 2" in stderr and "Traceback" not in stderr
    assert "RuntimeError: boom at 1" in (sweep / "seed1" / "failed.txt").read_text()
    assert "Traceback" in (sweep / "seed1" / "train.log").read_text()


def test_one_plan_decides_what_a_run_directory_is_for(trained, tmp_path):
    """resume.plan: keep the finished run (auto, same settings), continue it with the safe changes (true), start a
    new run where there is none, and refuse a new run over it or a finished run of other settings, before any write."""
    from nmt.runs.folder import RunFolder
    from nmt.runs.resume import Plan, plan

    run_dir, _ = trained
    before = snapshot(run_dir)
    config = checkpoint.load(run_dir / "last.pt")["config"]
    kept = plan(RunFolder(run_dir), "auto", config)
    assert kept.kept == json.loads((run_dir / "results.json").read_text()) and kept.checkpoint is None
    faster = {**config, "trainer": {**config["trainer"], "lr": config["trainer"]["lr"] * 2}}
    continued = plan(RunFolder(run_dir), True, faster)
    assert continued.kept is None and continued.checkpoint[0].name == "last.pt"
    assert continued.changes == {"trainer.lr": (config["trainer"]["lr"], config["trainer"]["lr"] * 2)}
    assert plan(RunFolder(tmp_path / "empty"), False, config) == Plan()
    with pytest.raises(UserError, match="already holds a run"):
        plan(RunFolder(run_dir), False, config)
    with pytest.raises(UserError, match="finished run trained with other settings.*trainer.lr"):
        plan(RunFolder(run_dir), "auto", faster)
    assert unchanged(before, snapshot(run_dir))


def hostile_entry(kind: str, path, outside):
    """Put `kind` where a run file belongs: a link to a user's file, a dangling link, a FIFO or a folder."""
    if kind == "link":
        path.symlink_to(outside)
    elif kind == "dangling link":
        path.symlink_to(outside.parent / "nothing-here")
    elif kind == "FIFO":
        os.mkfifo(path)
    else:
        path.mkdir()


@pytest.mark.parametrize("kind", ["link", "dangling link", "FIFO", "folder"])
@pytest.mark.parametrize("name", [".lock", "validations.jsonl", "train.log", "results.json", "provenance.json"])
def test_a_run_file_that_is_not_a_file_is_refused_before_anything_is_written(tmp_path, name, kind):
    """A run folder's files are the run's own: a link is never followed (a user's file it points to is untouched), a
    FIFO never waited on, a folder never opened; the entry is named, with what to do, and nothing is trained."""
    run_dir, outside = tmp_path / "run", tmp_path / "users-file.txt"
    run_dir.mkdir()
    outside.write_text("a user's own words\n")
    hostile_entry(kind, run_dir / name, outside)
    result = run("train.py", *SMALL, f"hydra.run.dir={run_dir}", timeout=60)
    refused(result, f"{run_dir / name} is a")
    assert "not a file" in result.stderr.decode() and "hydra.run.dir" in result.stderr.decode()
    assert outside.read_text() == "a user's own words\n" and not (tmp_path / "nothing-here").exists()
    assert not list(run_dir.glob("*.pt")) and not list(run_dir.glob("events.out.tfevents.*"))


def test_a_hard_linked_copy_of_a_run_resumed_leaves_the_original_untouched(trained, tmp_path):
    """`cp -al` (or rsync --link-dest) copies a run as hard links: resuming the copy appends to its own files."""
    original = trained[0]
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-al", str(original), str(copy)], check=True)
    before = snapshot(original)
    result = run("train.py", *SMALL, f"data.spm_cache={trained[1]}", f"hydra.run.dir={copy}",
                 "trainer.resume=true", "trainer.max_steps=6")  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert snapshot(original) == before  # validations.jsonl, train.log, provenance.json: the original's alone
    lines = (copy / "validations.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines][-1] == 6


def test_a_folder_with_an_older_runs_validations_holds_a_run_and_a_continued_one_keeps_one_history(tmp_path):
    """An older run's validations.jsonl (its checkpoints deleted) marks the folder: a new run is refused; a run
    started there with trainer.resume=true moves the older lines aside, so that its records are its own."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    older = [{"step": step, "bleu": 1.0, "train_minutes": 0.1} for step in (30, 50, 60)]
    (run_dir / "validations.jsonl").write_text("".join(json.dumps(line) + "\n" for line in older))
    refused(run("train.py", *SMALL, f"hydra.run.dir={run_dir}"), "already holds a run (validations.jsonl)")
    result = run("train.py", *SMALL, f"hydra.run.dir={run_dir}", "trainer.resume=true")
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    steps = [json.loads(line)["step"] for line in (run_dir / "validations.jsonl").read_text().splitlines()]
    assert steps == [2, 4]
    moved = [json.loads(line)["step"] for line in (run_dir / "validations.past.jsonl").read_text().splitlines()]
    assert moved == [30, 50, 60]


@pytest.mark.parametrize(
    "spoil, message",
    [
        (lambda p: p["config"]["model"].update(_target_=["nmt.models.rnn.BahdanauSeq2Seq"]), "model._target_"),
        (lambda p: p.update(model=list(p["model"].values())), "not a mapping of names to tensors"),
        (lambda p: p["vocabulary"].update(source=b"\x00\xff garbage"), "source vocabulary is not a sentencepiece"),
        (lambda p: p["vocabulary"].update(target="text"), "target vocabulary is not a sentencepiece"),
        (lambda p: p["config"]["model"].update(bogus_option=1), "model.bogus_option"),
        (lambda p: p["config"]["model"].update(hidden_size=-3), "model.hidden_size=-3: must be at least 1"),
    ],
)
def test_a_checkpoint_of_another_shape_is_refused_naming_it_before_it_is_used(trained, tmp_path, spoil, message):
    """A checkpoint's contents are checked, the file named, before any upgrade, build, decoding or averaging."""
    payload = torch.load(trained[0] / "best.pt", weights_only=True)
    spoil(payload)
    path = tmp_path / "spoiled.pt"
    torch.save(payload, path)
    with pytest.raises(UserError, match=message) as refusal:
        checkpoint.load(path)
    assert str(path) in str(refusal.value)
    refused(run("evaluate.py", f"checkpoint={path}", "split=valid"), str(path))


@pytest.mark.parametrize(
    "command, message",
    [
        (["evaluate.py"], "error: checkpoint: required; give it on the command line (checkpoint=...)"),
        (["evaluate.py", "checkpoint={tmp}/empty.pt"], "empty.pt: not a checkpoint: an empty file (0 bytes)"),
        (["translate.py", "checkpoint=/dev/zero"], "/dev/zero: not a regular file (a device, FIFO or socket)"),
        (["-m", "nmt_study", "compare", "{tmp}/nonexistent"], "nonexistent: no such folder; give the folders"),
        (["-m", "nmt_study", "compare", "{tmp}", "--beam", "0"], "--beam 0: the beam size must be 1 (greedy) or more"),
        (["-m", "nmt_study", "compare", "--train", "--records", "{tmp}/empty.pt"], "empty.pt: is a file; give a"),
        (["-m", "nmt_study", "results", "--parts", "main,lab", "--only", "bogus"], "--only: bogus unknown; use any of"),
        (["train.py", *SMALL, "seed=-1", "hydra.run.dir={tmp}/run"], "seed=-1: must be a whole number from 0 to"),
        (["train.py", *SMALL, "hydra.run.dir={tmp}/empty.pt"], "hydra.run.dir={tmp}/empty.pt: is a file; give a"),
        (
            ["train.py", "-m", *SMALL, "hydra/launcher=joblib", "hydra.launcher.n_jobs=0", "hydra.sweep.dir={tmp}/s"],
            "hydra.launcher.n_jobs=0: runs no job; give 1 or more",
        ),
    ],
    ids=[
        "no checkpoint",
        "empty .pt",
        "a device",
        "no folder",
        "beam 0",
        "records a file",
        "only bogus",
        "seed -1",
        "run dir a file",
        "n_jobs 0",
    ],
)
def test_inputs_that_mean_nothing_are_refused_in_one_line_before_any_work(tmp_path, command, message):
    """The probe's last members of the class: each refused with one line naming the option or file and what to do,
    no traceback, no OmegaConf internals, and no folder made for a mistyped one."""
    (tmp_path / "empty.pt").write_bytes(b"")
    done = run(*[part.replace("{tmp}", str(tmp_path)) for part in command])
    stderr = done.stderr.decode()
    assert done.returncode != 0 and message.replace("{tmp}", str(tmp_path)) in stderr, stderr[-2000:]
    assert "Traceback" not in stderr and "full_key" not in stderr and "object_type" not in stderr
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["empty.pt"]  # nothing made


def test_the_studys_counts_are_checked_with_render_too():
    """`results --seeds 0 --render` was accepted (--render skipped the checks); a count is a count either way."""
    result = run("-m", "nmt_study", "results", "--seeds", "0", "--render")
    assert result.returncode == 2 and b"--seeds 0: at least 1" in result.stderr


def test_a_run_continued_on_changed_training_files_is_refused_naming_them(tmp_path):
    """A data=files run knows the text it read (corpus.json: each split's sha256): trainer.resume on training files
    changed since is refused naming the split and its files, before an update; restored, the run continues."""
    corpus = tmp_path / "corpus"
    written = run("-m", "nmt.text.sample", str(corpus))
    assert written.returncode == 0, written.stderr.decode()[-1000:]
    files = [f"data.{split}.{side}={corpus / f'{split}.{lang}'}" for split in ("train", "valid", "test")
             for side, lang in (("src", "de"), ("tgt", "en"))]  # fmt: skip
    options = ["data=files", *files, "data.vocab_size=250", "size=tiny", "trainer.progress=false"]
    options += ["trainer.test_at_end=false", f"data.spm_cache={tmp_path / 'spm'}", f"hydra.run.dir={tmp_path / 'r'}"]
    first = run("train.py", *options, "trainer.max_steps=4")
    assert first.returncode == 0, first.stderr.decode()[-2000:]
    original = (corpus / "train.de").read_bytes()
    (corpus / "train.de").write_bytes(original.replace(b"Hund", b"Katze", 1))
    refused_run = run("train.py", *options, "trainer.max_steps=8", "trainer.resume=true")
    said = refused_run.stderr.decode().strip().splitlines()[-1]
    assert refused_run.returncode == 1 and "was trained on other text than this command reads: the train split" in said
    assert str(corpus / "train.de") in said
    (corpus / "train.de").write_bytes(original)
    again = run("train.py", *options, "trainer.max_steps=8", "trainer.resume=true")
    assert again.returncode == 0, again.stderr.decode()[-2000:]


def test_ctrl_c_after_a_command_wrote_its_output_says_so(tmp_path, capsys, monkeypatch):
    """evaluate said "no hypotheses were written" when Ctrl-C came after it had replaced its output (issue 83):
    "written" is said exactly when it is true (in-process: the signal's moment cannot be timed through the command)."""
    from nmt import paths
    from nmt.cli import refusals_and_ctrl_c

    monkeypatch.setattr(paths, "PUT_IN_PLACE", [])
    with pytest.raises(SystemExit) as stopped, refusals_and_ctrl_c("hypotheses"):
        raise KeyboardInterrupt
    assert stopped.value.code == 130 and "stopped by Ctrl-C; no hypotheses were written" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped, refusals_and_ctrl_c("hypotheses"):
        paths.write_text(tmp_path / "out.en", "a translation\n")
        raise KeyboardInterrupt
    assert (
        stopped.value.code == 130
        and f"stopped by Ctrl-C; after it wrote {tmp_path / 'out.en'}" in capsys.readouterr().err
    )
