"""Joey NMT's speed, read from what the peer's measurement wrote, saved beside our benchmark for docs/speed.md.

TRAIN_SECONDS=300 TP_SECONDS=60 RNN_VALID=100000 TF_VALID=100000 bash ../shared/peers/joeynmt/run.sh
python -m nmt_study measure joeynmt --record [joeynmt|joeynmt_fp32] [--work /tmp/peer-work]
python -m nmt_study measure joeynmt --record joeynmt_cuda --cuda DIR

`run.sh` (the peer's, not ours) trains Joey NMT's RNN and Transformer on Multi30k for TRAIN_SECONDS each, decodes
test2016 greedy and with beam 5 with what they learnt, then trains each again for TP_SECONDS; everything lands in
$WORK/out. This reads from there each model's training speed (the mean of Joey's own "Tokens per Sec" log lines,
which count target tokens), the peak RSS of its training process (/usr/bin/time) and its decoding speed (Joey's own
"Generation took" time over the sentences it wrote), and saves them as results/measured/<name>.json; the tables of
docs/speed.md put them beside `python -m nmt_study measure speed --record`'s figures of the same session. Run both
alone on the machine, one after the other; for `joeynmt_fp32`, run.sh with the variables that hold the CPU to AVX2
(docs/speed.md).

On a GPU, `bash scripts/device_check.sh` runs the peer's gpu.sh (Joey NMT's RNN and Transformer in fp16 for a
minute or less each, no validation) beside our benchmark and brings back its logs; `--cuda DIR` reads them (the median
of the second half of Joey's "Tokens per Sec" lines, as gpu.sh takes it) and records them with the date and machine
of results/measured/benchmark_cuda.json, which the same call measured.
"""

from __future__ import annotations

import re
import statistics
import sys
from datetime import datetime
from pathlib import Path

from nmt import UserError
from nmt_study import published
from nmt_study.measures import options, record_option

MODELS = {"rnn": "rnn", "transformer": "tf"}  # our name for each of run.sh's models: its file prefix
COLUMNS = [
    "model",
    "params",
    "train tok/s (target), long / short run",
    "peak RSS training",
    "greedy sent/s",
    "beam 5 sent/s",
]


def read(path: Path) -> str:
    if not path.is_file():
        raise UserError(f"{path}: missing; run ../shared/peers/joeynmt/run.sh first (it writes $WORK/out)")
    return path.read_text(encoding="utf-8", errors="replace")


def rates_of(text: str) -> list[float]:
    """Joey NMT's "Tokens per Sec" figures of a training log (target tokens), in order."""
    return [float(m) for m in re.findall(r"Tokens per Sec:\s+([0-9.]+)", text)]


def tokens_per_second(log: Path, required: bool = True) -> float | None:
    """The mean of Joey NMT's "Tokens per Sec" lines of a training log (none in a run shorter than its log interval,
    which only the long run must outlast)."""
    rates = rates_of(read(log))
    if not rates and required:
        raise UserError(f"{log}: no 'Tokens per Sec' line; the run was shorter than one of Joey NMT's log intervals")
    return statistics.mean(rates) if rates else None


def time_report(path: Path) -> tuple[float, float]:
    """(peak RSS in GiB, wall seconds) from /usr/bin/time -v."""
    text = read(path)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([0-9:.]+)", text)
    if not rss or not wall:
        raise UserError(f"{path}: not a report of /usr/bin/time -v")
    seconds = sum(float(part) * 60**i for i, part in enumerate(reversed(wall[1].split(":"))))
    return int(rss[1]) / 2**20, seconds


def sentences_per_second(out: Path, name: str, beam: int) -> float:
    """Sentences decoded per second of Joey NMT's own generation time."""
    log = out / f"{name}_b{beam}.log"
    took = re.search(r"Generation took ([0-9.]+)\[sec\]", read(log))
    if not took:
        raise UserError(f"{log}: no 'Generation took' line; did the decoding fail?")
    sentences = len(read(out / f"{name}_b{beam}.hyp.test").splitlines())
    return sentences / float(took[1])


def measure(work: Path) -> dict[str, dict]:
    """Each model's figures from $WORK/out."""
    out = work / "out"
    found = {}
    for model, name in MODELS.items():
        parameters = re.search(r"Total params: (\d+)", read(out / f"{name}.log"))
        rss, seconds = time_report(out / f"{name}.time")
        found[model] = {
            "parameters": int(parameters[1]) if parameters else None,
            "train_tokens_per_second": tokens_per_second(out / f"{name}.log"),
            "train_seconds": seconds,
            "train_tokens_per_second_short": tokens_per_second(out / f"tp_{name}.log", required=False),
            "train_seconds_short": time_report(out / f"tp_{name}.time")[1],
            "peak_rss_gib": rss,
            **{f"decode_beam{b}_sentences_per_second": sentences_per_second(out, name, b) for b in (1, 5)},
        }
    return found


