"""Every option of every command, its type and its default: the one place they are defined.

The YAML files under `configs/` choose among these (a corpus, a model, a trainer recipe) and override a few values;
Hydra validates them against these dataclasses, so a wrong type (`trainer.lr=abc`) or an unknown key
(`trainer.lrr=1`) stops before anything is built, naming the key. The defaults are the tuned values: a command with no
overrides reproduces the README's figures.

Without Hydra, build the same objects in Python: `TrainerConfig(max_steps=100)`, `SampleConfig(vocab_size=150)`.
Model options are the model classes' own constructor arguments, with their schemas in nmt/models/options.py.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from omegaconf import MISSING

from nmt import UserError
from nmt.metrics import SELECTABLE

# The YAML files: a checkout's (and an editable install's) top-level configs/, or the copy a wheel ships as nmt/configs
_PACKAGED = Path(__file__).resolve().parent / "configs"
CONFIGS = _PACKAGED if _PACKAGED.is_dir() else Path(__file__).resolve().parents[1] / "configs"

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
# An option whose value does not change what a run trains (where files are, what is logged, how many threads sum the
# same products): a finished run with another value of it is the same run (nmt.runs.resume.same_run_options). Every
# other option of data, model and trainer makes another run
SAME_RUN = {"same_run": True}


# --- data (the `data` group) -------------------------------------------------------------------------------------


@dataclass
class DataConfig:
    """What every corpus shares: the language pair, the subword vocabulary and the batches."""

    corpus: str = "multi30k"
    src_lang: str = "de"
    tgt_lang: str = "en"
    vocab_size: int = 8000  # sentencepiece pieces (per side when joint_vocab is false)
    subword: str = "unigram"  # unigram or bpe
    joint_vocab: bool = True  # one sentencepiece model for both languages
    character_coverage: float = 1.0
    spm_cache: str | None = field(default="data/spm", metadata=SAME_RUN)  # sentencepiece models by settings; null: none
    max_tokens: int = 4096  # padded tokens per training batch (batch size x longest sentence on either side)
    max_len: int = 100  # training pairs longer than this (subwords, either side) are left out


@dataclass
class Multi30kConfig(DataConfig):
    """Multi30k task 1 (raw text): train 29,000 / valid (val) 1,014 / test (test_2016_flickr) 1,000 pairs."""

    dir: str | None = field(default=None, metadata=SAME_RUN)  # the *.gz files' folder; null: $NMT_DATA_DIR or download
    url: str = field(default=MULTI30K_URL, metadata=SAME_RUN)  # file:// works too
    cache: str = field(default="data/multi30k", metadata=SAME_RUN)  # where downloads go


@dataclass
class SampleSizes:
    train: int = 4000
    valid: int = 300
    test: int = 300


SHORTEST_SENTENCE = 3  # words in the sample grammar's shortest German sentence ("Ein Mann läuft.")


@dataclass
class GrammarOptions:
    """How long the sample grammar's sentences are and which reorderings they have; the defaults give the sample
    corpus."""

    clauses: int = 2  # at most this many clauses (a main clause and subordinate ones)
    adjectives: float = 0.4  # probability that a noun phrase has an adjective
    phrases: int = 0  # at most this many extra prepositional phrases per clause (mit dem Hund, im Garten)
    fronted: bool = True  # a fronted time adverb puts the German verb before its subject
    subordinate: bool = True  # subordinate clauses with the German verb at the end
    separable: bool = True  # separable verbs with the particle at the end of a German main clause
    min_words: int = 0  # keep only sentences of at least this many German words
    max_words: int = 0  # and at most this many (0: no limit)

    def check(self) -> None:
        if self.clauses < 1 or self.phrases < 0 or not 0 <= self.adjectives <= 1 or self.min_words < 0:
            raise UserError(
                "data.grammar: clauses must be at least 1, phrases and min_words at least 0, adjectives a probability"
            )
        if self.clauses > 16 or self.phrases > 4:  # 12 clauses and 1 phrase already give the lab's 80-word sentences
            raise UserError(
                f"data.grammar: clauses={self.clauses}, phrases={self.phrases}; at most 16 clauses and 4 "
                "phrases (longer sentences than any test needs, and they take minutes to generate)"
            )
        if self.max_words and self.max_words < self.min_words:
            raise UserError(f"data.grammar.max_words={self.max_words} is below min_words={self.min_words}")
        if self.max_words and self.max_words < SHORTEST_SENTENCE:
            raise UserError(
                f"data.grammar.max_words={self.max_words}: the grammar's shortest sentence has "
                f"{SHORTEST_SENTENCE} words ('Ein Mann läuft.'); allow at least that"
            )


@dataclass
class SampleConfig(DataConfig):
    """The built-in German-English sample corpus (nmt/text/sample.py): offline, generated from a small grammar that also
    gives every pair's gold word alignment."""

    corpus: str = "sample"
    sizes: SampleSizes = field(default_factory=SampleSizes)
    sample_seed: int = 1234
    grammar: GrammarOptions = field(default_factory=GrammarOptions)
    vocab_size: int = 250
    max_tokens: int = 2048


