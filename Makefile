# make install | train | demo | compare | lab | bench | test | tensorboard | lint
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# A CPU build of torch unless a GPU is present: an unpinned torch pulls a CUDA build of several GB.
TORCH ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && echo torch || echo torch==2.13.0)
DATA_DIR ?=
DATA_ARG := $(if $(DATA_DIR),data.dir=$(abspath $(DATA_DIR)),)

.PHONY: install train demo compare lab bench test tensorboard lint

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install "$(TORCH)"
	$(BIN)/pip install -e ".[dev]"
	touch $@

install: $(VENV)/.installed

train: install
	$(BIN)/python train.py model=bahdanau $(DATA_ARG)

demo: install
	$(BIN)/python train.py data=sample model=bahdanau experiment=demo

# The four families, then the Luong scores and local alignments, one after another on the same data and the same
# CPU-sized budget; then the report (multirun/compare/report.md and its figures). About 90 minutes on 2 cores.
COMPARE_MINUTES ?= 8
COMPARE_ARGS = trainer.max_minutes=$(COMPARE_MINUTES) trainer.progress=false $(DATA_ARG)
compare: install
	$(BIN)/python train.py -m model=sutskever,bahdanau,luong,transformer \
		hydra.sweep.dir=multirun/compare/families $(COMPARE_ARGS)
	$(BIN)/python train.py -m model=luong model/attention=dot,concat,location \
		hydra.sweep.dir=multirun/compare/luong_scores $(COMPARE_ARGS)
	$(BIN)/python train.py -m model=luong model.alignment=local_m,local_p \
		hydra.sweep.dir=multirun/compare/luong_local $(COMPARE_ARGS)
	$(BIN)/python scripts/compare.py multirun/compare

# The alignment lab: the four families and the Luong variants on the sample grammar; AER against its gold alignments
# and BLEU by sentence length up to 80 words (multirun/lab/report.md and its figures). About 30 minutes on 2 cores.
lab: install
	$(BIN)/python scripts/lab.py --output multirun/lab

# Training tokens/s, peak memory and decoding sentences/s of each model (bench/benchmark.md); decodes with the
# checkpoints in outputs/runs/<model>/best.pt when they exist.
bench: install
	$(BIN)/python scripts/benchmark.py $(if $(DATA_DIR),--data-dir $(abspath $(DATA_DIR)),)

test: install
	$(BIN)/python -m pytest -q

tensorboard: install
	$(BIN)/tensorboard --logdir outputs

lint: install
	$(BIN)/ruff check . && $(BIN)/ruff format --check .
