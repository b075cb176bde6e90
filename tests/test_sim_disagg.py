"""Disaggregated prefill/decode in the simulator (issue 17 item 2): prefill instances are exactly
single engines of the prompts routed to them, each request's second token comes after its KV
landed (transfer priced over the named link, queued behind the prefill instance's egress), the
decode instances run decodes only (and recompute what they preempt), and bad input is one line."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engines.core import BlockManager, Engine, Sequence
from engines.perf.hardware import get_topology
from engines.perf.transfer import plan_kv_transfers
from engines.routers import make_router
from engines.schedulers import EngineConfig, DecodeOnlyPolicy, SchedulerConfig, make_engine
from harness.backends import open_backend
from harness.backends.sim import simulate, simulate_disaggregated
from harness.config import compose
from harness.config import plan_experiment
from harness.search.probe import probe_requests
from tests.cli import assert_refused
from tests.test_sim import _requests

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["experiment=yi34b_tp2_strict", "scheduler=[sarathi]", "search.num_requests=128"]
DISAGG = ["cluster.prefill_instances=1", "cluster.decode_instances=1"]


def _plan(*extra):
    return plan_experiment(compose([*SMALL, *DISAGG, *extra]))


def _run(plan, qps=1.5, **changes):
    job = plan.job("sarathi", progress=False)
    if changes:
        job = dataclasses.replace(job, cluster=dataclasses.replace(job.cluster, **changes))
    reqs = probe_requests(plan, qps)
    return reqs, open_backend(job).run(reqs)


def _lands(plan, reqs, records, mode="after_prefill"):
    """When each handed-off request's KV lands on the decode instance, recomputed here: one
    prefill and one decode instance, transfers one at a time in first-token order."""
    (tr,), = plan.disagg.transfers
    tr = dataclasses.replace(tr, mode=mode)
    free, out = 0.0, {}
    for i in sorted((i for i, r in enumerate(reqs) if r.output_len > 1), key=lambda i: (records[i].first_token_s, i)):
        rec = records[i]
        start = max(rec.first_token_s if mode == "after_prefill" else rec.first_scheduled_s, free)
        free = out[i] = max(start + tr.seconds(reqs[i].prompt_len),
                            rec.first_token_s + (tr.seconds(reqs[i].prompt_len) / tr.layers if mode == "layerwise" else 0))
    return out


def test_the_prefill_instance_is_a_single_engine_of_the_prompts():
    plan = _plan()
    reqs, run = _run(plan)
    d = plan.disagg.prefill
    alone = simulate([dataclasses.replace(r, output_len=1) for r in reqs],
                     make_engine(EngineConfig(plan.schedulers["sarathi"], d.kv_capacity_tokens, plan.max_model_len, d.block_size)), d.timer)
    for rec, a, spec in zip(run.records, alone, reqs, strict=True):
        assert rec.first_token_s == a.first_token_s and rec.first_scheduled_s == a.first_scheduled_s
        assert rec.completed and len(rec.token_times_s) == spec.output_len == rec.output_len
        assert np.all(np.diff(rec.token_times_s) > 0)


@pytest.mark.parametrize("mode", ["after_prefill", "layerwise"])
def test_the_second_token_comes_after_the_kv_landed(mode):
    plan = _plan(f"cluster.kv_transfer={mode}", "cluster.kv_link=eth100g")  # slow enough that transfers queue
    reqs, run = _run(plan, qps=3.0)
    lands = _lands(plan, reqs, run.records, mode)
    (tr,), = plan.disagg.transfers
    queued = [i for i in lands if lands[i] - tr.seconds(reqs[i].prompt_len) > run.records[i].first_token_s + 1e-9]
    assert len(queued) > 5  # the egress link's queue is exercised
    gaps = []
    for i, when in lands.items():
        second = run.records[i].token_times_s[1]
        assert second > when
        gaps.append(second - run.records[i].first_token_s)
    # the decode instance starts a decode within about one iteration of the landing, not later
    decode_iteration = plan.disagg.decode.timer.batch_times(np.ones(64, dtype=np.int64), np.full(64, 4096))
    late = [run.records[i].token_times_s[1] - lands[i] for i in lands]
    assert np.median(late) < 2 * float(decode_iteration)
    assert run.diagnostics["kv_transfer_max_s"] >= run.diagnostics["kv_transfer_mean_s"] > 0
    assert run.diagnostics["decode_instance_requests"] == [len(lands)]


def test_a_faster_link_and_layerwise_sends_shrink_the_gap():
    plan = _plan()
    (tr,), = plan.disagg.transfers
    assert tr.link.name == "pcie4"  # paper-a100: the decode instance is the other NVLink pair of the node
    tbt = {}
    for link, mode in (("pcie4", "after_prefill"), ("eth100g", "after_prefill"), ("pcie4", "layerwise")):
        p = _plan(f"cluster.kv_link={link}", f"cluster.kv_transfer={mode}")
        reqs, run = _run(p, qps=3.0)
        tbt[link, mode] = np.mean([r.token_times_s[1] - r.first_token_s for r in run.records if r.output_len > 1])
    assert tbt["pcie4", "layerwise"] < tbt["pcie4", "after_prefill"] < tbt["eth100g", "after_prefill"]


def test_two_by_two_with_least_outstanding_spreads_both_roles_and_is_deterministic():
    plan = plan_experiment(compose([*SMALL, "cluster.prefill_instances=2", "cluster.decode_instances=2",
                                    "cluster.router=least_outstanding"]))
    reqs, a = _run(plan, qps=4.0)
    _, b = _run(plan, qps=4.0)
    assert all(min(a.diagnostics[f"{role}_instance_requests"]) > 0 for role in ("prefill", "decode"))
    assert sum(a.diagnostics["prefill_instance_requests"]) == len(reqs)
    for x, y in zip(a.records, b.records, strict=True):
        np.testing.assert_array_equal(x.token_times_s, y.token_times_s)
    # four tp2 instances on 4-GPU nodes: by role, every KV crosses the nodes; interleaved, p_k -> d_k stays inside
    assert {t.link.name for row in plan.disagg.transfers for t in row} == {"eth100g"}
    mixed = plan_experiment(compose([*SMALL, "cluster.prefill_instances=2", "cluster.decode_instances=2",
                                     "cluster.placement=interleaved"])).disagg.transfers
    assert [[t.link.name for t in row] for row in mixed] == [["pcie4", "eth100g"], ["eth100g", "pcie4"]]


def test_a_decode_instance_decodes_arrivals_and_recomputes_what_it_preempts():
    block = 4
    engine = Engine(DecodeOnlyPolicy(max_num_seqs=8, token_budget=16), BlockManager(12, block, watermark=0.0), 64)
    seqs = [Sequence(i, 10, 12) for i in range(3)]
    for s in seqs:
        s.arrive_prefilled()
        engine.add(s)
    saw_recompute = False
    for _ in range(200):
        batch = engine.schedule()
        if batch is None:
            break
        # arrivals join as decodes: the only prefill tokens are recomputes of preempted requests
        for s, n, pre in zip(batch.seqs, batch.new_tokens, batch.is_prefill):
            assert pre == (s.num_preemptions > 0 and s.num_computed < s.prefill_target)
            saw_recompute |= pre
            assert n == 1 or pre
        engine.complete(batch)
    assert not engine.has_unfinished and saw_recompute
    assert all(s.num_generated == 12 for s in seqs)
    with pytest.raises(ValueError, match="arrive prefilled"):
        Sequence(9, 5, 1).arrive_prefilled()


def test_a_time_limit_cuts_off_loudly():
    plan = _plan()
    reqs, run = _run(plan, qps=3.0)
    limit = float(np.median([r.finished_s for r in run.records]))
    job = dataclasses.replace(plan.job("sarathi", progress=False), time_limit_s=limit)
    cut = open_backend(job).run(reqs).records
    unfinished = [r for r in cut if not r.completed]
    assert unfinished and all(r.error == "unfinished at time limit" for r in unfinished)
    assert all(len(r.token_times_s) < r.output_len for r in unfinished)


def test_the_transfer_prices_kv_bytes_over_the_lanes():
    from engines.perf import Deployment
    tp2 = Deployment.create(model="yi-34b", gpu="a100-80g-pcie", tp=2)
    tp4 = Deployment.create(model="yi-34b", gpu="a100-80g-pcie", tp=4)
    topo = get_topology(None, tp2.gpu)
    (t22,), = plan_kv_transfers(tp2, tp2, 1, 1, topo, link="pcie4")
    (t42,), = plan_kv_transfers(tp4, tp2, 1, 1, topo, link="pcie4")
    assert t22.lane_bytes_per_token == tp2.model.kv_bytes_per_token / 2 == t42.lane_bytes_per_token
    one = t22.seconds(1)
    assert t22.seconds(4001) - one == pytest.approx(4000 * t22.lane_bytes_per_token / t22.link.p2p_bandwidth)


@pytest.mark.parametrize("args,message", [
    (["cluster.prefill_instances=2"], "needs at least one instance of each role"),
    (["cluster.decode_instances=1", "cluster.prefill_instances=0"], "needs at least one instance of each role"),
    ([*DISAGG, "cluster.kv_link=ib-hdr"], "topology paper-a100 has no such link"),
    ([*DISAGG, "cluster.kv_transfer=teleport"], "unknown kv_transfer 'teleport'"),
    ([*DISAGG, "cluster.placement=random"], "unknown placement 'random'"),
    ([*DISAGG, "cluster.instances=2"], "leave instances=1"),
    ([*DISAGG, "experiment=llama2_70b_tp4pp2_strict", "cluster.decode_tp=1", "cluster.decode_pp=1"],
     "a decode instance: llama2-70b on 1x"),
    ([*DISAGG, "backend=endpoint", "backend.base_url=http://127.0.0.1:9/v1"], "only backend=sim and backend=live"),
])
def test_bad_disaggregation_input_one_line_exit_2_nothing_written(tmp_path, args, message):
    base = [a for a in SMALL if not (a.startswith("experiment=") and any(b.startswith("experiment=") for b in args))]
    assert_refused(tmp_path, [*base, *args], message)


def test_a_disaggregated_run_is_saved_and_loaded_as_its_own_cell(tmp_path):
    from harness.analysis.loader import load_results
    p = subprocess.run([sys.executable, "-m", "harness", *SMALL, *DISAGG, f"results_dir={tmp_path}",
                        "search.fixed_qps=2", "search.num_requests=64", "cluster.decode_tp=4"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "1 prefill (tp2) + 1 decode (tp4) instances" in p.stdout
    (summary,) = tmp_path.glob("*/*/summary.json")
    saved = json.loads(summary.read_text())
    cluster = saved["cluster"]
    assert saved["num_gpus"] == 6 and cluster["prefill_instances"] == 1 and cluster["decode_tp"] == 4
    runs, _ = load_results(tmp_path)
    row = runs[["num_gpus", "layout"]].to_dict("records")
    assert row == [{"num_gpus": 6, "layout": cluster["layout"]}]


def test_simulate_disaggregated_refuses_a_role_without_engines():
    reqs = _requests([(5, 3)], 1.0, 0)
    sc = SchedulerConfig("sarathi")
    with pytest.raises(ValueError, match="at least one engine"):
        simulate_disaggregated(reqs, ([], [], 1), ([make_engine(EngineConfig(sc, 4096, 512, role="decode"))], [None], 1), [[]],
                               (make_router("round_robin"), make_router("round_robin")))


def test_the_decode_router_is_its_own():
    """cluster.decode_router routes the handoffs; cluster.router the arrivals."""
    plan = plan_experiment(compose([*SMALL, "cluster.prefill_instances=1", "cluster.decode_instances=3",
                                    "cluster.router=least_outstanding", "cluster.decode_router=round_robin"]))
    reqs, run = _run(plan, qps=4.0)
    handed = sum(r.output_len > 1 for r in reqs)
    assert sorted(run.diagnostics["decode_instance_requests"]) == sorted(handed // 3 + (k < handed % 3) for k in range(3))
    _, other = _run(plan, qps=4.0, decode_router="least_outstanding")
    assert other.diagnostics["decode_instance_requests"] != run.diagnostics["decode_instance_requests"]
