"""The built-in sample corpus: German-English pairs generated from a small grammar written for this project.

It is small enough to train on in a couple of minutes and rich enough to need real translation: gender and case on
articles and adjectives, plural nouns with numbers, verbs that agree with their subject, separable verbs whose
particle goes to the end of a German main clause, subordinate clauses with the verb at the end, and a fronted time
adverb that moves the German verb before its subject. The same seed always gives the same corpus.

The grammar knows which German word each English word translates, so every pair comes with its gold word alignment
(`nmt.aer.Gold`): sure links between a word and its translation, possible links where a word has no
counterpart of its own (the German separable particle and the English verb, the article folded into "im" and "the").
Options make sentences longer (clauses, adjectives, prepositional phrases) and switch the reorderings on and off;
`python -m nmt.sample FOLDER` writes the corpus as plain parallel files with `.align` files of gold links in Pharaoh
format (0-based word indices), e.g. a long-sentence test set:

    python -m nmt.sample data/long --clauses 8 --phrases 2 --min-words 30 --max-words 80 --sizes 0 0 500
"""

from __future__ import annotations

import argparse
import random
from dataclasses import astuple
from functools import lru_cache
from pathlib import Path

from nmt import UserError
from nmt.aer import Gold, format_links
from nmt.config import GrammarOptions
from nmt.corpus import Splits
from nmt.paths import output_file, output_folder, write_text
from nmt.sample_words import (
    ADJECTIVES,
    COMPANIONS,
    CONJUNCTIONS,
    DEFINITE,
    INDEFINITE,
    INTRANSITIVE,
    NUMBERS,
    PEOPLE,
    PLACES,
    SEPARABLE,
    THINGS,
    TIMES,
    TRANSITIVE,
    Phrase,
    Word,
    adjective_ending,
    complex_sentence,
    fronted,
    inflect,
    join,
    separable_verb,
    simple_sentence,
    words,
)


