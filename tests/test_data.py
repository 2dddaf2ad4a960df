import gzip

import numpy as np
import pytest
import torch
from conftest import MULTI30K

from nmt import UserError
from nmt.config import FilePair
from nmt.text.batches import TokenBatchSampler
from nmt.text.corpus import fetch, load_files, load_multi30k, read_lines, read_parallel
from nmt.text.data import BOS_ID, EOS_ID, PAD_ID, ParallelDataset, collate
from nmt.text.sample import drawn, generate


def test_read_lines_strips_bom_crlf_and_keeps_empty_lines(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes("\ufeffEin Satz.\r\n\r\n  Noch einer.\t\r\n".encode())
    assert read_lines(path) == ["Ein Satz.", "", "Noch einer."]


def test_read_lines_reads_gzip(tmp_path):
    path = tmp_path / "a.txt.gz"
    path.write_bytes(gzip.compress(b"eins\nzwei\n"))
    assert read_lines(path) == ["eins", "zwei"]


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(UserError, match=r"nowhere\.de: no such file"):
        read_lines(tmp_path / "nowhere.de")
    with pytest.raises(UserError, match=r": a folder, not a text file"):
        read_lines(tmp_path)


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "bad.de"
    path.write_bytes(b"gut\nauch gut\nschlecht \xff\xfe\n")
    with pytest.raises(UserError, match=r"bad\.de, line 3: not valid UTF-8"):
        read_lines(path)


def test_binary_file_is_refused(tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(b"\x00\x01\x02binary")
    with pytest.raises(UserError, match="binary"):
        read_lines(path)


def test_parallel_files_of_different_length_name_both_counts(tmp_path):
    (tmp_path / "x.de").write_text("a\nb\nc\n")
    (tmp_path / "x.en").write_text("a\nb\n")
    with pytest.raises(UserError, match=r"x\.de has 3 lines, .*x\.en has 2"):
        read_parallel(tmp_path / "x.de", tmp_path / "x.en")


def test_files_corpus_drops_pairs_with_an_empty_side_from_every_split(tmp_path):
    """A blank line teaches nothing, and a blank test line would be scored as a sentence (tests/test_inputs.py: the
    command says how many it dropped)."""
    for name in ("train", "valid", "test"):
        (tmp_path / f"{name}.src").write_text("ein Hund\n\nzwei Katzen\n")
        (tmp_path / f"{name}.tgt").write_text("a dog\nsomething\ntwo cats\n")
    paths = {n: FilePair(str(tmp_path / f"{n}.src"), str(tmp_path / f"{n}.tgt")) for n in ("train", "valid", "test")}
    splits = load_files(paths["train"], paths["valid"], paths["test"])
    assert len(splits.train) == len(splits.valid) == len(splits.test) == 2


def test_multi30k_language_options_are_checked():
    with pytest.raises(UserError, match=r"data.src_lang='xx': Multi30k has de, en, fr, cs"):
        load_multi30k("xx", "en", None, "file:///nowhere", "unused")
    with pytest.raises(UserError, match="both 'de'"):
        load_multi30k("de", "de", None, "file:///nowhere", "unused")


def test_multi30k_folder_without_files_says_what_to_do(tmp_path):
    with pytest.raises(UserError, match=r"train\.de\.gz: not found\. data\.dir must be a folder"):
        load_multi30k("de", "en", str(tmp_path), "file:///nowhere", tmp_path)


def test_failed_download_suggests_data_dir(tmp_path, monkeypatch):
    monkeypatch.setattr("nmt.text.corpus.SHARED_COPY", tmp_path / "no-shared-copy")
    with pytest.raises(UserError, match=r"data.dir=FOLDER to train.py \(make train DATA_DIR=FOLDER\)"):
        fetch("val.de.gz", f"file://{tmp_path}/empty", tmp_path / "cache")


@pytest.mark.skipif(not MULTI30K.is_dir(), reason=f"no offline copy of Multi30k at {MULTI30K}")
def test_multi30k_from_folder_and_from_file_url(tmp_path):
    splits = load_multi30k("de", "en", str(MULTI30K), "unused", tmp_path)
    assert (len(splits.train), len(splits.valid), len(splits.test)) == (29000, 1014, 1000)
    cached = fetch("val.en.gz", MULTI30K.resolve().as_uri(), tmp_path / "cache")  # the download path, via file://
    assert cached.read_bytes() == (MULTI30K / "val.en.gz").read_bytes()


def test_download_with_wrong_checksum_is_rejected(tmp_path, monkeypatch):
    monkeypatch.setattr("nmt.text.corpus.SHARED_COPY", tmp_path / "no-shared-copy")
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "val.de.gz").write_bytes(gzip.compress(b"not the real file\n"))
    with pytest.raises(UserError, match="does not match its sha256"):
        fetch("val.de.gz", mirror.as_uri(), tmp_path / "cache")
    assert not (tmp_path / "cache" / "val.de.gz").exists()


def test_sentencepiece_round_trip(sample_splits, sample_vocabulary):
    sentences = [t for _, t in sample_splits.valid]
    assert sample_vocabulary.decode_target(sample_vocabulary.encode_target(sentences)) == sentences
    ids = sample_vocabulary.encode_source(["Der Hund schläft."])[0]
    assert all(i > EOS_ID for i in ids)  # special ids never come out of text
    assert sample_vocabulary.source.pad_id() == PAD_ID and sample_vocabulary.source.bos_id() == BOS_ID


def test_vocabulary_cache_is_reused(tmp_path, sample_splits):
    from nmt.text.data import build_vocabulary

    first = build_vocabulary(sample_splits.train, 120, False, "bpe", 1.0, tmp_path)
    assert len(list(tmp_path.glob("*.model"))) == 2
    second = build_vocabulary(sample_splits.train, 120, False, "bpe", 1.0, tmp_path)
    assert second.source_model == first.source_model and second.target_model == first.target_model
    assert not first.joint


def test_a_damaged_vocabulary_cache_is_named_and_trained_again(tmp_path, sample_splits, caplog):
    from nmt.text.data import build_vocabulary

    first = build_vocabulary(sample_splits.train, 120, False, "bpe", 1.0, tmp_path)
    cached = sorted(tmp_path.glob("*.src.model"))[0]
    cached.write_bytes(b"cut short")
    again = build_vocabulary(sample_splits.train, 120, False, "bpe", 1.0, tmp_path)
    assert again.source_model == first.source_model and cached.read_bytes() == first.source_model  # rebuilt, stored
    assert f"the cached sentencepiece models {cached}" in caplog.text and "training them again" in caplog.text


def test_jobs_that_fill_one_vocabulary_cache_at_once_each_write_it_whole(tmp_path):
    """Two jobs of a sweep start together and train the same sentencepiece models: each writes the cached file
    through a temporary file of its own, so neither fails nor leaves a mix of the two."""
    from concurrent.futures import ThreadPoolExecutor

    from nmt.paths import write_text

    path = tmp_path / "cache" / "key.src.model"
    path.parent.mkdir()
    contents = [bytes([i]) * 200_000 for i in range(8)]

    def fill(content: bytes) -> None:
        for _ in range(20):
            write_text(path, content)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(fill, contents))  # a shared temporary name fails here: a rename of a file another moved away
    assert path.read_bytes() in contents and [p.name for p in path.parent.iterdir()] == ["key.src.model"]
    assert path.stat().st_mode & 0o777 == 0o666 & ~__import__("nmt.paths").paths.UMASK


