#!/usr/bin/env bash
# The GPU check (scripts/gpu_check/check.py says what it runs), with `timeout` as the backstop of
# its own --budget-s: `scripts/gpu_check.sh [--tiny] [...]` is `python scripts/gpu_check [...]`.
# Results in $OUT (or results/gpu_check).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec timeout --kill-after=10 475 "${PYTHON:-python3}" "$ROOT/scripts/gpu_check" "$@"
