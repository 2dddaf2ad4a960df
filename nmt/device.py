"""Where the tensors live and in what precision: device `auto`, precision `auto` from what the hardware runs natively.

bf16 pays only where the hardware has it. On a CPU with AVX512_BF16 or AMX, oneDNN's bf16 products run at about twice
fp32's speed; on an AVX-512 CPU without them oneDNN emulates bf16 at about half fp32's speed, and below AVX-512 it has
no bf16 kernels at all: matrix products fall back to a reference loop hundreds of times slower than fp32, and an LSTM
fails with "could not create a primitive descriptor" (measured on one CPU with oneDNN held to each level by
ONEDNN_MAX_CPU_ISA: docs/speed.md). On CUDA, bf16 needs compute capability 8.0 (Ampere); older GPUs get fp16 with
the gradient scaler, from 7.0 (tensor cores), and fp32 below.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
from dataclasses import dataclass
from pathlib import Path

import torch

from nmt import UserError, distributed

log = logging.getLogger(__name__)

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
CHOICES = ("auto", *PRECISIONS)

# oneDNN's instruction-set levels below VNNI, where an int8 product pair is summed in 16 bits (`int8_pairs_clip`)
ONEDNN_BELOW_VNNI = {"SSE41", "AVX", "AVX2", "AVX512_CORE"}
# oneDNN's instruction-set levels (ONEDNN_MAX_CPU_ISA) that include native bf16 arithmetic: AVX512_CORE_BF16 and
# everything above it. AVX512_CORE and AVX512_CORE_VNNI convert bf16 in software; AVX2 and below have no bf16 kernels.
ONEDNN_NATIVE_BF16 = {
    "AVX512_CORE_BF16",
    "AVX512_CORE_FP16",
    "AVX10_1_512",
    "AVX512_CORE_AMX",
    "AVX10_1_512_AMX",
    "AVX512_CORE_AMX_FP16",
    "AVX10_1_512_AMX_FP16",
    "AVX10_2_512",
    "AVX10_2_512_AMX_2",
    "ALL",
    "DEFAULT",
}


def device(name: str, option: str = "trainer.device") -> torch.device:
    """`auto` (CUDA when present), `cpu`, `cuda` or `cuda:N`; refusals name `option`, the command's own."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name not in ("cpu", "cuda") and not name.startswith("cuda:"):
        raise UserError(f"{option}={name!r}: use auto, cpu or cuda")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"{option}={name}: no CUDA device is available here; use {option}=auto or cpu")
    return torch.device(name)


@dataclass(frozen=True)
class Capability:
    """What one device runs fast, the facts `choose` decides from (a test builds them by hand)."""

    kind: str  # "cpu" or "cuda"
    name: str  # the processor's or GPU's name
    native_bf16: bool  # bf16 arithmetic in hardware, usable by the kernels (not capped, not emulated)
    bf16_kernels: bool  # bf16 runs at all (a CPU: oneDNN builds bf16 primitives, LSTMs included)
    fp16: bool  # fast fp16 (a GPU with tensor cores)
    detail: str  # what was found, for the log: "AVX512_BF16, oneDNN not capped", "compute capability 7.0"


def cpu_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_kernels() -> str:
    """The vector instructions ATen's CPU kernels use here ("AVX512", "AVX2"; ATEN_CPU_CAPABILITY lowers it): fp32
    sums round differently under each, so the same seed trains other bits on a CPU of another kind."""
    return torch.backends.cpu.get_cpu_capability()


def int8_pairs_clip() -> bool:
    """Whether oneDNN's int8 matrix products (CTranslate2's on a CPU) may clip here: without VNNI, or with oneDNN held
    below it (ONEDNN_MAX_CPU_ISA), a pair of unsigned 8-bit activations times signed 8-bit weights is summed in 16
    bits (vpmaddubsw). On this 2-core AMD EPYC held to AVX2, a small Transformer's int8 export gave our greedy output
    on 63 of 80 sample sentences (77 with VNNI)."""
    cap = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "").strip().upper()
    return cap in ONEDNN_BELOW_VNNI or not getattr(torch.cpu, "_is_vnni_supported", lambda: True)()


def cpu_capability() -> Capability:
    """The CPU's bf16 support as oneDNN will use it: the hardware's instructions (AVX512_BF16 or AMX) and the level
    oneDNN is held to (ONEDNN_MAX_CPU_ISA or DNNL_MAX_CPU_ISA), which hides instructions the CPU has."""
    hardware = [
        name
        for name, has in (("AVX512_BF16", "_is_avx512_bf16_supported"), ("AMX", "_is_amx_tile_supported"))
        if getattr(torch.cpu, has, lambda: False)()
    ]
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA")
    kernels = bool(getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)())
    capped = cap is not None and cap.strip().upper() not in ONEDNN_NATIVE_BF16
    native = bool(hardware) and kernels and not capped
    found = "+".join(hardware) if hardware else "no AVX512_BF16 or AMX"
    held = f"oneDNN held to {cap.strip().upper()}" if cap else "oneDNN not capped"
    detail = f"{found}, {held}, ATen {cpu_kernels()}"
    return Capability("cpu", cpu_name(), native, kernels, False, detail)


