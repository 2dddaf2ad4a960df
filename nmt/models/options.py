"""Every model option, its type, range and tuned default: the `model` and `model/attention` groups' schemas.

A model's options are its class's constructor arguments (the vocabulary sizes and padding id come at build time);
`configs/model/<family>.yaml` picks the schema here and an attention, and `configs/model/attention/<score>.yaml` the
attention's. Hydra checks each option's type as it composes; `check` checks its range from the field's metadata
(`at_least`, `above`, `probability`, `one_of`), before anything is built, naming the option. The same check holds a
config a checkpoint saved (nmt/build.py). tests/test_config.py holds each schema to its class's constructor.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from nmt import UserError


def at_least(low: int, default, **kwargs):
    """A whole number of at least `low`."""
    return field(default=default, metadata={"at_least": low}, **kwargs)


def above(low: float, default: float):
    """A number above `low`."""
    return field(default=default, metadata={"above": low})


def probability(default: float):
    """A dropout probability, in [0, 1)."""
    return field(default=default, metadata={"probability": True})


def one_of(default: str, *others: str):
    return field(default=default, metadata={"one_of": (default, *others)})


# --- attention (model/attention=...) -----------------------------------------------------------------------------


@dataclass
class AttentionOptions:
    """An attention class, which the model completes with its own sizes (`_partial_`): what every score has."""

    _target_: str = MISSING
    _partial_: bool = True


@dataclass
class ScoreOptions(AttentionOptions):
    """The options every attention score shares (docs/attention.md): how its weights are normalised, and whether the
    context is soft or one annotation."""

    normalizer: str = one_of("softmax", "sparsemax", "entmax15")  # sparse ones give exact zeros outside a few positions
    # none (soft); reinforce or gumbel: the context is one annotation, drawn in training, the argmax decoding
    hard: str = one_of("none", "reinforce", "gumbel")
    temperature: float = above(0.0, 1.0)  # of the Gumbel-softmax whose gradient hard=gumbel passes back


@dataclass
class AdditiveOptions(ScoreOptions):
    """Bahdanau et al. 2015: e = v^T tanh(W s + U h), U h computed once per sentence."""

    _target_: str = "nmt.models.attention.AdditiveAttention"
    attention_size: int = at_least(1, 512)  # the alignment model's units (the YAML: the decoder state's, n' = n)


@dataclass
class ConcatOptions(ScoreOptions):
    """Luong et al. 2015, eq. 8 'concat': v^T tanh(W [h_t; h_s])."""

    _target_: str = "nmt.models.attention.ConcatAttention"
    attention_size: int | None = at_least(1, None)  # null: the query's size


@dataclass
class DotOptions(ScoreOptions):
    """Luong et al. 2015, eq. 8 'dot': h_t^T h_s."""

    _target_: str = "nmt.models.attention.DotAttention"
    scaled: bool = False  # true: h_t^T h_s / sqrt(H)


@dataclass
class GeneralOptions(ScoreOptions):
    """Luong et al. 2015, eq. 8 'general': h_t^T W_a h_s."""

    _target_: str = "nmt.models.attention.GeneralAttention"


@dataclass
class LocationOptions(ScoreOptions):
    """Luong et al. 2015, eq. 8 'location': softmax(W_a h_t), one score per source position."""

    _target_: str = "nmt.models.attention.LocationAttention"
    max_positions: int = at_least(1, 128)  # source positions W_a scores; later ones are never attended


@dataclass
class FixedContextOptions(AttentionOptions):
    """No attention: every decoder step reads the encoder's summary (RNNencdec)."""

    _target_: str = "nmt.models.attention.FixedContext"


# --- models (model=...) ------------------------------------------------------------------------------------------


@dataclass
class SutskeverOptions:
    """Sutskever, Vinyals and Le 2014: multi-layer LSTM encoder-decoder, no attention, reversed source."""

    _target_: str = "nmt.models.rnn.SutskeverSeq2Seq"
    embedding_size: int = at_least(1, 256)
    hidden_size: int = at_least(1, 512)
    layers: int = at_least(1, 2)
    dropout: float = probability(0.3)
    reverse_source: bool = True
    # 0: PyTorch's defaults; the paper's U(-0.08, 0.08) (section 3.4) learned slower here (README)
    init_range: float = field(default=0.0, metadata={"at_least": 0})


@dataclass
class BahdanauOptions:
    """Bahdanau, Cho and Bengio 2015 (RNNsearch): bidirectional encoder, additive attention on s_{t-1}, maxout
    readout."""

    _target_: str = "nmt.models.rnn.BahdanauSeq2Seq"
    attention: Any = MISSING  # model/attention=: additive (the paper's) or none (RNNencdec)
    cell: str = one_of("gru", "lstm")  # gru as in the paper
    embedding_size: int = at_least(1, 256)
    hidden_size: int = at_least(1, 512)  # per direction in the encoder; the decoder state size
    encoder_layers: int = at_least(1, 1)
    readout_size: int = at_least(1, 512)  # maxout units
    dropout: float = probability(0.3)


