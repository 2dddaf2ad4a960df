#!/usr/bin/env bash
# The checks that need a GPU (tests/test_cuda.py and the benchmark on CUDA), as one short run on a lent GPU machine
# whose python3 holds a CUDA build of torch and which can fetch nothing.
#
#   bash scripts/device_check.sh prepare   here, on a clean checkout: puts in .gpu/ (ignored by git) the wheels that
#                                          machine lacks, Multi30k's files and the commit the tree is at
#   bash scripts/device_check.sh           there, with .gpu carried (at most 575 s, CHECK_SECONDS): the CUDA graph
#                                          tests, the benchmark's training figures with CUDA graphs and eager, a 1e14
#                                          and a 5e14 run end to end with their wall times, the decoding speed of the
#                                          first's checkpoint, Joey NMT beside it (45 s a model), a profile of a
#                                          captured update of Bahdanau and the Transformer, the other CUDA
#                                          tests; $OUT gets summary.txt, logs.tgz, benchmark_cuda.json (for
#                                          results/measured/) and joeynmt_cuda.json
#                                          CHECK_STEPS="e2e_1e14 profile" runs only the steps it names
#   bash scripts/device_check.sh peer [S]  there: Joey NMT's RNN and Transformer, S seconds each (60), fp16, as
#                                          ../shared/peers/joeynmt/gpu.sh measures them ($OUT/joey/joeynmt_cuda.json)
#   bash scripts/device_check.sh jobs [RUNS] [FLOPS]
#                                          there: RUNS (4) runs of Bahdanau at FLOPS (1e14, 12 validations), seeds
#                                          1234..., one at a time, then 2 and 4 at once on the one GPU: the wall time
#                                          and runs per hour of each ($OUT/jobs.txt, the logs in $OUT/jobs.tgz), for
#                                          how many jobs `make results` should run on a GPU
#   bash scripts/device_check.sh pack [FLOPS] [SECONDS]
#                                          there: 1, 4, 8 and 16 runs of Bahdanau at FLOPS (5e13, 2 validations)
#                                          packed in one process (hydra/launcher=packed), in at most SECONDS (150):
#                                          the wall time, runs per hour and each run's median tokens/s
#                                          ($OUT/pack.txt; logs in $OUT/pack.tgz), against `jobs`' one at a time
#   bash scripts/device_check.sh study PART VARIANTS JOBS SECONDS [SEEDS]
#                                          there: `make results`' PART (tune first, as it sets the defaults:
#                                          `python -m nmt_study tune` of the targets VARIANTS, SEEDS trials each (6),
#                                          continuing the journals and records it has; back here untar them, then `python -m
#                                          nmt_study tune --report --apply` and commit before the next part; claims,
#                                          main, others (`make compare`'s variants at 1e14 FLOPs, recorded in
#                                          results/runs/compare), or lab: `python -m nmt_study lab`'s variants) for
#                                          VARIANTS (comma-separated), SEEDS each (3),
#                                          JOBS runs at once on the one GPU, for at most SECONDS; every run that
#                                          finishes is recorded by its own job, and the records come back as
#                                          $OUT/records.tgz (untar it into results/runs/, then `python -m nmt_study results
#                                          --parts PART --record` here makes the report and tables)
#
# Back here, copy $OUT's benchmark_cuda.json into results/measured/ and run `python -m nmt_study results --render`:
# docs/speed.md's GPU table is rendered from it.
set -euo pipefail
cd "$(dirname "$0")/.."
GPU=.gpu
PYTHON="${PYTHON:-python3}"  # there, the python3 that holds CUDA torch
# Pure-Python packages nmt needs that the GPU image does not hold (its torch, sacrebleu, sentencepiece, tensorboard,
# matplotlib and statsmodels are used as they are)
MISSING=(hydra-core omegaconf antlr4-python3-runtime entmax hydra-joblib-launcher joblib)

