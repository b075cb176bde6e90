"""Data-parallel attention + expert-parallel MoE (issue 34 item 3): the token exchange priced from
the link constants by hand, DP padding, expert weights per rank, the lockstep of the ranks in the
simulator, the router, and what is refused."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest

from common.errors import HarnessError
from engines.perf import Deployment
from engines.perf import memory
from engines.perf.expert_parallel import ExpertParallelModel, dp_padded_tokens
from engines.perf.factory import build_perf_model
from engines.perf.links import get_link
from engines.routers import InstanceState, make_router
from engines.schedulers import EngineConfig, SchedulerConfig, make_engine
from harness.backends.sim.data_parallel import simulate_data_parallel
from harness.records import RequestSpec
from tests.cli import assert_refused

MODEL, GPU = "qwen3-30b-a3b", "h100-80g-sxm"  # 48 layers, hidden 2048, 128 experts, top-8; dgx-h100 (nvlink4)


def ep(dp: int = 2, **kw) -> ExpertParallelModel:
    m = build_perf_model(Deployment.create(MODEL, GPU, dp=dp, ep=True, **kw))
    assert isinstance(m, ExpertParallelModel)
    return m


def test_allgather_dispatch_and_combine_by_hand() -> None:
    """vLLM 0.32's default AgRs dispatch: all-gather of 2 ranks' 32 tokens (hidden 16-bit + top-8
    weights and ids), combine a reduce-scatter of the hidden states; nvlink4 has no measured curve:
    (p-1) hop latencies + (p-1)/p bus bytes over 450 GB/s x 0.78."""
    layer = ep().moe
    nv = get_link("nvlink4")
    assert (nv.bandwidth, nv.efficiency, nv.latency_s, nv.allreduce_curve) == (450e9, 0.78, 5e-6, None)
    bw = 450e9 * 0.78
    dispatch = 5e-6 + 64 * (2048 * 2 + 8 * (4 + 4)) * 0.5 / bw
    combine = 5e-6 + 64 * 2048 * 2 * 0.5 / bw
    assert layer.dispatch_s([32, 32]) == pytest.approx(dispatch, rel=1e-12)
    assert layer.combine_s([32, 32]) == pytest.approx(combine, rel=1e-12)


def test_all2all_dispatch_by_hand() -> None:
    """DeepEP-style: hidden x 2 B x top-k a token, the 1/EP share of it staying on the GPU; one send."""
    layer = ep(ep_comm="all2all").moe
    send = 5e-6 + 32 * 8 * 2048 * 2 * (1 / 2) / (450e9 * 0.78)
    assert layer.dispatch_s([32, 32]) == pytest.approx(send, rel=1e-12)
    assert layer.combine_s([32, 32]) == layer.dispatch_s([32, 32])


def test_expert_gemms_see_every_ranks_tokens() -> None:
    """One GPU's experts: all ranks' tokens x k / EP rows over D(T)/EP hit experts: 2 ranks of 32
    tokens price as 64 tokens of one GPU over half its experts (the occupancy table of moe.py)."""
    layer = ep().moe
    hit = layer.routing.table[64] / 2
    assert hit == pytest.approx(64 * (1 - (1 - 8 / 128) ** 64), rel=1e-12)
    rows = 64 * 8 / 2
    block = 64 if 64 > 64 else 16  # 64 tokens vs 64 local experts: the small block
    tiled = hit * math.ceil(rows / hit / block) * block
    (c2, w2, a2), (c3, w3, a3) = layer.up, layer.down
    want = layer.gemm(rows, tiled, c2, w2 * hit, a2) + layer.gemm(rows, tiled, c3, w3 * hit, a3)  # the stack's GEMM law
    assert layer.experts_s(64) == pytest.approx(want, rel=1e-12)
    assert layer.up == build_perf_model(Deployment.create(MODEL, GPU)).coeffs.gemm_scalars[2]  # whole experts


def test_dp_padding_to_the_largest_ranks_graph() -> None:
    """_post_process_dp_padding: every rank at the max graph size when all run a graph, else none."""
    sizes = (1, 2, 4, 8, 16, 24, 32, 512)
    assert dp_padded_tokens(sizes, [3, 17]) == [24, 24]
    assert dp_padded_tokens(sizes, [3, 600]) == [3, 600]
    assert dp_padded_tokens((), [3, 17]) == [3, 17]
    m = ep(stack="vllm-0.32")
    assert m.moe.graph_sizes and m.moe.layer_s([3, 17]) == m.moe.layer_s([24, 24])


def test_expert_weights_per_rank() -> None:
    """EP over dp x tp GPUs: each GPU holds E/EP whole experts; attention, embeddings, router whole."""
    one = Deployment.create(MODEL, GPU)
    two = Deployment.create(MODEL, GPU, dp=2, ep=True)
    arch = one.model
    experts = arch.num_layers * arch.num_experts * arch.expert_params() * arch.bytes_per_param
    w1, w2 = memory.inputs(one).stage_weight_bytes[0], memory.inputs(two).stage_weight_bytes[0]
    assert w1 - w2 == experts // 2
    assert build_perf_model(two).kv_capacity_tokens() > build_perf_model(one).kv_capacity_tokens()


@pytest.mark.parametrize("stack", [None, "vllm-0.32"])  # CPU after the GPU work; async: hidden behind it
def test_balanced_step_is_the_iteration_time(stack) -> None:
    """What SLOs and the planner read (iteration_time) is the step of ranks running the same batch."""
    m = ep(**({"stack": stack} if stack else {}))
    for n, c in (([1] * 32, [1000] * 32), ([1] * 3, [50] * 3), ([2048], [0])):
        assert m.step_time([(n, c), (n, c)]) == pytest.approx(m.iteration_time(n, c), rel=1e-12)
        assert m.alone.iteration_time(n, c) < m.iteration_time(n, c)
    n, c = [1] * 20, [1000] * 20
    if stack is None:  # a dummy batch is one token (vllm-0.32 pads it to the other rank's graph: equal)
        assert m.step_time([(n, c), None]) < m.step_time([(n, c), (n, c)])


def test_lockstep_a_prefill_on_one_rank_slows_the_other_ranks_decodes() -> None:
    """Request A decodes on rank 0; B's 4000-token prompt lands on rank 1 (vllm_dp: the rank with
    fewer outstanding). A's token gap across B's prefill step is exactly step_time of the two batches."""
    m = ep()
    cfg = SchedulerConfig("sarathi", token_budget=4096, max_num_seqs=64)
    engines = [make_engine(EngineConfig(cfg, m.kv_capacity_tokens(), 8192)) for _ in range(2)]
    reqs = [RequestSpec("a", 0.0, 16, 60), RequestSpec("b", 0.05, 4000, 2)]
    stats: dict = {}
    a, b = simulate_data_parallel(reqs, engines, m, make_router("vllm_dp"), stats=stats)
    assert stats["instance_requests"] == [1, 1]
    j = list(a.token_times_s).index(b.first_token_s)  # the step holding B's prefill produced A's token j
    gap = a.token_times_s[j] - a.token_times_s[j - 1]
    with_prefill = m.step_time([([1], [16 + j - 1]), ([4000], [0])])
    assert gap == pytest.approx(with_prefill, rel=1e-9)
    before = a.token_times_s[j - 1] - a.token_times_s[j - 2]
    assert before == pytest.approx(m.step_time([([1], [16 + j - 2]), None]), rel=1e-9)
    assert gap - before > 0.5 * m.alone.iteration_time([4000], [0])  # B's prefill is in A's gap
    assert stats["dummy_batches"] > 0  # rank 1 ran dummies while only A had work


def test_vllm_dp_router_rotates_ties() -> None:
    r = make_router("vllm_dp")
    s = [InstanceState(0, 0, 1), InstanceState(0, 0, 1)]
    assert [r.choose(s) for _ in range(4)] == [0, 1, 0, 1]
    assert r.choose([InstanceState(3, 0, 1), InstanceState(1, 0, 1)]) == 1


@pytest.mark.parametrize("kw, message", [
    (dict(model="llama3-8b", dp=2, ep=True), "needs an MoE model"),
    (dict(dp=2), "ep=true only"),
    (dict(dp=2, ep=True, tp=8), "more than a dgx-h100 node's 8"),
    (dict(dp=2, ep=True, pp=2), "not modelled"),
])
def test_bad_layouts_refused(kw, message) -> None:
    args = {"model": MODEL, "gpu": GPU, **kw}
    with pytest.raises(HarnessError, match=message):
        Deployment.create(**args)


def test_cli_refuses_ep_on_a_dense_model(tmp_path) -> None:
    assert_refused(tmp_path, ["experiment=mistral7b_strict", "parallel=dp2_ep", "search.num_requests=8"],
                   "needs an MoE model")


def test_dp1_deployment_is_unchanged() -> None:
    """parallel.dp=1 ep=false is the plain PerfModel (the fingerprint check covers the results)."""
    d = Deployment.create(MODEL, GPU)
    assert type(build_perf_model(d)).__name__ == "PerfModel" and d.expert_shards is None
    assert replace(d) == Deployment.create(MODEL, GPU, dp=1, ep=False)


def test_backend_runs_dp_ranks_through_the_config() -> None:
    """parallel=dp2_ep through the config and SimBackend: two ranks, requests split by vllm_dp, every
    request finished; deterministic; and two ranks take a load that overloads one GPU's engine."""
    from harness.backends import open_backend
    from harness.config import compose
    from harness.metrics import summarize
    from harness.config import plan_experiment
    from harness.search.probe import probe_requests

    words = ["experiment=mistral7b_strict", f"model={MODEL}", "hardware=h100_80g", "scheduler=[vllm_v1]",
             "perf.stack=vllm-0.32", "slo.tbt_s=0.1", "search.num_requests=96"]
    plan = plan_experiment(compose([*words, "parallel=dp2_ep"]))
    assert (plan.deployment.dp, plan.deployment.ep) == (2, True)
    reqs = probe_requests(plan, 12.0)
    run = open_backend(plan.job("vllm_v1", progress=False)).run(reqs)
    split = run.diagnostics["instance_requests"]
    assert sum(split) == 96 and min(split) >= 40 and run.diagnostics["steps"] > 0  # the balancer evens them out
    assert all(r.error is None for r in run.records)
    again = open_backend(plan.job("vllm_v1", progress=False)).run(reqs)
    assert [list(r.token_times_s) for r in run.records] == [list(r.token_times_s) for r in again.records]
    one = plan_experiment(compose([*words, "parallel=tp1"]))
    alone = summarize(open_backend(one.job("vllm_v1", progress=False)).run(reqs).records)
    assert summarize(run.records).scheduling_delay.p50 < alone.scheduling_delay.p50


def test_every_deployment_knob_is_a_perf_key_and_ep_comm_reaches_the_deployment() -> None:
    """The documented `perf.ep_comm=all2all` composes (it was refused as an unknown key: the perf
    schema had drifted from the knobs a deployment takes) and reaches the MoE layer's exchange."""
    import dataclasses

    from harness.config import compose, plan_experiment
    from harness.config.schema import schema_of
    from harness.settings.deployment import DEPLOYMENT_KNOBS, PerfSettings

    assert set(DEPLOYMENT_KNOBS) <= {f.name for f in dataclasses.fields(schema_of(PerfSettings))}
    words = ["experiment=mistral7b_strict", f"model={MODEL}", "hardware=h100_80g", "scheduler=[vllm_v1]",
             "perf.stack=vllm-0.32", "slo.tbt_s=0.1", "parallel=dp2_ep"]
    default = plan_experiment(compose(words)).deployment.timer.deployment
    all2all = plan_experiment(compose([*words, "perf.ep_comm=all2all"])).deployment.timer.deployment
    assert (default.ep_comm, all2all.ep_comm) == ("allgather_reducescatter", "all2all")