@dataclass
class FilePair:
    src: str = MISSING  # one sentence per line; line i of src translates line i of tgt (UTF-8, .gz allowed)
    tgt: str = MISSING


@dataclass
class FilesConfig(DataConfig):
    """Your own parallel text."""

    corpus: str = "files"
    src_lang: str = "src"
    tgt_lang: str = "tgt"
    train: FilePair = field(default_factory=FilePair)
    valid: FilePair = field(default_factory=FilePair)
    test: FilePair = field(default_factory=FilePair)


# --- decoding -----------------------------------------------------------------------------------------------------


@dataclass
class DecodeOptions:
    """How a checkpoint decodes, the one place of these defaults: evaluate.py and translate.py take them as top-level
    options (beam=5) and pass them whole (`of`); validation, the study and the benchmark build one."""

    beam: int = 1  # 1: greedy; more: beam search with that many hypotheses
    alpha: float = 0.6  # GNMT length penalty of beam search; 0 ranks by log-probability alone
    device: str = "auto"
    # chosen for this device as in training, whatever the checkpoint was trained in; `trained`: the run's own
    # trainer.precision (a study that pinned fp32 decodes in fp32 on any machine)
    precision: str = "auto"
    # padded source tokens (times the beam) per decoding batch; the longest line times the beam must fit in it
    max_tokens: int = 8000
    max_input_len: int = 1024  # longer lines (subwords) are refused, naming the line: split them into sentences

    @classmethod
    def of(cls, options) -> DecodeOptions:
        """The decoding options of a command's config (or any object with these fields)."""
        return cls(**{f.name: getattr(options, f.name) for f in dataclasses.fields(cls)})

    def check(self) -> None:
        """Refuse values that make no sense, naming the option, before a model loads."""
        if isinstance(self.beam, bool) or not isinstance(self.beam, int) or self.beam < 1:
            raise UserError(f"beam={self.beam!r}: the beam size must be 1 (greedy) or more")
        for option, value in (("max_tokens", self.max_tokens), ("max_input_len", self.max_input_len)):
            if value < 1:
                raise UserError(f"{option}={value}: must be at least 1")
        if not math.isfinite(self.alpha) or self.alpha < 0:
            raise UserError(
                f"alpha={self.alpha}: the length penalty's exponent must be 0 (rank by log-probability) "
                "or more (GNMT: 0.6 to 1)"
            )


# --- training (the `trainer` group) ------------------------------------------------------------------------------


# The trainer options with a set of values, and the least value of the numeric ones (TrainerConfig.check)
TRAINER_CHOICES = {
    "select": SELECTABLE,
    "optimizer": ("adam", "adamw"),
    "schedule": ("constant", "plateau", "inverse_sqrt"),
    "precision": ("auto", "fp32", "bf16", "fp16"),
}
TRAINER_AT_LEAST = {
    "log_every": 1,
    "accumulate": 1,
    "valid_max_tokens": 1,
    "decode_extra": 1,
    "max_steps": 0,
    "max_epochs": 0,
    "max_minutes": 0,
    "max_flops": 0,
    "validations": 0,
    "valid_every": 0,
    "threads": 0,
    "patience": 0,
    "keep_checkpoints": 0,
    "average_last": 1,
    "num_samples": 0,
    "num_plots": 0,
    "warmup_steps": 0,
    "plateau_patience": 0,
    "clip_norm": 0,
    "weight_decay": 0,
    "min_lr": 0,
    "decode_ratio": 0,
    "decode_max_input_len": 1,
}