def test_batches_respect_the_token_bound_and_masks(sample_splits, sample_vocabulary):
    dataset = ParallelDataset(sample_splits.train, sample_vocabulary)
    sampler = TokenBatchSampler(dataset, max_tokens=300, shuffle=True, seed=3, max_len=30)
    seen = []
    for indices in sampler:
        batch = collate([dataset[i] for i in indices])
        longest = max(batch.source.shape[1], batch.target_in.shape[1])
        assert batch.source.shape[0] * longest <= 300
        assert torch.equal(batch.source_mask, batch.source != PAD_ID)
        assert (batch.target_in[:, 0] == BOS_ID).all()
        assert ((batch.target_out == EOS_ID).sum(1) == 1).all()
        assert torch.equal(batch.target_in != PAD_ID, batch.target_out != PAD_ID)
        seen.extend(indices)
    lengths = np.maximum(dataset.source_lengths, dataset.target_lengths)
    assert sorted(seen) == sorted(np.flatnonzero(lengths <= 30).tolist())
    assert sampler.dropped == int((lengths > 30).sum())


def test_batches_are_bucketed_and_reproducible_per_epoch(sample_splits, sample_vocabulary):
    dataset = ParallelDataset(sample_splits.train, sample_vocabulary)
    sampler = TokenBatchSampler(dataset, max_tokens=400, shuffle=True, seed=3)
    first = sampler.batches()
    assert sampler.batches() == first
    sampler.set_epoch(1)
    assert sampler.batches() != first
    real = sum(int(dataset.source_lengths[i]) for b in first for i in b)
    padded = sum(len(b) * int(dataset.source_lengths[b].max()) for b in first)
    assert real / padded > 0.85  # bucketing keeps padding low


