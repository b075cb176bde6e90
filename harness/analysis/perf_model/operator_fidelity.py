"""How engines.perf prices one measured operator point of Vidur's profiles, and the error table.

A *point* is one row of the table `harness.analysis.perf_model.vidur_points` reads (or its committed
sample): an operator family, where it was measured (`gpu`: Vidur's compute GPU or network
directory), its shape and its measured median `measured_s`. `price(points, stack)` adds what
the model predicts for it; `summarize` gives MAPE per group. benchmarks/validate_operators.py
(every point) and the report's operator-fidelity figure (the sample) both price through here.

How each prediction is obtained (the project's own code, nothing refitted here):

* GEMMs (attn_pre_proj = QKV, attn_post_proj = O, mlp_up_proj = gate+up, mlp_down_proj):
  PerfModel(Deployment.create(model, gpu, tp, stack))._components(n=[[T]], c=[[0]])["linear.qkv"...],
  the stack's per-GEMM law (engines/perf/kernels.py).
* elementwise: Vidur's mlp.csv times input_layernorm, post_attention_layernorm, ONE residual add,
  attn_rope and mlp_act, but no KV-cache save, so the family 'elementwise' compares the sum of
  those five ops with the model's kernels of one layer without the KV write; sub-families
  compare each piece: 'ew.norms+add' (the model's norm kernels, plus one add kernel unless the
  stack fuses add into norm), 'ew.rope', 'ew.act'.
* embedding: the model's tokens x 2h bytes kernel (the all-reduce is excluded, as Vidur's
  profiled VocabParallelEmbedding has reduce_results=False).
* prefill / decode attention: PerfModel._components(...)["attention"] for one chunk of n tokens
  over `context` cached tokens, or b decodes each over `context` cached tokens.
* all_reduce / send_recv: operators.allreduce_time(bytes, p, link) and p2p_time(bytes, link),
  with the link Deployment.create picks (Topology.ring_link / link_between) on the catalog
  topology matching the Vidur network directory (NETWORKS); devices_per_node -> gpus_per_node.
  Vidur's `size` column is bytes (vidur/profiling/collectives/collectives_wrapper.py).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from engines.perf import operators as ops
from engines.perf.analytical import PerfModel
from engines.perf.deployment import Deployment
from engines.perf.hardware import get_topology
from engines.perf.kernels import DEFAULT_STACK
from engines.perf.measured import VIDUR_MODELS

# The Llama models the shared profiles hold: Vidur directory name -> catalog name.
MODELS = {path.split("/")[1]: name for path, name in VIDUR_MODELS.items() if path.startswith("meta-llama/")}
COMPUTE_GPUS = {"a100": None, "a40": "a40-48g"}  # Vidur compute dir -> catalog card (None: A100_CARDS)
A100_CARDS = {"pcie": "a100-80g-pcie", "sxm": "a100-80g-sxm"}  # which card Vidur's "a100" is priced as
NETWORKS = {  # Vidur network dir -> (catalog topology, catalog GPU; None: the A100 card)
    "a100_pairwise_nvlink": ("paper-a100", None),
    "a100_dgx": ("dgx-a100", "a100-80g-sxm"),
    "a40_pairwise_nvlink": ("paper-a40", "a40-48g"),
}
GEMM_OPS = {"attn_pre_proj": "linear.qkv", "attn_post_proj": "linear.attn_out",
            "mlp_up_proj": "linear.mlp_up", "mlp_down_proj": "linear.mlp_down"}
ELEMENTWISE = ("ew.norms+add", "ew.rope", "ew.act")  # 'elementwise' is their sum
ATTENTION = ("attn_prefill", "attn_decode")
COLLECTIVES = ("all_reduce", "send_recv")
FAMILY_ORDER = [*GEMM_OPS, "elementwise", *ELEMENTWISE, "embedding", *ATTENTION, *COLLECTIVES]
OP_NAMES = {"elementwise": "elementwise(excl. kv save)", "embedding": "emb"}  # else op = family
COLUMNS = ["family", "op", "gpu", "catalog_gpu", "model", "tp", "num_tokens", "batch_size", "context",
           "num_workers", "devices_per_node", "link", "size_bytes", "gemm_k", "gemm_n",
           "measured_s", "predicted_s", "signed_err_pct"]


def catalog_gpu(gpu: str, a100: str = "pcie") -> str:
    """The catalog card a Vidur compute GPU or network directory is priced on."""
    card = NETWORKS[gpu][1] if gpu in NETWORKS else COMPUTE_GPUS[gpu]
    return card or A100_CARDS[a100]


def perf_model(model: str, card: str, tp: int, stack: str) -> PerfModel:
    """The model for one Vidur model directory on one catalog card at TP `tp` under `stack`."""
    return PerfModel(Deployment.create(MODELS[model], card, tp=tp, stack=stack))


def elementwise_pieces(pm: PerfModel, tokens: np.ndarray) -> dict[str, np.ndarray]:
    """The model's time of each of Vidur's elementwise pieces of one layer at `tokens` tokens."""
    T = np.asarray(tokens, dtype=np.float64)
    hbm = pm.gpu.hbm_bandwidth

    def kernel_time(name: str, count: int | None = None) -> np.ndarray:
        """The model's time of its `name` kernels of one layer (the first `count` of them)."""
        ks = [(k, b) for n, k, b in pm.elementwise_kernels if n == name][:count]
        return sum(k.fixed_s + T * b * k.per_byte(hbm) for k, b in ks) + np.zeros_like(T)

    # Vidur times both norms and ONE residual add; a fused stack's norm kernel is norm + add.
    fused = pm.kernels.elementwise.fused_add_norm
    return {"ew.norms+add": kernel_time("norm") + (0 if fused else kernel_time("add", 1)),
            "ew.rope": kernel_time("rope"), "ew.act": kernel_time("act")}


