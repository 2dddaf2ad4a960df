"""Text with no words and files of another kind, given as data through the real commands: each refused with one line
naming the file, what it is and how many of its lines are blank, never scored, never read without end."""

import os
from pathlib import Path

import pytest
from helpers import refused
from helpers import run_cli as run

from nmt import UserError
from nmt.text.corpus import read_lines, with_text

TEXT = {"src": "Der Hund läuft.\nDie Katze schläft.\n", "tgt": "The dog runs.\nThe cat sleeps.\n"}


def files_run(tmp_path, texts: dict[tuple[str, str], str], *extra: str, timeout: float = 90):
    """train.py on data=files whose (split, side) files hold `texts` where given, two sentences elsewhere."""
    paths = []
    for split in ("train", "valid", "test"):
        for side in ("src", "tgt"):
            path = tmp_path / f"{split}.{side}"
            given = texts.get((split, side), TEXT[side] * (5 if split == "train" else 1))
            if isinstance(given, str):
                path.write_text(given)
            else:
                path = given  # a path of another kind (a device, a FIFO, a folder)
            paths.append(f"data.{split}.{side}={path}")
    return run(
        "train.py",
        "data=files",
        "data.vocab_size=30",
        *paths,
        "trainer=debug",
        "trainer.progress=false",
        f"data.spm_cache={tmp_path / 'spm'}",
        f"hydra.run.dir={tmp_path / 'run'}",
        *extra,
        timeout=timeout,
    )


@pytest.mark.parametrize("empty", ["valid", "test"])
def test_an_empty_valid_or_test_split_is_refused_before_training(tmp_path, empty):
    result = files_run(tmp_path, {(empty, "src"): "", (empty, "tgt"): ""})
    refused(result, f"the {empty} split is empty")


@pytest.mark.parametrize("split", ["train", "valid", "test"])
def test_a_split_of_spaces_and_tabs_is_refused_naming_its_files_and_blank_lines(tmp_path, split):
    blank = " \t \n" * 20
    result = files_run(tmp_path, {(split, "src"): blank, (split, "tgt"): TEXT["tgt"] * 10})
    refused(result, f"data.{split}.src={tmp_path / f'{split}.src'} and data.{split}.tgt=")
    refused(result, f"the {split} split has no text: all 20 of its lines are blank on one side or both")
    assert not (tmp_path / "run" / "results.json").exists()


def test_a_test_split_that_sentencepiece_empties_is_refused_after_its_normalisation(tmp_path):
    """Zero-width spaces and control characters are text to Python and nothing to sentencepiece."""
    result = files_run(tmp_path, {("test", "src"): "\u200b\n\x01\x02\n", ("test", "tgt"): "a.\nb.\n"})
    refused(result, "the test split has no text: all 2 of its lines are blank")
    refused(result, "(after sentencepiece's normalisation)")


def test_a_partly_blank_split_drops_those_pairs_and_says_so_once():
    pairs = [("Der Hund.", "The dog."), ("", "The cat."), ("Ein Mann.", "")]
    with pytest.raises(UserError, match="the valid split has no text: all 2 of its lines"):
        with_text(pairs[1:], "valid", "v.de and v.en")
    assert with_text(pairs, "valid", "v.de and v.en") == pairs[:1]
    assert with_text([], "test", "t") == []  # empty: left to whoever needs the pairs ("the test split is empty")


def test_scoring_your_own_files_drops_their_blank_pairs_once_and_refuses_all_blank(trained, tmp_path):  # noqa: F811
    best = trained[0] / "best.pt"
    (tmp_path / "s.de").write_text("Der Hund läuft.\n  \nDie Katze schläft.\n")
    (tmp_path / "r.en").write_text("The dog runs.\nThe man.\nThe cat sleeps.\n")
    done = run("evaluate.py", f"checkpoint={best}", f"source={tmp_path / 's.de'}", f"reference={tmp_path / 'r.en'}")
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stderr.decode().count("1 of the given split's 3 pairs are blank on one side or both: dropped") == 1
    (tmp_path / "s.de").write_text("\t\n \n")
    (tmp_path / "r.en").write_text("The man.\nThe cat.\n")
    result = run("evaluate.py", f"checkpoint={best}", f"source={tmp_path / 's.de'}", f"reference={tmp_path / 'r.en'}")
    refused(result, "the given split has no text: all 2 of its lines are blank")
    refused(run("translate.py", f"checkpoint={best}", stdin=b" \n\t\n"), "stdin: all 2 of its lines are blank")
    translated = run("translate.py", f"checkpoint={best}", stdin=b"Der Hund.\n\nEin Mann.\n")
    assert translated.returncode == 0 and translated.stdout.decode().split("\n")[1] == ""  # kept in its place


def test_a_line_that_normalisation_empties_is_blank_to_evaluate_and_translate_as_to_training(trained, tmp_path):  # noqa: F811
    """One rule for text (issue 83): a line of zero-width characters, which training drops once sentencepiece has
    normalised it, is not scored by evaluate (its pair dropped, said once) and translates to an empty line in its
    place, as a blank line does (both decoded it as a sentence)."""
    best = trained[0] / "best.pt"
    (tmp_path / "s.de").write_text("Der Hund läuft.\n\u200b\u200b\nDie Katze schläft.\n")
    (tmp_path / "r.en").write_text("The dog runs.\nThe man.\nThe cat sleeps.\n")
    done = run("evaluate.py", f"checkpoint={best}", f"source={tmp_path / 's.de'}", f"reference={tmp_path / 'r.en'}")
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stderr.decode().count("1 of the given split's 3 pairs are blank on one side or both: dropped") == 1
    translated = run("translate.py", f"checkpoint={best}", stdin="Der Hund.\n\u200b\nEin Mann.\n".encode())
    lines = translated.stdout.decode().split("\n")
    assert translated.returncode == 0 and lines[1] == "" and lines[0] and lines[2]


@pytest.mark.parametrize("kind", ["a device", "a FIFO", "a folder"])
def test_a_file_of_another_kind_named_as_data_is_named_as_such_and_never_read(tmp_path, kind):
    if kind == "a device":
        other = Path("/dev/zero")
    elif kind == "a FIFO":
        other = tmp_path / "pipe"
        os.mkfifo(other)  # read, it would wait for a writer forever
    else:
        other = tmp_path / "folder"
        other.mkdir()
    result = files_run(tmp_path, {("train", "src"): other}, timeout=30)
    refused(result, f"{other}: {kind}, not a text file; give the path of a file with one sentence per line")
    with pytest.raises(UserError, match=f"{kind}, not a text file"):
        read_lines(other)
    link = tmp_path / "link.txt"  # a link to a text file is read as the file
    (tmp_path / "real.txt").write_text("Der Hund.\n")
    link.symlink_to(tmp_path / "real.txt")
    assert read_lines(link) == ["Der Hund."]
