#!/usr/bin/env python3
"""Operator-level fidelity of engines.perf's analytical model against Vidur's measured profiles.

For every measured point in ../shared/profiles/vidur (medians, ms; --profiles DIR) this prices the same
operator and shape with the project's analytical model and reports MAPE per
operator family x GPU x TP (or x interconnect configuration for collectives).

How each prediction is obtained (all from the project's own code, nothing refitted here):

* GEMMs (attn_pre_proj = QKV, attn_post_proj = O, mlp_up_proj = gate+up, mlp_down_proj):
  PerfModel(Deployment.create(model, gpu, tp))._components(n=[[T]], c=[[0]])["linear.qkv"...],
  i.e. the model's per-GEMM roofline (tile 128, matmul_flops, weight_bandwidth). It is
  cross-checked bit for bit against operators.gemm_time with the hardware.py constants.
* elementwise: the model prices one per-token byte count (analytical.py):
  norms (2 x fused add+norm, 4h bytes each) + rotary + activation + KV-cache write.
  Vidur's mlp.csv has input_layernorm, post_attention_layernorm, add, attn_rope, mlp_act but
  no KV-cache save, so the family 'elementwise' compares the model's total *without* the
  KV-write term to the sum of those five ops; sub-families compare each piece:
  'ew.norms+add' (model norm bytes) vs input_layernorm+post_attention_layernorm+add,
  'ew.rope' vs attn_rope, 'ew.act' vs mlp_act. Their sum is asserted equal to the model's
  elementwise total minus the KV write.
* embedding: model's tokens x 2h bytes / mem_bandwidth (the all-reduce is excluded, as
  Vidur's profiled VocabParallelEmbedding has reduce_results=False).
* prefill / decode attention: PerfModel._components(...)["attention"] for one chunk of n tokens
  over kv_cache_size cached tokens, or b decodes each over kv_cache_size cached tokens
  (Llama-2-70B, TP2, the profile's geometry).
* all_reduce / send_recv: operators.allreduce_time(bytes, p, link) and p2p_time(bytes, link),
  with the link that Deployment.create picks (Topology.ring_link / link_between) on the
  catalog topology matching the Vidur network directory:
  a100_pairwise_nvlink -> paper-a100, a100_dgx -> dgx-a100, a40_pairwise_nvlink -> paper-a40;
  devices_per_node -> gpus_per_node. Vidur's `size` column is bytes (fp16 elements x 2,
  vidur/profiling/collectives/collectives_wrapper.py).

Usage:  python benchmarks/validate_operators.py [--a100 pcie|sxm] [--profiles DIR] [--out DIR]

First pass of issue 14 (operator validation suite); it prices with the model as it is and fits
nothing. A helper wrote it; its findings are in the closing note of that issue.
Writes DIR/points.csv (every point) and DIR/mape.csv (the table); prints the table.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engines.perf import operators as ops  # noqa: E402
from engines.perf.kernels import DEFAULT_STACK, known_stacks  # noqa: E402
from engines.perf.analytical import PerfModel  # noqa: E402
from engines.perf.deployment import Deployment  # noqa: E402
from engines.perf.hardware import get_gpu, get_topology  # noqa: E402

VIDUR = REPO.parent / "shared" / "profiles" / "vidur"  # --profiles overrides
STACK = DEFAULT_STACK  # --stack overrides
MS = 1e-3

MODELS = {  # Vidur directory -> catalog name
    "Llama-2-7b-hf": "llama2-7b",
    "Llama-2-70b-hf": "llama2-70b",
    "Meta-Llama-3-8B": "llama3-8b",
    "Meta-Llama-3-70B": "llama3-70b",
}
GEMM_OPS = {"attn_pre_proj": "linear.qkv", "attn_post_proj": "linear.attn_out",
            "mlp_up_proj": "linear.mlp_up", "mlp_down_proj": "linear.mlp_down"}
NETWORKS = {  # Vidur network dir -> (catalog topology, catalog GPU)
    "a100_pairwise_nvlink": ("paper-a100", None),
    "a100_dgx": ("dgx-a100", "a100-80g-sxm"),
    "a40_pairwise_nvlink": ("paper-a40", "a40-48g"),
}


def med(df: pd.DataFrame, keys: list[str], cols: list[str]) -> pd.DataFrame:
    """Median over duplicate keys (as engines/perf/measured.py does)."""
    return df.groupby(keys, as_index=False)[cols].median()


# ----------------------------------------------------------------------------- compute
def compute_points(gpu_dir: str, catalog_gpu: str) -> list[pd.DataFrame]:
    out = []
    for vdir, mname in MODELS.items():
        f = VIDUR / "compute" / gpu_dir / "meta-llama" / vdir / "mlp.csv"
        if not f.is_file():
            continue
        raw = pd.read_csv(f)
        ops_ = ["attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj", "input_layernorm",
                "post_attention_layernorm", "add", "attn_rope", "mlp_act", "emb"]
        cols = [f"time_stats.{o}.median" for o in ops_]
        d = med(raw, ["num_tensor_parallel_workers", "num_tokens"], cols)
        for tp, g in d.groupby("num_tensor_parallel_workers"):
            tp = int(tp)
            pm = PerfModel(Deployment.create(mname, catalog_gpu, tp=tp, stack=STACK))
            hbm = pm.gpu.hbm_bandwidth
            T = g["num_tokens"].to_numpy(dtype=np.float64)
            comp = pm._components(T[:, None].copy(), np.zeros((len(T), 1)))
            base = dict(gpu=gpu_dir, catalog_gpu=catalog_gpu, model=vdir, tp=tp, num_tokens=T.astype(int))
            for vop, cname in GEMM_OPS.items():
                shape = {s[0]: (s[1], s[2]) for s in pm._gemm_shapes}[cname]
                out.append(pd.DataFrame(dict(base, family=vop, op=vop, gemm_k=shape[0], gemm_n=shape[1],
                                             measured_s=g[f"time_stats.{vop}.median"].to_numpy() * MS,
                                             predicted_s=comp[cname])))

            def kernel_time(name: str, count: int | None = None) -> np.ndarray:
                """The model's time of its `name` kernels of one layer (the first `count` of them)."""
                ks = [(k, b) for n, k, b in pm.elementwise_kernels if n == name][:count]
                return sum(k.fixed_s + T * b * k.per_byte(hbm) for k, b in ks)

            # Vidur times both norms and ONE residual add; a fused stack's norm kernel is norm + add.
            fused = pm.kernels.elementwise.fused_add_norm
            v = {o: g[f"time_stats.{o}.median"].fillna(0.0).to_numpy() * MS for o in ops_}
            pieces = {
                "ew.norms+add": (v["input_layernorm"] + v["post_attention_layernorm"] + v["add"],
                                 kernel_time("norm") + (0 if fused else kernel_time("add", 1))),
                "ew.rope": (v["attn_rope"], kernel_time("rope")),
                "ew.act": (v["mlp_act"], kernel_time("act")),
            }
            for fam, (meas, pred) in pieces.items():
                out.append(pd.DataFrame(dict(base, family=fam, op=fam, measured_s=meas, predicted_s=pred)))
            out.append(pd.DataFrame(dict(base, family="elementwise", op="elementwise(excl. kv save)",
                                         measured_s=sum(p[0] for p in pieces.values()),
                                         predicted_s=sum(p[1] for p in pieces.values()))))
            out.append(pd.DataFrame(dict(base, family="embedding", op="emb", measured_s=v["emb"],
                                         predicted_s=T * pm._embedding_per_token + pm._embedding_fixed)))
    return out


