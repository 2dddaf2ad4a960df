"""The built-in sample corpus: German-English pairs generated from a small grammar written for this project.

It is small enough to train on in a couple of minutes and rich enough to need real translation: gender and case on
articles and adjectives, plural nouns with numbers, verbs that agree with their subject, separable verbs whose
particle goes to the end of a German main clause, subordinate clauses with the verb at the end, and a fronted time
adverb that moves the German verb before its subject. The alignment plots of a trained attention model show these
reorderings. The same seed always gives the same corpus.

`python -m nmt.sample FOLDER` writes it out as plain parallel files.
"""

from __future__ import annotations

import random
import sys

from nmt.corpus import Splits, copy_corpus

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
# Separable verbs: (particle, 3rd singular stem, plural stem, English singular, English plural, objects they take)
SEPARABLE = [
    ("auf", "macht", "machen", "opens", "open", ("Tür", "Tasche", "Buch")),
    ("an", "ruft", "rufen", "calls", "call", None),
    ("ab", "holt", "holen", "picks up", "pick up", None),
    ("an", "schaut", "schauen", "looks at", "look at", None),
]
CONJUNCTIONS = [("weil", "because"), ("während", "while"), ("wenn", "when"), ("obwohl", "although")]
TIMES = [("heute", "today"), ("morgen", "tomorrow"), ("jetzt", "now"), ("oft", "often")]

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


class Grammar:
    def __init__(self, rng: random.Random):
        self.rng = rng

    def noun_phrase(self, nouns: list, case: str, plural: bool | None = None) -> tuple[str, str, bool]:
        """A German and an English noun phrase and whether it is plural."""
        rng = self.rng
        de_sg, de_pl, gender, en_sg, en_pl = rng.choice(nouns)
        plural = rng.random() < 0.25 if plural is None else plural
        adjective = rng.choice(ADJECTIVES) if rng.random() < 0.4 else None
        if plural:
            number = rng.choice(NUMBERS) if rng.random() < 0.6 else None
            article = "definite" if number is None else "none"
            de, en = ([number[0]] if number else ["die"]), ([number[1]] if number else ["the"])
            noun_de, noun_en = de_pl, en_pl
            if case == "dat" and not noun_de.endswith(("n", "s")):
                noun_de += "n"  # dative plural: den Männern
            if case == "dat" and not number:
                de = ["den"]
        else:
            article = rng.choice(["definite", "indefinite"])
            table = DEFINITE if article == "definite" else INDEFINITE
            de, en = [table[case][gender]], ["the" if article == "definite" else "a"]
            noun_de, noun_en = de_sg, en_sg
            if noun_de == "Junge" and case != "nom":
                noun_de = "Jungen"  # a weak noun: den Jungen, dem Jungen
        if adjective:
            de.append(inflect(adjective[0], adjective_ending(article, case, gender, plural)))
            en.append(adjective[1])
        de.append(noun_de)
        en.append(noun_en)
        if en[0] == "a" and en[1][0] in "aeiou":
            en[0] = "an"
        return " ".join(de), " ".join(en), plural

    def place(self) -> tuple[str, str]:
        de_noun, gender, en_noun = self.rng.choice(PLACES)
        contraction = {"m": "im", "n": "im", "f": "in der"}[gender]
        return f"{contraction} {de_noun}", f"in the {en_noun}"

    def clause(self) -> dict:
        """The parts of one clause; `main` and `subordinate` put them in German order."""
        rng = self.rng
        subject_de, subject_en, plural = self.noun_phrase(PEOPLE, "nom")
        kind = rng.choice(["transitive", "transitive", "intransitive", "separable"])
        parts = {"subject": (subject_de, subject_en), "object": ("", ""), "particle": "", "place": ("", "")}
        if kind == "intransitive":
            verb = rng.choice(INTRANSITIVE)
            parts["verb"] = (verb[1] if plural else verb[0], verb[3] if plural else verb[2])
            if rng.random() < 0.5:
                parts["place"] = self.place()
        elif kind == "transitive":
            verb = rng.choice(TRANSITIVE)
            parts["verb"] = (verb[1] if plural else verb[0], verb[3] if plural else verb[2])
            parts["object"] = self.noun_phrase(THINGS, "acc")[:2]
        else:
            particle, singular, plural_stem, en_singular, en_plural, objects = rng.choice(SEPARABLE)
            parts["verb"] = (plural_stem if plural else singular, en_plural if plural else en_singular)
            parts["particle"] = particle
            pool = [n for n in THINGS if n[0] in objects] if objects else PEOPLE
            parts["object"] = self.noun_phrase(pool, "acc")[:2]
        return parts

    @staticmethod
    def english(parts: dict) -> str:
        words = [parts["subject"][1], parts["verb"][1], parts["object"][1], parts["place"][1]]
        return " ".join(w for w in words if w)

    @staticmethod
    def main(parts: dict) -> str:
        """Verb second; a separable verb's particle goes to the end."""
        words = [parts["subject"][0], parts["verb"][0], parts["object"][0], parts["place"][0], parts["particle"]]
        return " ".join(w for w in words if w)

    @staticmethod
    def subordinate(parts: dict) -> str:
        """Verb last, with a separable verb joined to its particle (weil der Mann die Frau anruft)."""
        verb = parts["particle"] + parts["verb"][0]
        words = [parts["subject"][0], parts["object"][0], parts["place"][0], verb]
        return " ".join(w for w in words if w)

    def sentence(self) -> tuple[str, str]:
        rng = self.rng
        first = self.clause()
        roll = rng.random()
        if roll < 0.35:
            de, en = self.main(first), self.english(first)
        elif roll < 0.55:
            # A fronted time adverb: the German verb comes before the subject (V2), the English order stays.
            time_de, time_en = rng.choice(TIMES)
            words = [
                time_de.capitalize(),
                first["verb"][0],
                first["subject"][0],
                first["object"][0],
                first["place"][0],
                first["particle"],
            ]
            de = " ".join(w for w in words if w)
            en = f"{time_en} {self.english(first)}"
        else:
            second = self.clause()
            conjunction_de, conjunction_en = rng.choice(CONJUNCTIONS)
            de = f"{self.main(first)}, {conjunction_de} {self.subordinate(second)}"
            en = f"{self.english(first)} {conjunction_en} {self.english(second)}"
        return de[0].upper() + de[1:] + ".", en[0].upper() + en[1:] + "."


def generate(train: int = 4000, valid: int = 300, test: int = 300, seed: int = 1234) -> Splits:
    """A deterministic corpus of distinct sentence pairs, split into train/valid/test without overlap."""
    grammar = Grammar(random.Random(seed))
    seen: dict[str, str] = {}
    wanted = train + valid + test
    while len(seen) < wanted:
        de, en = grammar.sentence()
        seen.setdefault(de, en)
    pairs = list(seen.items())
    return Splits(pairs[:train], pairs[train : train + valid], pairs[train + valid :])


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m nmt.sample FOLDER")
    copy_corpus(sys.argv[1], generate(), "de", "en")