@dataclass
class TrainerConfig:
    """Optimiser, schedule, precision, budget, validation and checkpoints: the tuned values for the RNN models on
    Multi30k on a small CPU (`configs/trainer/transformer.yaml` changes the schedule for the Transformer)."""

    optimizer: str = "adam"  # adam or adamw
    lr: float = 1e-3
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    weight_decay: float = 0.0
    schedule: str = "plateau"  # constant, plateau (on valid BLEU) or inverse_sqrt (with warmup_steps)
    warmup_steps: int = 4000
    plateau_factor: float = 0.5
    plateau_patience: int = 1  # validations without a better BLEU before the rate is cut
    min_lr: float = 1e-5
    clip_norm: float = 1.0  # 0 turns clipping off
    label_smoothing: float = 0.1
    max_epochs: int = 0  # 0: no limit (another limit must stop training)
    max_steps: int = 0
    max_minutes: float = 0.0  # wall-clock budget of training (validation excluded); not reproducible across machines
    # Training compute budget: the FLOPs of the updates' matrix products, from each model's formula for its batches
    # (nmt/models/flops.py); the same updates on any machine, idle or busy. 5e14: what Bahdanau's model trains in about
    # 40 minutes alone on a 2-core CPU with native bf16 (12.7 epochs of Multi30k), the budget of README's results
    max_flops: float = 5e14
    valid_every: int = 0  # steps between validations; 0: at the end of each epoch
    validations: int = 0  # with max_flops: validate as training passes each 1/N of the budget (instead of valid_every)
    patience: int = 5  # early stopping: validations without a better `select` score; 0 turns it off
    # What makes a validation the best (best.pt, and what patience waits for): bleu (higher), or the valid loss or
    # AER (lower; aer needs the valid split's gold links, which the sample corpus has). The plateau schedule reads BLEU
    select: str = "bleu"
    # auto: bf16 where the CPU or GPU has it natively, else fp16 (loss-scaled) on a GPU, else fp32 (nmt/device.py);
    # or fp32, bf16, fp16 (GPU only)
    precision: str = "auto"
    device: str = "auto"  # auto (CUDA when present), cpu or cuda
    # true: on a GPU each update is captured as a CUDA graph per batch shape and replayed (nmt/training/update.py;
    # batches of a few static shapes), where the run allows it (one process, no accumulation, no fp16), else eager with
    # the reason logged; false: eager, batches as on a CPU. No effect on a CPU
    cuda_graphs: bool = True
    # true: deterministic kernels only, so a CUDA run repeats bit for bit (slower; an op without one is refused by
    # name). CPU runs repeat bit for bit without it
    deterministic: bool = False
    # true: continue from this run directory's last.pt; or a checkpoint path; auto (a sweep's jobs, rerun): keep the
    # run finished here with these settings, continue an interrupted one, start a new one where there is none
    resume: Any = field(default=False, metadata=SAME_RUN)
    # torch's CPU threads; 0: its default (all cores). Jobs side by side: cores / jobs each. The same run: more
    # threads sum the same products in another order (bit for bit needs the same number: the results runs pin it)
    threads: int = field(default=0, metadata=SAME_RUN)
    log_every: int = field(default=20, metadata=SAME_RUN)  # steps between training-loss logs
    # padded tokens per validation/decoding batch
    valid_max_tokens: int = field(default=DecodeOptions.max_tokens, metadata=SAME_RUN)
    decode_ratio: float = 1.5  # greedy decoding stops at decode_ratio x source length + decode_extra
    decode_extra: int = 10
    # valid/test sentences longer than this (subwords) are refused before training
    decode_max_input_len: int = DecodeOptions.max_input_len
    num_samples: int = field(default=4, metadata=SAME_RUN)  # validation translations shown in TensorBoard's TEXT tab
    num_plots: int = field(default=3, metadata=SAME_RUN)  # validation sentences whose attention is plotted each time
    progress: bool = field(default=True, metadata=SAME_RUN)  # the progress bar
    test_at_end: bool = True  # decode the test split with the best checkpoint when training ends
    # weights of the last N validations and of the N ending at the best, as step<N>.pt, for
    # scripts/average_checkpoints.py and average_last
    keep_checkpoints: int = field(default=5, metadata=SAME_RUN)
    # The model a run reports (tests, and the study reads): 1, its best checkpoint (best.pt); k > 1, the average of
    # the weights of its k validations ending at the best one (averaged_last<k>.pt, scored on valid when training
    # ends; the best checkpoint is always in the window): a choice each family's tuning makes on valid
    # (nmt_study/tune.py)
    average_last: int = 1
    accumulate: int = 1  # batches whose gradients are summed into one update

    def check(self) -> None:
        """Refuse values that make no sense, naming the option, before anything is built."""
        for key, allowed in TRAINER_CHOICES.items():
            if getattr(self, key) not in allowed:
                raise UserError(f"trainer.{key}={getattr(self, key)!r}: use one of {', '.join(allowed)}")
        for key, low in TRAINER_AT_LEAST.items():
            if not getattr(self, key) >= low:  # NaN too
                raise UserError(f"trainer.{key}={getattr(self, key)}: must be at least {low}")
        for key in ("max_minutes", "max_flops", "lr", "clip_norm", "decode_ratio", "min_lr"):
            if math.isinf(getattr(self, key)):  # a budget of inf never stops a run; 0 is "no limit"
                raise UserError(
                    f"trainer.{key}={getattr(self, key)}: must be a finite number"
                    + (" (0: no limit of this kind)" if key.startswith("max_") else "")
                )
        if not self.lr > 0:
            raise UserError(f"trainer.lr={self.lr}: the learning rate must be above 0")
        for key in ("label_smoothing", "plateau_factor"):
            if not 0 <= getattr(self, key) < 1:
                raise UserError(f"trainer.{key}={getattr(self, key)}: must be in [0, 1)")
        if len(self.betas) != 2 or not all(0 <= beta < 1 for beta in self.betas):
            raise UserError(f"trainer.betas={list(self.betas)}: two numbers in [0, 1), e.g. [0.9, 0.98]")
        if not (self.max_steps or self.max_epochs or self.max_minutes or self.max_flops or self.patience):
            raise UserError(
                "trainer.max_steps, max_epochs, max_minutes, max_flops and patience are all 0, so nothing would stop "
                "training: set at least one (e.g. trainer.max_flops=8e13)"
            )
        if self.average_last > 1 and self.keep_checkpoints < self.average_last:
            raise UserError(
                f"trainer.average_last={self.average_last} averages the weights of {self.average_last} "
                f"validations, but trainer.keep_checkpoints={self.keep_checkpoints} keeps {self.keep_checkpoints}: "
                f"set trainer.keep_checkpoints={self.average_last} or more"
            )
        if self.validations and not self.max_flops:
            raise UserError(
                f"trainer.validations={self.validations} divides the compute budget, but trainer.max_flops "
                "is 0: set it, or validate with trainer.valid_every"
            )