if [[ "${1:-}" == "prepare" ]]; then
    if [[ -n "$(git status --porcelain --untracked-files=no)" ]]; then
        echo "error: the checkout has uncommitted changes; commit them first, so that the figures name the code" >&2
        exit 1
    fi
    data="${NMT_DATA_DIR:-../shared/data/multi30k}"
    [[ -f "$data/train.de.gz" ]] || { echo "error: no Multi30k files in $data: set NMT_DATA_DIR" >&2; exit 1; }
    rm -rf "$GPU" && mkdir -p "$GPU/wheels" "$GPU/multi30k"
    pins=()
    for name in "${MISSING[@]}"; do
        pins+=("$name==$(.venv/bin/python -m pip show "$name" | sed -n 's/^Version: //p')")
    done
    .venv/bin/python -m pip wheel --quiet --no-deps --wheel-dir "$GPU/wheels" "${pins[@]}"
    cp "$data"/*.gz "$GPU/multi30k/"
    # the sentencepiece models of Multi30k's defaults, so that jobs started together do not each train them there
    NMT_DATA_DIR="$data" .venv/bin/python -c "from nmt import build; from nmt.config import Multi30kConfig as C; \
c = C(spm_cache='$GPU/spm'); build.vocabulary(c, build.load_corpus(c))"
    # Joey NMT beside us there (`peer`): its wheels, configs and data, and the script that measures it
    peer="${PEER:-../shared/peers/joeynmt}"
    if [[ -f "$peer/gpu.sh" ]]; then
        bash "$peer/gpu.sh" prepare "$GPU/joey" > /dev/null && cp "$peer/gpu.sh" "$GPU/joey/"
    fi
    git rev-parse HEAD > "$GPU/commit"
    echo "prepared $GPU: ${pins[*]}, Multi30k, commit $(cut -c1-7 "$GPU/commit"); run with carry=[\"$GPU\"]"
    exit 0
fi

OUT="${OUT:?OUT: the folder whose files come back (set by the device tool)}"
"$PYTHON" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'error: no CUDA device here')"
[[ -f "$GPU/commit" ]] || { echo "error: $GPU/commit missing: run 'bash scripts/device_check.sh prepare' first" >&2; exit 1; }
"$PYTHON" -m pip install --quiet --no-index --no-deps --no-compile --target /tmp/site "$GPU"/wheels/*.whl
export PYTHONPATH="/tmp/site:$PWD" NMT_DATA_DIR="$PWD/$GPU/multi30k" NMT_COMMIT="$(cat "$GPU/commit")"
# The tree there is a copy whose .git, if any, may be the one of an earlier commit (the device tool sends the
# session's checkout with the files of this one): no git there, so the records name NMT_COMMIT's commit
export PYTHONUNBUFFERED=1 GIT_DIR=/nonexistent
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
if [[ "${1:-}" == "peer" ]]; then  # Joey NMT 2.3.0's training rate on this GPU, 60 s per model, fp16
    [[ -f "$GPU/joey/gpu.sh" ]] || { echo "error: no $GPU/joey: prepare where ../shared/peers/joeynmt is" >&2; exit 1; }
    PY="$PYTHON" bash "$GPU/joey/gpu.sh" run "$GPU/joey" "$OUT/joey" "${2:-60}"
    exit 0
fi
if [[ "${1:-}" == "jobs" ]]; then  # runs per hour with 1, 2 and 4 runs at once on the one GPU
    runs="${2:-4}" flops="${3:-1e14}" deadline=$(( $(date +%s) + ${CHECK_SECONDS:-575} ))
    rm -rf /tmp/jobs && mkdir -p /tmp/jobs
    ( while sleep 10; do nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader; done ) \
        > /tmp/jobs_gpu_use.csv 2>&1 &
    for jobs in 1 2 4; do
        left=$(( deadline - $(date +%s) - 10 ))
        (( left > 30 )) || { echo "$jobs at once: skipped, the check's time is spent" | tee -a "$OUT/jobs.txt"; continue; }
        start=$(date +%s) code=0
        seq 0 $(( runs - 1 )) | timeout "$left" xargs -P "$jobs" -I{} sh -c "$PYTHON -m nmt.cli.train model=bahdanau \
            seed=\$(( 1234 + {} )) trainer.max_flops=$flops trainer.validations=12 trainer.progress=false \
            data.dir=$NMT_DATA_DIR data.spm_cache=$PWD/$GPU/spm hydra.run.dir=/tmp/jobs/$jobs/{} \
            > /tmp/jobs/$jobs.{}.log 2>&1" || code=$?
        wall=$(( $(date +%s) - start )) done=$(ls /tmp/jobs/$jobs/*/results.json 2>/dev/null | wc -l)
        echo "$jobs at once: $done of $runs runs of bahdanau at $flops FLOPs in $wall s (exit $code):" \
            "$(( done * 3600 / (wall > 0 ? wall : 1) )) runs per hour" | tee -a "$OUT/jobs.txt"
    done
    kill %1 2>/dev/null || true
    cp /tmp/jobs_gpu_use.csv /tmp/jobs/ 2>/dev/null || true
    tar czf "$OUT/jobs.tgz" -C /tmp/jobs --exclude='*.pt' --exclude='events.out*' . 2>/dev/null || true
    exit 0