def attention_points(catalog_gpu: str) -> list[pd.DataFrame]:
    f = VIDUR / "compute/a100/meta-llama/Llama-2-70b-hf/attention.csv"
    raw = pd.read_csv(f)
    tp = int(raw["num_tensor_parallel_workers"].iloc[0])
    assert (raw["n_q_head"] == 64).all() and (raw["n_kv_head"] == 8).all() and (raw["n_embd"] == 8192).all()
    pm = PerfModel(Deployment.create("llama2-70b", catalog_gpu, tp=tp, stack=STACK))
    out = []
    keys = ["batch_size", "prefill_chunk_size", "kv_cache_size"]
    p = med(raw[raw["is_prefill"]], keys, ["time_stats.attn_prefill.median"])
    n = p["prefill_chunk_size"].to_numpy(np.float64)[:, None]
    c = p["kv_cache_size"].to_numpy(np.float64)[:, None]
    pred = pm._components(n.copy(), c.copy())["attention"]
    out.append(pd.DataFrame(dict(gpu="a100", catalog_gpu=catalog_gpu, model="Llama-2-70b-hf", tp=tp,
                                 family="attn_prefill", op="attn_prefill", batch_size=1,
                                 num_tokens=p["prefill_chunk_size"].to_numpy(), context=p["kv_cache_size"].to_numpy(),
                                 measured_s=p["time_stats.attn_prefill.median"].to_numpy() * MS, predicted_s=pred)))
    d = med(raw[~raw["is_prefill"]], keys, ["time_stats.attn_decode.median"])
    b = d["batch_size"].to_numpy(int)
    bmax = int(b.max())
    nn = (np.arange(bmax)[None, :] < b[:, None]).astype(np.float64)
    cc = nn * d["kv_cache_size"].to_numpy(np.float64)[:, None]
    pred = pm._components(nn, cc)["attention"]
    out.append(pd.DataFrame(dict(gpu="a100", catalog_gpu=catalog_gpu, model="Llama-2-70b-hf", tp=tp,
                                 family="attn_decode", op="attn_decode", batch_size=b, num_tokens=b,
                                 context=d["kv_cache_size"].to_numpy(),
                                 measured_s=d["time_stats.attn_decode.median"].to_numpy() * MS, predicted_s=pred)))
    return out


