"""The GPU path, where there is one: train, resume and decode in bf16 and fp16, the fused loss and the fused attention
kernel against their plain forms, data parallelism on NCCL. Skipped, saying why, on a machine without CUDA; the
logic these share with the CPU path is tested on the CPU elsewhere (test_device.py, test_distributed.py)."""

import json
import math
import os
import subprocess
import sys

import pytest
import torch
from conftest import ROOT
from helpers import VARIANTS  # every family and attention variant the trainer trains

from nmt.device import cuda_capability
from nmt.models.attention import MultiHeadAttention
from nmt.models.transformer import band
from nmt.runs import checkpoint
from nmt.training.loss import linear_cross_entropy

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device on this machine: these run where a GPU is"
)
CUDA = torch.device("cuda")
SMALL = [
    "data=sample",
    "data.sizes.train=300",
    "data.sizes.valid=20",
    "data.sizes.test=20",
    "trainer=debug",
    "trainer.valid_every=2",
    "trainer.progress=false",
    "trainer.device=cuda",
]


def run(*args):
    environment = {**os.environ, "HYDRA_FULL_ERROR": "1"}
    return subprocess.run(
        [sys.executable, *map(str, args)], cwd=ROOT, capture_output=True, text=True, env=environment, timeout=600
    )


def bf16_supported() -> bool:
    return torch.cuda.is_available() and cuda_capability(CUDA).native_bf16


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize("model", ["bahdanau", "transformer"])
def test_train_resume_and_decode_on_cuda(tmp_path, precision, model):
    if precision == "bf16" and not bf16_supported():
        pytest.skip("this GPU has no native bf16 (compute capability below 8.0)")
    run_dir, spm = tmp_path / "run", f"data.spm_cache={tmp_path / 'spm'}"
    first = run(
        "train.py",
        *SMALL,
        f"model={model}",
        f"trainer.precision={precision}",
        "trainer.max_steps=4",
        spm,
        f"hydra.run.dir={run_dir}",
    )
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = run(
        "train.py",
        *SMALL,
        f"model={model}",
        f"trainer.precision={precision}",
        "trainer.max_steps=6",
        spm,
        f"hydra.run.dir={run_dir}",
        "trainer.resume=true",
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    last = checkpoint.load(run_dir / "last.pt")
    assert last["progress"]["step"] == 6 and last["config"]["trainer"]["precision"] == precision
    assert bool(last["scaler"]) == (precision == "fp16")  # the loss scale travels with an fp16 run
    results = json.loads((run_dir / "results.json").read_text())
    assert results["precision"] == precision and 0 <= results["test/bleu"] <= 100
    scored = run("evaluate.py", f"checkpoint={run_dir / 'best.pt'}", "split=valid", "beam=3", "device=cuda")
    assert scored.returncode == 0, scored.stderr[-3000:]
    on_cpu = run(
        "evaluate.py",
        f"checkpoint={run_dir / 'best.pt'}",
        "split=valid",
        "device=cpu",
        f"output={tmp_path / 'cpu.hyp'}",
    )
    assert on_cpu.returncode == 0, on_cpu.stderr[-3000:]  # a GPU checkpoint decodes on the CPU, in its precision


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_fused_loss_equals_the_plain_one_on_cuda(dtype):
    if dtype == torch.bfloat16 and not bf16_supported():
        pytest.skip("this GPU has no native bf16")
    torch.manual_seed(0)
    features = torch.randn(300, 64, device=CUDA, requires_grad=True)
    weight = torch.randn(1000, 64, device=CUDA, requires_grad=True)
    target = torch.randint(0, 1000, (300,), device=CUDA)
    ours = linear_cross_entropy(features, weight, None, target, 0.1, dtype=dtype)
    ours.backward()
    grads = features.grad.clone(), weight.grad.clone()
    features.grad = weight.grad = None
    with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
        logits = torch.nn.functional.linear(features, weight)
    plain = torch.nn.functional.cross_entropy(logits.float(), target, reduction="sum", label_smoothing=0.1)
    plain.backward()
    tolerance = 1e-4 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(ours, plain, rtol=tolerance, atol=tolerance * 10)
    torch.testing.assert_close(grads[0], features.grad, rtol=tolerance, atol=tolerance)
    torch.testing.assert_close(grads[1], weight.grad, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("causal", [False, True])
def test_the_fused_attention_kernel_equals_the_explicit_product_on_cuda(causal):
    torch.manual_seed(1)
    attention = MultiHeadAttention(64, 4).to(CUDA).eval()
    x = torch.randn(3, 9, 64, device=CUDA)
    mask = band(9, 9, 0, causal=True, device=CUDA) if causal else (torch.arange(9, device=CUDA) < 7)[None, None, None]
    explicit, _ = attention(x, x, x, mask, need_weights=True)  # the explicit product (weights asked for)
    fused, _ = attention(x, x, x, None, causal=True) if causal else attention(x, x, x, mask)
    torch.testing.assert_close(fused, explicit, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="data parallelism on NCCL needs two GPUs")
def test_two_gpus_train_identical_replicas_on_nccl(tmp_path):
    run_dir = tmp_path / "run"
    launched = run(
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "train.py",
        *SMALL,
        "trainer.max_steps=4",
        f"data.spm_cache={tmp_path / 'spm'}",
        f"hydra.run.dir={run_dir}",
    )
    assert launched.returncode == 0, launched.stderr[-3000:]
    assert "all 2 replicas hold the same weights" in launched.stdout + launched.stderr
    assert checkpoint.load(run_dir / "last.pt")["progress"]["step"] == 4


@pytest.mark.parametrize("name, overrides", [("sutskever", ()), ("bahdanau", ()), ("luong", ()), ("transformer", ())])
def test_an_update_on_cuda_never_waits_for_the_device(tmp_path, sample_vocabulary, sample_splits, name, overrides):
    """CUDA's own check of tests/test_sync_free.py: with torch's sync debug mode set to error, any operation that
    makes the host wait for the GPU raises while an update of each family runs (bf16 where the GPU has it)."""
    from helpers import make_trainer

    precision = "bf16" if bf16_supported() else "fp32"
    trainer = make_trainer(
        tmp_path, sample_vocabulary, sample_splits.train[:64], name, 0.1, overrides, device="cuda", precision=precision
    )
    updates = trainer.updates()
    batches, tokens, *_ = next(updates)
    trainer.update(batches, tokens)  # the first: lazy initialisations may wait once
    batches, tokens, *_ = next(updates)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        loss, norm = trainer.update(batches, tokens)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(loss) and torch.isfinite(norm)


def captured_trainer(tmp_path, sample_vocabulary, sample_splits, name, overrides=(), dropout=0.1):
    from helpers import make_trainer

    precision = "bf16" if bf16_supported() else "fp32"
    trainer = make_trainer(
        tmp_path, sample_vocabulary, sample_splits.train[:300], name, dropout, overrides, device="cuda",
        precision=precision,
    )  # fmt: skip
    assert trainer.mode.captured, trainer.mode.refusal
    return trainer, trainer.update


@pytest.mark.parametrize("name, overrides", VARIANTS, ids=[f"{n}{''.join(o)}" for n, o in VARIANTS])
def test_every_variant_trains_as_captured_cuda_graphs(tmp_path, sample_vocabulary, sample_splits, name, overrides):
    """trainer.cuda_graphs on a GPU: every family and attention variant's update is captured, one graph per batch
    shape, and replayed; the loss falls."""
    from nmt.training.update import WARMUP

    trainer, update = captured_trainer(tmp_path, sample_vocabulary, sample_splits, name, overrides)
    assert trainer.sampler.static is not None
    losses = []
    for number, (batches, tokens, *_) in enumerate(trainer.updates()):
        loss, norm = update(batches, tokens)
        losses.append(float(loss) / tokens)
        assert math.isfinite(float(norm))
        if number == 40:
            break
    graphed = update.graphs
    assert not graphed.failed, graphed.failed
    eager = sum(graphed.seen.values())  # each shape's warm-ups, at most WARMUP each
    assert all(n <= WARMUP for n in graphed.seen.values())
    assert len(graphed.graphs) >= 1 and graphed.replays + eager == 41 and graphed.replays > eager
    assert sum(losses[-5:]) < sum(losses[:5])


def test_a_replayed_update_is_the_eager_update(tmp_path, sample_vocabulary, sample_splits):
    """From the same weights and optimiser state, one batch: the graph's replay and the eager update give the same
    loss and the same weights after the step (dropout off, so nothing random tells them apart)."""
    from nmt.training.update import WARMUP

    trainer, update = captured_trainer(tmp_path, sample_vocabulary, sample_splits, "luong", dropout=0.0)
    batches, tokens, *_ = next(trainer.updates())
    for _ in range(WARMUP + 1):  # the eager warm-ups, then the capture (and its first replay)
        update(batches, tokens)
    graphed = update.graphs
    assert len(graphed.graphs) == 1
    parameters = list(trainer.model.parameters())
    state = [t for s in trainer.optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    saved = [t.detach().clone() for t in parameters + state]
    replayed_loss, _ = graphed(batches[0], 1.0 / tokens)
    replayed = [p.detach().clone() for p in parameters]
    replayed_loss = replayed_loss.clone()
    with torch.no_grad():
        for tensor, value in zip(parameters + state, saved, strict=True):
            tensor.copy_(value)  # in place: the graph holds these very tensors
    eager_loss, _ = graphed.eager(batches[0], 1.0 / tokens)
    torch.testing.assert_close(replayed_loss, eager_loss, rtol=1e-3, atol=1e-3)
    for got, want in zip(replayed, parameters, strict=True):
        torch.testing.assert_close(got, want.detach(), rtol=1e-3, atol=1e-4)
