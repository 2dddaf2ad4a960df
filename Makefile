# make install | train | demo | compare | lab | results | tune | bench | test | tensorboard | lint
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# A CPU build of torch unless a GPU is present: an unpinned torch pulls a CUDA build of several GB.
TORCH ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && echo torch || echo torch==2.13.0)
DATA_DIR ?=
DATA_ARG := $(if $(DATA_DIR),data.dir=$(abspath $(DATA_DIR)),)

.PHONY: install train demo compare lab results results-tables tune queue queue-pause queue-status queue-record bench test tensorboard lint

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install "$(TORCH)"
	$(BIN)/pip install -e ".[dev]"
	touch $@

install: $(VENV)/.installed

# RESUME=<run folder>: continue that run (its corpus folder is the checkpoint's unless DATA_DIR names another)
RESUME ?=
train: install
	$(BIN)/python train.py model=bahdanau $(DATA_ARG) $(if $(RESUME),trainer.resume=true hydra.run.dir=$(abspath $(RESUME)),)

demo: install
	$(BIN)/python train.py experiment=demo

# Every family and Luong variant (configs/variant/) on the same data and compute (COMPARE_FLOPS: what Bahdanau's
# model trains in 8 minutes on 2 cores with native bf16), SEEDS seeds each, as one `train.py -m`, then the report with
# significance and the papers' claims (multirun/compare/report.md). About three hours per seed on 2 cores; rerunning
# continues where it stopped. The lab's lab.json, when there, feeds two of the claims.
SEEDS ?= 1
COMPARE_FLOPS ?= 1e14
# Runs at once, each with cores / jobs threads: 2 jobs x 1 thread took 0.76 of 1 job x 2 threads here (docs/comparison.md)
COMPARE_JOBS ?= 2
LAB_JSON = $(wildcard multirun/lab/lab.json)
compare: install
	$(BIN)/python -m nmt_study compare --train --output multirun/compare --seeds $(SEEDS) --flops $(COMPARE_FLOPS) \
		--launcher joblib --jobs $(COMPARE_JOBS) $(if $(LAB_JSON),--lab $(LAB_JSON),) --extra $(DATA_ARG)

# The alignment lab: the four families and the Luong variants on the sample grammar; AER against its gold alignments
# and BLEU by sentence length up to 80 words (multirun/lab/report.md and its figures). About 13 minutes a run on one
# core, two at once on 2 cores: about two hours per seed (17 variants).
lab: install
	$(BIN)/python -m nmt_study lab --output multirun/lab --seeds $(SEEDS) --launcher joblib --jobs $(COMPARE_JOBS)

# What README.md and docs/results.md report, 3 seeds each, from one commit: the four families' (tuned) defaults and
# the claims' own arms the main table lacks (input feeding), trained until they stop learning (up to the cap,
# patience on valid BLEU: nmt_study/design.py), the claims judged on both; the lab (8 seeds of the variants its
# claims compare); the comparison of every variant at 1e14 FLOPs (early training). About an hour a run on 2 cores;
# on one GPU the whole converged queue costs the minutes docs/tuning.md computes (scripts/device_check.sh study).
# Each run is recorded in results/runs/ as it finishes (commit them: a later `make results`, on any machine, trains
# only the runs without a record). Then results/*.json and the tables between markers in README.md and
# docs/results.md (tests/test_results.py checks them). PARTS=main runs one part; ONLY=luong,transformer trains only
# those variants (a share of the runs for one machine); `make results-tables` only renders the tables again from
# results/*.json.
PARTS ?= main,claims,lab,others
results: install
	$(BIN)/python -m nmt_study results --parts $(PARTS) --seeds 3 $(if $(ONLY),--only $(ONLY),) $(if $(DATA_DIR),--extra data.dir=$(abspath $(DATA_DIR)),)

# Each family's recipe (and the input-feeding arm's) tuned with equal effort on valid BLEU (docs/tuning.md): its
# defaults, then Sobol points, TRIALS in all, pruned by successive halving, each up to the final runs' cap; rerunning
# continues from the study's journal file (results/runs/tune/<target>.journal).
TRIALS ?= 6
FAMILIES ?= transformer,sutskever,bahdanau,luong,luong_feeding
tune: install
	$(BIN)/python -m nmt_study tune --families $(FAMILIES) --trials $(TRIALS) $(if $(DATA_DIR),--extra data.dir=$(abspath $(DATA_DIR)),)

# The study's design (nmt_study/design.py) in the background, at the lowest CPU priority, from a worktree of its own
# beside the checkout (../nmt-queue): `make queue` starts or continues it, `make queue-pause` pauses it (before timing
# anything), `make queue-status` says what runs, what is recorded and the machine-hours left; `make queue-record`
# commits the records so far with the tables they render.
queue: install
	$(BIN)/python -m nmt_study queue start

queue-pause: install
	$(BIN)/python -m nmt_study queue pause

queue-status: install
	$(BIN)/python -m nmt_study queue status

queue-record: install
	$(BIN)/python -m nmt_study queue record

results-tables: install
	$(BIN)/python -m nmt_study results --render

# Training tokens/s, peak memory and decoding sentences/s of each model (bench/benchmark.md); decodes with the
# checkpoints in outputs/runs/<model>/best.pt when they exist.
bench: install
	$(BIN)/python -m nmt_study measure speed $(if $(DATA_DIR),--data-dir $(abspath $(DATA_DIR)),)

# One pytest worker per core (at most 4): most tests start a train.py or decode in a process of its own. Bytecode
# caches (__pycache__/, ignored by git) are written even where PYTHONDONTWRITEBYTECODE is set: the suite's fresh
# interpreters (sweep workers, torchrun, the wheel's) then skip compiling nmt, 0.4 s each, and pytest's rewritten tests.
test: install
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q -n auto --maxprocesses 4 --dist worksteal --durations=10

tensorboard: install
	$(BIN)/tensorboard --logdir outputs

lint: install
	$(BIN)/ruff check . && $(BIN)/ruff format --check .
