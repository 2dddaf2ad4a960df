"""One model timed in a process of its own (`python -m nmt_study measure speed` starts one per model): training
target tokens/s of its updates after warm-up, peak memory, decoding sentences/s with a trained checkpoint, an optional
profile, and the machine's matrix-multiply peak that the table reads FLOP/s against.
"""

from __future__ import annotations

import resource
import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch
from omegaconf import OmegaConf

from nmt import build
from nmt.config import DecodeOptions, TrainConfig
from nmt.decoding.translator import Translator
from nmt.paths import output_folder, write_text
from nmt.runs.folder import RunFolder
from nmt.training.trainer import Trainer
from nmt_study.sweep import composed

MAX_WARM_UP = 300  # updates


def matmul_peak(dtype: torch.dtype, device: torch.device) -> float:
    """Best FLOP/s of square matrix products of a few sizes in `dtype` (the machine's practical peak)."""
    best = 0.0
    for n in (1024, 2048, 4096):
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        for _ in range(2):
            a @ b
        synchronize(device)
        repeats, started = 0, time.perf_counter()
        while time.perf_counter() - started < 1.0:
            a @ b
            repeats += 1
        synchronize(device)
        best = max(best, 2 * n**3 * repeats / (time.perf_counter() - started))
    return best


def gpu_utilization(device: torch.device) -> float | None:
    """The share of the last sample period the GPU was busy (NVML, through torch), or None (no GPU, no NVML)."""
    if device.type != "cuda":
        return None
    try:
        return float(torch.cuda.utilization(device))
    except Exception:  # pynvml missing or the driver refuses: the other figures stand without it
        return None


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def config(spec: str, args) -> TrainConfig:
    """The train.py config of a model spec such as "luong model/attention=dot", typed."""
    model, *extra = spec.split()
    overrides = [f"model={model}", *extra, f"trainer.precision={args.precision}", f"trainer.device={args.device}"]
    if args.data_dir:
        overrides.append(f"data.dir={args.data_dir}")
    return OmegaConf.to_object(composed(overrides))


def measure(model_name: str, args) -> dict:
    """Train and decode one model in this process; returns its figures."""
    torch.set_num_threads(args.threads)
    cfg = config(model_name, args)
    splits = build.load_corpus(cfg.data)
    vocabulary = build.vocabulary(cfg.data, splits)
    torch.manual_seed(0)
    model = build.model(cfg.model, vocabulary)
    parameters = sum(p.numel() for p in model.parameters())
    options = replace(cfg.trainer, progress=False)
    trainer = Trainer(
        model,
        vocabulary,
        splits.train,
        splits.valid[:8],
        "/tmp/nmt-benchmark",
        options,
        max_tokens=cfg.data.max_tokens,
        max_len=cfg.data.max_len,
        seed=cfg.seed,
    )
    result = {"model": model_name, "parameters": parameters, "target_vocab_size": vocabulary.target_size}
    result |= training_speed(trainer, args)
    result["six_n_flops_per_second"] = 6 * parameters * result["train_tokens_per_second"]
    if args.profile:
        write_profile(trainer, trainer.updates(), model_name, args)
    if not args.train_only:
        result |= decoding_speed(trainer, vocabulary, [s for s, _ in splits.test], model_name, args)
    return result


def training_speed(trainer: Trainer, args) -> dict:
    """Target tokens/s of training updates (the median of --windows timed windows of --steps updates, after the
    warm-up), FLOP/s from the model's own formula (nmt/models/flops.py, on any device) and peak memory."""
    updates = trainer.updates()
    warm_up(trainer, updates)  # allocator, kernels, first batches; under CUDA graphs each shape's capture
    rates, all_tokens, all_flops, busy = [], 0, 0, []
    if trainer.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(trainer.device)
    for _ in range(args.windows):
        synchronize(trainer.device)
        started, window_tokens = time.perf_counter(), 0
        for _ in range(args.steps):
            batches, tokens, _, _, flops = next(updates)
            trainer.update(batches, tokens)  # as training makes it: captured where trainer.cuda_graphs holds
            window_tokens += tokens
            all_flops += flops
        synchronize(trainer.device)
        rates.append(window_tokens / (time.perf_counter() - started))
        all_tokens += window_tokens
        busy.append(gpu_utilization(trainer.device))
    cuda = trainer.device.type == "cuda"
    return {
        "train_tokens_per_second": statistics.median(rates),
        "train_windows": rates,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        # on a GPU: the tensors' peak (host RSS says little there) and how busy the GPU was, NVML's sample
        "peak_gpu_gib": torch.cuda.max_memory_allocated(trainer.device) / 2**30 if cuda else None,
        "gpu_utilization": statistics.median(busy) if busy and None not in busy else None,
        "flops_per_token": all_flops / all_tokens,
        "model_flops_per_second": all_flops / all_tokens * statistics.median(rates),
    }


