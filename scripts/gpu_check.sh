#!/usr/bin/env bash
# One prepared check of the torch engine on a GPU machine (torch, triton, aiohttp, numpy, pandas;
# nothing else needed). Random-weight Mistral-7B-shaped model; a short Poisson workload under the
# sarathi and vllm policies; throughput, TTFT/TBT measured next to the performance model's
# prediction for the detected GPU; per-iteration times measured vs predicted; a correctness check
# of the attention backend on the device. Budgeted to finish in under 8 minutes.
#
#   scripts/gpu_check.sh                 # on the GPU machine; results in $OUT (or results/gpu_check)
#   scripts/gpu_check.sh --tiny          # the same pipeline on CPU with a tiny model (~1 minute)
#   scripts/gpu_check.sh --requests 64 --qps 4 --policies sarathi,vllm,orca
#
# Exit status: 0 when every phase ran and the correctness check passed; 1 otherwise.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
OUT_DIR="${OUT:-$ROOT/results/gpu_check}"
mkdir -p "$OUT_DIR"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
# The whole check stops itself before 8 minutes (--budget-s); `timeout` is the backstop.
exec timeout --kill-after=10 475 "$PY" "$ROOT/scripts/gpu_check/check.py" --out "$OUT_DIR" "$@"
