"""Autoscaling in the simulator (issue 39 part 3): replicas started and drained during a run by a
named policy (engines/routers/autoscale.py), driven by diurnal arrivals; cold starts from weight
bytes over a load bandwidth; drains; GPU-hours; bad input refused."""
from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engines.routers import InstanceState, RouteRequest, least_outstanding, make_router
from engines.routers.autoscale import ScalePolicy, ScaleSignals, desired_replicas, drain_choice
from harness.backends.scaling import ScalePlan
from harness.settings.autoscale import AutoscaleSettings
from harness.backends.sim import simulate_cluster
from harness.backends.sim.autoscale import simulate_autoscaled
from harness.commands.scaling_report import MAX_ROWS
from harness.config import compose
from harness.records import RequestSpec
from harness.config import plan_experiment
from harness.workload.arrivals import diurnal
from tests.cli import assert_refused
from tests.policy_workloads import build
from tests.test_sim_cluster import same

ROOT = Path(__file__).resolve().parent.parent
PERIOD, PEAK = 400.0, 200.0  # a day compressed to 400 s: the trough at 0 and 400, the peak at 200


class SlowTimer:
    """20 ms an iteration plus 10 us a token: a replica of 16 sequences serves about 8 requests
    of 100 output tokens a second, so the diurnal load below needs several at its peak."""

    def batch_times(self, new_tokens, context_lens):
        return 0.02 + 1e-5 * np.sum(np.asarray(new_tokens, dtype=np.int64), axis=-1)

    def pp_send_time(self, num_tokens):
        return 0.0


def replica():
    return build("sarathi", 256, 16, 16384, 512), SlowTimer()


def day(n=2400, rate=6.0, seed=0):
    arrivals = diurnal(rate, n, seed, amplitude=0.8, period_s=PERIOD, peak_s=PEAK)
    lengths = np.random.default_rng(seed).integers(50, 200, size=(n, 2))
    return [RequestSpec(i, float(a), int(p), int(o)) for i, (a, (p, o)) in enumerate(zip(arrivals, lengths))]


def plan(policy="queue", lo=1, hi=4, cold=5.0, interval=10.0, initial=1, up=None, down=None):
    return ScalePlan(ScalePolicy(policy, lo, hi, up, down), initial, interval, interval, cold, tbt_s=0.1, ttft_s=2.0,
                     gpus_per_replica=2, gpu_hour_usd=3.0)


def scaled(p, requests=None, router="least_outstanding"):
    stats: dict = {}
    records = simulate_autoscaled(requests or day(), replica, make_router(router), p, stats=stats)
    return records, stats["autoscale"]


@pytest.fixture(scope="module")
def queue_day():
    return scaled(plan(up=8, down=3, cold=15.0))


def test_diurnal_scales_up_at_the_peak_and_down_at_the_trough_within_bounds(queue_day):
    records, a = queue_day
    assert all(r.error is None for r in records)
    for d in a["decisions"]:
        assert 1 <= d["serving"] + d["warming"] <= 4 and 1 <= d["desired"] <= 4
    serving = {d["time_s"]: d["serving"] for d in a["decisions"]}
    near_peak = max(n for t, n in serving.items() if abs(t - PEAK) <= 40)
    assert near_peak == 4  # the peak needs max
    assert any(d["warming"] for d in a["decisions"])  # a 15 s cold start outlasts a 10 s interval
    assert serving[10.0] == 1 and min(n for t, n in serving.items() if t >= 350) == 1  # both troughs: one replica
    assert any(r["drain_s"] is not None for r in a["replicas"])  # the way down drained replicas


def test_a_new_replica_serves_nothing_before_its_cold_start(queue_day):
    _, a = queue_day
    late = [r for r in a["replicas"] if r["started_s"] > 0]
    assert late
    for r in late:
        assert r["ready_s"] == pytest.approx(r["started_s"] + 15.0)
        assert r["first_request_s"] is None or r["first_request_s"] >= r["ready_s"]


def test_the_cold_start_is_weight_bytes_over_the_load_bandwidth(tmp_path):
    cfg = compose(["experiment=yi34b_tp2_strict", "scheduler=[sarathi]", "search.num_requests=16", "arrival=diurnal",
                   "cluster.autoscale.policy=kv", "cluster.autoscale.load_gbps=2.5", "cluster.autoscale.startup_s=3",
                   f"results_dir={tmp_path}"])
    experiment = plan_experiment(cfg)
    d = experiment.deployment.perf.deployment
    per_gpu = max(d.model.stage_weight_bytes_per_gpu(2, 1, d.weight_bytes_per_param))
    assert 30e9 < per_gpu < 40e9  # Yi-34B's 68 GB of BF16 weights over TP2
    job = experiment.job("sarathi")
    assert job.autoscale.cold_start_s == pytest.approx(per_gpu / 2.5e9 + 3)
    assert job.autoscale.gpus_per_replica == 2 and job.autoscale.tbt_s == experiment.slo.tbt_s
    assert AutoscaleSettings(policy="kv", cold_start_s=42.0).cold_start(per_gpu) == 42.0