CUDA_LOGS = {"rnn": "rnn_bahdanau", "transformer": "transformer"}  # gpu.sh's log of each: joeynmt_<name>.log
CUDA_COLUMNS = ["model", "params", "train tok/s (target)", "Joey's rate lines (median of the second half)"]


def measure_cuda(out: Path) -> dict[str, dict]:
    """Each model's figures from the logs ../shared/peers/joeynmt/gpu.sh wrote on a GPU machine."""
    found = {}
    for model, name in CUDA_LOGS.items():
        log = out / f"joeynmt_{name}.log"
        text = read(log)
        rates = rates_of(text)
        if len(rates) < 2:
            raise UserError(f"{log}: {len(rates)} 'Tokens per Sec' lines; the run was too short to measure")
        stamps = re.findall(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", text, re.MULTILINE)
        parameters = re.search(r"Total params: (\d+)", text)
        found[model] = {
            "parameters": int(parameters[1]) if parameters else None,
            "train_tokens_per_second": statistics.median(rates[len(rates) // 2 :]),
            "rate_lines": len(rates),
            "fp16": re.search(r"cfg\.fp16 : True", text) is not None,
            "log_seconds": (datetime.fromisoformat(stamps[-1]) - datetime.fromisoformat(stamps[0])).total_seconds(),
        }
    return found


def record_cuda(out: Path, folder: Path = published.RESULTS) -> Path:
    found = measure_cuda(out)
    ours = published.load("measured/benchmark_cuda", folder)
    if ours is None:
        raise UserError("results/measured/benchmark_cuda.json: missing; copy in the one the same GPU call measured")
    precision = "fp16" if all(f["fp16"] for f in found.values()) else "fp32"
    note = (
        f"Joey NMT 2.3.0 with the peer's configs on CUDA in {precision}, no validation, about "
        f"{round(statistics.mean(f['log_seconds'] for f in found.values()))} s a model from its first log line "
        "(../shared/peers/joeynmt/gpu.sh, run by scripts/device_check.sh in the call that measured "
        "benchmark_cuda, on its machine); the median of the second half of Joey NMT's own 'Tokens per Sec' lines "
        "(every 20 updates), the first half holding its start and warm-up."
    )
    rows = [
        [
            m,
            f"{f['parameters']:,}" if f["parameters"] else "-",
            f"{f['train_tokens_per_second']:,.0f}",
            str(f["rate_lines"]),
        ]
        for m, f in found.items()
    ]
    return published.record_measurement("joeynmt_cuda", CUDA_COLUMNS, rows, note, folder, found, measured_on=ours)


def row(model: str, figures: dict) -> list[str]:
    parameters = f"{figures['parameters']:,}" if figures["parameters"] else "-"
    short = figures["train_tokens_per_second_short"]
    return [
        model,
        parameters,
        f"{figures['train_tokens_per_second']:,.0f} / {f'{short:,.0f}' if short else '-'}",
        f"{figures['peak_rss_gib']:.2f} GiB",
        f"{figures['decode_beam1_sentences_per_second']:,.1f}",
        f"{figures['decode_beam5_sentences_per_second']:,.1f}",
    ]


def record(name: str, work: Path, folder: Path = published.RESULTS) -> Path:
    found = measure(work)
    versions_file = work / "out" / "versions.txt"
    versions = f": {versions_file.read_text().strip()}" if versions_file.is_file() else ""
    long, short = (
        round(statistics.mean(f[key] for f in found.values()) / 60) for key in ("train_seconds", "train_seconds_short")
    )
    note = (
        f"Joey NMT in fp32, its default, with the peer's configs (../shared/peers/joeynmt){versions}. Training "
        f"runs of about {long} and {short} min without validation; decoding test2016 with the checkpoint of the "
        "long run, 64 sentences a batch, Joey NMT's own generation time."
    )
    if name == "joeynmt_fp32":
        note += f" run.sh ran with {published.HELD_TO_AVX2}."
    rows = [row(m, f) for m, f in found.items()]
    return published.record_measurement(name, COLUMNS, rows, note, folder, values=found)


def main(argv: list[str] | None = None) -> None:
    parser = options(__name__, __doc__)
    record_option(parser, ("joeynmt", "joeynmt_fp32", "joeynmt_cuda"), "save the figures (without it: print them) as")
    parser.add_argument("--work", default="/tmp/peer-work", help="run.sh's $WORK")
    parser.add_argument("--cuda", metavar="DIR", help="the logs of gpu.sh's run on a GPU machine (joeynmt_cuda)")
    args = parser.parse_args(argv)
    try:
        if (args.record == "joeynmt_cuda") != bool(args.cuda):
            raise UserError("--record joeynmt_cuda reads --cuda DIR, and --cuda DIR is recorded as joeynmt_cuda")
        if args.cuda:
            print(f"wrote {record_cuda(Path(args.cuda))}", file=sys.stderr)
        elif args.record:
            print(f"wrote {record(args.record, Path(args.work))}", file=sys.stderr)
        else:
            for model, figures in measure(Path(args.work)).items():
                print(" | ".join(row(model, figures)))
    except UserError as error:
        sys.exit(f"error: {error}")
