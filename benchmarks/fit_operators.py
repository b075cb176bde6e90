#!/usr/bin/env python3
"""Where the measured-kernel constants of engines/perf come from: fits to Vidur's operator profiles.

Each fit minimizes the relative error of one operator law over a training split and is scored on
a held-out split (A100: trained on Llama-2-7B/70B, scored on Llama-3-8B/70B, a GQA shape it never
saw; A40: trained on TP1/2, scored on TP4/8; attention and collectives: even-indexed shapes vs
odd ones). Only operator data goes in; no serving or capacity result is used anywhere.

    GEMM          t = t0 + (C^4 + W^4)^(1/4)     C = 2 ceil(M/128)128 K N / (peak eta_c K/(K+K0))
                                                 W = 2 B (K N + M (K + N)) / (eta_w HBM)
    elementwise   t = t0 + bytes / (eta HBM)     per kernel (norm, add, rotary, activation, embedding)
    attention     prefill t = t0 + 4 hd heads n (c + n) / (eta peak)
                  decode (one call, FlashAttention-2's split-KV kernel: engines/perf/split_kv.py)
                  t = t0 + [splits > 1] t_combine + max(KV bytes / (eta HBM), critical blocks x block bytes / B_cta)
    collectives   t = alpha + f bytes / B        (f = 2(p-1)/p for all-reduce, 1 for send/recv)
    link curves   t = alpha + sum_i clip(f bytes - x_i, 0, x_(i+1) - x_i) / B_i, one or two segments
                  per link (engines/perf/links.py Curve; a second only where it cuts held-out MAPE
                  by over a point), all-reduces pooled over the rank counts of one link

Usage: python benchmarks/fit_operators.py [--profiles DIR]   (needs scipy: the dev extra)
The constants it prints are the ones cited in engines/perf/hardware.py and kernels.py.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engines.perf.architectures import get_model  # noqa: E402
from engines.perf.hardware import get_gpu  # noqa: E402
from engines.perf.split_kv import DecodeCall, SplitKvDecode  # noqa: E402

VIDUR = REPO.parent / "shared" / "profiles" / "vidur"
from harness.analysis.perf_model.operator_fidelity import MODELS  # noqa: E402  (Vidur directory -> catalog name)
PEAK = {"a100": 312e12, "a40": 149.7e12}  # hardware.py datasheet peaks (A100 80GB PCIe, A40)
HBM = {"a100": 1935e9, "a40": 696e9}
GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
STREAMS = ("input_layernorm", "post_attention_layernorm", "add", "attn_rope", "mlp_act", "emb")
MS = 1e-3


def is_train(gpu: str, df: pd.DataFrame) -> pd.Series:
    return df["model"].str.startswith("Llama-2") if gpu == "a100" else df["tp"] <= 2


def compute_rows(profiles: Path) -> pd.DataFrame:
    """One row per (GPU, model, TP, tokens, operator): its shape, bytes and median time (s)."""
    rows = []
    for gpu in ("a100", "a40"):
        for vdir, name in MODELS.items():
            f = profiles / "compute" / gpu / "meta-llama" / vdir / "mlp.csv"
            if not f.is_file():
                continue
            m = get_model(name)
            cols = [f"time_stats.{o}.median" for o in GEMMS + STREAMS]
            d = pd.read_csv(f).groupby(["num_tensor_parallel_workers", "num_tokens"], as_index=False)[cols].median()
            for r in d.itertuples(index=False):
                tp, t = int(r[0]), float(r[1])
                h, hd, inter = m.hidden_size, m.head_dim, m.intermediate_size // tp
                qh, kvh = m.q_heads_per_gpu(tp), m.kv_heads_per_gpu(tp)
                shapes = {"attn_pre_proj": (h, (qh + 2 * kvh) * hd), "attn_post_proj": (qh * hd, h),
                          "mlp_up_proj": (h, m.mlp_in_width // tp), "mlp_down_proj": (inter, h)}
                width = {"input_layernorm": 2 * h, "post_attention_layernorm": 2 * h, "add": 3 * h,
                         "attn_rope": 2 * (qh + kvh) * hd, "mlp_act": 3 * inter, "emb": 2 * h}
                for op, v in zip(GEMMS + STREAMS, r[2:]):
                    if not v > 0:
                        continue
                    k, n = shapes.get(op, (0, 0))
                    kind = "norm" if op.endswith("layernorm") else op
                    rows.append(dict(gpu=gpu, model=vdir, tp=tp, tokens=t, op=op, kind=kind, k=k, n=n,
                                     bytes=t * width.get(op, 0) * m.bytes_per_param, measured=v * MS))
    return pd.DataFrame(rows)


def fit(law, x0, scale, lo, hi, train: pd.DataFrame):
    res = least_squares(lambda x: law(x, train) / train["measured"] - 1, x0=x0, x_scale=scale, bounds=(lo, hi))
    return res.x


def mape(law, x, df: pd.DataFrame) -> float:
    return 100 * float(np.mean(np.abs(law(x, df) / df["measured"] - 1))) if len(df) else float("nan")


def gemm_law(gpu: str):
    def law(x, d):
        eta_c, k0, eta_w, t0 = x
        m, k, n = d["tokens"].to_numpy(float), d["k"].to_numpy(float), d["n"].to_numpy(float)
        c = 2 * np.ceil(m / 128) * 128 * k * n / (PEAK[gpu] * eta_c * k / (k + k0))
        w = 2 * (k * n + m * (k + n)) / (eta_w * HBM[gpu])
        return t0 + (c ** 4 + w ** 4) ** 0.25
    return law


def stream_law(gpu: str):
    return lambda x, d: x[0] + d["bytes"].to_numpy(float) / (x[1] * HBM[gpu])


def report(title: str, law, x, df: pd.DataFrame, train: pd.Series, fmt: str) -> None:
    print(f"  {title:<18} {fmt.format(*x):<48} train {mape(law, x, df[train]):5.1f} %   held-out {mape(law, x, df[~train]):5.1f} %")


def attention_rows(profiles: Path) -> pd.DataFrame:
    raw = pd.read_csv(profiles / "compute/a100/meta-llama/Llama-2-70b-hf/attention.csv")
    tp = int(raw["num_tensor_parallel_workers"].iloc[0])
    m = get_model("llama2-70b")
    qh, kvh, hd = m.q_heads_per_gpu(tp), m.kv_heads_per_gpu(tp), m.head_dim
    keys = ["batch_size", "prefill_chunk_size", "kv_cache_size"]
    pre = raw[raw["is_prefill"]].groupby(keys, as_index=False)["time_stats.attn_prefill.median"].median()
    dec = raw[~raw["is_prefill"]].groupby(keys, as_index=False)["time_stats.attn_decode.median"].median()
    n, c = pre["prefill_chunk_size"].to_numpy(float), pre["kv_cache_size"].to_numpy(float)
    b, cd = dec["batch_size"].to_numpy(float), dec["kv_cache_size"].to_numpy(float)
    return pd.concat([
        pd.DataFrame(dict(kind="prefill", work=4.0 * hd * qh * n * (c + n), measured=pre.iloc[:, -1] * MS)),
        pd.DataFrame(dict(kind="decode", batch=b, context=cd, measured=dec.iloc[:, -1] * MS)),
    ], ignore_index=True)


# The four readings of FlashAttention-2's split heuristic (split_kv.py): query groups swapped into
# the rows or not, the heuristic counting SMs or 2 x SMs. The first is the kernels' newest and the model's.
READINGS = {"groups swapped, 2 x SMs": (True, 2), "groups swapped, SMs": (True, 1),
            "not swapped, 2 x SMs": (False, 2), "not swapped, SMs": (False, 1)}


def decode_split_law(d: pd.DataFrame, swap: bool, per_sm: int):
    """The split-KV decode law on Llama-2-70B TP2 on A100 80GB PCIe, x = (t0, eta, t_combine, B_cta)."""
    m, tp = get_model("llama2-70b"), 2
    qh, kvh, hd, bpe = m.q_heads_per_gpu(tp), m.kv_heads_per_gpu(tp), m.head_dim, m.bytes_per_param
    kv, qo = 2.0 * kvh * hd * bpe, 2.0 * qh * hd * bpe
    call = DecodeCall(SplitKvDecode(combine_s=0.0, cta_bandwidth=1.0), sm_count=get_gpu("a100-80g-pcie").sm_count,
                      q_heads=qh, kv_heads=kvh, head_dim=hd, kv_bytes_per_token=kv, qo_bytes_per_token=qo,
                      bandwidth=1.0, window=None, swap_groups=swap, ctas_per_sm=per_sm)
    b = d["batch"].to_numpy(int)
    n = (np.arange(b.max())[None, :] < b[:, None]).astype(float)
    seqs, keys, splits, critical = call.layout(n, n * d["context"].to_numpy(float)[:, None])
    stream, block = keys * kv + seqs * qo, call.block * kv / kvh

    def law(x, dd):
        i = dd.index.to_numpy()
        return x[0] + (splits[i] > 1) * x[2] + np.maximum(stream[i] / (x[1] * HBM["a100"]), critical[i] * block / x[3])
    return law


def network_rows(profiles: Path) -> pd.DataFrame:
    frames = []
    for f in sorted((profiles / "network").glob("*/*.csv")):
        coll = f.stem
        raw = pd.read_csv(f)
        col = f"time_stats.{coll}.median"
        d = raw.groupby(["num_workers", "devices_per_node", "size"], as_index=False)[col].median()
        p = d["num_workers"].to_numpy(float)
        factor = 2 * (p - 1) / p if coll == "all_reduce" else np.ones_like(p)
        frames.append(pd.DataFrame(dict(net=f.parent.name, coll=coll, workers=d["num_workers"].astype(int),
                                        per_node=d["devices_per_node"].astype(int), size=d["size"],
                                        work=factor * d["size"], measured=d[col] * MS)))
    return pd.concat(frames, ignore_index=True)


# Which measured points each link's curves are fitted on (links.py): (name, network, collective, rows).
LINK_POINTS = [
    ("nvlink3 all-reduce", "a100_pairwise_nvlink", "all_reduce", lambda d: d["workers"] == 2),
    ("nvlink3 send", "a100_pairwise_nvlink", "send_recv", lambda d: d["per_node"] == 2),
    ("eth100g send", "a100_pairwise_nvlink", "send_recv", lambda d: d["per_node"] == 1),
    ("eth100g-a40 send", "a40_pairwise_nvlink", "send_recv", lambda d: d["per_node"] == 1),
    ("nvswitch-a100 all-reduce", "a100_dgx", "all_reduce", lambda d: d["workers"] == d["per_node"]),
    ("nvswitch-a100 send", "a100_dgx", "send_recv", lambda d: d["per_node"] == 2),
    *((f"ib-hdr all-reduce, {g} a node", "a100_dgx", "all_reduce",
       (lambda g: lambda d: (d["per_node"] == g) & (d["workers"] == 2 * g))(g)) for g in (1, 2, 4, 8)),
]


def curve_law(segments: int):
    """x = (log alpha, log B_1..B_k, log widths of segments 1..k-1): positive by construction."""
    def law(x, d):
        w = d["work"].to_numpy(float)
        t = np.full(len(w), np.exp(x[0]))
        edges = np.concatenate([[0.0], np.cumsum(np.exp(x[1 + segments:])), [np.inf]])
        for i in range(segments):
            t = t + np.clip(w - edges[i], 0, edges[i + 1] - edges[i]) / np.exp(x[1 + i])
        return t
    return law


def fit_curve(d: pd.DataFrame, train: pd.Series, segments: int):
    law, best = curve_law(segments), None
    for alpha in (1e-5, 5e-5):  # a few starts: the segment boundary makes the loss non-convex
        for bw in (5e9, 1e11):
            for edge in (1e6, 8e6):
                x0 = [np.log(alpha)] + [np.log(bw)] * segments + [np.log(edge)] * (segments - 1)
                res = least_squares(lambda x: law(x, d[train]) / d[train]["measured"] - 1, x0=x0,
                                    loss="soft_l1", f_scale=0.05)
                best = res if best is None or res.cost < best.cost else best
    return law, best.x


def chosen_curve(net: pd.DataFrame, name: str) -> tuple[float, list[float], list[float], float, float]:
    """LINK_POINTS entry `name`'s curve: (latency s, segment starts in bytes, bandwidths B/s), and
    its train and held-out MAPE."""
    _, where, coll, rows = next(entry for entry in LINK_POINTS if entry[0] == name)
    d = net[(net["net"] == where) & (net["coll"] == coll)]
    d = d[rows(d)].sort_values(["workers", "size"]).reset_index(drop=True)
    train = pd.Series(d.index % 2 == 0)
    (law1, x1), (law2, x2) = fit_curve(d, train, 1), fit_curve(d, train, 2)
    law, x = (law2, x2) if mape(law2, x2, d[~train]) < mape(law1, x1, d[~train]) - 1 else (law1, x1)
    k = len(x) // 2  # x: alpha, k bandwidths, k - 1 widths
    starts = np.concatenate([[0.0], np.cumsum(np.exp(x[1 + k:]))])
    return float(np.exp(x[0])), list(starts), list(np.exp(x[1:1 + k])), mape(law, x, d[train]), mape(law, x, d[~train])


def link_curves(net: pd.DataFrame) -> None:
    print("link curves (links.py): alpha us, then [segment start MiB: GB/s] of bus bytes")
    for name, *_ in LINK_POINTS:
        alpha, starts, bandwidths, train, held = chosen_curve(net, name)
        segs = " ".join(f"[{s / 2**20:.2f}: {b / 1e9:.1f}]" for s, b in zip(starts, bandwidths))
        print(f"  {name:<26} {alpha * 1e6:6.1f} us {segs:<30} train {train:5.1f} %   held-out {held:5.1f} %")


# vLLM's own all-reduce on H100 NVSwitch, the fastest of its implementations at each size (links.py
# ALLREDUCE_KERNELS cites it): vllm-project/vllm PR #24111, H100 table, (TP, MiB, ms per all-reduce).
VLLM_ALLREDUCE_H100 = [(2, 0.5, 0.007), (4, 0.5, 0.010), (4, 1.0, 0.015), (4, 1.5, 0.019), (4, 2.0, 0.022),
                       (4, 3.0, 0.025), (4, 4.0, 0.029), (6, 0.5, 0.013), (6, 1.0, 0.016), (6, 2.0, 0.021),
                       (6, 4.0, 0.031)]


def vllm_allreduce_curve() -> tuple[float, float, float]:
    """One line through VLLM_ALLREDUCE_H100 over bus bytes: (latency s, bus bandwidth B/s, MAPE %);
    eleven points, so no held-out split."""
    d = pd.DataFrame([dict(work=2 * (p - 1) / p * mib * 2**20, measured=ms * MS) for p, mib, ms in VLLM_ALLREDUCE_H100])
    law, x = fit_curve(d, pd.Series(True, index=d.index), 1)
    return float(np.exp(x[0])), float(np.exp(x[1])), mape(law, x, d)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profiles", default=str(VIDUR), help="Vidur's data/profiling layout (compute/, network/)")
    profiles = Path(ap.parse_args().profiles)
    if not (profiles / "compute").is_dir():
        sys.exit(f"no Vidur profiles at {profiles} (--profiles DIR)")
    rows = compute_rows(profiles)
    for gpu in ("a100", "a40"):
        print(f"{gpu}: GEMMs (eta_c, K0, eta_w, t0) and elementwise kernels (t0, eta)")
        g = rows[(rows["gpu"] == gpu) & rows["op"].isin(GEMMS)]
        train = is_train(gpu, g)
        law = gemm_law(gpu)
        x = fit(law, [0.75, 100, 0.8, 4e-6], [0.1, 50, 0.1, 1e-6], [0.3, 0, 0.3, 0], [1, 1000, 1, 5e-5], g[train])
        report("GEMM", law, x, g, train, "eta_c {:.3f}  K0 {:.0f}  eta_w {:.3f}  t0 {:.2e} s")
        for kind, s in rows[(rows["gpu"] == gpu) & ~rows["op"].isin(GEMMS)].groupby("kind"):
            train = is_train(gpu, s)
            law = stream_law(gpu)
            x = fit(law, [2e-6, 0.5], [1e-6, 0.1], [0, 0.05], [5e-5, 1.5], s[train])
            report(kind, law, x, s, train, "t0 {:.2e} s  eta {:.2f}")
    print("a100: attention, Llama-2-70B TP2 (t0, eta of peak | of HBM)")
    att = attention_rows(profiles)
    d = att[att["kind"] == "prefill"].reset_index(drop=True)
    train = pd.Series(d.index % 2 == 0)
    law = lambda x, dd: x[0] + dd["work"].to_numpy(float) / (x[1] * PEAK["a100"])  # noqa: E731
    report("prefill", law, fit(law, [15e-6, 0.5], [1e-5, 0.1], [0, 0.05], [1e-3, 1.0], d[train]), d, train,
           "t0 {:.2e} s  eta {:.3f}")
    d = att[att["kind"] == "decode"].reset_index(drop=True)
    train = pd.Series(d.index % 2 == 0)
    for reading, (swap, per_sm) in READINGS.items():
        law = decode_split_law(d, swap, per_sm)
        x = fit(law, [7e-6, 0.85, 5e-6, 1e10], [1e-6, 0.1, 1e-6, 1e9], [0, 0.3, 0, 1e8], [5e-5, 1.0, 5e-5, 1e12], d[train])
        report(f"decode, {reading}", law, x, d, train, "t0 {:.2e} s  eta {:.3f}  combine {:.2e} s  B_cta {:.3g}")
    print("collectives, sizes <= 64 MiB (alpha s, bus bandwidth B/s)")
    net = network_rows(profiles)
    net = net[net["size"] <= 64 * 2**20]
    for key, d in net.groupby(["net", "coll", "workers", "per_node"]):
        d = d.sort_values("size").reset_index(drop=True)
        train = pd.Series(d.index % 2 == 0)
        law = lambda x, dd: x[0] + dd["work"].to_numpy(float) / x[1]  # noqa: E731
        x = fit(law, [10e-6, 50e9], [1e-5, 1e10], [0, 1e8], [1e-3, 1e12], d[train])
        report(" ".join(map(str, key)), law, x, d, train, "alpha {:.2e} s  B {:.3g}")
    link_curves(network_rows(profiles))
    alpha, bw, err = vllm_allreduce_curve()
    print(f"vLLM's all-reduce, H100 (PR #24111): {alpha * 1e6:.1f} us + bus bytes at {bw / 1e9:.1f} GB/s, {err:.1f} % over 11 points")


if __name__ == "__main__":
    main()
