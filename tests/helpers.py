"""What several test modules share: a trainer built in the test's process, the commands run as a user types them,
reads of device data that raise inside an update, and the significance tests' made-up systems."""

import contextlib
import os
import sys

import commands
import torch
from conftest import ROOT, compose_config, tiny_model_overrides

from nmt import build
from nmt.config import TrainerConfig
from nmt.training.trainer import Trainer


def make_trainer(tmp_path, vocabulary, train_pairs, model_name, dropout=0.0, overrides=(), mode=None, **options):
    cfg = compose_config(*tiny_model_overrides(model_name, *overrides), f"model.dropout={dropout}")
    torch.manual_seed(0)
    model = build.model(cfg.model, vocabulary)
    defaults = dict(
        lr=0.01,
        schedule="constant",
        label_smoothing=0.0,
        precision="fp32",
        device="cpu",
        log_every=10,
        valid_every=0,
        patience=0,
        progress=False,
        num_plots=0,  # heatmaps are drawn where a test reads them
    )
    return Trainer(
        model,
        vocabulary,
        train_pairs,
        train_pairs[:4],
        tmp_path,
        TrainerConfig(**{**defaults, **options}),
        max_tokens=400,
        max_len=100,
        seed=1,
        mode=mode,
    )


class Exploit:
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


def run_python(*args, cwd=ROOT, stdin=None):
    environment = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    return commands.run([sys.executable, *args], cwd=cwd, text=True, env=environment, input=stdin)


SMALL = [
    "experiment=demo",
    "data.sizes.train=300",
    "data.sizes.valid=10",
    "data.sizes.test=10",
    "trainer=debug",
    "trainer.max_steps=4",
    "trainer.valid_every=2",
    "trainer.progress=false",
    "trainer.num_plots=0",
    "model.hidden_size=32",
    "model.embedding_size=16",
    "model.readout_size=16",
]


def run_cli(*args, stdin: bytes | None = None, timeout: float = 90):
    environment = {**os.environ, "HYDRA_FULL_ERROR": "0", "LC_ALL": "C.UTF-8"}
    return commands.run([sys.executable, *args], cwd=ROOT, env=environment, input=stdin, timeout=timeout)


def snapshot(folder) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def refused(result, message: str) -> None:
    stderr = result.stderr.decode()
    assert result.returncode != 0, stderr
    assert message in stderr, stderr[-2000:]
    assert "Traceback" not in stderr


READS = ("item", "cpu", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__")


READ = {name: getattr(torch.Tensor, name) for name in READS}


@contextlib.contextmanager
def reads_raise(monkeypatch):
    """Every read of a tensor's value on the host raises, naming it, until the block ends."""
    with monkeypatch.context() as patched:
        for name in READS:

            def refuse(tensor, *args, _name=name, _read=READ[name], **kwargs):
                if reads_host_data():
                    return _read(tensor, *args, **kwargs)
                raise AssertionError(f"Tensor.{_name} inside an update: the host would wait for the device")

            patched.setattr(torch.Tensor, name, refuse)
        yield


HOST_DATA = (  # torch's code that reads host data only: packing by CPU lengths, the optimizer's step counter
    os.path.join("torch", "nn", "utils", "rnn.py"),
    os.path.join("torch", "nn", "modules", "rnn.py"),
    os.path.join("torch", "optim", ""),
)


def reads_host_data() -> bool:
    """Whether the read comes from torch code that reads host data (HOST_DATA)."""
    frame = sys._getframe(2)
    while frame is not None:
        if any(part in frame.f_code.co_filename for part in HOST_DATA):
            return True
        frame = frame.f_back
    return False


VARIANTS = [
    ("sutskever", ()),
    ("bahdanau", ()),
    ("bahdanau", ("model/attention=none",)),
    ("bahdanau", ("model.attention.normalizer=sparsemax",)),
    ("bahdanau", ("model.attention.hard=reinforce",)),
    ("bahdanau", ("model.attention.hard=gumbel",)),
    ("luong", ()),
    ("luong", ("model.input_feeding=true",)),
    ("luong", ("model.alignment=local_m",)),
    ("luong", ("model.alignment=local_p",)),
    ("luong", ("model/attention=location",)),
    ("luong", ("model/attention=concat",)),
    ("transformer", ()),
    ("transformer", ("model.window=2",)),
]


SCENES = [
    ("small", "dog", "runs", "park"),
    ("old", "man", "sleeps", "house"),
    ("red", "car", "waits", "street"),
    ("young", "girl", "sings", "garden"),
    ("tired", "cat", "lies", "kitchen"),
    ("blue", "bird", "sits", "tree"),
    ("big", "horse", "stands", "field"),
    ("fast", "boy", "plays", "yard"),
]


REFERENCES = [f"the {a} {n} {v} in the {p} ." for a, n, v, p in SCENES] * 5


def degrade(sentence: str, every: int, offset: int = 0) -> str:
    """Every `every`-th word (from `offset`) replaced by a wrong one."""
    words = sentence.split()
    return " ".join("xx" if (i + offset) % every == 0 else w for i, w in enumerate(words, 1))


def system(every: int, seeds=(1, 2, 3)) -> dict[int, list[str]]:
    """Hypotheses of one variant: every `every`-th word wrong, the wrong words moving with the seed."""
    return {seed: [degrade(r, every, i + seed) for i, r in enumerate(REFERENCES)] for seed in seeds}