# ----------------------------------------------------------------------------- network
def network_points(a100_catalog: str) -> list[pd.DataFrame]:
    out = []
    for net, (topo_name, gpu_name) in NETWORKS.items():
        for coll in ("all_reduce", "send_recv"):
            f = VIDUR / "network" / net / f"{coll}.csv"
            if not f.is_file():
                continue
            raw = pd.read_csv(f)
            col = f"time_stats.{coll}.median"
            d = med(raw, ["num_workers", "devices_per_node", "size"], [col])
            for (p, dpn), g in d.groupby(["num_workers", "devices_per_node"]):
                p, dpn = int(p), int(dpn)
                topo = get_topology(topo_name, gpus_per_node=dpn)
                size = g["size"].to_numpy(np.float64)
                if coll == "all_reduce":
                    link = topo.ring_link(0, p)  # = Deployment.create(tp=p, pp=1).tp_link
                    pred = ops.allreduce_time(size, p, link)
                else:
                    link = topo.link_between(0, 1)  # = Deployment.create(tp=1, pp=2).pp_link
                    pred = ops.p2p_time(size, link)
                out.append(pd.DataFrame(dict(
                    gpu=net, catalog_gpu=gpu_name or a100_catalog, model="", tp=p, family=coll, op=coll,
                    num_workers=p, devices_per_node=dpn, link=link.name, size_bytes=size.astype(np.int64),
                    measured_s=g[col].to_numpy() * MS, predicted_s=pred)))
    return out


# ----------------------------------------------------------------------------- report
def point_label(r: pd.Series) -> str:
    if r["family"] in ("all_reduce", "send_recv"):
        s = r["size_bytes"]
        return f"{s / 1e6:.3g}MB"
    if r["family"] == "attn_prefill":
        return f"n={int(r['num_tokens'])},c={int(r['context'])}"
    if r["family"] == "attn_decode":
        return f"b={int(r['batch_size'])},c={int(r['context'])}"
    return f"{r['model']},T={int(r['num_tokens'])}"