def cuda_capability(where: torch.device) -> Capability:
    major, minor = torch.cuda.get_device_capability(where)
    name = torch.cuda.get_device_name(where)
    return Capability("cuda", name, major >= 8, True, major >= 7, f"compute capability {major}.{minor}")


def capability(where: torch.device) -> Capability:
    return cuda_capability(where) if where.type == "cuda" else cpu_capability()


@dataclass(frozen=True)
class Precision:
    """The precision a command runs in and why: `reason` is the log line; `warning` says what will be slow."""

    name: str
    reason: str
    warning: str | None = None

    @property
    def dtype(self) -> torch.dtype:
        return PRECISIONS[self.name]


def choose(requested: str, found: Capability, option: str = "trainer.precision") -> Precision:
    """`requested` (auto, fp32, bf16 or fp16) on the device `found` describes. `auto` takes the fastest precision
    the hardware runs natively; an explicit choice the hardware cannot run is refused naming `option` and the fix,
    one it runs slowly is kept with a warning."""
    if requested not in CHOICES:
        raise UserError(f"{option}={requested!r}: use one of {', '.join(CHOICES)}")
    on = f"{found.name} ({found.detail})"
    if requested == "auto":
        if found.native_bf16:
            return Precision("bf16", f"bf16 (auto): {on} runs bf16 natively")
        if found.fp16:
            return Precision("fp16", f"fp16 with loss scaling (auto): {on} has no native bf16")
        why = "has no native bf16" if found.kind == "cpu" else "has neither bf16 nor fast fp16"
        return Precision("fp32", f"fp32 (auto): {on} {why}")
    if requested == "fp16" and found.kind == "cpu":
        raise UserError(f"{option}=fp16 needs a GPU; on a CPU use {option}=auto (bf16 where the CPU has it)")
    if requested == "bf16" and not found.bf16_kernels:
        raise UserError(
            f"{option}=bf16: {on} has no bf16 kernels, so LSTMs fail and matrix products run hundreds of times slower "
            f"than in fp32. Use {option}=auto (fp32 here) or {option}=fp32."
        )
    reason = f"{requested} (as asked): {on}"
    if requested == "bf16" and not found.native_bf16:
        slower = "emulates bf16, about twice as slow as fp32" if found.kind == "cpu" else "emulates bf16, slowly"
        return Precision("bf16", reason, f"{option}=bf16: {on} {slower}; {option}=auto would choose faster")
    return Precision(requested, reason)


def exact_fp32(chosen: Precision, where: torch.device) -> None:
    """fp32 means fp32 on a GPU too: cuDNN's RNNs and convolutions otherwise use TF32 (a 10-bit mantissa) on Ampere
    and later GPUs, and `precision=fp32` would train another model there than on a CPU. Under bf16 or fp16 autocast
    TF32 stays allowed for what runs in fp32. Matrix products keep PyTorch's default, no TF32."""
    if where.type == "cuda":
        torch.backends.cudnn.allow_tf32 = chosen.name != "fp32"
        torch.backends.cuda.matmul.allow_tf32 = False


def resolve(requested: str, where: torch.device, option: str = "trainer.precision") -> Precision:
    """`choose` for the device `where`, logged (and warned about) once."""
    chosen = choose(requested, capability(where), option)
    exact_fp32(chosen, where)
    log.info("precision %s", chosen.reason)
    if chosen.warning:
        log.warning(chosen.warning)
    return chosen


def autocast(where: torch.device, dtype: torch.dtype):
    """Mixed precision for the forward pass (the weights stay fp32); nothing for fp32."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(where.type, dtype=dtype)


def make_deterministic() -> None:
    """trainer.deterministic: PyTorch's deterministic kernels only (an op without one raises, naming itself), cuDNN's
    deterministic algorithms without autotuning, and the cuBLAS workspace that makes its products repeatable. On a
    CPU our runs are bit for bit already (tests/test_train.py); on CUDA this is the condition for it, at some speed."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before the first cuBLAS call
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def place(name: str, precision: str, deterministic: bool = False) -> tuple[torch.device, Precision]:
    """The device (`trainer.device`; under torchrun this process's) and the precision a run trains in, decided here
    and only here: a precision the device cannot run is refused; fp32 made exact (no TF32); deterministic kernels
    where asked."""

    where = distributed.setup(device(name))
    if deterministic:
        make_deterministic()
    chosen = choose(precision, capability(where))
    exact_fp32(chosen, where)
    if chosen.warning:
        log.warning(chosen.warning)
    return where, chosen