def test_max_tokens_smaller_than_a_sentence_is_a_user_error(sample_splits, sample_vocabulary):
    dataset = ParallelDataset(sample_splits.train, sample_vocabulary)
    with pytest.raises(UserError, match="data.max_tokens=5 is smaller than the longest sentence"):
        TokenBatchSampler(dataset, max_tokens=5, shuffle=True)


def test_sample_corpus_is_deterministic_and_has_reorderings():
    first = generate(200, 20, 20, seed=5)
    first.train.append(("Ein Satz des Aufrufers.", "A caller's own sentence."))  # its lists are its own
    second = generate(200, 20, 20, seed=5)  # drawn once per process
    drawn.cache_clear()
    assert second == generate(200, 20, 20, seed=5) and len(first.train) == len(second.train) + 1  # drawn again
    first = second
    pairs = first.train + first.valid + first.test
    assert len({s for s, _ in pairs}) == len(pairs)  # no duplicates, so no test sentence is in training
    assert any(", weil" in s or ", wenn" in s for s, _ in pairs)  # verb-final subordinate clauses
    assert any(s.rstrip(".").endswith((" an", " auf", " ab")) for s, _ in pairs)  # separable particles


def test_collate_pads_each_row_as_written_out_one_row_at_a_time():
    """The vectorised collate against the definition, row by row: source ids then padding; bos y_1..y_n and
    y_1..y_n eos; masks, positions of the real target tokens and lengths. Ragged rows, an empty target among them."""
    rng = np.random.default_rng(5)
    items = []
    for index in range(40):
        source = rng.integers(4, 50, rng.integers(1, 12)).tolist()
        target = rng.integers(4, 50, 0 if index == 7 else rng.integers(1, 15)).tolist()
        items.append((index * 3, source, target))
    batch = collate(items)
    width_source, width_target = max(len(s) for _, s, _ in items), max(len(t) for _, _, t in items) + 1
    for row, (_, source, target) in enumerate(items):
        assert batch.source[row].tolist() == source + [PAD_ID] * (width_source - len(source))
        assert batch.target_in[row].tolist() == [BOS_ID, *target] + [PAD_ID] * (width_target - len(target) - 1)
        assert batch.target_out[row].tolist() == [*target, EOS_ID] + [PAD_ID] * (width_target - len(target) - 1)
    assert batch.source.dtype == batch.target_in.dtype == batch.target_out.dtype == torch.long
    assert torch.equal(batch.source_mask, batch.source != PAD_ID)
    assert batch.source_lengths.tolist() == [len(s) for _, s, _ in items]
    assert batch.indices.tolist() == [i for i, _, _ in items]
    real = [row * width_target + col for row, (_, _, t) in enumerate(items) for col in range(len(t) + 1)]
    assert batch.target_positions.tolist() == real