def test_draining_replicas_get_no_new_requests_and_finish_their_own(queue_day):
    records, a = queue_day
    drained = [r for r in a["replicas"] if r["drain_s"] is not None]
    assert drained
    for r in drained:
        if r["requests"]:
            assert r["last_request_s"] < r["drain_s"]
        assert r["end_s"] >= r["drain_s"]
    assert all(not math.isnan(r.finished_s) for r in records)  # everything routed finished, drained or not


class WritingDown:
    """least_outstanding, writing down the replica each request went to (its instance id)."""

    name = "least_outstanding"
    needs_state = True
    needs_request = needs_cache = False

    def __init__(self) -> None:
        self.replica_of: list[int] = []  # by arrival order

    def choose(self, states: list[InstanceState], request: RouteRequest | None = None) -> int:
        k = least_outstanding(states)
        self.replica_of.append(states[k].instance_id)
        return k


def test_a_drained_replica_costs_gpu_hours_until_its_last_request_finishes():
    """Told to drain, a replica still holds its GPUs while its requests run: it is retired when the
    last of them finishes (or at once, holding none), and the run's GPU-hours integrate that."""
    reqs = day()
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(reqs, reqs[1:]))  # arrival order is input order
    router, stats = WritingDown(), {}
    records = simulate_autoscaled(reqs, replica, router, plan(up=8, down=3, cold=15.0), stats=stats)
    a = stats["autoscale"]
    last_finish: dict[int, float] = {}
    for rec, k in zip(records, router.replica_of):
        last_finish[k] = max(last_finish.get(k, 0.0), rec.finished_s)
    drained = [(k, r) for k, r in enumerate(a["replicas"]) if r["drain_s"] is not None]
    assert any(last_finish.get(k, 0.0) > r["drain_s"] for k, r in drained)  # some drained with work to finish
    ends = []
    for k, r in enumerate(a["replicas"]):
        end = a["end_s"] if r["drain_s"] is None else max(r["drain_s"], last_finish.get(k, r["drain_s"]))
        assert r["end_s"] == pytest.approx(end, abs=1e-9), (k, r)
        ends.append(end)
    held = sum(end - r["started_s"] for end, r in zip(ends, a["replicas"]))
    assert a["gpu_hours"] == pytest.approx(held * 2 / 3600, rel=1e-9)


def test_nothing_is_added_or_removed_while_a_replica_warms(queue_day):
    """The cold start is the cooldown: a decision taken while a replica warms keeps the fleet as it
    is, however far over or under its thresholds the signal is (and the rule alone says the same)."""
    _, a = queue_day
    warm = [d for d in a["decisions"] if d["warming"]]
    assert any(d["signal"] > 8 for d in warm)  # a decision that would have added, had nothing warmed
    assert all(d["desired"] == d["serving"] + d["warming"] for d in warm)
    rule = ScalePolicy("queue", 1, 4, 4, 1)
    assert desired_replicas(rule, ScaleSignals(1, 1, 100, 0.0)) == 2  # over `up`: no third replica yet
    assert desired_replicas(rule, ScaleSignals(2, 1, 0, 0.0)) == 3  # under `down`: none removed yet


def test_gpu_hours_are_the_integral_of_replicas_over_time(queue_day):
    _, a = queue_day
    events = sorted([(r["started_s"], 1) for r in a["replicas"]] + [(r["end_s"], -1) for r in a["replicas"]])
    held, count, last = 0.0, 0, 0.0
    for t, step in events:  # the step function of replicas held, integrated
        held += count * (t - last)
        count, last = count + step, t
    assert count == 0
    assert a["gpu_hours"] == pytest.approx(held * 2 / 3600, rel=1e-12)
    assert sum(w["gpu_hours"] for w in a["windows"]) == pytest.approx(a["gpu_hours"], rel=1e-9)
    assert a["cost_usd"] == pytest.approx(a["gpu_hours"] * 3.0)
    assert a["windows"][-1]["start_s"] < a["end_s"] <= a["windows"][-1]["start_s"] + 10.0
    assert all(d["time_s"] <= a["end_s"] for d in a["decisions"])  # none after the last finish
    assert all(r["drain_s"] is None or r["drain_s"] <= r["end_s"] for r in a["replicas"])


def test_a_fleet_that_cannot_scale_is_the_fixed_cluster_exactly():
    reqs = day(600)
    fixed = simulate_cluster(reqs, [replica()[0] for _ in range(2)], [SlowTimer()] * 2, make_router("least_outstanding"))
    records, a = scaled(plan(lo=2, hi=2, initial=2), reqs)
    for x, y in zip(fixed, records):
        same(x, y)
    assert len(a["replicas"]) == 2


