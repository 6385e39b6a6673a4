#!/usr/bin/env bash
# The GPU machine's checks, in two stages meant to run back to back:
#
#   bash benchmarks/gpu.sh --smoke OUT/smoke && bash benchmarks/gpu.sh OUT/full
#
# --smoke (under a minute): every CUDA path on a tiny model, one pass/fail line each (the
#   imports, the tests marked gpu, the doctor end to end); benchmarks/gpu_smoke.py says how.
# full (under 8 minutes on an H200): the bf16 GEMM ceiling; GPT-2 124M tokens/s and MFU naive,
#   by hand and tuned at a batch that fills the card (benchmarks/gpu_bench.py); torchboost
#   doctor and tune --budget 150 on benchmarks/scripts/char_gpt.py; the doctor's GPU shares
#   against HolisticTraceAnalysis's on the doctor's own trace (benchmarks/gpu_vs_hta.py). Each
#   part runs under its own time limit, all of them within the stage's; a part that fails or
#   runs out of time is said, and the next one still runs. Tables are printed; results.json,
#   results.md and each part's log go into OUT.
#
# Needs no network and nothing installed beyond torch (2.11 or later) and the machine's usual
# packages: torchboost runs from src/ (on PYTHONPATH; `python3 -m torchboost`), and what the
# machine lacks (tomli-w; HolisticTraceAnalysis and plotly for the HTA check) is installed
# from benchmarks/wheels with pip --no-index into a temporary folder, also on PYTHONPATH, so
# the doctor's and tune's child processes find both. Every file goes into OUT, none into the
# tree (no bytecode, no pytest cache). Without a CUDA GPU it says so on its last line and
# exits 0. Exit status: 2 bad usage, 1 the install or a check failed, 0 otherwise.
set -uo pipefail

usage() { echo "usage: bash benchmarks/gpu.sh [--smoke] OUTDIR" >&2; exit 2; }
smoke=0
if [[ "${1:-}" == "--smoke" ]]; then smoke=1; shift; fi
[[ $# -eq 1 && "$1" != -* ]] || usage
mkdir -p "$1" || exit 1
out="$(cd "$1" && pwd)"  # absolute: the parts run in OUT/work
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo" || exit 1
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1

install() {  # the wheels into a fresh temporary folder, which goes first on PYTHONPATH after src/
    shopt -s nullglob
    local wheels=("$repo"/benchmarks/wheels/*.whl)
    shopt -u nullglob
    if (( ${#wheels[@]} == 0 )); then
        echo "install: FAILED: no wheels in benchmarks/wheels (tomli-w, HolisticTraceAnalysis, plotly)"
        exit 1
    fi
    site="$(mktemp -d "${TMPDIR:-/tmp}/torchboost-gpu-site.XXXXXX")" || exit 1
    trap 'rm -rf "$site"' EXIT
    # --no-deps: HTA's requirements name jupyterlab, pydot and pytest, which its analyses never
    # import; what they do import (pandas, numpy, networkx; plotly's narwhals) the smoke checks.
    if ! python3 -m pip install --no-index --no-deps --no-compile --disable-pip-version-check --quiet \
            --target "$site" "${wheels[@]}" >"$out/install.log" 2>&1; then
        echo "install: FAILED: pip could not install benchmarks/wheels/*.whl (install.log):"
        tail -n 5 "$out/install.log"
        exit 1
    fi
    export PYTHONPATH="$repo/src:$site${PYTHONPATH:+:$PYTHONPATH}"
    echo "install: ok: torchboost from src/, $(cd "$repo/benchmarks/wheels" && ls -- *.whl | tr '\n' ' ')"
}

if (( smoke )); then
    install
    python3 benchmarks/gpu_smoke.py "$out"
    exit $?
fi

if ! python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)' 2>"$out/cuda-check.log"; then
    echo "no CUDA GPU: the full stage measures on one, and torch here sees none" \
         "($(python3 -c 'import torch; print("torch", torch.__version__)' 2>&1 | tail -n 1)); nothing was measured"
    exit 0
fi
install
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv >"$out/nvidia-smi.csv" 2>&1 || true
python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, torch.cuda.get_device_name(0))'

STAGE_S=470      # the whole full stage, seconds: the parts' limits are cut to what is left of it
deadline=$((SECONDS + STAGE_S))
: >"$out/parts.tsv"
# The parts' working directory: an empty folder of its own, as the doctor and tune watch the one
# they are started in for what the script writes, and the parts' logs grow in OUT.
mkdir -p "$out/work"
part() {  # part NAME LIMIT_S COMMAND...: run in OUT/work under its limit, log to OUT/NAME.log, say how it ended
          # (PART_OK="0 3" part ...: the exit statuses that are not a failure; default 0)
    local name=$1 limit=$2; shift 2
    local left=$((deadline - SECONDS - 10))  # 10 s kept for the summary
    (( limit > left )) && limit=$left
    if (( limit < 20 )); then
        echo "== $name: NOT RUN: the stage's $STAGE_S s are spent"
        printf '%s\tnot run\t\t0\t0\n' "$name" >>"$out/parts.tsv"
        return
    fi
    echo "== $name (at most $limit s)"
    local start=$SECONDS
    (cd "$out/work" && timeout --kill-after=20 "$limit" "$@") 2>&1 | tee "$out/$name.log"
    local code=${PIPESTATUS[0]} took=$((SECONDS - start)) status=ok
    if (( code == 124 || code == 137 )); then status="timed out"; elif [[ " ${PART_OK:-0} " != *" $code "* ]]; then
        status=failed; fi
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$code" "$took" "$limit" >>"$out/parts.tsv"
    echo "== $name: $status (exit status $code, $took s; log $name.log)"
}

bench="$repo/benchmarks"
part gemm 60 python3 "$bench/gpu_bench.py" gemm --out "$out"
part gpt 200 python3 "$bench/gpu_bench.py" gpt --out "$out"
part doctor 120 python3 -m torchboost doctor --out "$out/doctor" -- python3 "$bench/scripts/char_gpt.py"
part hta 60 python3 "$bench/gpu_vs_hta.py" "$out"
# tune last, its budget cut to fit what is left: it ends within --budget x 1.5 (search, then its check)
left=$((deadline - SECONDS - 40))
budget=$(( left * 2 / 3 < 150 ? left * 2 / 3 : 150 ))
if (( budget < 40 )); then
    budget=0  # too short to search: the part is then not run
elif (( budget < 150 )); then
    echo "tune: --budget $budget, not 150: that is what the stage has left"
fi
# tune exits 3 when it proves no change faster (torchboost tune --help): a result, not a failure
PART_OK="0 3" part tune $(( budget ? 240 : 0 )) python3 -m torchboost tune --budget "$budget" --out "$out/tune" \
    --config "$out/tune/torchboost.toml" -- python3 "$bench/scripts/char_gpt.py"
echo
python3 "$bench/gpu_bench.py" summary "$out"