@dataclass
class LuongOptions:
    """Luong, Pham and Manning 2015: stacked LSTMs, attention on the current state h_t, attentional vector h~_t.
    Three defaults are the ones that learn fastest on a CPU budget, measured (docs/models.md): a bidirectional
    encoder (not the paper's), no input feeding and the paper's dropout 0.2. The paper's model:
    model.bidirectional=false model.input_feeding=true."""

    _target_: str = "nmt.models.rnn.LuongSeq2Seq"
    attention: Any = MISSING  # model/attention=: dot, general, concat or location (eq. 8)
    embedding_size: int = at_least(1, 256)
    hidden_size: int = at_least(1, 512)
    layers: int = at_least(1, 2)
    dropout: float = probability(0.2)  # the paper's (section 4.1); 0.3 learned slower in 8 minutes
    # true: feed h~_{t-1} into step t (section 3.3), the paper's; false runs the decoder LSTM at once
    input_feeding: bool = False
    feed_dropout: bool = False  # the fed-back h~ skips dropout (no dropout on a recurrent path); true: the dropped one
    alignment: str = one_of("global", "local_m", "local_p")  # section 3.2
    window: int = at_least(1, 10)  # D: local attention looks at [p_t - D, p_t + D]
    # the encoder reads the source backwards ("Base + reverse", section 4.1); attention sees it in order
    reverse_source: bool = True
    # the encoder reads both ways, hidden_size/2 per direction (not the paper's); false: the paper's
    bidirectional: bool = True
    init_range: float = field(default=0.1, metadata={"at_least": 0})  # U(-0.1, 0.1) (section 4.1); 0: PyTorch's
    uniform_embeddings: bool = False  # the embedding tables keep PyTorch's N(0, 1) (docs/models.md); true: U too


@dataclass
class TransformerOptions:
    """Vaswani et al. 2017, sized for Multi30k: 3+3 layers, d_model 256, 4 heads, feed-forward 1024."""

    _target_: str = "nmt.models.transformer.Transformer"
    d_model: int = at_least(1, 256)
    heads: int = at_least(1, 4)
    feedforward_size: int = at_least(1, 1024)
    encoder_layers: int = at_least(1, 3)
    decoder_layers: int = at_least(1, 3)
    dropout: float = probability(0.1)  # residual and embedding dropout (section 5.4)
    attention_dropout: float = probability(0.0)  # on the attention weights: not in the paper (tensor2tensor, fairseq)
    activation_dropout: float = probability(0.0)  # inside the feed-forward layer: not in the paper (fairseq)
    pre_norm: bool = True  # false: post-norm, as in the paper
    positions: str = one_of("sinusoidal", "learned")
    share_embeddings: bool = True  # one embedding matrix for both languages (needs data.joint_vocab=true)
    tie_output: bool = True  # the output layer reuses the target embedding (section 3.4)
    window: int = at_least(0, 0)  # sliding-window self-attention: each position sees W neighbours (0: global)
    max_len: int = at_least(1, 1024)  # positions the embeddings cover


MODELS = {"sutskever": SutskeverOptions, "bahdanau": BahdanauOptions, "luong": LuongOptions}
MODELS |= {"transformer": TransformerOptions}
ATTENTIONS = {"additive": AdditiveOptions, "concat": ConcatOptions, "dot": DotOptions, "general": GeneralOptions}
ATTENTIONS |= {"location": LocationOptions, "none": FixedContextOptions}


def schema_of(target: str | None) -> type | None:
    """The schema of the model or attention class `target` names, or None."""
    return next((s for s in (*MODELS.values(), *ATTENTIONS.values()) if s._target_ == target), None)


def check(options: Any, prefix: str = "model") -> None:
    """Refuse a value out of its option's range (the schema's field metadata), naming the option; an attention
    inside a model is checked against its own schema."""
    schema = schema_of(options.get("_target_"))
    if schema is None:
        return
    for spec in dataclasses.fields(schema):
        value, name, rules = options.get(spec.name), f"{prefix}.{spec.name}", spec.metadata
        if value is None or spec.name == "attention":  # the attention after the model's own options
            continue
        elif "at_least" in rules and not value >= rules["at_least"]:
            raise UserError(f"{name}={value}: must be at least {rules['at_least']}")
        elif "above" in rules and not (value > rules["above"] and math.isfinite(value)):
            raise UserError(f"{name}={value}: must be above {rules['above']:g}")
        elif "probability" in rules and not 0 <= value < 1:
            raise UserError(f"{name}={value!r}: a dropout probability must be in [0, 1)")
        elif "one_of" in rules and value not in rules["one_of"]:
            raise UserError(f"{name}={value!r}: use one of {', '.join(rules['one_of'])}")
    if options.get("attention") is not None:
        check(options["attention"], f"{prefix}.attention")


def register(store) -> None:
    """The schemas in Hydra's ConfigStore: /schema/model/<family> and /schema/attention/<score>."""
    for name, node in MODELS.items():
        store.store(group="schema/model", name=name, node=node)
    for name, node in ATTENTIONS.items():
        store.store(group="schema/attention", name=name, node=node)