# --- the commands ------------------------------------------------------------------------------------------------


@dataclass
class TrainConfig:
    """`python train.py`: a corpus (`data=`), a model (`model=`), a trainer recipe (`trainer=`) and a seed."""

    data: Any = MISSING  # one of the data dataclasses above, chosen by configs/data/<name>.yaml
    model: Any = MISSING  # _target_ (the model class) and its constructor arguments: configs/model/<name>.yaml
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    seed: int = 1234


@dataclass
class SearchOptions(DecodeOptions):
    """How evaluate.py and translate.py decode: a checkpoint and the decoding options."""

    checkpoint: str = MISSING  # a best.pt, last.pt or averaged.pt written by train.py or the scripts
    # The attention that gives word alignments: `alignment` for the RNNs; cross_layer_N or cross_layer_N_shifted for
    # the Transformer. null: the RNNs' one; for the Transformer the map that aligns best on the valid split when the
    # training corpus has gold alignments (the sample corpus), else the last layer.
    alignment_map: str | None = None
    RENAMED: ClassVar[dict[str, str]] = {}  # an option's name -> its name in the command's function, where they differ

    @classmethod
    def task(cls, config) -> dict:
        """The command's own options of `config` (its Hydra config, or this dataclass), beyond the checkpoint and the
        decoding options, as the keyword arguments of its function (nmt.decoding.evaluate's `evaluate`,
        `translate_file`): an option added here reaches the function without a word more in the command."""
        decoding = {f.name for f in dataclasses.fields(DecodeOptions)} | {"checkpoint"}
        return {
            cls.RENAMED.get(f.name, f.name): getattr(config, f.name)
            for f in dataclasses.fields(cls)
            if f.name not in decoding
        }


@dataclass
class EvaluateConfig(SearchOptions):
    """`python evaluate.py`: BLEU, chrF and TER of a checkpoint on a split or on your own files."""

    split: str = "test"  # valid or test of the corpus the model was trained on
    source: str | None = None  # or your own source file ...
    reference: str | None = None  # ... and its reference translations (one sentence per line)
    data_dir: str | None = None  # where the corpus lies, if not where it was when training ($NMT_DATA_DIR)
    output: str | None = None  # hypotheses file; null: beside the checkpoint, <checkpoint>.<split>.beam<N>.hyp
    overwrite: bool = False  # true: output= may replace an existing file (never a file of a training run)
    # Gold word alignments of the scored pairs (Pharaoh format: i-j sure, i?j possible, 0-based words) for AER;
    # null: the sample corpus's own when scoring one of its splits, else none
    alignments: str | None = None