def compute_times(pm: PerfModel, family: str, tokens: np.ndarray) -> np.ndarray:
    """The model's time of one layer's `family` operator at each token count in `tokens`."""
    T = np.asarray(tokens, dtype=np.float64)
    if family in GEMM_OPS:
        return pm._components(T[:, None].copy(), np.zeros((len(T), 1)))[GEMM_OPS[family]]
    if family == "embedding":
        return T * pm.coeffs.embedding_per_token + pm.coeffs.embedding_fixed
    pieces = elementwise_pieces(pm, T)
    return sum(pieces.values()) if family == "elementwise" else pieces[family]


def attention_times(pm: PerfModel, family: str, tokens: np.ndarray, context: np.ndarray,
                    batch: np.ndarray) -> np.ndarray:
    """One prefill chunk of `tokens` over `context` cached tokens, or `batch` decodes each over
    `context` cached tokens: the model's attention time of one layer."""
    c = np.asarray(context, dtype=np.float64)
    if family == "attn_prefill":
        n = np.asarray(tokens, dtype=np.float64)[:, None]
        return pm._components(n.copy(), c[:, None].copy())["attention"]
    b = np.asarray(batch, dtype=np.int64)
    nn = (np.arange(int(b.max()))[None, :] < b[:, None]).astype(np.float64)
    return pm._components(nn, nn * c[:, None])["attention"]


def collective_times(family: str, gpu: str, workers: int, devices_per_node: int,
                     size_bytes: np.ndarray) -> tuple[np.ndarray, str]:
    """An all-reduce over `workers` ranks or one send between two, on the catalog topology of
    Vidur's network directory `gpu`: (seconds, the link's name)."""
    topo = get_topology(NETWORKS[gpu][0], gpus_per_node=devices_per_node)
    size = np.asarray(size_bytes, dtype=np.float64)
    if family == "all_reduce":
        link = topo.ring_link(0, workers)  # = Deployment.create(tp=p, pp=1).tp_link
        return ops.allreduce_time(size, workers, link), link.name
    link = topo.link_between(0, 1)  # = Deployment.create(tp=1, pp=2).pp_link
    return ops.p2p_time(size, link), link.name


