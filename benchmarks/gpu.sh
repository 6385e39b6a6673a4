#!/usr/bin/env bash
# All GPU checks in one prepared run (about 5 minutes on an H200): the bf16 GEMM ceiling,
# GPT-2 124M tokens/s and MFU naive, by hand (bf16 + fused AdamW) and tuned (+ compile, loader), and the vision workload's
# data-wait share before and after loader tuning, then the doctor's GPU facts on that live
# run's trace against HolisticTraceAnalysis's (when installed). Prints short tables; full results
# go to the folder given as the first argument (default gpu-results).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu-results}"
mkdir -p "$out"
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU'; print(torch.__version__, torch.cuda.get_device_name(0))"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv | tee "$out/nvidia-smi.csv" || true
PYTHONUNBUFFERED=1 timeout 480 python3 benchmarks/gpu_bench.py --out "$out" 2>&1 | tee "$out/log.txt"
python3 benchmarks/gpu_vs_hta.py "$out" 2>&1 | tee "$out/gpu_vs_hta.md" || echo "gpu_vs_hta: no trace to compare"