@dataclass
class TranslateConfig(SearchOptions):
    """`python translate.py`: translate stdin or a file line for line."""

    RENAMED: ClassVar[dict[str, str]] = {"input": "source"}
    beam: int = 5
    engine: str = "nmt"  # nmt: our decoder, from checkpoint=; ctranslate2: a folder nmt-export wrote, model_dir=
    model_dir: str | None = None  # with engine=ctranslate2: the exported folder (`model=` is Hydra's model group)
    input: str | None = None  # a file with one sentence per line; null reads stdin
    output: str | None = None  # null writes to stdout
    attention: str | None = None  # a folder: also write each line's attention heatmap there as line<N>.png
    alignments: str | None = None  # a file: also write each translation's word alignment there (Pharaoh format)
    overwrite: bool = False  # true: output= and alignments= may replace existing files (never a training run's)


@dataclass
class ExportConfig:
    """`nmt-export`: a trained Transformer as a CTranslate2 model folder (nmt/decoding/export/)."""

    checkpoint: str = MISSING  # a best.pt, last.pt or averaged checkpoint of a Transformer
    format: str = "ctranslate2"
    quantization: str = "int8"  # the weights' type: int8, int16, float32, ... (CTranslate2's quantization)
    output: str | None = None  # the folder; null: <checkpoint>.ctranslate2-<quantization> beside the checkpoint
    overwrite: bool = False  # true: replace an earlier export there (a folder holding other files never is)
    check: str = "valid"  # decode this split with the export and with ours (greedy), compare; none: skip
    tolerance: float = 0.5  # the most BLEU the export may lose to ours on the check; more refuses the export
    data_dir: str | None = None  # where the run's corpus is read for the check (as evaluate.py's data_dir)
    threads: int = 0  # CPU threads of the check's decoding; 0: every core


def check_options(trainer: TrainerConfig, seed: int) -> None:
    """The options a run can be refused for before it reads any data: the trainer's and the seed. train.py checks
    them before Hydra makes the run folder (nmt.cli.train.OptionsFirst); `train` again, for a call from Python."""
    trainer.check()
    if not 0 <= seed < 2**32:  # what numpy's generator takes; torch's too
        raise UserError(f"seed={seed}: must be a whole number from 0 to {2**32 - 1}")


def flatten(tree: dict, prefix: str = "") -> dict:
    """A resolved config as dotted keys: {'model': {'hidden_size': 512}} -> {'model.hidden_size': 512}."""
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def option_groups() -> str:
    """The option groups a user picks from, one line each ("model: bahdanau, luong, ..."), for `train.py --help`:
    the folders of configs/, without Hydra's own, family_size (what `size=` picks for each family) and tuned (what
    `model=` picks: a family's tuned recipe); the schemas,
    in Hydra's ConfigStore, are not folders."""
    lines = []
    for folder in sorted(p for p in CONFIGS.rglob("*") if p.is_dir()):
        group = folder.relative_to(CONFIGS).as_posix()
        names = sorted(f.stem for f in folder.glob("*.yaml"))
        if names and group.split("/")[0] not in ("hydra", "family_size", "tuned"):
            lines.append(f"{group}: {', '.join(names)}")
    return "\n".join(lines)


def register() -> None:
    """Put the dataclasses in Hydra's ConfigStore, where the YAML files' defaults lists find them as `/schema/...`,
    and the resolver `--help` lists the option groups with (`option_groups`)."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("nmt_option_groups", option_groups, replace=True)

    store = ConfigStore.instance()
    store.store(group="schema", name="train", node=TrainConfig)
    store.store(group="schema", name="evaluate", node=EvaluateConfig)
    store.store(group="schema", name="translate", node=TranslateConfig)
    store.store(group="schema", name="export", node=ExportConfig)
    for name, node in (("multi30k", Multi30kConfig), ("sample", SampleConfig), ("files", FilesConfig)):
        store.store(group="schema/data", name=name, node=node)
    from nmt.models import options as model_config  # the model and attention schemas (a module of their own)

    model_config.register(store)
