"""What a run's model is, as the study compares it: a structured key read from the model's config (`Variant.of`),
and the readable name the reports show, made from the key (`Variant.name`). The claims pair runs by their keys
(the same model but for the one thing a claim is about), never by parsing names.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from nmt import build
from nmt.config import CONFIGS

# The study's variants: configs/variant/<name>.yaml, each a few train.py overrides, the one list of them. The
# comparison (`python -m nmt_study compare --train`) and the lab (at the lab's sizes, size=lab) train each, in this
# order, each family's together.
VARIANTS = sorted(path.stem for path in (CONFIGS / "variant").glob("*.yaml"))
# The four families' defaults: make results' main table, and what the tuning tunes
FAMILIES = ("sutskever", "bahdanau", "luong", "transformer")
# The variants the lab's two claims compare (Bahdanau's model with and without attention for the length claim;
# Luong's local-p, local-m and global attention with the general score, and global with the location score, for the
# alignment claim)
LAB_CLAIM_VARIANTS = ("bahdanau", "bahdanau_fixed", "luong", "luong_local_m", "luong_local_p", "luong_location")


@dataclass(frozen=True)
class Variant:
    """A model family with the options the study varies. `score`: the attention's (`model/attention=`; "none" for
    the fixed context, None for a model without attention); `alignment`, `feeding`, `bidirectional`: Luong's options,
    None for a family without them; `window`: the Transformer's self-attention window (0: global)."""

    family: str
    score: str | None = None
    scaled: bool = False
    alignment: str | None = None
    feeding: bool | None = None
    bidirectional: bool | None = None
    normalizer: str = "softmax"
    hard: str = "none"
    window: int = 0

    @classmethod
    def of(cls, model: dict) -> Variant:
        """The key of a resolved model config (a checkpoint's or a record's `config["model"]`)."""
        family = model["_target_"].rsplit(".", 1)[-1].replace("Seq2Seq", "").lower()
        attention = model.get("attention")
        if not attention:
            return cls(family, window=model.get("window") or 0)
        return cls(
            family,
            score=build.option_name(attention["_target_"]),
            scaled=bool(attention.get("scaled")),
            alignment=model.get("alignment"),
            feeding=model.get("input_feeding"),
            bidirectional=model.get("bidirectional"),
            normalizer=attention.get("normalizer", "softmax"),
            hard=attention.get("hard", "none"),
        )

    @property
    def name(self) -> str:
        """`luong (general, local_p, no feeding, bidirectional)`, `bahdanau (additive, sparsemax)`,
        `bahdanau (fixed context)`, `transformer (window 4)`, `sutskever`."""
        if self.score is None:
            return f"{self.family} (window {self.window})" if self.window else self.family
        details = [("scaled " if self.scaled else "") + self.score.replace("none", "fixed context")]
        details += [self.alignment] if self.alignment is not None else []
        details += ["no feeding"] if self.feeding is False else []
        details += ["bidirectional"] if self.bidirectional else []
        details += [self.normalizer] if self.normalizer != "softmax" else []
        details += [f"hard {self.hard}"] if self.hard != "none" else []
        return f"{self.family} ({', '.join(details)})"

    def but(self, **changes) -> Variant:
        """The same variant with other values of some fields (its twin for a claim)."""
        return replace(self, **changes)

    def as_record(self) -> dict:
        return asdict(self)


def named(variants: dict[str, Variant], wanted: Variant) -> str | None:
    """The name of the variant among `variants` ({name: key}) whose key is `wanted`, or None."""
    return next((name for name, key in variants.items() if key == wanted), None)
