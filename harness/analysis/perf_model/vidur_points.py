"""Vidur's measured operator profiles as one table of points, and the committed sample of it.

`measured_points(DIR)` reads Vidur's data/profiling layout (../shared/profiles/vidur: compute/,
network/; never committed) into one row per measured point (POINT_COLUMNS: operator family,
where it was measured, its shape, its median in seconds). `stratified_sample` keeps a thirtieth
of every stratum, evenly spaced by shape; `write_sample` / `load_sample` are the
committed copy (data/perf/vidur_operator_sample.csv, provenance in its header and
data/perf/README.md) that the report's operator-fidelity figure and the tests price without
the full profiles. `harness.analysis.perf_model.operator_fidelity.price` prices either.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis.perf_model.operator_fidelity import ATTENTION, COLLECTIVES, ELEMENTWISE, GEMM_OPS, MODELS, NETWORKS

REPO = Path(__file__).resolve().parents[3]
VIDUR_DIR = REPO.parent / "shared" / "profiles" / "vidur"
SAMPLE_FILE = REPO / "data" / "perf" / "vidur_operator_sample.csv"
MS = 1e-3
POINT_COLUMNS = ["family", "gpu", "model", "tp", "num_tokens", "batch_size", "context", "num_workers",
                 "devices_per_node", "size_bytes", "measured_s"]
INT_COLUMNS = ["tp", "num_tokens", "batch_size", "context", "num_workers", "devices_per_node", "size_bytes"]
# Share of every stratum kept (at least MIN_PER_STRATUM rows), at evenly spaced ranks in shape
# order. Proportional, so pooled errors weigh strata as the full set does; sized so the sample's
# MAPE per figure panel is within 1.2 points of the full set's, per family x GPU within 2.2.
SAMPLE_FRACTION = 1 / 30
MIN_PER_STRATUM = 8
# Vidur's ops summed into each elementwise piece (norms + add, rotary, activation)
_ELEMENTWISE_OPS = dict(zip(ELEMENTWISE, (("input_layernorm", "post_attention_layernorm", "add"),
                                          ("attn_rope",), ("mlp_act",))))
_PROVENANCE = """\
# Stratified sample of Vidur's measured operator profiles: shapes and measured medians only (no predictions).
# source: github.com/microsoft/vidur, data/profiling at commit 7d47513 (2024-11-19); attention.csv from commit
#   e2d00e9 (data/profiling/a100/attention.csv); MIT licence, Copyright (c) Microsoft Corporation (data/perf/README.md)
# read from: ../shared/profiles/vidur (compute/{{a100,a40}}/meta-llama/*/mlp.csv, compute/a100/.../attention.csv,
#   network/*/{{all_reduce,send_recv}}.csv); medians over duplicate keys, points with a median <= 0 dropped
# sampled: {n} of {total} points; {per_stratum} of every stratum (at least {minimum} rows) at evenly spaced
#   ranks in shape order; strata: compute (family, gpu, model, tp) by num_tokens, attention (family) by
#   (num_tokens, batch_size, context), collectives (family, gpu, num_workers, devices_per_node) by size_bytes
# derived_by: python benchmarks/validate_operators.py --write-sample data/perf/vidur_operator_sample.csv
# columns: family (operator; 'elementwise' = norms + one add + rotary + activation, ew.* its pieces), gpu (Vidur
#   compute GPU or network directory), model (Vidur model directory), tp (TP ranks; collectives: ranks),
#   num_tokens, batch_size, context (KV-cache tokens), num_workers, devices_per_node, size_bytes, measured_s
#   (Vidur's median ms / 1000)
"""


def _median(df: pd.DataFrame, keys: list[str], cols: list[str]) -> pd.DataFrame:
    """Median over duplicate keys (as engines/perf/measured.py does)."""
    return df.groupby(keys, as_index=False)[cols].median()


def _compute(vidur: Path, gpu: str) -> list[pd.DataFrame]:
    out = []
    for vdir in MODELS:
        f = vidur / "compute" / gpu / "meta-llama" / vdir / "mlp.csv"
        if not f.is_file():
            continue
        names = [*GEMM_OPS, *(o for ops_ in _ELEMENTWISE_OPS.values() for o in ops_), "emb"]
        d = _median(pd.read_csv(f), ["num_tensor_parallel_workers", "num_tokens"],
                    [f"time_stats.{o}.median" for o in names])
        for tp, g in d.groupby("num_tensor_parallel_workers"):
            base = dict(gpu=gpu, model=vdir, tp=int(tp), num_tokens=g["num_tokens"].to_numpy(int))
            v = {o: g[f"time_stats.{o}.median"].to_numpy() * MS for o in GEMM_OPS}
            v.update({o: g[f"time_stats.{o}.median"].fillna(0.0).to_numpy() * MS for o in names if o not in v})
            out += [pd.DataFrame(dict(base, family=o, measured_s=v[o])) for o in GEMM_OPS]
            pieces = {fam: sum(v[o] for o in ops_) for fam, ops_ in _ELEMENTWISE_OPS.items()}
            out += [pd.DataFrame(dict(base, family=fam, measured_s=m)) for fam, m in pieces.items()]
            out.append(pd.DataFrame(dict(base, family="elementwise", measured_s=sum(pieces.values()))))
            out.append(pd.DataFrame(dict(base, family="embedding", measured_s=v["emb"])))
    return out


def _attention(vidur: Path) -> list[pd.DataFrame]:
    f = vidur / "compute" / "a100" / "meta-llama" / "Llama-2-70b-hf" / "attention.csv"
    if not f.is_file():
        return []
    raw = pd.read_csv(f)
    assert (raw["n_q_head"] == 64).all() and (raw["n_kv_head"] == 8).all() and (raw["n_embd"] == 8192).all()
    base = dict(gpu="a100", model="Llama-2-70b-hf", tp=int(raw["num_tensor_parallel_workers"].iloc[0]))
    keys = ["batch_size", "prefill_chunk_size", "kv_cache_size"]
    p = _median(raw[raw["is_prefill"]], keys, ["time_stats.attn_prefill.median"])
    d = _median(raw[~raw["is_prefill"]], keys, ["time_stats.attn_decode.median"])
    return [pd.DataFrame(dict(base, family="attn_prefill", batch_size=1, num_tokens=p["prefill_chunk_size"].to_numpy(),
                              context=p["kv_cache_size"].to_numpy(),
                              measured_s=p["time_stats.attn_prefill.median"].to_numpy() * MS)),
            pd.DataFrame(dict(base, family="attn_decode", batch_size=d["batch_size"].to_numpy(int),
                              num_tokens=d["batch_size"].to_numpy(int), context=d["kv_cache_size"].to_numpy(),
                              measured_s=d["time_stats.attn_decode.median"].to_numpy() * MS))]


def _network(vidur: Path) -> list[pd.DataFrame]:
    out = []
    for net in NETWORKS:
        for coll in COLLECTIVES:
            f = vidur / "network" / net / f"{coll}.csv"
            if not f.is_file():
                continue
            col = f"time_stats.{coll}.median"
            d = _median(pd.read_csv(f), ["num_workers", "devices_per_node", "size"], [col])
            for (p, dpn), g in d.groupby(["num_workers", "devices_per_node"]):
                out.append(pd.DataFrame(dict(
                    gpu=net, model="", tp=int(p), family=coll, num_workers=int(p), devices_per_node=int(dpn),
                    size_bytes=g["size"].to_numpy(np.int64), measured_s=g[col].to_numpy() * MS)))
    return out


def measured_points(vidur: str | Path = VIDUR_DIR) -> pd.DataFrame:
    """Every measured point under `vidur` (Vidur's data/profiling layout), POINT_COLUMNS; points
    whose median is missing or <= 0 are dropped."""
    vidur = Path(vidur)
    if not (vidur / "compute").is_dir():
        raise FileNotFoundError(f"no Vidur profiles at {vidur} (compute/ missing)")
    frames = _compute(vidur, "a100") + _compute(vidur, "a40") + _attention(vidur) + _network(vidur)
    pts = pd.concat(frames, ignore_index=True)
    pts = pts[pts["measured_s"] > 0].reset_index(drop=True)
    return pts.reindex(columns=POINT_COLUMNS)


# (kind, stratum keys, shape keys the kept rows are spread over)
_STRATA = (("compute", ["family", "gpu", "model", "tp"], ["num_tokens"]),
           ("attention", ["family"], ["num_tokens", "batch_size", "context"]),
           ("collective", ["family", "gpu", "num_workers", "devices_per_node"], ["size_bytes"]))


def stratified_sample(points: pd.DataFrame, fraction: float = SAMPLE_FRACTION,
                      minimum: int = MIN_PER_STRATUM) -> pd.DataFrame:
    """Deterministic subset of measured points: in every stratum of n rows, k = max(minimum,
    round(n x fraction)) of them (all if fewer), those at ranks floor((i + 1/2) n / k) in shape
    order (the middles of k equal slices, so the sample's error is the full set's, not its
    ends'). No randomness: the same points give the same sample."""
    kind = np.where(points["family"].isin(ATTENTION), "attention",
                    np.where(points["family"].isin(COLLECTIVES), "collective", "compute"))
    keep = []
    for k, strata, shape in _STRATA:
        for _, g in points[kind == k].groupby(strata, sort=False):
            g = g.sort_values(shape, kind="stable")
            n = min(len(g), max(minimum, round(len(g) * fraction)))
            keep.append(g.iloc[np.floor((np.arange(n) + 0.5) * len(g) / n).astype(int)])
    sample = pd.concat(keep).sort_index(kind="stable")
    return sample.reset_index(drop=True)[POINT_COLUMNS]


def write_sample(sample: pd.DataFrame, path: str | Path, total: int, fraction: float = SAMPLE_FRACTION,
                 minimum: int = MIN_PER_STRATUM) -> Path:
    """Write `sample` (drawn from `total` measured points with `fraction` and `minimum`) as CSV
    with its provenance header."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    out = sample[POINT_COLUMNS].copy()
    for c in INT_COLUMNS:
        out[c] = out[c].round().astype("Int64")
    share = f"1/{round(1 / fraction)}" if abs(1 / fraction - round(1 / fraction)) < 1e-9 else f"{fraction:g}"
    header = _PROVENANCE.format(n=len(out), total=total, per_stratum=share, minimum=minimum)
    path.write_text(header + out.to_csv(index=False, float_format="%.6g", lineterminator="\n"))
    return path


def load_sample(path: str | Path = SAMPLE_FILE) -> pd.DataFrame:
    """The committed sample (or another file write_sample wrote), POINT_COLUMNS."""
    df = pd.read_csv(path, comment="#", dtype={"family": str, "gpu": str, "model": str})
    df["model"] = df["model"].fillna("")
    for c in INT_COLUMNS:
        df[c] = df[c].astype(np.float64)
    return df[POINT_COLUMNS]
