"""The sample grammar's words (nmt.sample): its lexicon, German and English side by side, with the gender and plural
of each noun and the forms of each verb; German articles and adjective endings by case, gender and number; the words
and phrases a sentence is built of, each German word linked to the English words it translates (the gold alignment
the grammar writes); and the order of a clause's phrases on each side (main and subordinate clauses, a fronted time
adverb), rendered as the pair's texts and links. `nmt.sample.Grammar` chooses the words.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nmt.aer import Gold

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