def session_replica():
    from tests.test_sim_sessions import _engine
    return _engine("sarathi", 4096), SlowTimer()


def session_day(n=400, rate=6.0, seed=0):
    """Conversations (turns released by answers) starting on the compressed day's curve."""
    from harness.workload import requests_at_rate
    from tests.test_sim_sessions import _sessions
    arrival = {"name": "diurnal", "amplitude": 0.8, "period_s": PERIOD, "peak_s": PEAK}
    return requests_at_rate(_sessions(n, seed, think=0.5), arrival, rate, seed)


def test_sessions_on_a_fleet_that_cannot_scale_are_the_fixed_clusters_exactly():
    reqs = session_day(200)
    engines = [session_replica()[0] for _ in range(2)]
    fixed = simulate_cluster(reqs, engines, [SlowTimer()] * 2, make_router("least_outstanding"))
    stats: dict = {}
    records = simulate_autoscaled(reqs, session_replica, make_router("least_outstanding"), plan(lo=2, hi=2, initial=2),
                                  stats=stats)
    for x, y in zip(fixed, records):
        same(x, y)
    assert sum(r.cached_tokens for r in records) > 0 and len(stats["autoscale"]["replicas"]) == 2


def test_sessions_scale_up_and_down_and_every_turn_is_answered():
    reqs = session_day(2400, rate=6.0)  # sessions starting over the whole compressed day (432 s)
    stats: dict = {}
    records = simulate_autoscaled(reqs, session_replica, make_router("least_outstanding"),
                                  plan(up=3, down=1, cold=15.0), stats=stats)
    a = stats["autoscale"]
    assert all(r.completed for r in records) and len(records) == len(reqs)
    fleet = [d["serving"] + d["warming"] for d in a["decisions"]]
    assert max(fleet) > 1 and fleet[-1] < max(fleet)  # up for the peak, down after it
    for r in a["replicas"]:  # nothing routed to a replica before it served or after it drained
        if r["first_request_s"] is not None:
            assert r["ready_s"] <= r["first_request_s"]
            assert r["drain_s"] is None or r["last_request_s"] < r["drain_s"]


@pytest.mark.parametrize("router", ["session_affinity", "prefix_aware", "prefix_exact"])
def test_a_cache_aware_router_on_a_fleet_that_cannot_scale_is_the_fixed_clusters_exactly(router):
    reqs = session_day(200)
    engines = [session_replica()[0] for _ in range(2)]
    fixed = simulate_cluster(reqs, engines, [SlowTimer()] * 2, make_router(router))
    records = simulate_autoscaled(reqs, session_replica, make_router(router), plan(lo=2, hi=2, initial=2))
    for x, y in zip(fixed, records):
        same(x, y)


def test_prefix_aware_remembers_each_replica_by_its_id():
    """What it sent a replica stays that replica's when another leaves (its index is by id, not
    by position), and a replica started has an empty one."""
    r = make_router("prefix_aware", cache_threshold=0.0)
    two = [InstanceState(0, 0, 1, instance_id=i) for i in (0, 1)]
    assert r.choose(two, RouteRequest(None, (11, 12, 13))) == 0  # no match: least loaded, first
    survivors = [InstanceState(0, 0, 1, instance_id=i) for i in (1, 0)]  # ids at other positions
    assert r.matched(survivors, (11, 12, 13)) == [0, 3]
    assert r.matched([InstanceState(0, 0, 1, instance_id=2)], (11, 12)) == [0]


def test_session_affinity_keeps_conversations_home_while_the_fleet_scales():
    """The ring is over the replicas' ids: a replica started takes some sessions, the others keep
    theirs; so a scaled fleet behind affinity finds more of its prompts cached than behind load."""
    r = make_router("session_affinity")
    keys = [f"conversation {i}" for i in range(400)]
    for members, grown in (((0, 1), (0, 1, 2)), ((0, 2, 3), (0, 2, 3, 5))):
        before = [members[r.owner(k, len(members), members)] for k in keys]
        after = [grown[r.owner(k, len(grown), grown)] for k in keys]
        moved = [(b, a) for b, a in zip(before, after) if b != a]
        assert moved and all(a == grown[-1] for _, a in moved)  # only to the new replica
    states = [InstanceState(0, 0, 1, instance_id=i) for i in (0, 2)]  # replica 1 drained: the ring is 0 and 2's
    assert [r.choose(states, RouteRequest(k)) for k in keys] == [r.owner(k, 2, (0, 2)) for k in keys]
    assert [r.choose(states, RouteRequest(k)) for k in keys] != [r.owner(k, 2) for k in keys]
    seen: list[tuple] = []

    class Spy(type(r)):  # what the router is shown of the scaled fleet
        def choose(self, states, request=None):
            seen.append(tuple(s.instance_id for s in states))
            return super().choose(states, request)
    reqs = session_day(2400, rate=6.0)
    cached = {}
    for router in (Spy(), make_router("least_outstanding")):
        stats: dict = {}
        records = simulate_autoscaled(reqs, session_replica, router, plan(up=3, down=1, cold=15.0), stats=stats)
        started = len(stats["autoscale"]["replicas"])
        assert all(r.completed for r in records)
        assert max(d["serving"] for d in stats["autoscale"]["decisions"]) > 1
        cached[router.name] = sum(r.cached_tokens for r in records)
    assert all(list(ids) == sorted(set(ids)) and set(ids) <= set(range(started)) for ids in seen)  # serving ones, by start
    assert cached["session_affinity"] > 1.2 * cached["least_outstanding"], cached


