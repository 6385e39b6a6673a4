#!/usr/bin/env bash
# The GPU machine's run: one command, two independent stages, the results in three files.
#
#   bash benchmarks/gpu.sh OUT                # the set-up, the smoke stage, then the full stage
#   bash benchmarks/gpu.sh --only full OUT    # one stage again (smoke or full), the rest of OUT kept
#
# smoke (at most SMOKE_S): every CUDA path on a tiny model, one pass/fail line each (the imports,
#   the tests marked gpu, the doctor end to end); benchmarks/gpu_smoke.py says how.
# full (at most FULL_S): the GEMM ceilings (bf16, fp16, TF32, fp32); torchboost tune on GPT-2
#   124M (python -m torchboost.workloads.gpt --size gpt2), its budget what the stage leaves;
#   GPT-2 124M naive, then with tune's pick, the loader inside the timed step
#   (benchmarks/gpu_bench.py); the GPU shares of tune's diagnosis against HolisticTraceAnalysis
#   (benchmarks/gpu_vs_hta.py). Each part runs under its own time limit, cut to what is left of
#   the stage's; a part that fails or runs out of time is said, and the next one still runs.
#
# A failed stage (or install) does not stop the next: the full stage runs after a failed smoke.
# After each part and each stage, benchmarks/gpu_results.py gathers everything into OUT:
# results.md (the tables), results.json (the same as data) and logs.tar.gz (every log, report
# and trace), each replaced whole, so a run cut short keeps what it measured. Nothing else is
# written into OUT, none into the tree (no bytecode, no pytest cache); the work is done in a
# temporary folder, removed at the end.
#
# Needs no network and nothing installed beyond torch (2.11 or later) and the machine's usual
# packages: torchboost runs from src/ (on PYTHONPATH; `python3 -m torchboost`), and what the
# machine lacks (tomli-w; HolisticTraceAnalysis and plotly for the HTA check) is installed
# from benchmarks/wheels with pip --no-index into a temporary folder, also on PYTHONPATH, so
# the doctor's and tune's child processes find both. Without a CUDA GPU the smoke stage ends
# "no CUDA GPU: N checks skipped" and the full stage says it measured nothing.
# Exit status: 2 bad usage; 1 a stage failed (or OUT could not be written); 0 otherwise.
set -uo pipefail

# Seconds. One command on the GPU machine runs at most 10 minutes and a session has 15, start-up
# included: the whole run in 7 leaves room for a rerun of either stage (--only).
TOTAL_S=420
SETUP_S=30    # the install, the CUDA check, gathering the results after each stage
SMOKE_S=90
FULL_S=300
GATHER_S=20   # the most one gathering of the results takes
GPT_BATCH=16  # GPT-2 124M's sequences a step, the same in tune's trials and in the naive/tuned runs

usage() { echo "usage: bash benchmarks/gpu.sh [--only smoke|full] OUTDIR" >&2; exit 2; }
stages="smoke full"
if [[ "${1:-}" == "--only" ]]; then
    [[ "${2:-}" == smoke || "${2:-}" == full ]] || usage
    stages=$2; shift 2
