"""Precision from the hardware: what `auto` chooses on each kind of device (capabilities faked), what an explicit
choice the hardware cannot serve gets, and the command lines of every family on a CPU held below native bf16."""

from __future__ import annotations

import os
import sys
from dataclasses import asdict

import commands
import pytest
import torch
from conftest import ROOT, compose_config, tiny_model_overrides
from omegaconf import OmegaConf

import nmt.device
from nmt import UserError
from nmt.config import DecodeOptions, TrainerConfig
from nmt.decoding.translator import Translator
from nmt.device import Capability, choose, cpu_capability, cpu_kernels, cuda_capability
from nmt.training.trainer import Trainer

NATIVE_CPU = Capability("cpu", "CPU", native_bf16=True, bf16_kernels=True, fp16=False, detail="AVX512_BF16")
EMULATED_CPU = Capability("cpu", "CPU", native_bf16=False, bf16_kernels=True, fp16=False, detail="AVX512_CORE")
AVX2_CPU = Capability("cpu", "CPU", native_bf16=False, bf16_kernels=False, fp16=False, detail="AVX2")
HELD_DOWN = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}  # a CPU without AVX-512, as oneDNN sees it


@pytest.mark.parametrize(
    "found, chosen",
    [
        (NATIVE_CPU, "bf16"),
        (EMULATED_CPU, "fp32"),
        (AVX2_CPU, "fp32"),
        (Capability("cuda", "H100", True, True, True, "compute capability 9.0"), "bf16"),
        (Capability("cuda", "T4", False, True, True, "compute capability 7.5"), "fp16"),
        (Capability("cuda", "P40", False, True, False, "compute capability 6.1"), "fp32"),
    ],
)
def test_auto_takes_the_fastest_precision_the_hardware_runs_natively(found, chosen):
    precision = choose("auto", found)
    assert precision.name == chosen and precision.warning is None
    assert precision.reason.startswith(f"{chosen}") and found.detail in precision.reason  # says what and why


def test_an_explicit_precision_the_hardware_cannot_run_is_refused_naming_the_fix():
    with pytest.raises(
        UserError,
        match=r"trainer.precision=bf16: .*no bf16 kernels, so LSTMs fail.*trainer.precision="
        r"auto \(fp32 here\)",
    ):
        choose("bf16", AVX2_CPU)
    with pytest.raises(UserError, match=r"^precision=fp16 needs a GPU"):
        choose("fp16", NATIVE_CPU, option="precision")
    with pytest.raises(UserError, match=r"trainer.precision='fp8': use one of auto, fp32, bf16, fp16"):
        choose("fp8", NATIVE_CPU)
    slow = choose("bf16", EMULATED_CPU)  # runs, at half fp32's speed: kept, with a warning
    assert slow.name == "bf16" and "twice as slow as fp32" in slow.warning
    assert choose("bf16", NATIVE_CPU).warning is None and choose("fp32", AVX2_CPU).name == "fp32"


def test_the_cpu_capability_follows_the_hardware_and_the_level_onednn_is_held_to(monkeypatch):
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    for has in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        monkeypatch.setattr(torch.cpu, has, lambda: True)
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True, raising=False)
    assert cpu_capability().native_bf16
    for level, native in (("AVX512_CORE", False), ("avx512_core_vnni", False), ("AVX512_CORE_AMX", True)):
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", level)
        found = cpu_capability()
        assert found.native_bf16 == native and f"oneDNN held to {level.upper()}" in found.detail
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    for has in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        monkeypatch.setattr(torch.cpu, has, lambda: False)
    assert not cpu_capability().native_bf16 and "no AVX512_BF16 or AMX" in cpu_capability().detail


def test_the_cuda_capability_reads_the_compute_capability(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda where=None: "Tesla V100")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda where=None: (7, 0))
    v100 = cuda_capability(torch.device("cuda"))
    assert (v100.native_bf16, v100.fp16) == (False, True) and choose("auto", v100).name == "fp16"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda where=None: (8, 0))
    assert choose("auto", cuda_capability(torch.device("cuda"))).name == "bf16"


def test_training_and_decoding_choose_for_the_cpu_they_run_on(tmp_path, sample_splits, sample_vocabulary, monkeypatch):
    """A model trained in bf16 decodes in fp32 on a CPU without native bf16 (the checkpoint's precision does not
    decide); training there with `auto` takes fp32 and an explicit bf16 is refused before anything trains."""
    from nmt import build

    cfg = compose_config("data=sample", *tiny_model_overrides("luong"))
    model = build.model(cfg.model, sample_vocabulary)
    config = TrainerConfig(
        max_steps=2,
        max_minutes=0,
        valid_every=2,
        precision="bf16",
        device="cpu",
        progress=False,
        test_at_end=False,
        num_plots=0,
    )
    monkeypatch.setattr(nmt.device, "cpu_capability", lambda: NATIVE_CPU)
    stored = {"model": OmegaConf.to_container(cfg.model, resolve=True), "trainer": asdict(config)}
    trainer = Trainer(
        model, sample_vocabulary, sample_splits.train[:16], sample_splits.valid[:4], tmp_path, config, run_config=stored
    )
    trainer.save()  # last.pt, a checkpoint trained in bf16
    monkeypatch.setattr(nmt.device, "cpu_capability", lambda: AVX2_CPU)
    assert Translator.load(tmp_path / "last.pt", DecodeOptions(device="cpu")).dtype == torch.float32
    with pytest.raises(UserError, match="precision=bf16: .* has no bf16 kernels"):
        Translator.load(tmp_path / "last.pt", DecodeOptions(device="cpu", precision="bf16"))
    auto = Trainer(
        model,
        sample_vocabulary,
        sample_splits.train[:16],
        sample_splits.valid[:4],
        tmp_path / "b",
        TrainerConfig(**{**vars(config), "precision": "auto"}),
    )
    assert auto.dtype == torch.float32
    with pytest.raises(UserError, match="trainer.precision=bf16"):
        Trainer(model, sample_vocabulary, sample_splits.train[:16], sample_splits.valid[:4], tmp_path / "c", config)


