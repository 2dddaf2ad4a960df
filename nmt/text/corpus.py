"""Parallel text: three sources, one shape.

`Splits` holds train/valid/test lists of (source, target) strings, from
- Multi30k (task 1, raw), downloaded on first use and checked by sha256, or read from a folder that holds it;
- the built-in sample corpus (`nmt.text.sample`), generated from a small German-English grammar;
- the user's own parallel files.
Every reader names the file and line of what it cannot read.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import stat
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from nmt import UserError
from nmt.paths import KINDS

log = logging.getLogger(__name__)

MULTI30K_LANGS = ("de", "en", "fr", "cs")
MULTI30K_SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
# sha256 of the files the public dataset repository serves.
MULTI30K_SHA256 = {
    "test_2016_flickr.cs.gz": "200a4a74cc9560f051924abb9803be008d1908d77f747e9141aeb86dfd2797f1",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    "train.cs.gz": "a65adb8b32e3bc664f21ecba7a6e7f6950fd1f405e135f7c312faabdb6255077",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "val.cs.gz": "b63226e05c4bd5dd6a42897d74b86a1b9d2c31498252c572b1ea7f7996927fcc",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
}

Pairs = list[tuple[str, str]]


@dataclass
class Splits:
    """Parallel text of one corpus: lists of (source, target) sentence pairs, and where the corpus knows them (the
    sample grammar does), the gold word alignment of every pair (`nmt.text.aer.Gold`), by split name."""

    train: Pairs
    valid: Pairs
    test: Pairs
    alignments: dict[str, list] | None = None

    def split(self, name: str) -> Pairs:
        if name not in ("train", "valid", "test"):
            raise UserError(f"split={name!r} is not a split; use one of: train, valid, test")
        return getattr(self, name)


# --- reading text ---------------------------------------------------------------------------------------------


def read_lines(path: str | Path) -> list[str]:
    """The lines of a UTF-8 text file (gzipped when the name ends in .gz), without BOM or line endings.

    Raises UserError naming the file when it is missing or is not UTF-8 text.
    """
    path = Path(path)
    try:
        kind = KINDS.get(stat.S_IFMT(os.stat(path).st_mode))  # followed: a link to a text file is one
    except FileNotFoundError:
        raise UserError(f"{path}: no such file; check the path") from None
    except OSError as error:
        raise UserError(f"{path}: cannot be read ({error.strerror or error})") from None
    if kind is not None:  # never read: a device or FIFO may give bytes without end, or wait for them
        raise UserError(f"{path}: {kind}, not a text file; give the path of a file with one sentence per line")
    try:
        raw = path.read_bytes()
    except OSError as error:  # no permission to read it, an I/O error
        raise UserError(f"{path}: cannot be read ({error.strerror or error})") from None
    if path.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as error:
            raise UserError(f"{path}: not a readable gzip file ({error}). Delete it and download it again.") from None
    if b"\x00" in raw:
        raise UserError(f"{path}: holds NUL bytes, so it is a binary file, not a text corpus.")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise UserError(f"{path}, line {line}: not valid UTF-8. Convert the file to UTF-8 first.") from None
    # splitlines() would also break on form feeds and Unicode separators inside a sentence; only \n and \r\n end one.
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r").strip() for line in lines]


def read_parallel(source_path: str | Path, target_path: str | Path) -> Pairs:
    """Pairs of lines from two files that must have the same number of lines."""
    source, target = read_lines(source_path), read_lines(target_path)
    if len(source) != len(target):
        raise UserError(
            f"parallel files differ in length: {source_path} has {len(source)} lines, "
            f"{target_path} has {len(target)}. Each line of one must translate the same line of the other."
        )
    return list(zip(source, target))


def with_text(pairs: Pairs, split: str, where: str) -> Pairs:
    """The pairs of a split with text on both sides (a line of spaces and tabs is read as empty): a blank line
    teaches nothing, and a blank test line would be scored as a sentence. A split none of whose lines has text is
    refused, naming `where` (its files) and how many of its lines are blank; one partly blank loses those pairs,
    said once. An empty split (no lines at all) is left to whoever needs its pairs."""
    kept = [(s, t) for s, t in pairs if s and t]
    blank = len(pairs) - len(kept)
    if pairs and not kept:
        raise UserError(
            f"{where}: the {split} split has no text: all {len(pairs)} of its lines are blank on one side or both; "
            "give files with one sentence per line"
        )
    if blank:
        log.warning(
            "%s: %d of the %s split's %d pairs are blank on one side or both: dropped", where, blank, split, len(pairs)
        )
    return kept


# --- Multi30k ---------------------------------------------------------------------------------------------------


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# A copy of the corpus that a team keeps beside its checkouts (shared/data/multi30k next to the checkout's folder):
# read in place, once its sha256 matches, before anything is downloaded.
SHARED_COPY = Path(__file__).resolve().parents[3] / "shared" / "data" / "multi30k"


def good_copy(path: Path) -> bool:
    return path.is_file() and sha256(path) == MULTI30K_SHA256[path.name]


def fetch(name: str, url: str, cache: Path) -> Path:
    """One Multi30k file: the download cache's copy, else the shared copy beside the checkout (`SHARED_COPY`), else
    downloaded into `cache` (progress bar, sha256 check)."""
    target = cache / name
    for copy in (target, SHARED_COPY / name):
        if good_copy(copy):
            return copy
    cache.mkdir(parents=True, exist_ok=True)
    source = f"{url.rstrip('/')}/{name}"
    partial = target.with_suffix(".part")
    try:
        with urllib.request.urlopen(source, timeout=60) as response, open(partial, "wb") as out:
            size = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=size, unit="B", unit_scale=True, desc=name, leave=False) as bar:
                while chunk := response.read(1 << 16):
                    out.write(chunk)
                    bar.update(len(chunk))
    except (OSError, ValueError) as error:
        partial.unlink(missing_ok=True)
        raise UserError(
            f"could not download {source} ({error}). On a machine without internet, copy the Multi30k files into a "
            f"folder and give it: data.dir=FOLDER to train.py (make train DATA_DIR=FOLDER), or the NMT_DATA_DIR "
            f"variable, which every command and script reads; or put them in {cache} or {SHARED_COPY}; or point "
            f"data.url at a mirror (file:// works)."
        ) from None
    if sha256(partial) != MULTI30K_SHA256[name]:
        partial.unlink()
        raise UserError(f"{source}: the download does not match its sha256; the mirror serves a different file.")
    partial.replace(target)
    return target


def multi30k_file(split: str, lang: str, folder: str | None, url: str, cache: Path) -> Path:
    name = f"{MULTI30K_SPLITS[split]}.{lang}.gz"
    if folder:
        path = Path(folder) / name
        if not path.is_file():
            raise UserError(
                f"{path}: not found. data.dir must be a folder holding the Multi30k task-1 raw files "
                f"({name} and the others); leave it empty to download them."
            )
        return path
    return fetch(name, url, cache)


def load_multi30k(src_lang: str, tgt_lang: str, folder: str | None, url: str, cache: str | Path) -> Splits:
    for option, lang in (("data.src_lang", src_lang), ("data.tgt_lang", tgt_lang)):
        if lang not in MULTI30K_LANGS:
            raise UserError(f"{option}={lang!r}: Multi30k has {', '.join(MULTI30K_LANGS)}")
    if src_lang == tgt_lang:
        raise UserError(f"data.src_lang and data.tgt_lang are both {src_lang!r}; choose two different languages")
    pairs = {}
    for split in MULTI30K_SPLITS:
        files = [multi30k_file(split, lang, folder, url, Path(cache)) for lang in (src_lang, tgt_lang)]
        pairs[split] = with_text(read_parallel(*files), split, " and ".join(map(str, files)))
    return Splits(pairs["train"], pairs["valid"], pairs["test"])


def load_files(train, valid, test) -> Splits:
    """The user's own corpus: each of train/valid/test has `src` and `tgt` paths (nmt.config.FilePair)."""
    splits = {}
    for name, paths in (("train", train), ("valid", valid), ("test", test)):
        if any(path in (None, "", "???") for path in (paths.src, paths.tgt)):
            raise UserError(f"data.{name}.src and data.{name}.tgt must both name files (data=files)")
        where = f"data.{name}.src={paths.src} and data.{name}.tgt={paths.tgt}"
        splits[name] = with_text(read_parallel(paths.src, paths.tgt), name, where)
    return Splits(splits["train"], splits["valid"], splits["test"])
