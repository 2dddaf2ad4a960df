"""The built-in sample corpus: German-English pairs generated from a small grammar written for this project.

It is small enough to train on in a couple of minutes and rich enough to need real translation: gender and case on
articles and adjectives, plural nouns with numbers, verbs that agree with their subject, separable verbs whose
particle goes to the end of a German main clause, subordinate clauses with the verb at the end, and a fronted time
adverb that moves the German verb before its subject. The same seed always gives the same corpus.

Its words come first: the lexicon, German and English side by side, with the gender and plural of each noun and the
forms of each verb; German articles and adjective endings by case, gender and number; the words and phrases a
sentence is built of, each German word linked to the English words it translates; and the order of a clause's phrases
on each side (main and subordinate clauses, a fronted time adverb). `Grammar` chooses the words.

The grammar knows which German word each English word translates, so every pair comes with its gold word alignment
(`nmt.text.aer.Gold`): sure links between a word and its translation, possible links where a word has no
counterpart of its own (the German separable particle and the English verb, the article folded into "im" and "the").
Options make sentences longer (clauses, adjectives, prepositional phrases) and switch the reorderings on and off;
`python -m nmt.text.sample FOLDER` writes the corpus as plain parallel files with `.align` files of gold links in
Pharaoh format (0-based word indices), e.g. a long-sentence test set:

    python -m nmt.text.sample data/long --clauses 8 --phrases 2 --min-words 30 --max-words 80 --sizes 0 0 500
"""

from __future__ import annotations

import argparse
import random
from dataclasses import astuple, dataclass, field
from functools import lru_cache
from pathlib import Path

from nmt import UserError
from nmt.config import GrammarOptions
from nmt.paths import output_file, output_folder, write_text
from nmt.text.aer import Gold, format_links
from nmt.text.corpus import Splits

# (German singular, German plural, gender, English singular, English plural)
PEOPLE = [
    ("Mann", "Männer", "m", "man", "men"),
    ("Frau", "Frauen", "f", "woman", "women"),
    ("Kind", "Kinder", "n", "child", "children"),
    ("Junge", "Jungen", "m", "boy", "boys"),
    ("Mädchen", "Mädchen", "n", "girl", "girls"),
    ("Lehrer", "Lehrer", "m", "teacher", "teachers"),
    ("Ärztin", "Ärztinnen", "f", "doctor", "doctors"),
    ("Hund", "Hunde", "m", "dog", "dogs"),
    ("Katze", "Katzen", "f", "cat", "cats"),
    ("Koch", "Köche", "m", "cook", "cooks"),
]
THINGS = [
    ("Ball", "Bälle", "m", "ball", "balls"),
    ("Buch", "Bücher", "n", "book", "books"),
    ("Apfel", "Äpfel", "m", "apple", "apples"),
    ("Zeitung", "Zeitungen", "f", "newspaper", "newspapers"),
    ("Fahrrad", "Fahrräder", "n", "bicycle", "bicycles"),
    ("Auto", "Autos", "n", "car", "cars"),
    ("Brief", "Briefe", "m", "letter", "letters"),
    ("Blume", "Blumen", "f", "flower", "flowers"),
    ("Tür", "Türen", "f", "door", "doors"),
    ("Tasche", "Taschen", "f", "bag", "bags"),
]
PLACES = [("Park", "m", "park"), ("Küche", "f", "kitchen"), ("Haus", "n", "house"), ("Garten", "m", "garden")]
ADJECTIVES = [
    ("groß", "big"),
    ("klein", "small"),
    ("alt", "old"),
    ("jung", "young"),
    ("rot", "red"),
    ("blau", "blue"),
    ("schnell", "fast"),
    ("müde", "tired"),
]
NUMBERS = [("zwei", "two"), ("drei", "three"), ("vier", "four"), ("fünf", "five")]
# (3rd singular, 3rd plural / infinitive, English singular, English plural)
TRANSITIVE = [
    ("sieht", "sehen", "sees", "see"),
    ("liest", "lesen", "reads", "read"),
    ("kauft", "kaufen", "buys", "buy"),
    ("hat", "haben", "has", "have"),
    ("sucht", "suchen", "looks for", "look for"),
    ("trägt", "tragen", "carries", "carry"),
]
INTRANSITIVE = [
    ("läuft", "laufen", "runs", "run"),
    ("schläft", "schlafen", "sleeps", "sleep"),
    ("lacht", "lachen", "laughs", "laugh"),
    ("singt", "singen", "sings", "sing"),
    ("wartet", "warten", "waits", "wait"),
]
# Separable verbs: (particle, 3rd singular stem, plural stem, English singular, English plural, objects they take).
# A two-word English verb (picks up) has its own particle, which the German particle translates.
SEPARABLE = [
    ("auf", "macht", "machen", "opens", "open", ("Tür", "Tasche", "Buch")),
    ("an", "ruft", "rufen", "calls", "call", None),
    ("ab", "holt", "holen", "picks up", "pick up", None),
    ("an", "schaut", "schauen", "looks at", "look at", None),
]
CONJUNCTIONS = [("weil", "because"), ("während", "while"), ("wenn", "when"), ("obwohl", "although")]
TIMES = [("heute", "today"), ("morgen", "tomorrow"), ("jetzt", "now"), ("oft", "often")]
COMPANIONS = [("mit", "with"), ("ohne", "without"), ("neben", "next to")]  # + dative (ohne takes the accusative)