fi
[[ $# -eq 1 && "$1" != -* ]] || usage
mkdir -p "$1" || exit 1
out="$(cd "$1" && pwd)"  # absolute: the parts run in folders of their own
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo" || exit 1
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
bench="$repo/benchmarks"

work="$(mktemp -d "${TMPDIR:-/tmp}/torchboost-gpu.XXXXXX")" || exit 1
site="$work.site"
trap 'rm -rf "$work" "$site"' EXIT
# A rerun (--only) into an earlier run's OUT: its logs come back, the stage run again replaces its own
if [[ -f "$out/logs.tar.gz" ]]; then
    tar -xzf "$out/logs.tar.gz" -C "$work" 2>/dev/null || echo "gpu.sh: $out/logs.tar.gz does not unpack; starting afresh"
fi
printf 'total\t%s\nsetup\t%s\nsmoke\t%s\nfull\t%s\n' "$TOTAL_S" "$SETUP_S" "$SMOKE_S" "$FULL_S" >"$work/plan.tsv"
echo "plan: set-up $SETUP_S s, smoke $SMOKE_S s, full $FULL_S s: at most $TOTAL_S s; running: $stages"

record() {  # record FILE NAME STATUS CODE SECONDS LIMIT: one row of stages.tsv or parts.tsv, an earlier one replaced in place
    local file=$1 row
    row="$(printf '%s\t%s\t%s\t%s\t%s' "$2" "$3" "$4" "$5" "$6")"
    touch "$file"
    awk -F '\t' -v name="$2" -v row="$row" '$1 == name { print row; done = 1; next } { print }
        END { if (!done) print row }' "$file" >"$file.new" && mv "$file.new" "$file"
}

gather() {  # results.md, results.json and logs.tar.gz into OUT, from what the work folder holds now
    timeout --kill-after=5 "$GATHER_S" python3 "$bench/gpu_results.py" "$work" "$out" \
        || echo "gpu.sh: the results could not be gathered into $out (exit status $?)"
}

install() {  # the wheels into a fresh temporary folder, which goes first on PYTHONPATH after src/
    # Without a GPU only tomli-w: HTA and plotly (16,000 files) serve the full stage's check alone
    shopt -s nullglob
    local wheels=("$bench"/wheels/tomli_w-*.whl)
    [[ -n "$gpu" ]] && wheels=("$bench"/wheels/*.whl)
    shopt -u nullglob
    export PYTHONPATH="$repo/src${PYTHONPATH:+:$PYTHONPATH}"
    if (( ${#wheels[@]} == 0 )); then
        echo "install: FAILED: no wheels in benchmarks/wheels (tomli-w, HolisticTraceAnalysis, plotly); going on without"
        return
    fi
    # --no-deps: HTA's requirements name jupyterlab, pydot and pytest, which its analyses never
    # import; what they do import (pandas, numpy, networkx; plotly's narwhals) the smoke checks.
    if ! timeout 60 python3 -m pip install --no-index --no-deps --no-compile --disable-pip-version-check --quiet \
            --target "$site" "${wheels[@]}" >"$work/install.log" 2>&1; then
        echo "install: FAILED: pip could not install benchmarks/wheels/*.whl (install.log); going on without:"
        tail -n 5 "$work/install.log"
        return
    fi
    export PYTHONPATH="$repo/src:$site${PYTHONPATH#"$repo/src"}"
    echo "install: ok: torchboost from src/, $(for w in "${wheels[@]}"; do printf '%s ' "${w##*/}"; done)"
}

mapfile -t found < <(timeout 60 python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)
print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' 2>"$work/cuda-check.log")
torch_words="${found[0]:-torch does not import (cuda-check.log)}" gpu="${found[1]:-}"
printf 'device\t%s\ntorch\t%s\n' "${gpu:-no CUDA GPU}" "$torch_words" >"$work/machine.tsv"
install
echo "$torch_words; ${gpu:-no CUDA GPU}"
record "$work/stages.tsv" setup ok 0 "$SECONDS" "$SETUP_S"

run_smoke() {
    rm -rf "$work/smoke" && mkdir -p "$work/smoke"
    echo "== smoke (at most $SMOKE_S s)"
    local start=$SECONDS status=ok
    # the checks' own limit leaves the stage's last seconds for smoke.json
    timeout --kill-after=5 "$SMOKE_S" python3 "$bench/gpu_smoke.py" --limit $((SMOKE_S - 8)) "$work/smoke" 2>&1 \
        | tee "$work/smoke/smoke.log"
    local code=${PIPESTATUS[0]}
    if (( code == 124 || code == 137 )); then status="timed out"; elif (( code )); then status=failed; fi
    record "$work/stages.tsv" smoke "$status" "$code" $((SECONDS - start)) "$SMOKE_S"
    echo "== smoke: $status (exit status $code, $((SECONDS - start)) s)"
    gather
    [[ $status == ok ]]
}

part() {  # part NAME LIMIT_S COMMAND...: run in full/run under its limit, log to full/NAME.log, say how it ended
          # (PART_OK="0 3" part ...: the exit statuses that are not a failure; default 0)
    local name=$1 limit=$2; shift 2
    local left=$((deadline - SECONDS))
    (( limit > left )) && limit=$left
    if (( limit < 20 )); then
        echo "== $name: NOT RUN: the full stage's time is spent"
        record "$work/full/parts.tsv" "$name" "not run" "" 0 0
        failed_parts+=" $name"
        return
    fi
    echo "== $name (at most $limit s)"
    local start=$SECONDS
    (cd "$work/full/run" && timeout --kill-after=10 "$limit" "$@") 2>&1 | tee "$work/full/$name.log"
    local code=${PIPESTATUS[0]} status=ok
    if (( code == 124 || code == 137 )); then status="timed out"; elif [[ " ${PART_OK:-0} " != *" $code "* ]]; then
        status=failed; fi
    [[ $status == ok ]] || failed_parts+=" $name"
    record "$work/full/parts.tsv" "$name" "$status" "$code" $((SECONDS - start)) "$limit"
    echo "== $name: $status (exit status $code, $((SECONDS - start)) s; log $name.log)"
    gather
}

run_full() {
    rm -rf "$work/full" && mkdir -p "$work/full/run" "$work/full/tuned"
    local start=$SECONDS limit=$FULL_S
    local left=$((TOTAL_S - SECONDS - GATHER_S))
    (( limit > left )) && limit=$left
    echo "== full (at most $limit s)"
    if [[ -z "$gpu" ]]; then
        echo "no CUDA GPU: the full stage measures on one, and torch here sees none ($torch_words); nothing was measured"
        record "$work/stages.tsv" full "no gpu" 0 $((SECONDS - start)) "$FULL_S"
        echo "== full: no gpu ($((SECONDS - start)) s)"
        gather
        return 0
    fi
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv >"$work/full/nvidia-smi.csv" 2>&1
    deadline=$((SECONDS + limit - 10))  # 10 s of the stage kept for a part's kill and the last gathering
    failed_parts=""
    part gemm 40 python3 "$bench/gpu_bench.py" gemm --out "$work/full"
    # tune next, its budget what the stage leaves after the GPT-2 runs and HTA: it ends within
    # --budget x 1.5 (diagnosis and search, then its end-to-end check); the script is told a
    # real run's length, so that compile's seconds are weighed against 5000 steps
    local budget=$(( (deadline - SECONDS - 105 - 15) * 2 / 3 ))
    (( budget > 100 )) && budget=100
    if (( budget < 40 )); then
        record "$work/full/parts.tsv" tune "not run" "" 0 0
        echo "== tune: NOT RUN: $budget s of budget is too short to search"
        failed_parts+=" tune"
    else
        # exit 3: no proven win; 4: faster, not verified end to end within the budget (torchboost tune --help)
        PART_OK="0 3 4" part tune $((budget * 3 / 2 + 15)) python3 -m torchboost tune --budget "$budget" \
            --run-steps 5000 --out "$work/full/tune" --config "$work/full/tuned/torchboost.toml" \
            -- python3 -m torchboost.workloads.gpt --size gpt2 --batch-size "$GPT_BATCH" --steps 5000
    fi
    part gpt 85 python3 "$bench/gpu_bench.py" gpt --batch "$GPT_BATCH" --out "$work/full" --tuned "$work/full/tuned"
    part hta 20 python3 "$bench/gpu_vs_hta.py" "$work/full"
    local status=ok code=0
    [[ -n $failed_parts ]] && { status="failed:$failed_parts"; code=1; }
    record "$work/stages.tsv" full "$status" "$code" $((SECONDS - start)) "$limit"
    echo "== full: $status ($((SECONDS - start)) s)"
    gather
    return $code
}

failed=""
for stage in $stages; do
    "run_$stage" || failed+=" $stage"
done
echo "results: $out/results.md, results.json, logs.tar.gz ($SECONDS s in all)"
if [[ -n $failed ]]; then
    echo "gpu.sh: failed:$failed"
    exit 1
fi
exit 0