def price(points: pd.DataFrame, stack: str = DEFAULT_STACK, a100: str = "pcie") -> pd.DataFrame:
    """`points` (same index and order) with op, catalog_gpu, link, gemm_k, gemm_n, predicted_s
    and signed_err_pct added, each point priced by the model under engine `stack`."""
    pts = points.copy()
    pts["op"] = [OP_NAMES.get(f, f) for f in pts["family"]]
    pts["catalog_gpu"] = [catalog_gpu(g, a100) for g in pts["gpu"]]
    pred = np.full(len(pts), np.nan)
    link = np.full(len(pts), np.nan, dtype=object)
    gemm = np.full((len(pts), 2), np.nan)
    where = pd.Series(np.arange(len(pts)), index=pts.index)
    model_rows = pts[~pts["family"].isin(COLLECTIVES)]
    for (card, model, tp), g in model_rows.groupby(["catalog_gpu", "model", "tp"], sort=False):
        pm = perf_model(model, card, int(tp), stack)
        shapes = {name: (k, n) for name, k, n in pm.coeffs.gemm_shapes}
        for fam, f in g.groupby("family", sort=False):
            i = where[f.index].to_numpy()
            if fam in ATTENTION:
                pred[i] = attention_times(pm, fam, f["num_tokens"], f["context"], f["batch_size"])
            else:
                pred[i] = compute_times(pm, fam, f["num_tokens"])
            if fam in GEMM_OPS:
                gemm[i] = shapes[GEMM_OPS[fam]]
    net = pts[pts["family"].isin(COLLECTIVES)]
    for (fam, gpu, p, dpn), f in net.groupby(["family", "gpu", "num_workers", "devices_per_node"], sort=False):
        i = where[f.index].to_numpy()
        pred[i], link[i] = collective_times(fam, gpu, int(p), int(dpn), f["size_bytes"])
    if np.isnan(pred).any():
        raise ValueError(f"unpriced points of families {sorted(set(pts['family'][np.isnan(pred)]))}")
    pts["link"], pts["gemm_k"], pts["gemm_n"], pts["predicted_s"] = link, gemm[:, 0], gemm[:, 1], pred
    pts["signed_err_pct"] = 100 * (pts["predicted_s"] - pts["measured_s"]) / pts["measured_s"]
    return pts


def ordered(pts: pd.DataFrame) -> pd.DataFrame:
    """Priced points by family (FAMILY_ORDER), GPU, TP and model, in the COLUMNS order."""
    pts = pts.copy()
    pts["family"] = pd.Categorical(pts["family"], FAMILY_ORDER, ordered=True)
    pts = pts.sort_values(["family", "gpu", "tp", "model"], kind="stable")
    pts["family"] = pts["family"].astype(str)
    return pts[[c for c in COLUMNS if c in pts.columns]]


def point_label(r: pd.Series) -> str:
    if r["family"] in COLLECTIVES:
        return f"{r['size_bytes'] / 1e6:.3g}MB"
    if r["family"] == "attn_prefill":
        return f"n={int(r['num_tokens'])},c={int(r['context'])}"
    if r["family"] == "attn_decode":
        return f"b={int(r['batch_size'])},c={int(r['context'])}"
    return f"{r['model']},T={int(r['num_tokens'])}"


def mape_pct(pts: pd.DataFrame) -> float:
    """Mean absolute percentage error of priced points."""
    return float(pts["signed_err_pct"].abs().mean())


def summarize(pts: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """One row per group of priced points: points, MAPE %, median signed error %, worst point."""
    rows = []
    for key, g in pts.groupby(by, sort=False):
        e = (g["predicted_s"] - g["measured_s"]) / g["measured_s"]
        w = e.abs().idxmax()
        rows.append(dict(zip(by, key if isinstance(key, tuple) else (key,)), points=len(g),
                         mape_pct=100 * e.abs().mean(), median_signed_pct=100 * e.median(),
                         worst=f"{point_label(g.loc[w])}: {100 * e.loc[w]:+.0f}%"))
    return pd.DataFrame(rows)
