"""Number formats a deployment keeps its weights and KV cache in (`perf.weight_dtype`, `perf.kv_dtype`).

None (spelled `auto`, `bf16` or `fp16` too) is the model's own 16-bit format, the catalog's
default. `fp8` is FP8 E4M3, one byte an element, as vLLM serves it:

  [VLLM-FP8] vLLM `--quantization fp8` (vllm/model_executor/layers/quantization/fp8.py, W8A8): the
      linear layers' weights (QKV, attention output, MLP, the experts of an MoE layer) in FP8 with
      per-tensor scales, activations quantized on the fly, the GEMMs on FP8 tensor cores; the
      embedding, the LM head (a vocab-parallel embedding, not a linear layer), the norms and an MoE
      router (built with quant_config=None in vLLM's mixtral.py) stay 16-bit.
      `--kv-cache-dtype fp8`: K and V stored in FP8 and dequantized inside the attention kernel,
      so the KV bytes halve and the attention FLOPs stay 16-bit.

The model prices FP8 only on GPUs with FP8 tensor cores (hardware.py `GpuSpec.fp8_peak_flops`:
H100 and H200, [H100-DS]/[H200-DS]; the Ada, Hopper and Blackwell parts of recent_gpus.py); A100,
A40 and RTX A6000 have none, and either knob on them is refused.
What FP8 changes in the price: linear-layer weights stream at 1 B a parameter and their GEMMs
compute at the FP8 peak (times the stack's measured fraction, an assumption: no FP8 profile is in
the sources); KV reads and writes move 1 B an element. The GEMMs' activation traffic stays at
2 B an element, which covers the on-the-fly quantization kernel that reads them in 16-bit.
"""
from __future__ import annotations

from common.errors import HarnessError

from .hardware import GpuSpec, get_gpu, known_gpus

FP8 = "fp8"
FP8_BYTES = 1
_SPELLINGS = {"auto": None, "bf16": None, "fp16": None, "bfloat16": None, "float16": None,
              "fp8": FP8, "fp8-e4m3": FP8, "float8-e4m3fn": FP8}


def check_dtype(value: str | None, what: str, gpu: GpuSpec) -> str | None:
    """`value` in one spelling (None or "fp8"); refused when unknown or when `gpu` has no FP8."""
    if value is None:
        return None
    key = str(value).strip().lower().replace("_", "-")
    if key not in _SPELLINGS:
        raise HarnessError(f"{what}={value!r}: known {', '.join(sorted(_SPELLINGS))}")
    dtype = _SPELLINGS[key]
    if dtype == FP8 and gpu.fp8_peak_flops is None:
        fp8 = [name for name in known_gpus() if get_gpu(name).fp8_peak_flops is not None]
        raise HarnessError(f"{what}=fp8: {gpu.name} has no FP8 tensor cores (the model prices FP8 on GPUs "
                           f"whose datasheet has an FP8 peak: {', '.join(fp8)})")
    return dtype


def bytes_per_element(dtype: str | None, native: int) -> int:
    """Bytes of one element stored in `dtype` (None: the model's `native` width)."""
    return FP8_BYTES if dtype == FP8 else native