@pytest.mark.parametrize("policy", ["kv", "slo"])
def test_the_other_policies_scale_within_bounds(policy):
    p = plan(policy, hi=3, up=0.15 if policy == "kv" else None, down=0.05 if policy == "kv" else None)
    if policy == "slo":  # a TBT limit that a decode-only iteration meets and one with a prefill chunk misses
        p = dataclasses.replace(p, tbt_s=0.0205)
    _, a = scaled(p, day(1200))
    assert max(d["serving"] + d["warming"] for d in a["decisions"]) > 1
    assert all(1 <= d["serving"] + d["warming"] <= 3 for d in a["decisions"])
    assert all(w["attainment"] is None or 0 <= w["attainment"] <= 1 for w in a["windows"])


def test_the_decision_rule():
    q = ScalePolicy("queue", 1, 3, 4, 1)
    assert desired_replicas(q, ScaleSignals(2, 0, 10, 0.0)) == 3  # 5 a replica > 4
    assert desired_replicas(q, ScaleSignals(3, 0, 30, 0.0)) == 3  # at max
    assert desired_replicas(q, ScaleSignals(2, 1, 30, 0.0)) == 3  # warming: hold
    assert desired_replicas(q, ScaleSignals(2, 0, 1, 0.0)) == 1
    assert desired_replicas(ScalePolicy("slo", 1, 3), ScaleSignals(1, 0, 0, 0.0, 0.9)) == 2
    assert desired_replicas(ScalePolicy("slo", 1, 3), ScaleSignals(2, 0, 0, 0.0, None)) == 2  # nothing to judge
    assert drain_choice([3, 1, 1]) == 2


@pytest.mark.parametrize("args, message", [
    (["cluster.autoscale.policy=queue", "cluster.autoscale.min_replicas=3", "cluster.autoscale.max_replicas=2"],
     "min_replicas 3 > max_replicas 2"),
    (["cluster.autoscale.policy=vibes"], "unknown autoscale policy 'vibes'"),
    (["cluster.autoscale.policy=queue", "cluster.autoscale.min_replicas=0"], "min_replicas must be >= 1"),
    (["cluster.autoscale.policy=queue", "cluster.autoscale.cold_start_s=-1"], "cold_start_s must be a finite number >= 0"),
    (["cluster.autoscale.policy=queue", "backend=live"], "only backend=sim scales a fleet"),
])
def test_bad_input_is_refused_in_one_line(tmp_path, args, message):
    assert_refused(tmp_path, ["experiment=mistral7b_strict", "scheduler=[sarathi]", "arrival=diurnal",
                              "search.fixed_qps=1", *args], message)


def test_the_table_is_short_and_the_run_saves_every_window(tmp_path):
    p = subprocess.run([sys.executable, "-m", "harness", "experiment=mistral7b_strict", "scheduler=[sarathi]",
                        "arrival=diurnal", "arrival.period_s=300", "arrival.peak_s=150", "search.fixed_qps=2",
                        "search.num_requests=300", "cluster.autoscale.policy=queue", "cluster.autoscale.interval_s=10",
                        "cluster.autoscale.up_threshold=2", "cluster.autoscale.down_threshold=1",
                        f"results_dir={tmp_path}", "progress=false"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert p.returncode == 0, p.stderr
    saved = json.loads(next(tmp_path.glob("*/*/summary.json")).read_text())
    a = saved["schedulers"]["sarathi"]["probes"][0]["autoscale"]
    assert len(a["windows"]) > MAX_ROWS and a["policy"] == "queue"
    assert saved["cluster"]["autoscale"]["policy"] == "queue"
    table = p.stdout[p.stdout.index("autoscaled by queue in [1, 8]"):].splitlines()
    assert table[-2].startswith("  total ") and len(table) <= MAX_ROWS + 4  # title, header, rows, total, results
    assert f"total {a['gpu_hours']:.3f} GPU-hours" in table[-2]
