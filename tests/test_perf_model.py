"""PerfModel against published operator-level facts, and its API contract.

Published facts (Sarathi-Serve, OSDI'24; see shared/ARCHITECTURE.md "Paper facts"). Each test
states its tolerance. Where the spec-derived model cannot meet a fact, the test is an xfail with
the measured value and the reason; the constants are never tuned to pass.
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import HarnessError
from engines.perf import BREAKDOWN_PARTS, LINEAR_PARTS, Deployment, PerfModel
from engines.perf import memory
from engines.perf import operators as ops
from engines.perf.queries import chunked_prefill_time, decode_iteration_time


def perf(model, gpu, tp=1, pp=1, **kw):
    return PerfModel(Deployment.create(model=model, gpu=gpu, tp=tp, pp=pp, **kw))


# The paper's deployments on the paper's hardware (Sec. 5): Azure NC96ads A100 v4 nodes carry
# A100 80GB PCIe cards (see experiments/hardware/a100_80g.yaml); LLaMA2-70B runs on an 8x A40 server.
MISTRAL = perf("mistral-7b", "a100-80g-pcie")
YI = perf("yi-34b", "a100-80g-pcie", tp=2)
LLAMA70 = perf("llama2-70b", "a40", tp=4, pp=2, topology="paper_a40")
FALCON = perf("falcon-180b", "a100-80g-pcie", tp=4, pp=2, topology="paper_a100", gpus_per_node=4)




# ----------------------------------------------------------------------------- published facts
def test_prefill_throughput_saturates_by_512_tokens():
    # Paper: prefill throughput saturates near 512 tokens (Mistral-7B, A100).
    # Tolerance: per-token time at 512 within 15 % of that at 4096.
    per_512 = MISTRAL.iteration_time([512], [0]) / 512
    per_4096 = MISTRAL.iteration_time([4096], [0]) / 4096
    assert abs(per_512 / per_4096 - 1) <= 0.15
    # and below saturation a token is dearer (weights are streamed for few tokens)
    assert MISTRAL.iteration_time([64], [0]) / 64 > 1.15 * per_512


def test_tile_quantization_257_vs_256():
    # Paper: a 257-token chunk can cost 32 % more than 256. Tolerance: linear layers >= 15 % more.
    lin = {n: MISTRAL.breakdown([n], [0])["linear"] for n in (256, 257)}
    assert lin[257] >= 1.15 * lin[256]
    # within a tile, an extra token is nearly free
    assert MISTRAL.breakdown([384], [0])["linear"] == pytest.approx(lin[257], rel=0.01)


def test_falcon_4k_prefill_about_1150ms_per_stage():
    # Paper, Sec. 3.3 ("Pipeline Bubbles waste GPU Cycles"): "For Falcon-180B, a single prompt of 4k
    # tokens takes ~1150 ms to execute compared to a decode only iteration with batch size 32 which
    # would take about ~200 ms to execute. Interleaving of these iteration could result in a bubble
    # of ~950 ms." A bubble is the time a stage idles between micro-batches, so 950 = 1150 - 200 is
    # a difference of per-STAGE micro-batch times: the figure is one stage's time, not the sum of
    # both (which no A100 could reach: 1.5e15 FLOPs / (4 x 312e12 FLOP/s) = 1.2 s at 100 % of peak).
    # Tolerance: +-35 % on the slowest stage (batch_times); the whole pipeline takes about twice that.
    t = float(FALCON.batch_times(np.array([4096]), np.array([0])))
    assert abs(t / 1.150 - 1) <= 0.35
    whole = float(FALCON.pipeline_latency(np.array([4096]), np.array([0])))
    assert 1.9 * t <= whole <= 2.1 * t


# The two pipeline-parallel deployments decode 1.7-2.3x faster in the model than the paper's SLOs imply,
# while the two single-stage ones match. What the model charges a PP decode (batch 32, 4k context):
# every GPU streams its share of the weights (at the 73 % of HBM bandwidth measured for decode GEMMs)
# and of the KV, does its stage's TP all-reduces, and the last stage pays the engine's measured CPU +
# multi-GPU overheads (Vidur profiles, 9.6-13 ms at batch 32). Every candidate cause found (issue 36)
# is a what-if in benchmarks/pp_gap_whatifs.py, pinned by tests/test_pp_gap.py: the token period
# with two micro-batches of 32 in flight, input preparation on every stage, the TP ranks' concurrent
# stage sends, a missed 10 ms scheduler wake-up; none alone closes the gap, all at once leave Falcon
# at 110 ms. Fitting a constant to close it is ruled out. These stay strict xfails: they fail loudly
# (XPASS) the day a cited cost closes the gap. See engines/perf/README.md.
FALCON_DECODE_REASON = (
    "model (perf.stack=sarathi-serve-2024, measured kernels): 89 ms through both stages (last stage: 31 ms of "
    "GEMMs streaming weights, 2.3 ms of attention, 1.0 ms of elementwise kernels, 4.8 ms of PCIe all-reduces, "
    "9.6 ms engine overhead); 200 ms needs 2.3x that (the datasheet stack: 87 ms). Candidates "
    "(benchmarks/pp_gap_whatifs.py): the period with two micro-batches of 32 in flight 98.6 ms, input preparation "
    "on every stage 89.4, 4 TP ranks' concurrent stage sends 89.6, a missed 10 ms scheduler wake-up 98.8, all at "
    "once 110 ms: not found"
)


@pytest.mark.xfail(strict=True, reason=FALCON_DECODE_REASON)
def test_falcon_batch32_decode_about_200ms():
    # Paper (Sec. 3.3, and Table 3's 1 s strict SLO = 5x a decode iteration): a batch-32 decode
    # iteration (4k context each) ~200 ms. Compared through both stages (the reading closest to the
    # model; per stage it is 48 ms). Tolerance: +-35 %.
    assert abs(decode_iteration_time(FALCON) / 0.200 - 1) <= 0.35


SLO_CASES = [
    # (deployment, published strict P99 TBT SLO = 5 x decode iteration, reason if the model misses it)
    pytest.param(MISTRAL, 0.1, id="mistral-7b-1xA100", marks=pytest.mark.xfail(strict=True, reason=(
        "a measured operator against a published fact: 5x decode = 0.145 s (+45 %; the ideal stack 0.126). "
        "32 sequences x 8 KV heads are 256 CTAs of FlashAttention-2's decode kernel, two waves on 2 x 108 "
        "SMs: 0.42 ms of attention a layer where the KV stream takes 0.33 (Vidur measured the same layout, "
        "Llama-2-70B TP2 at 64 x 2,048: 219 us; test_decode_waves_as_measured)"))),
    pytest.param(YI, 0.2, id="yi-34b-tp2-A100"),
    pytest.param(LLAMA70, 1.0, id="llama2-70b-tp4pp2-A40", marks=pytest.mark.xfail(strict=True, reason=(
        "model (measured kernels): 5x decode = 0.59 s. Last stage: GEMMs streaming 17.2 GB of weights per "
        "A40 (34 ms), attention over 5.4 GB of KV (10 ms), 80 PCIe all-reduces (7.5 ms), 13 ms engine overhead "
        "(the A40 host's profile) = 66 ms; both stages 118 ms per decode, 59 % of the 200 ms the 1 s SLO implies. "
        "No operator candidate closes it (benchmarks/pp_gap_whatifs.py: input preparation on every stage 118.7 ms, "
        "concurrent stage sends 118.5); reading the SLO unit as the period of two micro-batches of 32 (130.8 ms, "
        "5x = 0.654 s) lands 0.4 points inside the tolerance, a reading, not a shown cost"))),
    pytest.param(FALCON, 1.0, id="falcon-180b-tp4pp2-A100", marks=pytest.mark.xfail(strict=True, reason=(
        "model: 5x decode = 0.44 s (the period of two micro-batches of 32: 0.49 s; every candidate at once: "
        "0.55 s); see test_falcon_batch32_decode_about_200ms"))),
]


@pytest.mark.parametrize("p,slo", SLO_CASES)
def test_strict_slo_is_five_decode_iterations(p, slo):
    # Paper: strict P99 TBT SLO = 5 x a decode iteration (batch 32, 4k context, no prefill).
    # Tolerance: +-35 %; for pp = 2 an iteration is the sum of the stages + the send.
    assert abs(5 * decode_iteration_time(p) / slo - 1) <= 0.35


def test_decode_waves_as_measured():
    # FlashAttention-2's split-KV decode (engines/perf/split_kv.py) runs one CTA per sequence and KV
    # head: Mistral-7B's 32 x 8 is Llama-2-70B TP2's 64 x 4, which Vidur measured (A100 80GB PCIe,
    # attention.csv, c = 2,048): 219 us, against 137 us at 52 sequences (208 CTAs, one wave of the
    # 2 x 108 the heuristic counts) and a KV stream of 167 us at 0.83 of HBM.
    mistral, llama = MISTRAL, perf("llama2-70b", "a100-80g-pcie", tp=2)
    att = lambda p, b: float(p._components(np.ones((1, b)), np.full((1, b), 2048.0))["attention"][0])  # noqa: E731
    assert att(mistral, 32) == pytest.approx(att(llama, 64), rel=1e-6)
    assert att(llama, 64) == pytest.approx(219e-6, rel=0.10)
    assert att(llama, 52) == pytest.approx(137e-6, rel=0.10)
    assert att(llama, 56) > 1.3 * att(llama, 52)  # the second wave (measured: 191 us, 1.39x)


YI_IDEAL = perf("yi-34b", "a100-80g-pcie", tp=2, stack="ideal")


@pytest.mark.parametrize("p", [YI, YI_IDEAL], ids=["sarathi-serve-2024", "ideal"])
@pytest.mark.parametrize("prompt", [2048, 4096, 8192, 16384])
def test_yi_chunking_overhead(prompt, p):
    # Paper (Fig. 14, Yi-34B TP2): chunking costs <= ~25 % with chunks of 512, near 0 at 2048.
    # Tolerance (brief): chunks of 512 <= 35 % more than one go, chunks of 2048 <= 10 % more.
    whole = p.iteration_time([prompt], [0])
    assert chunked_prefill_time(p, prompt, 512) <= 1.35 * whole
    assert chunked_prefill_time(p, prompt, 2048) <= 1.10 * whole
    if p is YI and prompt > 4096:
        # A conflict between a measured operator and a published fact, kept visible: the paper's
        # kernel (Sarathi-Serve's flash_attn_with_kvcache prefill, Vidur's attention.csv) pays the
        # in-chunk causal triangle like an unmasked rectangle (n = 2048: 0.681 ms over no context,
        # 1.027 ms over 2048 cached tokens, where causal work triples), so one whole prompt of
        # 8192 / 16384 tokens costs more attention than 512-token chunks: chunked 5 % / 15 % below
        # whole, where Fig. 14 shows an overhead. The profile measures chunks up to 4096 tokens only:
        # longer whole prefills are the law's extrapolation (engines/perf/README.md, "Conflicts").
        assert chunked_prefill_time(p, prompt, 512) < whole
    else:
        assert chunked_prefill_time(p, prompt, 512) > whole  # chunking is never free


# ----------------------------------------------------------------------------- operator behaviour
def test_later_chunks_reread_earlier_kv():
    first = YI.breakdown([512], [0])["attention"]
    later = YI.breakdown([512], [3584])["attention"]
    assert later > 4 * first


def test_sliding_window_caps_decode_attention():
    att = {c: MISTRAL.breakdown([1] * 8, [c] * 8)["attention"] for c in (1000, 4095, 5000, 20000)}
    assert att[1000] < att[4095]
    assert att[4095] == att[5000] == att[20000]  # Mistral attends to at most 4096 positions
    llama = perf("llama3-8b", "a100-80g-sxm")  # same shapes, no window
    assert llama.breakdown([1] * 8, [20000] * 8)["attention"] > 4 * att[20000]


@pytest.mark.parametrize("stack", ["ideal", "sarathi-serve-2024"])
def test_decode_is_bandwidth_bound_prefill_compute_bound(stack):
    p = perf("mistral-7b", "a100-80g-pcie", stack=stack)
    g, gemm = p.gpu, p.kernels.gemm
    # the stack's rates: datasheet fractions, or the measured kernel's (kernels.GemmKernel)
    weight_bw = g.hbm_bandwidth * gemm.stream_efficiency if gemm.smooth else g.weight_bandwidth
    flop_rate = g.peak_flops * gemm.compute_efficiency if gemm.smooth else g.matmul_flops
    weights = p.model.weight_bytes - 2 * p.model.embedding_params * 2  # minus embedding + LM head
    # decode: the linear layers cost about weights / achievable bandwidth (+ a fixed cost per GEMM),
    # whatever the batch; the measured kernel's soft knee adds up to 1.19x where the 128-row tile's
    # compute equals the weight stream (kernels.GemmKernel), the datasheet roofline nothing.
    streamed = weights / weight_bw + 4 * p.model.num_layers * gemm.fixed_s
    decode = p.breakdown([1] * 32, [1000] * 32)["linear"]
    assert decode == pytest.approx(p.breakdown([1], [1000])["linear"], rel=0.05)
    assert streamed * 0.98 <= decode <= streamed * (1.2 if gemm.smooth else 1.02)
    # prefill of 4096: linear FLOPs / achievable FLOP/s (short K loses a little of it: k_half)
    flops = 2 * 4096 * (weights / 2)
    assert p.breakdown([4096], [0])["linear"] == pytest.approx(flops / flop_rate, rel=0.02)


def test_tp_and_pp_communication():
    assert YI.breakdown([256], [0])["tp_comm"] > 0
    assert MISTRAL.breakdown([256], [0])["tp_comm"] == 0
    assert MISTRAL.pp_send_time(4096) == 0.0 and YI.pp_send_time(4096) == 0.0
    send = FALCON.pp_send_time(4096)
    # 4096 x 14848 x 2 B over 100 GbE on Vidur's measured curve (links.py): 14.3 us, 8.6 GB/s for the
    # first 2.33 MiB, 2.1 GB/s past them; a decode batch's 950 KB stays in the first segment
    nbytes, knee = 4096 * 14848 * 2, 2.33 * 2**20
    assert send == pytest.approx(14.3e-6 + knee / 8.6e9 + (nbytes - knee) / 2.1e9, rel=1e-9)
    assert FALCON.pp_send_time(32) == pytest.approx(14.3e-6 + 32 * 14848 * 2 / 8.6e9, rel=1e-9)
    assert FALCON.pp_send_time(0) == 0.0
    # Falcon sums attention and MLP before one all-reduce; Llama all-reduces twice per layer
    assert FALCON.coeffs.allreduces_per_layer == 1 and LLAMA70.coeffs.allreduces_per_layer == 2


def test_cpu_overhead_is_documented_and_counted():
    d = MISTRAL.deployment
    b = MISTRAL.breakdown([1] * 10, [100] * 10)
    assert b["cpu_overhead"] == pytest.approx(d.cpu_overhead_s + 10 * d.cpu_overhead_per_seq_s)
    lean = PerfModel(d.with_changes(cpu_overhead_s=0.0, cpu_overhead_per_seq_s=0.0))
    assert lean.iteration_time([1] * 10, [100] * 10) == pytest.approx(b["total"] - b["cpu_overhead"])
    # more than one GPU adds the driver-to-worker round trip, growing with the batch
    y = YI.deployment
    assert YI.breakdown([1] * 10, [100] * 10)["cpu_overhead"] == pytest.approx(
        y.cpu_overhead_s + y.multi_gpu_overhead_s + 10 * (y.cpu_overhead_per_seq_s + y.multi_gpu_overhead_per_seq_s))
    # the A40 server brings its own host's profile; an explicit override still wins
    a40 = LLAMA70.deployment
    assert (a40.cpu_overhead_s, a40.multi_gpu_overhead_s) != (y.cpu_overhead_s, y.multi_gpu_overhead_s)
    assert Deployment.create(model="llama2-70b", gpu="a40", tp=4, pp=2, topology="paper_a40",
                             cpu_overhead_s=0.5e-3).cpu_overhead_s == 0.5e-3


def test_kv_capacity():
    m, d = MISTRAL.model, MISTRAL.deployment
    # the paper's engine (Sarathi-Serve): CUDA's device total x utilization - (weights + the profile
    # pass's activations), in whole 16-token blocks
    assert d.gpu.visible_bytes < d.gpu.hbm_bytes
    blocks = (d.gpu.visible_bytes * 0.9 - m.weight_bytes - memory.inputs(d).activation_bytes) // (16 * m.kv_bytes_per_token)
    assert MISTRAL.kv_capacity_tokens(0.9) == 16 * int(blocks)
    # the datasheet recipe (the `ideal` stack): HBM x utilization, activations and logits reserved, tokens
    ideal = perf("mistral-7b", "a100-80g-pcie", stack="ideal")
    expected = (d.gpu.hbm_bytes * 0.9 - m.weight_bytes - ideal.activation_reserve_bytes()) / m.kv_bytes_per_token
    assert ideal.kv_capacity_tokens(0.9) == math.floor(expected)
    assert 400_000 < MISTRAL.kv_capacity_tokens() < 500_000
    assert MISTRAL.kv_capacity_tokens(0.5) < MISTRAL.kv_capacity_tokens(0.9)
    # TP halves weights and KV per GPU; PP halves layers per GPU
    assert YI.kv_capacity_tokens() > 0 and FALCON.kv_capacity_tokens() > 0 and LLAMA70.kv_capacity_tokens() > 0
    assert perf("falcon-180b", "a100-80g-sxm", tp=4).kv_capacity_tokens() == 0  # 89 GB of weights per GPU
    with pytest.raises(HarnessError):
        MISTRAL.kv_capacity_tokens(1.5)


def test_kv_capacity_as_vidur_sizes_it():
    # Issue 14: Vidur's own run of Llama-2-70B TP2 on its A100 holds 53,248 KV tokens (3,328 blocks);
    # its memory planner (engines/perf/memory.py [VIDUR-MEM]) reproduces it exactly, where the
    # datasheet recipe gives 47,525 and the paper's engine (CUDA's 79.2 GiB, all weights) fewer.
    caps = {r: perf("llama2-70b", "a100-80g-pcie", tp=2, kv_memory=r).kv_capacity_tokens(0.9)
            for r in ("vidur", "datasheet", "sarathi-serve")}
    assert caps["vidur"] == 53_248 and caps["datasheet"] == 47_525
    assert caps["sarathi-serve"] < caps["datasheet"] and caps["sarathi-serve"] % 16 == 0
    with pytest.raises(HarnessError, match="unknown KV memory recipe"):
        perf("llama2-70b", "a100-80g-pcie", tp=2, kv_memory="vllm-v9")


# ----------------------------------------------------------------------------- API contract
@pytest.mark.parametrize("p", [MISTRAL, YI, LLAMA70, FALCON], ids=["mistral", "yi", "llama70", "falcon"])
def test_vectorized_equals_row_by_row(p):
    # One batch at a time takes PerfModel's scalar path; (rows, B) arrays the vectorized one.
    # The simulator's decode-run fast-forward is exact only if the two agree bit for bit.
    rng = np.random.default_rng(7)
    new = rng.choice([0, 1, 1, 1, 17, 256, 257, 512], size=(40, 24))
    ctx = rng.integers(0, 9000, size=(40, 24))
    rows = np.array([p.batch_times(new[i], ctx[i]) for i in range(40)])
    whole = p.batch_times(new, ctx)
    assert whole.shape == (40,)
    assert np.array_equal(whole, rows)  # bit-identical
    assert np.array_equal(p.batch_times(new.reshape(5, 8, 24), ctx.reshape(5, 8, 24)), whole.reshape(5, 8))
    assert p.iteration_time(list(new[3]), list(ctx[3])) == whole[3]
    stages = p.stage_times(new, ctx)
    assert stages.shape == (40, p.pp)
    assert np.array_equal(stages, [p.stage_times(new[i], ctx[i]) for i in range(40)])
    lat = p.pipeline_latency(new, ctx)
    assert np.array_equal(lat, [p.pipeline_latency(new[i], ctx[i]) for i in range(40)])


def test_padding_costs_nothing():
    base = YI.iteration_time([1, 1, 300], [10, 2000, 0])
    assert YI.iteration_time([1, 0, 1, 0, 300, 0], [10, 99999, 2000, 5, 0, 123]) == base
    assert YI.iteration_time([0, 0], [100, 200]) == 0.0
    assert np.array_equal(YI.batch_times(np.zeros((3, 0), dtype=int), np.zeros((3, 0), dtype=int)), np.zeros(3))


def test_breakdown_sums_to_total():
    for p in (MISTRAL, YI, FALCON):
        b = p.breakdown([1] * 20 + [333], [4000] * 20 + [700])
        assert sum(b[k] for k in BREAKDOWN_PARTS) == pytest.approx(b["total"], rel=1e-12)
        assert sum(b[k] for k in LINEAR_PARTS) == pytest.approx(b["linear"], rel=1e-12)
        assert b["total"] == p.iteration_time([1] * 20 + [333], [4000] * 20 + [700])


def test_bad_input_raises():
    with pytest.raises(HarnessError):
        YI.batch_times(np.array([1, 2]), np.array([1, 2, 3]))
    with pytest.raises(HarnessError):
        YI.iteration_time([-1], [0])


batches = st.lists(st.tuples(st.integers(0, 700), st.integers(0, 9000)), min_size=1, max_size=12)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 40000)), min_size=1, max_size=40))
def test_scalar_path_is_bit_identical(batch):
    new = np.array([n for n, _ in batch])
    ctx = np.array([c for _, c in batch])
    for p in (MISTRAL, YI, LLAMA70, FALCON):
        assert np.array_equal(p.stage_times(new, ctx), p.stage_times(new[None], ctx[None])[0])
        assert p.batch_times(new, ctx) == p.batch_times(new[None], ctx[None])[0]


@settings(max_examples=60, deadline=None)
@given(batches, st.integers(0, 11), st.integers(1, 300), st.sampled_from(["new", "context"]))
def test_monotone_in_new_tokens_and_context(batch, index, delta, which):
    """Monotone up to the one TIME_QUANTUM_S a layer the split-KV call's flooring can take back
    (the strict xfail below pins that defect; anything larger fails here)."""
    new = [n for n, _ in batch]
    ctx = [c for _, c in batch]
    i = index % len(batch)
    more_new, more_ctx = list(new), list(ctx)
    if which == "new":
        more_new[i] += delta
    else:
        more_ctx[i] += delta
    for p in (MISTRAL, FALCON):
        slack = 1.01 * p.deployment.model.num_layers * ops.TIME_QUANTUM_S  # (1.01: the sums' float rounding)
        assert p.iteration_time(more_new, more_ctx) >= p.iteration_time(new, ctx) - slack
        assert float(p.pipeline_latency(np.array(more_new), np.array(more_ctx))) >= float(
            p.pipeline_latency(np.array(new), np.array(ctx))) - slack


@pytest.mark.xfail(strict=True, reason=(
    "a decode's split-KV call adds floor(critical path - KV stream) to the stream's own floored units "
    "(BatchPricer._decode_units_of, split_kv.DecodeCall.units): where the critical path is the longer, "
    "floor(s) + floor(C - s) drops by one unit as s's fraction wraps, one TIME_QUANTUM_S a layer as the "
    "context grows by a key (Mistral-7B: 0.0126183836643677 s at context 1, 0.012618383661167697 at 2). "
    "Flooring the critical path as one term, floor(C) - floor(s), makes these iterations equal; the fix "
    "changes every record by quanta, so it waits for its own change"))
def test_one_decode_is_strictly_monotone_in_its_context():
    times = [MISTRAL.iteration_time([1], [c]) for c in range(12)]
    assert times == sorted(times)