class Grammar:
    def __init__(self, rng: random.Random, options: GrammarOptions | None = None):
        self.rng, self.options = rng, options or GrammarOptions()

    def noun_phrase(self, nouns: list, case: str, plural: bool | None = None) -> tuple[Phrase, bool]:
        """A German and English noun phrase and whether it is plural."""
        rng = self.rng
        de_sg, de_pl, gender, en_sg, en_pl = rng.choice(nouns)
        plural = rng.random() < 0.25 if plural is None else plural
        adjective = rng.choice(ADJECTIVES) if rng.random() < self.options.adjectives else None
        if plural:
            number = rng.choice(NUMBERS) if rng.random() < 0.6 else None
            article = "definite" if number is None else "none"
            determiner = number if number else ("den" if case == "dat" else "die", "the")
            noun_de, noun_en = de_pl, en_pl
            if case == "dat" and not noun_de.endswith(("n", "s")):
                noun_de += "n"  # dative plural: den Männern
        else:
            article = rng.choice(["definite", "indefinite"])
            table = DEFINITE if article == "definite" else INDEFINITE
            determiner = (table[case][gender], "the" if article == "definite" else "a")
            noun_de, noun_en = de_sg, en_sg
            if noun_de == "Junge" and case != "nom":
                noun_de = "Jungen"  # a weak noun: den Jungen, dem Jungen
            if determiner[1] == "a" and (adjective[1] if adjective else noun_en)[0] in "aeiou":
                determiner = (determiner[0], "an")
        parts = [words(*determiner)]
        if adjective:
            parts.append(words(inflect(adjective[0], adjective_ending(article, case, gender, plural)), adjective[1]))
        parts.append(words(noun_de, noun_en))
        return join(*parts), plural

    def place(self) -> Phrase:
        """in + a place: im Park (in dem: 'im' is 'in' and possibly 'the'), in der Küche."""
        de_noun, gender, en_noun = self.rng.choice(PLACES)
        if gender == "f":
            return join(words("in der", "in the"), words(de_noun, en_noun))
        contraction, preposition, article = Word("im"), Word("in"), Word("the")
        contracted = Phrase(
            [contraction], [preposition, article], [(contraction, preposition, True), (contraction, article, False)]
        )
        return contracted + words(de_noun, en_noun)

    def companion(self) -> Phrase:
        """A prepositional phrase with a person: mit dem Hund, ohne die Frau, neben einem Kind."""
        preposition = self.rng.choice(COMPANIONS)
        noun_phrase, _ = self.noun_phrase(PEOPLE, "acc" if preposition[0] == "ohne" else "dat")
        return words(*preposition) + noun_phrase

    def clause(self) -> dict[str, Phrase]:
        """The parts of one clause; `main`, `subordinate` and `english` put them in each language's order."""
        rng = self.rng
        subject, plural = self.noun_phrase(PEOPLE, "nom")
        kinds = ["transitive", "transitive", "intransitive"] + (["separable"] if self.options.separable else [])
        kind = rng.choice(kinds)
        parts = {"subject": subject, "object": Phrase(), "particle": Phrase(), "place": Phrase()}
        if kind == "intransitive":
            verb = rng.choice(INTRANSITIVE)
            parts["verb"] = words(verb[1] if plural else verb[0], verb[3] if plural else verb[2])
            if rng.random() < 0.5:
                parts["place"] = self.place()
        elif kind == "transitive":
            verb = rng.choice(TRANSITIVE)
            parts["verb"] = words(verb[1] if plural else verb[0], verb[3] if plural else verb[2])
            parts["object"] = self.noun_phrase(THINGS, "acc")[0]
        else:
            particle, singular, plural_stem, en_singular, en_plural, objects = rng.choice(SEPARABLE)
            parts["verb"], parts["particle"], parts["joined"] = separable_verb(
                particle, plural_stem if plural else singular, en_plural if plural else en_singular
            )
            pool = [n for n in THINGS if n[0] in objects] if objects else PEOPLE
            parts["object"] = self.noun_phrase(pool, "acc")[0]
        for _ in range(self.options.phrases):  # drawn only when asked for, so the default corpus stays the same
            if rng.random() < 0.5:
                parts["place"] = parts["place"] + (self.place() if rng.random() < 0.5 else self.companion())
        return parts

    def sentence(self) -> tuple[str, str, Gold]:
        """A German sentence, its English translation and their gold word alignment."""
        rng = self.rng
        first = self.clause()
        roll = rng.random()
        if 0.35 <= roll < 0.55 and self.options.fronted:
            return fronted(words(*rng.choice(TIMES)), first)
        if roll < 0.55 or not self.options.subordinate:
            return simple_sentence(first)
        count = rng.randint(1, self.options.clauses - 1) if self.options.clauses > 2 else 1
        subordinates = []
        for _ in range(count):
            second = self.clause()
            subordinates.append((words(*rng.choice(CONJUNCTIONS)), second))
        return complex_sentence(first, subordinates)


# The most pairs the grammar is asked for: beyond it generation takes minutes and runs short of distinct sentences
MAX_PAIRS = 200_000


def check_sizes(train: int, valid: int, test: int, option: str = "data.sizes") -> None:
    """Refuse sizes that are negative or too large for the grammar, naming the option."""
    for name, size in (("train", train), ("valid", valid), ("test", test)):
        if size < 0:
            raise UserError(f"{option}: {name}={size}; a number of sentence pairs cannot be negative")
    if train + valid + test > MAX_PAIRS:
        raise UserError(
            f"{option}: {train + valid + test:,} pairs in all; the sample grammar gives at most "
            f"{MAX_PAIRS:,} (more takes minutes and runs short of distinct sentences): for a larger "
            "corpus use data=files"
        )