DEFINITE = {
    "nom": {"m": "der", "f": "die", "n": "das"},
    "acc": {"m": "den", "f": "die", "n": "das"},
    "dat": {"m": "dem", "f": "der", "n": "dem"},
}
INDEFINITE = {
    "nom": {"m": "ein", "f": "eine", "n": "ein"},
    "acc": {"m": "einen", "f": "eine", "n": "ein"},
    "dat": {"m": "einem", "f": "einer", "n": "einem"},
}


def adjective_ending(article: str, case: str, gender: str, plural: bool) -> str:
    """German adjective ending after a definite, indefinite or no article (mixed/weak/strong declension)."""
    if plural:
        return {"definite": "en", "none": "e"}[article] if case != "dat" else "en"
    if case == "dat" or (case == "acc" and gender == "m"):
        return "en"
    if article == "definite":
        return "e"
    return {"m": "er", "f": "e", "n": "es"}[gender]


def inflect(stem: str, ending: str) -> str:
    return stem + ending[1:] if stem.endswith("e") else stem + ending


class Word:
    """One word of one side of a sentence; links refer to words by identity, so they survive any reordering."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text


@dataclass
class Phrase:
    """German and English words (each side in its own order) and the links between them (German, English, sure)."""

    de: list[Word] = field(default_factory=list)
    en: list[Word] = field(default_factory=list)
    links: list[tuple[Word, Word, bool]] = field(default_factory=list)

    def __add__(self, other: Phrase) -> Phrase:
        return Phrase(self.de + other.de, self.en + other.en, self.links + other.links)

    def __bool__(self) -> bool:
        return bool(self.de or self.en)


def words(de: str, en: str) -> Phrase:
    """A translation pair: a one-word German side is linked surely to the first English word and possibly to the
    rest (sucht: looks for); words of equal count are linked one to one."""
    de_words, en_words = [Word(w) for w in de.split()], [Word(w) for w in en.split()]
    if len(de_words) == len(en_words):
        links = [(d, e, True) for d, e in zip(de_words, en_words)]
    else:
        links = [(d, e, k == 0) for d in de_words for k, e in enumerate(en_words)]
    return Phrase(de_words, en_words, links)


def join(*phrases: Phrase) -> Phrase:
    result = Phrase()
    for phrase in phrases:
        result = result + phrase
    return result


def separable_verb(particle: str, stem: str, english: str) -> tuple[Phrase, Phrase, Phrase]:
    """The stem and the particle of a main clause, and the joined verb of a subordinate clause. A one-word English
    verb is the stem's translation and possibly the particle's (ruft ... an: calls); a two-word one has its own
    particle, the German particle's translation (holt ... ab: picks up)."""
    stem_word, particle_word, joined_word = Word(stem), Word(particle), Word(particle + stem)
    en = [Word(w) for w in english.split()]
    if len(en) == 1:
        links = [(stem_word, en[0], True), (particle_word, en[0], False)]
    else:
        links = [
            (stem_word, en[0], True),
            (stem_word, en[1], False),
            (particle_word, en[1], True),
            (particle_word, en[0], False),
        ]
    joined = Phrase([joined_word], en, [(joined_word, e, True) for e in en])
    return Phrase([stem_word], en, links), Phrase([particle_word], [], []), joined


