"""Is the GEMM fit the cause of the first Sarathi paper's chunked-prefill misses? Its linear layers'
chunked-over-unchunked time for a 1K prompt, from Vidur's measured A40 rows (the RTX A6000's GA102
chip; Llama-2-7B, TP1: the only A40 model of that layout in the profile) against the cuBLAS fit
engines/perf prices them with (kernels.py `cublas-2024`), on the same shapes, and the fit on the
paper's LLaMA-13B / A6000.

    python benchmarks/sarathi23_chunk_gemms.py [--profiles DIR]   (Vidur's data/profiling layout)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engines.perf import Deployment, PerfModel  # noqa: E402
from engines.perf.queries import linear_time_per_layer  # noqa: E402

VIDUR = ROOT.parent / "shared" / "profiles" / "vidur"
LINEAR = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")  # QKV, out, MLP up+gate, down
PROMPT, CHUNKS = 1024, (64, 128, 256, 512)


def measured_linear_ms(profiles: Path) -> pd.Series:
    """One layer's linear time (ms, medians) by tokens, Llama-2-7B on one A40."""
    df = pd.read_csv(profiles / "compute" / "a40" / "meta-llama" / "Llama-2-7b-hf" / "mlp.csv")
    df = df[df["num_tensor_parallel_workers"] == 1]
    df = df.assign(linear=sum(df[f"time_stats.{c}.median"] for c in LINEAR))
    return df.groupby("num_tokens")["linear"].median()


def ratios(per_layer: dict[int, float]) -> dict[int, float]:
    """Chunked over unchunked linear time of a PROMPT-token prefill (the weights re-read each chunk)."""
    return {c: PROMPT // c * per_layer[c] / per_layer[PROMPT] for c in CHUNKS}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", default=str(VIDUR))
    profiles = Path(ap.parse_args().profiles)
    if not (profiles / "compute" / "a40").is_dir():
        print(f"no Vidur A40 profile under {profiles} (--profiles DIR)", file=sys.stderr)
        return 2
    rows = measured_linear_ms(profiles)
    tokens = np.array([*CHUNKS, PROMPT])
    out = {"measured, Llama-2-7B / A40": ratios({int(t): float(rows.loc[t]) for t in tokens})}
    for label, model, gpu in (("fit, Llama-2-7B / A40", "llama2-7b", "a40"),
                              ("fit, LLaMA-13B / RTX A6000", "llama-13b", "rtx-a6000")):
        perf = PerfModel(Deployment.create(model=model, gpu=gpu, stack="sarathi-2023"))
        out[label] = ratios(dict(zip(tokens.tolist(), linear_time_per_layer(perf, tokens).tolist())))
    print(f"linear time of a {PROMPT}-token prefill in chunks, over unchunked")
    print(f"{'':30s}" + "".join(f"{'chunk ' + str(c):>11s}" for c in CHUNKS))
    for label, r in out.items():
        print(f"{label:30s}" + "".join(f"{r[c]:10.3f}x" for c in CHUNKS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
