"""The GPUs of 2022-2025 (engines/perf/recent_gpus.py): each priced batch is derived here, by roofline
arithmetic, from the numbers the sources print (datasheet peaks, measured TFLOPS), not copied from
the model, so a wrong peak or fraction in the catalog moves a batch by a known amount and fails."""
import subprocess
import sys

import pytest

from common.errors import HarnessError
from engines.perf import Deployment, PerfModel, get_gpu, get_model
from harness.config import compose, experiment_config

GiB = 1024**3

# As the sources print them (recent_gpus.py names each): dense FP16/BF16 peak with FP32 accumulate,
# dense FP8 peak, memory bandwidth (B/s), SMs, what CUDA reports (GiB), the measured best BF16
# matmul (TFLOPS) and the attention kernel's fraction of the peak.
CITED = {
    "rtx-4090-24g": dict(peak=165.2e12, fp8=330.3e12, bw=1008e9, sms=128, cuda_gib=23.64, matmul_tflops=164.81,
                         attention=0.60),
    "l40s-48g": dict(peak=362.05e12, fp8=733e12, bw=864e9, sms=142, cuda_gib=44.42, matmul_tflops=269.15,
                     attention=0.60),
    "rtx-pro-6000-server-96g": dict(peak=500e12, fp8=1000e12, bw=1597e9, sms=188, cuda_gib=94.97,
                                    matmul_tflops=417.34, attention=0.60),
    "rtx-pro-6000-ws-96g": dict(peak=500e12, fp8=1000e12, bw=1792e9, sms=188, cuda_gib=94.97, matmul_tflops=368.43,
                                attention=0.60),
    "h100-80g-pcie": dict(peak=1513e12 / 2, fp8=3026e12 / 2, bw=2.0e12, sms=114, cuda_gib=79.2,
                          matmul_tflops=495.93, attention=0.34),
    "h20-96g": dict(peak=148e12, fp8=296e12, bw=4.0e12, sms=78, cuda_gib=95.2, matmul_tflops=142.25,
                    attention=83.7 / 148),
    "b200-180g": dict(peak=36e15 / 8 / 2, fp8=72e15 / 8 / 2, bw=64e12 / 8, sms=148, cuda_gib=179.2,
                      matmul_tflops=1745.0, attention=0.56),
}
WEIGHT_STREAM = 0.73  # hardware.py [VIDUR-MLP]: the fraction of bandwidth a GEMM streams its weights at
TILE = 128  # deployment.py GEMM_TILE_TOKENS


def _llama3_8b_gemms() -> list[tuple[int, int]]:
    """(K, N) of one Llama-3-8B layer's four GEMMs on one GPU: QKV, attention out, gate+up, down."""
    m = get_model("llama3-8b")
    h, hd = m.hidden_size, m.head_dim
    return [(h, (m.num_attention_heads + 2 * m.num_kv_heads) * hd), (m.num_attention_heads * hd, h),
            (h, 2 * m.intermediate_size), (m.intermediate_size, h)]