def warm_up(trainer: Trainer, updates) -> None:
    """Updates before the timing: 3, and under CUDA graphs until every batch shape of the training split has its
    graph (each shape's eager updates and capture; at most MAX_WARM_UP updates, since the batches come in random
    order and a rare shape may take epochs), so that the timed windows replay."""
    static, shapes = trainer.sampler.static, 0
    if static is not None and trainer.mode.captured:
        kept = trainer.sampler.kept
        source, target = trainer.dataset.source_lengths[kept], trainer.dataset.target_lengths[kept]
        shapes = len({static.length(s, t) for s, t in zip(source, target, strict=True)})
    for number in range(MAX_WARM_UP):
        graphs = trainer.update.graphs
        captured = len(graphs.graphs) if graphs and not graphs.failed else shapes
        if number >= 3 and captured >= shapes:
            return
        batches, tokens, _, _, _ = next(updates)
        trainer.update(batches, tokens)


def decoding_speed(trainer: Trainer, vocabulary, sources: list[str], model_name: str, args) -> dict:
    """Sentences/s of greedy search and beam 5 over `sources`, with the model's trained checkpoint when there is one
    (else the untrained model, which decodes to its length limit)."""
    checkpoint_path = checkpoint(args.checkpoints, model_name)
    trained = checkpoint_path is not None and checkpoint_path.is_file()
    result = {"decoded_with": str(checkpoint_path) if trained else "untrained"}
    for beam in (1, 5):
        if trained:
            translator = Translator.load(
                checkpoint_path, DecodeOptions(beam, device=args.device, precision=args.precision)
            )
        else:
            search = replace(trainer.search, beam=beam, max_tokens=DecodeOptions.max_tokens)
            translator = Translator(trainer.model.eval(), vocabulary, trainer.device, trainer.dtype, search)
        translator.translate(sources[:20])  # warm-up
        synchronize(trainer.device)
        started = time.perf_counter()
        translator.translate(sources)
        synchronize(trainer.device)
        result[f"decode_beam{beam}_sentences_per_second"] = len(sources) / (time.perf_counter() - started)
    return result


def checkpoint(folder: str | None, model_name: str) -> Path | None:
    """The trained checkpoint to decode with: `<folder>/<model>/best.pt`, or `{model}` in `folder` filled in; none for
    a model spec with overrides (a checkpoint folder is named after the model alone)."""
    if not folder or len(model_name.split()) != 1:
        return None
    return RunFolder(folder.format(model=model_name) if "{model}" in folder else Path(folder) / model_name).best


def write_profile(trainer: Trainer, updates, model_name: str, args) -> None:
    """The operators that take the training step's time (torch.profiler, self time) over --profile updates."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if trainer.device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as profiler:
        for _ in range(args.profile):
            batches, tokens, _, _, _ = next(updates)
            trainer.update(batches, tokens)
        synchronize(trainer.device)
    # on a GPU both: the kernels' time, and the host's, which bounds a small model's step when the GPU waits on it
    sorts = ["self_cpu_time_total"]
    if trainer.device.type == "cuda":
        sorts.insert(0, "self_cuda_time_total")
    tables = [f"sorted by {sort}\n" + profiler.key_averages().table(sort_by=sort, row_limit=25) for sort in sorts]
    path = output_folder(args.output, "--output") / f"profile_{model_name.replace(' ', '_').replace('/', '-')}.txt"
    write_text(path, "\n".join(tables) + "\n")