def generate_aligned(
    train: int = 4000, valid: int = 300, test: int = 300, seed: int = 1234, options: GrammarOptions | None = None
) -> tuple[Splits, dict[str, list[Gold]]]:
    """A deterministic corpus of distinct sentence pairs, split into train/valid/test without overlap, and the gold
    alignment of every pair, by split. Drawn once per process for each size, seed and grammar (a sweep's jobs, and a
    run's records and measurements, read the same corpus again); every call gets lists of its own."""
    options = options or GrammarOptions()
    options.check()
    check_sizes(train, valid, test)
    items = drawn(train + valid + test, seed, astuple(options))
    bounds = {"train": (0, train), "valid": (train, train + valid), "test": (train + valid, len(items))}
    gold = {name: [links for _, (_, links) in items[a:b]] for name, (a, b) in bounds.items()}
    return Splits(*([(de, en) for de, (en, _) in items[a:b]] for a, b in bounds.values()), alignments=gold), gold


@lru_cache(maxsize=8)
def drawn(wanted: int, seed: int, grammar: tuple) -> tuple[tuple[str, tuple[str, Gold]], ...]:
    """`wanted` distinct sentences the grammar with options `grammar` (GrammarOptions as a tuple) draws from `seed`,
    each (German, (English, gold links)), in the order drawn."""
    options = GrammarOptions(*grammar)
    sentences = Grammar(random.Random(seed), options)
    seen: dict[str, tuple[str, Gold]] = {}
    attempts, longest, limit = 0, 0, 1000 * (wanted + 10)
    while len(seen) < wanted:
        de, en, gold = sentences.sentence()
        length = len(de.split())
        longest = max(longest, length)
        if length >= options.min_words and (not options.max_words or length <= options.max_words):
            seen.setdefault(de, (en, gold))
        attempts += 1
        # At the rate found so far the limit comes first: refuse now, not after minutes of drawing
        if attempts > limit or (attempts % 2000 == 0 and len(seen) * limit < wanted * attempts):
            raise UserError(
                f"data.grammar: the grammar gives too few distinct sentences of {options.min_words} to "
                f"{options.max_words or 'any number of'} words with these options ({len(seen):,} of the "
                f"{wanted:,} asked for in {attempts:,} drawn; the longest had {longest} words); allow "
                "more clauses or phrases, or fewer sentences"
            )
    return tuple(seen.items())


def generate(train: int = 4000, valid: int = 300, test: int = 300, seed: int = 1234) -> Splits:
    """A deterministic corpus of distinct sentence pairs, split into train/valid/test without overlap."""
    return generate_aligned(train, valid, test, seed)[0]


def write_aligned(paths: tuple[Path, Path, Path], pairs: list[tuple[str, str]], gold: list[Gold]) -> None:
    """German lines, English lines and gold links (Pharaoh format), one pair per line, to the three paths."""
    paths[0].parent.mkdir(parents=True, exist_ok=True)
    write_text(paths[0], "".join(de + "\n" for de, _ in pairs))
    write_text(paths[1], "".join(en + "\n" for _, en in pairs))
    write_text(paths[2], "".join(format_links(g.sure, g.possible) + "\n" for g in gold))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m nmt.sample", description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--sizes", type=int, nargs=3, default=[4000, 300, 300], metavar=("TRAIN", "VALID", "TEST"))
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--overwrite", action="store_true", help="replace the split files already in FOLDER")
    defaults = GrammarOptions()
    for name, value in vars(defaults).items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=value)
        else:
            parser.add_argument(flag, type=type(value), default=value)
    args = parser.parse_args(argv)
    options = GrammarOptions(**{name: getattr(args, name) for name in vars(defaults)})
    files = {
        name: tuple(args.folder / f"{name}.{suffix}" for suffix in ("de", "en", "align"))
        for name in ("train", "valid", "test")
    }
    try:
        check_sizes(*args.sizes, option="--sizes")
        output_folder(args.folder, "FOLDER")
        for path in (p for paths in files.values() for p in paths):  # before the corpus is generated
            output_file(path, "FOLDER", overwrite=args.overwrite)
        splits, gold = generate_aligned(*args.sizes, seed=args.seed, options=options)
    except UserError as error:
        parser.error(str(error))
    for name, links in gold.items():
        write_aligned(files[name], splits.split(name), links)
    print(f"wrote {', '.join(f'{len(v)} {k}' for k, v in gold.items())} pairs with gold alignments to {args.folder}")


if __name__ == "__main__":
    main()