def render(de: list[Word], en: list[Word], links: list[tuple[Word, Word, bool]]) -> tuple[str, str, Gold]:
    """Sentence texts (capitalised, with a full stop on the last word) and the links as word indices."""
    de_index = {id(w): i for i, w in enumerate(de)}
    en_index = {id(w): j for j, w in enumerate(en)}
    present = [
        (de_index[id(d)], en_index[id(e)], sure) for d, e, sure in links if id(d) in de_index and id(e) in en_index
    ]
    gold = Gold.of([(i, j) for i, j, sure in present if sure], [(i, j) for i, j, sure in present if not sure])
    de_text, en_text = " ".join(w.text for w in de) + ".", " ".join(w.text for w in en) + "."
    return de_text[0].upper() + de_text[1:], en_text[0].upper() + en_text[1:], gold


Clause = dict[str, Phrase]  # subject, verb, object, place, particle; `joined` for a separable verb


def make_clause(
    subject: Phrase,
    verb: Phrase,
    object: Phrase | None = None,
    place: Phrase | None = None,
    particle: Phrase | None = None,
    joined: Phrase | None = None,
) -> Clause:
    parts = {
        "subject": subject,
        "verb": verb,
        "object": object or Phrase(),
        "place": place or Phrase(),
        "particle": particle or Phrase(),
    }
    return parts | ({"joined": joined} if joined else {})


def english(parts: Clause) -> list[Word]:
    return [w for key in ("subject", "verb", "object", "place") for w in parts[key].en]


def main_clause(parts: Clause) -> list[Word]:
    """Verb second; a separable verb's particle goes to the end."""
    return [w for key in ("subject", "verb", "object", "place", "particle") for w in parts[key].de]


def subordinate_clause(parts: Clause) -> list[Word]:
    """Verb last, with a separable verb joined to its particle (weil der Mann die Frau anruft)."""
    verb = parts.get("joined", parts["verb"])
    return [w for key in ("subject", "object", "place") for w in parts[key].de] + verb.de


def links(*clauses: Clause) -> list[tuple[Word, Word, bool]]:
    return [link for parts in clauses for phrase in parts.values() for link in phrase.links]


def simple_sentence(parts: Clause) -> tuple[str, str, Gold]:
    """A main clause alone."""
    return render(main_clause(parts), english(parts), links(parts))


def fronted(time: Phrase, parts: Clause) -> tuple[str, str, Gold]:
    """A fronted time adverb: the German verb comes before the subject (V2), the English order stays."""
    rest = [w for key in ("subject", "object", "place", "particle") for w in parts[key].de]
    return render(time.de + parts["verb"].de + rest, time.en + english(parts), links(parts, {"time": time}))


def complex_sentence(first: Clause, subordinates: list[tuple[Phrase, Clause]]) -> tuple[str, str, Gold]:
    """A main clause, then subordinate clauses, each after a comma and its conjunction."""
    de, en, clauses = main_clause(first), english(first), [first]
    for conjunction, parts in subordinates:
        de[-1].text += ","  # the words of a sentence are its own, so the comma can join the word it follows
        de, en = de + conjunction.de + subordinate_clause(parts), en + conjunction.en + english(parts)
        clauses += [parts, {"conjunction": conjunction}]
    return render(de, en, links(*clauses))


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
    parser = argparse.ArgumentParser(prog="python -m nmt.text.sample", description=__doc__.split("\n\n")[0])
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