fi
if [[ "${1:-}" == "pack" ]]; then  # packed runs per hour at 1, 4, 8 and 16 runs in one process on the one GPU
    flops="${2:-5e13}" deadline=$(( $(date +%s) + ${3:-150} ))
    rm -rf /tmp/pack && mkdir -p /tmp/pack
    for runs in 1 4 8 16; do
        left=$(( deadline - $(date +%s) ))
        (( left > 20 )) || { echo "$runs packed: skipped, the step's time is spent" | tee -a "$OUT/pack.txt"; continue; }
        start=$(date +%s) code=0
        timeout "$left" "$PYTHON" -m nmt.cli.train -m model=bahdanau "seed=range(1,$(( runs + 1 )))" \
            hydra/launcher=packed trainer.max_flops="$flops" trainer.validations=2 trainer.progress=false \
            data.dir="$NMT_DATA_DIR" data.spm_cache="$PWD/$GPU/spm" hydra.sweep.dir=/tmp/pack/$runs \
            > /tmp/pack/$runs.log 2>&1 || code=$?
        wall=$(( $(date +%s) - start )) done=$(ls /tmp/pack/$runs/*/results.json 2>/dev/null | wc -l)
        rates=$("$PYTHON" -c "import glob, json, statistics; \
r = [json.load(open(f))['train/tokens_per_second'] for f in glob.glob('/tmp/pack/$runs/*/results.json')]; \
print(f'median {statistics.median(r):,.0f} target tok/s a run' if r else 'no run finished')")
        echo "$runs packed: $done of $runs runs of bahdanau at $flops FLOPs in $wall s (exit $code), $rates:" \
            "$(( done * 3600 / (wall > 0 ? wall : 1) )) runs per hour" | tee -a "$OUT/pack.txt"
    done
    tar czf "$OUT/pack.tgz" -C /tmp/pack --exclude='*.pt' --exclude='events.out*' . 2>/dev/null || true
    exit 0
fi
if [[ "${1:-}" == "study" ]]; then
    part="${2:?PART}" variants="${3:?VARIANTS}" jobs="${4:-8}" seconds="${5:-420}" seeds="${6:-3}"
    folder="$part"; [[ "$part" == "others" ]] && folder=compare  # others: `make compare`'s runs and records
    # Every part keeps the records it has (committed from earlier windows; the earlier protocol's are apart, in
    # results/runs/<part>_5e14), so that it trains only the others (a tuning continues with its trials still to run)
    # The jobs record their runs as they finish; at the time limit the sweep is stopped, and what finished is kept
    ( while sleep 20; do nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader; done ) \
        > "$OUT/gpu_use.csv" 2>&1 &
    start=$(date +%s)
    if [[ "$part" == "tune" ]]; then  # VARIANTS: the families, in the order they are tuned; SEEDS: trials each
        timeout --kill-after=20 "$seconds" "$PYTHON" -m nmt_study tune --families "$variants" --trials "${6:-6}" \
            --jobs "$jobs" --runs /tmp/results/tune/runs \
            --extra "data.dir=$NMT_DATA_DIR" "data.spm_cache=$PWD/$GPU/spm" > "$OUT/study.log" 2>&1 || true
    elif [[ "$part" == "lab" ]]; then  # the lab's own program, pinned as the CPU's lab runs are, eager as they are
        timeout --kill-after=20 "$seconds" "$PYTHON" -m nmt_study lab --output /tmp/results/lab --variants "$variants" \
            --seeds "$seeds" --launcher joblib --jobs "$jobs" --records results/runs/lab \
            --extra trainer.precision=fp32 trainer.threads=1 trainer.cuda_graphs=false > "$OUT/study.log" 2>&1 || true
    else
        timeout --kill-after=20 "$seconds" "$PYTHON" -m nmt_study results --parts "$part" --only "$variants" \
            --seeds "$seeds" --jobs "$jobs" --runs /tmp/results \
            --extra "data.dir=$NMT_DATA_DIR" "data.spm_cache=$PWD/$GPU/spm" > "$OUT/study.log" 2>&1 || true
    fi
    echo "wall seconds: $(( $(date +%s) - start ))" >> "$OUT/study.log"
    pkill -TERM -f "nmt.cli.train" || true; pkill -TERM -f loky || true; sleep 2; kill %1 2>/dev/null || true
    # Records of runs whose job could not record them (stopped by the time limit after finishing; the lab's are
    # measured on its length test set too), then one archive each for the records and the logs: the device tool
    # brings back a limited number of files
    [[ "$part" == "tune" ]] || "$PYTHON" -c "from pathlib import Path; from nmt_study.records import record_runs; \
record_runs(Path('/tmp/results/$folder/runs'), Path('results/runs/$folder'), 5)" >> "$OUT/study.log" 2>&1 || true
    if [[ "$part" == "lab" ]]; then
        "$PYTHON" -c "from pathlib import Path; from nmt_study.lab_measure import measure_one; \
out = Path('/tmp/results/lab'); long = tuple(out / 'data' / f'long.{x}' for x in ('de', 'en', 'align')); \
[measure_one(r.parent, Path('results/runs/lab'), long) for r in sorted(out.glob('runs/*/seed*/results.json'))]" \
            >> "$OUT/study.log" 2>&1 || true
    fi
    tar czf "$OUT/records.tgz" -C results/runs "$folder" 2>/dev/null || true
    tar czf "$OUT/logs.tgz" -C /tmp/results --exclude='*.pt' --exclude='events.out*' --exclude='*.hyp' . 2>/dev/null \
        || true
    rm -rf "$OUT/records"
    tail -5 "$OUT/study.log"; tar tzf "$OUT/records.tgz" | grep record.json | sort
    exit 0
fi
# The check itself: each step within its own limit and what is left of DEADLINE seconds (575: the device tool's
# call runs at most 600), the most telling first, so that a lease too short for all still brings back the first ones.
# Logs go to one archive ($OUT/logs.tgz; the tool brings back at most 8 files), the records beside it.
DEADLINE=$(( $(date +%s) + ${CHECK_SECONDS:-575} )) LOGS=/tmp/check status=0
rm -rf "$LOGS" && mkdir -p "$LOGS"
step() {  # step NAME SECONDS COMMAND...: COMMAND's output in $LOGS/NAME.log, within min(SECONDS, time left)
    local name="$1" seconds="$2" left=$(( DEADLINE - $(date +%s) - 5 )); shift 2
    # CHECK_STEPS="e2e_1e14 profile": only the steps named (a lease with a few minutes left)
    [[ -z "${CHECK_STEPS:-}" || " $CHECK_STEPS " == *" $name "* ]] || return 0
    (( left < seconds )) && seconds=$left
    if (( seconds < 15 )); then echo "$name: skipped, the check's time is spent" | tee -a "$LOGS/summary.txt"; return; fi
    local start=$(date +%s) code=0
    timeout --kill-after=10 "$seconds" "$@" > "$LOGS/$name.log" 2>&1 || code=$?
    (( code == 0 )) || status=1
    echo "$name: exit $code after $(( $(date +%s) - start )) s (limit $seconds)" | tee -a "$LOGS/summary.txt"
    tail -3 "$LOGS/$name.log"
}
finish() {
    cp "$LOGS/summary.txt" "$OUT/" 2>/dev/null || true
    cp results/measured/benchmark_cuda.json "$OUT/" 2>/dev/null || true
    tar czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null || true
}
trap finish EXIT
# The captured updates first (every variant, and a replay against the eager update): what the rest measures
step cuda_graph_tests 140 "$PYTHON" -m pytest tests/test_cuda.py -k "captured or replayed" -rs -p no:cacheprovider \
    -o addopts=""
# Each family's training rate as training makes it (its updates captured as CUDA graphs, trainer.cuda_graphs) and
# eager beside it, in one run: the ratio is what the graphs give. The tables are written after each model.
eager=""
for model in sutskever bahdanau luong transformer; do eager+=";$model trainer.cuda_graphs=false"; done
step benchmark 230 "$PYTHON" -m nmt_study measure speed --record benchmark_cuda --train-only --device cuda --steps 24 \
    --windows 7 --model-timeout 50 --models "sutskever;bahdanau;luong;transformer$eager" \
    --data-dir "$NMT_DATA_DIR" --output "$LOGS/bench"
# A run at the claims' budget (1e14 FLOPs, 12 validations) and one at the main table's (5e14) end to end, with their
# wall times (targets: 20 s and 60 s); then the decoding speed of the first's checkpoint, greedy and beam 5
for flops in 1e14 5e14; do
    step "e2e_$flops" "$([[ $flops == 1e14 ]] && echo 60 || echo 80)" "$PYTHON" -m nmt.cli.train model=bahdanau \
        trainer.max_flops=$flops trainer.validations=12 trainer.progress=false "data.dir=$NMT_DATA_DIR" \
        "data.spm_cache=$PWD/$GPU/spm" hydra.run.dir=/tmp/e2e_$flops/bahdanau
    cp /tmp/e2e_$flops/bahdanau/*.log "$LOGS/e2e_${flops}_train.log" 2>/dev/null || true
done
step decode 60 "$PYTHON" -m nmt_study measure speed --models bahdanau --checkpoints /tmp/e2e_1e14 --device cuda \
    --data-dir "$NMT_DATA_DIR" --output "$LOGS/decode"
# Joey NMT beside it on the same GPU (45 s each model), then the other CUDA tests with the time left: training,
# resuming and decoding through the commands, the fused kernels
if [[ -f "$GPU/joey/gpu.sh" ]]; then
    step peer 130 env PY="$PYTHON" bash "$GPU/joey/gpu.sh" run "$GPU/joey" "$LOGS/joey" 45
    cp "$LOGS/joey/joeynmt_cuda.json" "$OUT/" 2>/dev/null || true
fi
# Where a captured update's time goes (the kernels' and the host's, 16 updates each; profile_*.txt in the logs),
# apart from the benchmark so that a profiler that stalls under graph replay costs no figure
step profile 60 "$PYTHON" -m nmt_study measure speed --train-only --device cuda --steps 4 --windows 1 --profile 16 \
    --models "bahdanau;transformer" --data-dir "$NMT_DATA_DIR" --output "$LOGS/profile"
step cuda_tests 120 "$PYTHON" -m pytest tests/test_cuda.py -k "not captured and not replayed" -rs \
    -p no:cacheprovider -o addopts=""
exit $status
