"""Decode on AD102 and GB202 (vLLM's FlashAttention-2 decode, cuBLAS at decode M), from NVIDIA AIConfigurator's
measured operator profiles.

    python benchmarks/fit_decode_ad102_gb202.py AIC_REPO     # a checkout of github.com/ai-dynamo/aiconfigurator

Reads aic-core/src/aiconfigurator_core/systems/data/{l40s,rtx_pro_6000_server}/attention/vllm/0.24.0/
generation_attention_perf.parquet (vLLM 0.24's decode attention timed on an L40S and an RTX PRO 6000
Blackwell Server Edition; not copied here), keeps the FA2 kernel's rows (kernel_source
vllm_flash_attn_fa2, bf16 KV, head dim 128, no window) and fits one law per GPU,

    t = t0 + per_cta x sequences x KV heads + KV bytes / (eta x bandwidth),

by least squares of relative error on the even-indexed points, scored on the odd ones (printed, with the
`fa2-ideal` decode it replaces scored on the same points). The profiler times each call over and over, so
a batch whose KV fits in the L2 cache (96 MB on the L40S, 128 MB on the RTX PRO 6000) is re-read warm,
faster than any DRAM: such points are left out, except those under 1/16 of L2, where the KV is too small
to matter and the per-call and per-CTA costs are what is timed. The constants land in
engines/perf/kernels.py _FA2_DECODE_MEASURED ([AIC-DECODE]).

Then the decode GEMMs: .../l40s/gemm/vllm/0.22.0 and .../rtx_pro_6000_server/gemm/sglang/0.5.10
gemm_perf.parquet (bf16, torch's GEMM, i.e. cuBLAS): the weight-streaming fraction is the median, over
M <= 16 and weights over 4 x L2, of bytes / ((t - 5.7 us) x bandwidth), 5.7 us the fixed cost of the
A100 fit whose other constants these parts keep; printed with the decode-GEMM MAPE of that law before
and after (kernels.py _GEMM_STREAM_MEASURED, [AIC-GEMM]).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

DATA = "aic-core/src/aiconfigurator_core/systems/data/{gpu}/attention/vllm/0.24.0/generation_attention_perf.parquet"
# name in AIConfigurator, the catalog's name, memory bandwidth B/s and L2 bytes (datasheets; recent_gpus.py)
GPUS = (("l40s", "l40s-48g", 864e9, 96e6), ("rtx_pro_6000_server", "rtx-pro-6000-server-96g", 1597e9, 128e6))
GEMMS = {"l40s": "aic-core/src/aiconfigurator_core/systems/data/l40s/gemm/vllm/0.22.0/gemm_perf.parquet",
         "rtx_pro_6000_server": "aic-core/src/aiconfigurator_core/systems/data/rtx_pro_6000_server/gemm/sglang/0.5.10/"
                                "gemm_perf.parquet"}
HEAD_DIM = 128


def points(path: Path):
    import pandas as pd

    df = pd.read_parquet(path)
    df = df[(df.kernel_source == "vllm_flash_attn_fa2") & (df.kv_cache_dtype == "bfloat16") & (df.window_size == 0)
            & (df.head_dim == HEAD_DIM)].sort_values(["num_heads", "num_key_value_heads", "batch_size", "step"])
    b = df.batch_size.to_numpy(float)
    kv_tokens = df.step.to_numpy(float) + 1.0  # isl 1 + the decode steps before this one
    kv_bytes = b * kv_tokens * df.num_key_value_heads.to_numpy(float) * HEAD_DIM * 2 * 2  # K and V, bf16
    qo_bytes = b * df.num_heads.to_numpy(float) * HEAD_DIM * 2 * 2
    return b * df.num_key_value_heads.to_numpy(float), kv_bytes + qo_bytes, df.latency.to_numpy(float) * 1e-3


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    from scipy.optimize import least_squares

    for aic, name, bandwidth, l2 in GPUS:
        path = Path(sys.argv[1], DATA.format(gpu=aic))
        if not path.is_file():
            print(f"no such file: {path}", file=sys.stderr)
            return 2
        ctas, nbytes, t = points(path)
        keep = (nbytes > 4 * l2) | (nbytes < l2 / 16)
        ctas, nbytes, t = ctas[keep], nbytes[keep], t[keep]

        def law(p, i):
            return p[0] * 1e-6 + p[1] * 1e-6 * ctas[i] + nbytes[i] / (p[2] * bandwidth)

        train, test = np.arange(0, len(t), 2), np.arange(1, len(t), 2)
        fit = least_squares(lambda p: law(p, train) / t[train] - 1, [10.0, 0.02, 0.8], bounds=([0, 0, 0.1], [100, 10, 1.2]))
        p = fit.x

        def mape(i, priced):
            return 100 * float(np.mean(np.abs(priced / t[i] - 1)))

        from engines.perf import get_gpu

        ideal = nbytes / (get_gpu(name).hbm_efficiency * bandwidth)
        print(f"{name}: t0 {p[0]:.2f} us, {p[1]:.4f} us a CTA (sequence x KV head), eta {p[2]:.3f} of {bandwidth / 1e9:g} GB/s; "
              f"MAPE train {mape(train, law(p, train)):.1f} %, held out {mape(test, law(p, test)):.1f} % "
              f"({len(t)} points); fa2-ideal on the held-out points {mape(test, ideal[test]):.1f} %")
        gemm_stream(Path(sys.argv[1], GEMMS[aic]), name, l2)
    return 0


def gemm_stream(path: Path, name: str, l2: float) -> None:
    from dataclasses import replace

    import pandas as pd

    from engines.perf import get_gpu
    from engines.perf.kernels import _GEMM_2024, _GEMM_2024_FALLBACK, _GEMM_FALLBACK_MAMF

    gpu = get_gpu(name)
    df = pd.read_parquet(path)
    df = df[df.gemm_dtype == "bfloat16"]
    m, n, k = (df[c].to_numpy(float) for c in ("m", "n", "k"))
    t = df.latency.to_numpy(float) * 1e-3
    nbytes = (n * k + m * (n + k)) * 2
    decode = (m <= 16) & (n * k * 2 > 4 * l2)
    base = _GEMM_2024[_GEMM_2024_FALLBACK]
    base = replace(base, compute_efficiency=base.compute_efficiency * gpu.matmul_efficiency / _GEMM_FALLBACK_MAMF)
    eta = float(np.median(nbytes[decode] / ((t[decode] - base.fixed_s) * gpu.hbm_bandwidth)))

    def law(g):
        tiled = np.ceil(m / 128) * 128
        compute = 2 * tiled * k * n / (gpu.peak_flops * g.compute_efficiency * k / (k + g.k_half))
        return g.fixed_s + (compute ** 4 + (nbytes / (gpu.hbm_bandwidth * g.stream_efficiency)) ** 4) ** 0.25

    before, after = (100 * float(np.mean(np.abs(law(g)[decode] / t[decode] - 1)))
                     for g in (base, replace(base, stream_efficiency=eta)))
    print(f"{name}: decode GEMMs stream weights at {eta:.3f} of bandwidth ({int(decode.sum())} GEMMs, M <= 16); "
          f"MAPE with the A100 fit's {base.stream_efficiency} {before:.1f} %, with {eta:.3f} {after:.1f} %")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