def test_an_update_the_gradient_scaler_skips_does_not_advance_the_schedule(tmp_path, sample_splits, sample_vocabulary):
    """fp16's scaler skips an update whose gradients overflowed; warm-up must count the updates made."""
    from nmt import build

    cfg = compose_config("data=sample", *tiny_model_overrides("transformer"))
    model = build.model(cfg.model, sample_vocabulary)
    config = TrainerConfig(
        max_steps=2,
        max_minutes=0,
        precision="fp32",
        device="cpu",
        schedule="inverse_sqrt",
        warmup_steps=10,
        progress=False,
    )
    trainer = Trainer(model, sample_vocabulary, sample_splits.train[:16], sample_splits.valid[:4], tmp_path, config)
    trainer.scaler = trainer.update.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)  # fp16's, on the CPU
    batches, tokens, _, _, _ = next(trainer.updates())
    trainer.update(batches, tokens)
    assert trainer.schedule.last_epoch == 1 and trainer.scaler.get_scale() == 2.0**10
    with torch.no_grad():
        model.output.bias.fill_(float("inf"))  # every gradient becomes NaN: the scaler skips the update
    before = [p.detach().clone() for p in model.parameters()]
    trainer.update(batches, tokens)
    assert trainer.scaler.get_scale() == 2.0**9 and trainer.schedule.last_epoch == 1
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True) if a.isfinite().all())


def run(*args, environment: dict[str, str] | None = None):
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", **(environment or {})}
    return commands.run([sys.executable, *args], cwd=ROOT, text=True, env=env)


# Every family and Luong variant, tiny: two multiruns (one process each) of train.py. Luong's variants take each
# score, each alignment, and input feeding with a one-way encoder (luong_paper) once.
RECURRENT = [
    "sutskever",
    "bahdanau",
    "luong",
    "luong_dot",
    "luong_concat",
    "luong_location",
    "luong_local_m",
    "luong_local_p",
    "luong_paper",
]
SWEEPS = [
    [f"variant={','.join(RECURRENT)}", "model.embedding_size=16", "model.hidden_size=24"],
    [*tiny_model_overrides("transformer"), "model.window=0,4"],
]


@pytest.mark.slow
@pytest.mark.parametrize("cpu", ["native", "without AVX-512"])
def test_every_family_and_luong_variant_trains_and_decodes_from_the_command_line(tmp_path, cpu):
    """With the default precision, on this CPU as it is and held to AVX2 (as a CPU without native bf16: there bf16
    LSTMs fail in oneDNN and bf16 products are hundreds of times slower), where `auto` must choose fp32."""
    if cpu != "native" and cpu_kernels() == "AVX2" and not cpu_capability().native_bf16:
        pytest.skip("this CPU is held to AVX2 already: the native case runs the same kernels and the same checks")
    environment = HELD_DOWN if cpu != "native" else {}
    expected = "bf16" if cpu == "native" and cpu_capability().native_bf16 else "fp32"
    small = [
        "-m",
        "data=sample",
        "data.sizes.train=300",
        "data.sizes.valid=8",
        "data.sizes.test=8",
        "trainer.max_steps=2",
        "trainer.valid_every=2",
        "trainer.progress=false",
        "trainer.num_plots=0",
        f"data.spm_cache={tmp_path / 'spm'}",
    ]
    runs = []
    for i, sweep in enumerate(SWEEPS):
        trained = run("train.py", *small, *sweep, f"hydra.sweep.dir={tmp_path / str(i)}", environment=environment)
        assert trained.returncode == 0, trained.stderr[-3000:]
        output = trained.stdout + trained.stderr
        assert output.count(f"precision {expected} (auto)") == output.count("test BLEU") > 0, output[-3000:]
        runs += sorted((tmp_path / str(i)).glob("*/best.pt"))
    assert len(runs) == len(RECURRENT) + 2
    decoded = run("evaluate.py", f"checkpoint={runs[2]}", "split=valid", "beam=2", environment=environment)
    assert decoded.returncode == 0 and "BLEU" in decoded.stdout, decoded.stderr[-3000:]
    assert f"precision {expected} (auto)" in decoded.stdout + decoded.stderr
    if expected == "fp32":  # an explicit bf16 is refused with the reason and the fix, never oneDNN's error
        refused = run(
            "train.py",
            *small[1:],
            *SWEEPS[0][1:],
            "model=luong",
            "trainer.precision=bf16",
            f"hydra.run.dir={tmp_path / 'bf16'}",
            environment=environment,
        )
        assert refused.returncode != 0 and "Traceback" not in refused.stderr
        assert "trainer.precision=bf16" in refused.stderr and "Use trainer.precision=auto (fp32 here)" in refused.stderr
        translated = run("translate.py", f"checkpoint={runs[2]}", "precision=bf16", environment=environment)
        assert translated.returncode != 0 and "precision=bf16" in translated.stderr