def _linear_roofline(tokens: int, matmul_flops: float, weight_bw: float) -> float:
    """All layers' GEMMs: max(compute on tile-rounded rows, weights + activations streamed)."""
    tiled = -(-tokens // TILE) * TILE
    per_layer = sum(max(2.0 * tiled * k * n / matmul_flops, 2.0 * (k * n + tokens * (k + n)) / weight_bw)
                    for k, n in _llama3_8b_gemms())
    return get_model("llama3-8b").num_layers * per_layer


def _ideal(gpu: str, **kw) -> PerfModel:
    return PerfModel(Deployment.create(model="llama3-8b", gpu=gpu, stack="ideal", **kw))


@pytest.mark.parametrize("name", CITED)
def test_peaks_and_memory_are_the_sources(name):
    c, gpu = CITED[name], get_gpu(name)
    assert gpu.peak_flops == pytest.approx(c["peak"], rel=1e-12)
    assert gpu.fp8_peak_flops == pytest.approx(c["fp8"], rel=1e-12)
    assert gpu.hbm_bandwidth == pytest.approx(c["bw"], rel=1e-12)
    assert gpu.sm_count == c["sms"]
    assert gpu.visible_bytes / GiB == pytest.approx(c["cuda_gib"], abs=0.01)


@pytest.mark.parametrize("name", CITED)
def test_llama3_8b_prefill_and_decode_priced_from_the_cited_numbers(name):
    """A 4,096-token prefill (compute-bound GEMMs, causal attention FLOPs) and a decode of 32
    sequences (weight-streaming GEMMs), datasheet kernels (`ideal`), against the roofline of the
    measured matmul TFLOPS, the attention fraction and the bandwidth as the sources print them."""
    c, perf = CITED[name], _ideal(name)
    matmul, weight_bw = c["matmul_tflops"] * 1e12, c["bw"] * WEIGHT_STREAM
    prefill = perf.breakdown([4096], [0])
    assert prefill["linear"] == pytest.approx(_linear_roofline(4096, matmul, weight_bw), rel=1e-6)
    m = get_model("llama3-8b")
    pairs = 4096 * 4097 / 2  # causal (query, key) pairs of one prompt
    flops = m.num_layers * 4.0 * m.head_dim * m.num_attention_heads * pairs
    assert prefill["attention"] == pytest.approx(flops / (c["peak"] * c["attention"]), rel=1e-6)
    decode = perf.breakdown([1] * 32, [1024] * 32)
    assert decode["linear"] == pytest.approx(_linear_roofline(32, matmul, weight_bw), rel=1e-6)


def test_geforce_fp32_accumulate_is_half_the_box_figure():
    """The RTX 4090's box says 330.3 TFLOPS FP16 (FP16 accumulate, [ADA-WP]); engines accumulate in
    FP32, at half that. A 4,096-token prefill's GEMMs cost the FP32-accumulate rate's time, twice
    what the box figure would give; professional boards of the same chip run FP32 accumulate at
    full rate (L40S 362.05 dense, its datasheet figure, not halved)."""
    box_fp16_accumulate = 330.3e12
    gpu = get_gpu("rtx-4090")
    assert gpu.peak_flops == pytest.approx(box_fp16_accumulate / 2, rel=1e-3)
    linear = _ideal("rtx-4090").breakdown([4096], [0])["linear"]
    at_box_rate = _linear_roofline(4096, box_fp16_accumulate * gpu.matmul_efficiency, 1008e9 * WEIGHT_STREAM)
    assert linear / at_box_rate == pytest.approx(2.0, rel=2e-3)
    assert get_gpu("l40s").peak_flops == 362.05e12
    assert CITED["l40s-48g"]["matmul_tflops"] * 1e12 > get_gpu("l40s").peak_flops / 2  # measured: full rate
    # the measured 417 TFLOPS BF16 of the server edition is above what a half-rate 500 could give
    assert CITED["rtx-pro-6000-server-96g"]["matmul_tflops"] * 1e12 > get_gpu("rtx-pro-6000-server").peak_flops / 2


@pytest.mark.parametrize("gpu,on,off,bw", [("rtx-4090", "pcie-only", "pcie4-no-p2p", 32e9),
                                           ("rtx-pro-6000-ws", "pcie5-p2p", "pcie5-no-p2p", 64e9)])
def test_p2p_off_stages_through_host_memory(gpu, on, off, bw):
    """TP-2 all-reduce of a 512-token prefill's activations (4 MiB), twice a layer. P2P on: NCCL's
    ring, 2 hops of 10 us + the payload at the measured ring fraction (Gen4 0.74; Gen5 0.547 up to 4
    GPUs, NVIDIA/nccl #1639). Off: two start-ups a hop; Gen4 half the fraction, Gen5 the measured (host-staged) one."""
    payload = 512 * get_model("llama3-8b").hidden_size * 2
    layers = get_model("llama3-8b").num_layers

    def expected(latency, eff):  # ring of 2: 2(p-1) = 2 hops, bus bytes 2(p-1)/p = 1 x the payload
        return layers * 2 * (2 * latency + payload / (bw * eff))

    comm = {t: _ideal(gpu, tp=2, topology=t).breakdown([512], [0])["tp_comm"] for t in (on, off)}
    ring = 0.74 if bw == 32e9 else 35 / 64  # Gen5: the <= 4-GPU ring of nccl #1639
    assert comm[on] == pytest.approx(expected(10e-6, ring), rel=1e-9)
    assert comm[off] == pytest.approx(expected(20e-6, 0.37 if bw == 32e9 else ring), rel=1e-9)
    # 4 MiB: the bandwidth term dominates; Gen5 staged through the host measures as the P2P ring,
    # so only its doubled start-ups are left
    if bw == 32e9:
        assert comm[off] / comm[on] == pytest.approx(2.0, rel=0.01)
    else:
        assert 1.0 < comm[off] / comm[on] < 1.2


def test_each_gpu_comes_in_its_usual_node():
    """SXM/HGX parts on their NVLink switches, PCIe cards in a PCIe box (the GeForce one without
    peer-to-peer, which its driver refuses); the H100 PCIe's NVLink bridge is a named choice."""
    links = {g: Deployment.create(model="llama3-8b", gpu=g, tp=2).tp_link.name
             for g in ("rtx-4090", "l40s", "rtx-pro-6000-server", "h100-pcie", "h20", "b200")}
    assert links == {"rtx-4090": "pcie4-host", "l40s": "pcie4", "rtx-pro-6000-server": "pcie5",
                     "h100-pcie": "pcie5", "h20": "nvlink4", "b200": "nvlink5"}
    bridged = Deployment.create(model="qwen3-32b", gpu="h100-pcie", tp=4, topology="h100-pcie-nvlink")
    assert bridged.tp_link.name == "pcie5"  # a TP4 ring leaves its NVLink pair
    pair = Deployment.create(model="qwen3-32b", gpu="h100-pcie", tp=2, topology="h100-pcie-nvlink")
    assert pair.tp_link.name == "nvlink-bridge-h100" and "h100-pcie-nvlink" in pair.describe()
    assert Deployment.create(model="llama3-70b", gpu="b200", tp=8, pp=2).pp_link.name == "ib-ndr"


def test_names_refused_in_one_line():
    with pytest.raises(HarnessError, match="ambiguous.*rtx-pro-6000-server-96g.*rtx-pro-6000-ws-96g"):
        get_gpu("RTX_PRO_6000")
    for args in (["--gpu", "rtx-pro-6000"], ["--gpu", "rtx-4090", "--topology", "nvl72"]):
        p = subprocess.run([sys.executable, "-m", "engines.perf", *args], capture_output=True, text=True)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_the_what_if_prints_the_chosen_topology():
    p = subprocess.run([sys.executable, "-m", "engines.perf", "--model", "llama3-8b", "--gpu", "rtx-4090", "--tp", "2",
                        "--batch", "32x1:1024"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "pcie4-no-p2p/8-per-node (TP over pcie4-host)" in p.stdout.splitlines()[0]


PRESETS = ["rtx_4090", "l40s", "rtx_pro_6000_server", "rtx_pro_6000_ws", "h100_pcie", "h20", "b200"]


@pytest.mark.parametrize("hardware", PRESETS)
def test_presets_plan_and_the_planner_takes_them(hardware):
    """`python -m harness experiment=yi34b_tp2_strict hardware=H model=llama3-8b` plans as the command
    does before it runs; `python -m harness plan` enumerates deployments on the same hardware."""
    from harness.planner.settings import plan_settings, split_words
    from harness.planner.space import enumerate_space
    from harness.config import plan_experiment

    overrides = ["experiment=yi34b_tp2_strict", f"hardware={hardware}", "model=llama3-8b", "slo=derived"]
    plan_experiment(compose(overrides))
    mine, rest = split_words([f"hardware={hardware}", "model=llama3-8b", "slo.tbt_s=0.1", "target_qps=10",
                              "plan.tp=[1,2]", "plan.pp=[1]"])
    space = enumerate_space(experiment_config(compose(rest)), plan_settings(mine))
    assert space.candidates


# ----------------------------------------------------------------------------- the docs' what-if table
# docs/performance-model/index.md, "What-if on the GPUs people own" (README.md's before the site): each row is `python -m engines.perf --model M --gpu G
# --tp N [--topology T] --batch 32x1:1024` (decode) and `--batch 512:0` (prefill), default stack.
WHAT_IF = [("Llama-3.1-8B", "llama3-8b", g, 1, None) for g in (
    "rtx-4090-24g", "l40s-48g", "rtx-pro-6000-server-96g", "rtx-pro-6000-ws-96g", "h100-80g-pcie", "h100-80g-sxm",
    "h20-96g", "b200-180g")] + [
    ("Qwen3-32B", "qwen3-32b", "rtx-4090-24g", 4, None), ("Qwen3-32B", "qwen3-32b", "rtx-4090-24g", 4, "pcie-only"),
    ("Qwen3-32B", "qwen3-32b", "l40s-48g", 2, None), ("Qwen3-32B", "qwen3-32b", "rtx-pro-6000-server-96g", 1, None),
    ("Qwen3-32B", "qwen3-32b", "rtx-pro-6000-ws-96g", 1, None), ("Qwen3-32B", "qwen3-32b", "h100-80g-pcie", 1, None),
    ("Qwen3-32B", "qwen3-32b", "h100-80g-sxm", 1, None), ("Qwen3-32B", "qwen3-32b", "h100-80g-sxm", 2, None),
    ("Qwen3-32B", "qwen3-32b", "h20-96g", 1, None), ("Qwen3-32B", "qwen3-32b", "b200-180g", 1, None)]


WHAT_IF_PAGE = "docs/performance-model/index.md"


def what_if_row(label: str, model: str, gpu: str, tp: int, topology: str | None) -> str:
    import numpy as np

    d = Deployment.create(model=model, gpu=gpu, tp=tp, topology=topology)
    perf = PerfModel(d)
    decode = float(perf.pipeline_latency(np.ones(32, dtype=np.int64), np.full(32, 1024)))
    prefill = float(perf.pipeline_latency(np.array([512]), np.array([0])))
    node = d.topology.split("/")[0] + (f", TP over {d.tp_link.name}" if d.tp_link else "")
    weights = d.model.weight_bytes_per_gpu(tp, 1) / 1e9
    return (f"| {label} | {tp}x {gpu} | {node} | {weights:.1f} GB | {decode * 1e3:.1f} ms | {prefill * 1e3:.1f} ms "
            f"| {perf.kv_capacity_tokens(0.9):,} |")


def test_the_readme_what_if_table_is_what_the_model_gives():
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / WHAT_IF_PAGE).read_text()
    stale = [row for row in (what_if_row(*r) for r in WHAT_IF) if row not in readme]
    assert not stale, f"{WHAT_IF_PAGE}'s what-if table should say:\n" + "\n".join(stale)


def test_the_readme_says_what_staging_through_host_memory_costs():
    import numpy as np
    from pathlib import Path

    def times(topology):
        perf = PerfModel(Deployment.create(model="qwen3-32b", gpu="rtx-4090", tp=4, topology=topology))
        return [float(perf.pipeline_latency(n, c)) for n, c in ((np.ones(32, dtype=np.int64), np.full(32, 1024)),
                                                                 (np.array([512]), np.array([0])))]

    (off_d, off_p), (on_d, on_p) = times(None), times("pcie-only")
    said = (f"Qwen3-32B on four 4090s pays {(off_d - on_d) * 1e3:.0f} ms a decode and {(off_p - on_p) * 1e3:.0f} ms "
            "a prefill for staging its all-reduces through host memory")
    readme = " ".join((Path(__file__).resolve().parent.parent / WHAT_IF_PAGE).read_text().split())
    assert said in readme, said


def test_the_gpu_check_names_the_new_cards():
    """scripts/gpu_check picks the performance model's GPU from the CUDA device name."""
    import importlib.util
    from pathlib import Path

    check = Path(__file__).resolve().parent.parent / "scripts" / "gpu_check" / "check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", check)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    names = {"NVIDIA GeForce RTX 4090": "rtx-4090-24g", "NVIDIA L40S": "l40s-48g", "NVIDIA H100 PCIe": "h100-80g-pcie",
             "NVIDIA H100 80GB HBM3": "h100-80g-sxm", "NVIDIA H20": "h20-96g", "NVIDIA H200": "h200-141g",
             "NVIDIA B200": "b200-180g", "NVIDIA RTX PRO 6000 Blackwell Server Edition": "rtx-pro-6000-server-96g",
             "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": "rtx-pro-6000-ws-96g",
             "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition": None}
    assert {n: mod.gpu_catalog_key(n) for n in names} == names


def test_ad102_and_gb202_decode_is_priced_from_their_measured_kernels():
    """Issue 50 item 4: vLLM's decode on the L40S and the RTX PRO 6000 Server is priced from their measured
    operator profiles (kernels.py [AIC-DECODE], [AIC-GEMM]), the RTX 4090 and the Workstation Edition from their
    chip sibling's; a decode-only step's attention is the fitted law, derived here from the cited constants."""
    from pathlib import Path

    from engines.perf.kernels import get_stack, kernels_for
    from engines.perf.recent_gpus import DECODE_SOURCES, RECENT_GPUS

    measured = {"l40s-48g": (9.02e-6, 0.0142e-6, 0.853, 0.819),
                "rtx-pro-6000-server-96g": (10.13e-6, 0.0146e-6, 0.947, 0.939)}
    sibling = {"rtx-4090-24g": "l40s-48g", "rtx-pro-6000-ws-96g": "rtx-pro-6000-server-96g"}
    page = " ".join((Path(__file__).resolve().parent.parent / "docs/performance-model/reference.md").read_text().split())
    section = page[page.index("Decode on AD102 and GB202"):]
    assert set(DECODE_SOURCES) == {n for n in RECENT_GPUS if n.startswith(("rtx-", "l40s"))}
    for name in DECODE_SOURCES:
        gpu = RECENT_GPUS[name]
        fixed, per_cta, eta, stream = measured[sibling.get(name, name)]
        k = kernels_for(get_stack("vllm-0.32"), name, gpu.matmul_efficiency)
        assert k.gemm.stream_efficiency == stream
        att = k.attention
        assert (att.decode_fixed_s, att.decode_per_cta_s, att.decode_efficiency) == (fixed, per_cta, eta)
        # Llama-3-8B (8 KV heads, head dim 128, 32 layers): 32 decodes at 4,096 tokens, one layer's call
        p = PerfModel(Deployment.create(model="llama3-8b", gpu=name, stack="vllm-0.32"))
        kv_bytes = 32 * (4096 + 1) * 8 * 128 * 2 * 2
        qo_bytes = 32 * 32 * 128 * 2 * 2
        law = fixed + per_cta * 32 * 8 + (kv_bytes + qo_bytes) / (eta * gpu.hbm_bandwidth)
        assert p.breakdown([1] * 32, [4096] * 32)["attention"] / 32 == pytest.approx(law, rel=1e-6)
        assert f"`{name}`" in section, f"the reference's table should name {name}"
    # Sarathi-Serve's own decode call keeps the A100's split-KV fit; the datasheet stack its fractions
    assert kernels_for(get_stack("sarathi-serve-2024"), "l40s-48g", 0.743).attention.name == "sarathi-2024"
    assert kernels_for(get_stack("ideal"), "l40s-48g", 0.743).attention.decode_per_cta_s == 0.0
    # a what-if that names the unmeasured kernel gets it
    assert kernels_for(get_stack("vllm-0.32"), "l40s-48g", 0.743, attention="fa2-ideal").attention.decode_fixed_s == 0.0