def summarize(pts: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    rows = []
    for key, g in pts.groupby(by, sort=False):
        e = (g["predicted_s"] - g["measured_s"]) / g["measured_s"]
        w = e.abs().idxmax()
        rows.append(dict(zip(by, key if isinstance(key, tuple) else (key,)), points=len(g),
                         mape_pct=100 * e.abs().mean(), median_signed_pct=100 * e.median(),
                         worst=f"{point_label(g.loc[w])}: {100 * e.loc[w]:+.0f}%"))
    return pd.DataFrame(rows)


FAMILY_ORDER = ["attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj", "elementwise",
                "ew.norms+add", "ew.rope", "ew.act", "embedding", "attn_prefill", "attn_decode",
                "all_reduce", "send_recv"]


def build(a100: str) -> pd.DataFrame:
    a100_catalog = {"pcie": "a100-80g-pcie", "sxm": "a100-80g-sxm"}[a100]
    frames = compute_points("a100", a100_catalog) + compute_points("a40", "a40-48g")
    frames += attention_points(a100_catalog) + network_points(a100_catalog)
    pts = pd.concat(frames, ignore_index=True)
    pts = pts[pts["measured_s"] > 0].copy()
    pts["signed_err_pct"] = 100 * (pts["predicted_s"] - pts["measured_s"]) / pts["measured_s"]
    pts["family"] = pd.Categorical(pts["family"], FAMILY_ORDER, ordered=True)
    pts = pts.sort_values(["family", "gpu", "tp", "model"], kind="stable")
    pts["family"] = pts["family"].astype(str)
    cols = ["family", "op", "gpu", "catalog_gpu", "model", "tp", "num_tokens", "batch_size", "context",
            "num_workers", "devices_per_node", "link", "size_bytes", "gemm_k", "gemm_n",
            "measured_s", "predicted_s", "signed_err_pct"]
    return pts[[c for c in cols if c in pts.columns]]


def main() -> None:
    global VIDUR
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a100", choices=("pcie", "sxm"), default="pcie",
                    help="catalog card for Vidur's 'a100' compute profile (default pcie; see FINDINGS.md)")
    ap.add_argument("--out", default="validation", help="where points.csv and mape.csv go")
    ap.add_argument("--profiles", default=None, help="Vidur's data/profiling layout (compute/, network/)")
    ap.add_argument("--compare-a100", action="store_true",
                    help="also print the A100 compute families' MAPE under both catalog cards")
    ap.add_argument("--stack", default=DEFAULT_STACK, choices=known_stacks(),
                    help="the engine stack whose kernels price the points (engines/perf/kernels.py)")
    args = ap.parse_args()
    global STACK
    STACK = args.stack
    VIDUR = Path(args.profiles) if args.profiles else VIDUR
    if not (VIDUR / "compute").is_dir():
        sys.exit(f"no Vidur profiles at {VIDUR} (--profiles DIR)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pts = build(args.a100)
    pts.to_csv(out / "points.csv", index=False, float_format="%.6g")
    table = summarize(pts, ["family", "gpu", "tp"])
    table.to_csv(out / "mape.csv", index=False, float_format="%.2f")
    pd.set_option("display.width", 200)
    pd.set_option("display.max_rows", 500)
    pd.set_option("display.max_colwidth", 60)
    print(f"A100 compute profile priced as: {pts.loc[pts.gpu == 'a100', 'catalog_gpu'].iloc[0]}")
    print("(network rows: gpu = Vidur network dir, tp = num_workers; per devices_per_node see below)\n")
    print(table.to_string(index=False, float_format=lambda x: f"{x:.1f}"))
    net = summarize(pts[pts.family.isin(["all_reduce", "send_recv"])],
                    ["family", "gpu", "num_workers", "devices_per_node", "link"])
    print("\nCollectives by configuration (all sizes):")
    print(net.to_string(index=False, float_format=lambda x: f"{x:.1f}"))
    coll = pts[pts.family.isin(["all_reduce", "send_recv"]) & (pts.size_bytes <= 64 * 2**20)]
    net64 = summarize(coll, ["family", "gpu", "num_workers", "devices_per_node", "link"])
    print("\nCollectives by configuration, sizes <= 64 MiB (the serving range: tokens x hidden x 2 B):")
    print(net64.to_string(index=False, float_format=lambda x: f"{x:.1f}"))
    fam = summarize(pts, ["family", "gpu"])
    print("\nPer family x GPU (all TP pooled):")
    print(fam.to_string(index=False, float_format=lambda x: f"{x:.1f}"))
    if args.compare_a100:
        other = build("sxm" if args.a100 == "pcie" else "pcie")
        a = summarize(pts[pts.gpu == "a100"], ["family"]).set_index("family")["mape_pct"]
        b = summarize(other[other.gpu == "a100"], ["family"]).set_index("family")["mape_pct"]
        print(f"\nA100 compute MAPE %: {args.a100} vs other card")
        print(pd.DataFrame({args.a100: a, "other": b}).round(1).to_string())
    by_stack = {}
    for stack in known_stacks():
        STACK = stack
        by_stack[stack] = summarize(build(args.a100), ["family", "gpu"]).set_index(["family", "gpu"])["mape_pct"]
    STACK = args.stack
    print("\nMAPE % per family x GPU, by engine stack (perf.stack=):")
    print(pd.DataFrame(by_stack).round(1).to_string())
    print(f"\nwrote {out / 'points.csv'} ({len(pts)} points) and {out / 'mape.csv'}")


if __name__ == "__main__":
    main()
