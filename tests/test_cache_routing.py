"""Cache-aware routers (issue 39 item 1), rule by rule: session affinity's consistent hashing, the
prefix routers' rule (balance threshold, then best prefix match over a threshold, then load), the
approximate router's index, the exact router's reading of the engine's cache; the simulator's
cluster with sessions; the live router's view of a request and its /metrics; bad knobs."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engines.core import PrefixCachingBlockManager, Sequence, TokenIds
from engines.routers import InstanceState, RouteRequest, make_router, router_knobs
from engines.routers.cache_aware import pick
from engines.schedulers import EngineConfig, make_engine
from harness.backends.live.prometheus import parse_counters
from harness.backends.sim import simulate, simulate_cluster
from harness.records import RequestSpec, session_keys
from harness.workload import load_workload, requests_at_rate
from tests.cli import assert_refused
from tests.test_live_sessions import SCHED, SESSIONS, _Scaled
from tests.test_sim_cluster import SMALL, same


ROOT = Path(__file__).resolve().parent.parent


def S(outstanding: int, cached: int = 0) -> InstanceState:
    return InstanceState(outstanding, 0, 0, cached)


# -- session affinity ----------------------------------------------------------------------------
def test_a_session_always_goes_to_one_instance_whatever_the_load():
    r = make_router("session_affinity")
    first = r.choose([S(0)] * 4, RouteRequest("session-3"))
    for loads in ([9, 0, 0, 0], [0, 9, 9, 9], [5, 5, 5, 5]):
        assert r.choose([S(n) for n in loads], RouteRequest("session-3")) == first
    # no session: fewest outstanding
    assert r.choose([S(3), S(1), S(1)], RouteRequest(None)) == 1 and r.choose([S(3), S(1)]) == 1


def test_adding_an_instance_moves_only_the_sessions_it_takes():
    r = make_router("session_affinity")
    keys = [f"session-{i}" for i in range(2000)]
    for n in (2, 4, 8):
        moved = [k for k in keys if r.owner(k, n) != r.owner(k, n + 1)]
        assert all(r.owner(k, n + 1) == n for k in moved)  # every moved session went to the new instance
        assert 0.4 / (n + 1) < len(moved) / len(keys) < 1.6 / (n + 1)  # about its share of the ring
        counts = [sum(r.owner(k, n) == i for k in keys) for i in range(n)]
        assert min(counts) > 0.5 * len(keys) / n  # virtual nodes spread the sessions


def test_placement_is_the_same_in_every_process():
    """The simulator and the live router are different processes: Python's str hash is salted per
    process, the ring's hash must not be."""
    code = ("from engines.routers import make_router; r = make_router('session_affinity'); "
            "print([r.owner(f'session-{i}', 5) for i in range(50)])")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}).stdout for seed in ("1", "2")}
    r = make_router("session_affinity")
    assert outs == {f"{[r.owner(f'session-{i}', 5) for i in range(50)]}\n"}


# -- the prefix routers' rule --------------------------------------------------------------------
def test_out_of_balance_goes_by_load_whatever_the_cache():
    # 70 vs 2 outstanding: over 64 apart and over 1.5x: the least loaded, though instance 0 holds all
    assert pick([S(70), S(2)], [10, 0], 10, 64, 1.5, 0.3) == (1, "balance")
    # both conditions are needed: 220 vs 150 is 70 apart but under 1.5x: the cache wins
    assert pick([S(220), S(150)], [10, 0], 10, 64, 1.5, 0.3) == (0, "cache")
    assert pick([S(65), S(1)], [10, 0], 10, 64, 1.5, 0.3) == (0, "cache")  # 64 apart: not over 64


def test_balanced_goes_to_the_best_match_over_the_threshold_else_by_load():
    assert pick([S(5), S(0), S(0)], [2, 8, 8], 10, 64, 1.5, 0.3) == (1, "cache")  # tie on 8: fewer outstanding, lower index
    assert pick([S(0), S(5), S(0)], [2, 8, 8], 10, 64, 1.5, 0.3) == (2, "cache")
    assert pick([S(0), S(1)], [0, 3], 10, 64, 1.5, 0.3) == (0, "load")  # 3 of 10 is not over 0.3
    assert pick([S(1), S(0)], [4, 0], 10, 64, 1.5, 0.3) == (0, "cache")
    assert pick([S(1), S(0)], [0, 0], 0, 64, 1.5, 0.3) == (1, "load")  # no full block: by load


def test_prefix_aware_remembers_what_it_sent_and_only_leading_runs_count():
    r = make_router("prefix_aware", cache_threshold=0.0)
    assert r.choose([S(0), S(0)], RouteRequest(None, (1, 2, 3))) == 0
    assert r.choose([S(1), S(0)], RouteRequest(None, (1, 2, 4))) == 0  # shares 2 of 3 leading blocks
    assert r.choose([S(0), S(1)], RouteRequest(None, (9, 2, 3))) == 0  # a middle match is no prefix: load
    assert r.choose([S(1), S(0)], RouteRequest(None, (8, 2, 3))) == 1
    assert r.decisions == {"balance": 0, "cache": 1, "load": 3}


def test_prefix_aware_index_is_lru_bounded():
    r = make_router("prefix_aware", index_blocks=3, cache_threshold=0.0)
    r.choose([S(0), S(0)], RouteRequest(None, (1, 2)))  # instance 0: 1, 2
    r.choose([S(1), S(0)], RouteRequest(None, (7,)))  # instance 1: 7
    r.choose([S(0), S(5)], RouteRequest(None, (3, 4)))  # instance 0: 1, 2, 3, 4 -> 2, 3, 4 (1 evicted)
    assert list(r.index[0]) == [2, 3, 4]
    assert r.choose([S(1), S(0)], RouteRequest(None, (1, 2))) == 1  # its head is gone: by load


def test_prefix_exact_reads_the_instances_caches():
    r = make_router("prefix_exact")
    assert r.choose([S(0, 1), S(3, 9)], RouteRequest(None, (1, 2, 3, 4))) == 1
    assert r.choose([S(0, 1), S(3, 0)], RouteRequest(None, (1, 2, 3, 4))) == 0  # 1 of 4 is not over 0.3: load


def test_the_engines_cache_answers_without_moving_anything():
    bm = PrefixCachingBlockManager(32, 4)
    seq = Sequence(0, 12, 2, TokenIds(range(12), 4))
    bm.admit(seq)
    seq.num_computed = 12
    bm.free(seq)
    stats = (bm.stats.queries, bm.stats.hits, bm.evictable_order())
    hashes = [TokenIds(list(range(12)) + [99] * 4, 4).block_hash(i) for i in range(4)]
    other = [TokenIds([99] + list(range(1, 16)), 4).block_hash(i) for i in range(4)]  # differs in its first token
    assert bm.cached_prefix(hashes) == 3 and bm.cached_prefix(other) == 0 and bm.cached_prefix([]) == 0
    assert bm.cached_prefix([12345, *hashes[1:3]]) == 0  # a leading run only: cached blocks behind a miss count nothing
    assert (bm.stats.queries, bm.stats.hits, bm.evictable_order()) == stats


# -- knobs ----------------------------------------------------------------------------------------
def test_knobs_are_constructor_parameters_and_bad_ones_are_refused():
    assert router_knobs("session_affinity") == {"virtual_nodes": 64, "without_session": "least_outstanding"}
    assert router_knobs("round_robin") == {}
    for name, knobs, message in (("prefix_aware", {"nope": 1}, "has no knob 'nope'"),
                                 ("prefix_exact", {"index_blocks": 9}, "has no knob 'index_blocks'"),
                                 ("prefix_aware", {"cache_threshold": 1.0}, "cache_threshold must be < 1"),
                                 ("prefix_aware", {"balance_rel_threshold": 0.5}, "balance_rel_threshold must be"),
                                 ("prefix_aware", {"balance_abs_threshold": True}, "balance_abs_threshold must be"),
                                 ("session_affinity", {"virtual_nodes": 0}, "virtual_nodes must be"),
                                 ("session_affinity", {"without_session": "x"}, "without_session must be one of")):
        with pytest.raises(ValueError, match=message):
            make_router(name, **knobs)


@pytest.mark.parametrize("args,message", [
    (["cluster.router=prefix_aware", "cluster.router_options={nope: 1}"], "cluster: router prefix_aware has no knob 'nope'"),
    (["cluster.router=prefix_aware", "cluster.router_options={cache_threshold: 2}"], "cache_threshold must be < 1"),
    (["cluster.router=session_affinity", "cluster.router_options=3"], "router_options must be a mapping"),
])
def test_bad_router_knobs_one_line_exit_2_nothing_written(tmp_path, args, message):
    assert_refused(tmp_path, [*SMALL, "cluster.instances=2", *args], message)


# -- the simulator's cluster with sessions ------------------------------------------------------
def _sessions(n=120, rate=6.0, seed=4, turns=None):
    sessions = SESSIONS if turns is None else {**SESSIONS, "turns": turns}
    return requests_at_rate(load_workload({"name": "t", "max_total_tokens": 4096, "sessions": sessions}, n, seed),
                            {"name": "poisson"}, rate, seed)


def test_session_keys_name_the_first_turn():
    reqs = [RequestSpec(0, 0, 1, 1), RequestSpec(1, 0, 1, 1), RequestSpec(2, 0, 1, 1, after=1),
            RequestSpec(3, 0, 1, 1, after=2)]
    assert session_keys(reqs) == [None, "session-1", "session-1", "session-1"]
    # turns listed before the ones they follow are named by their first turn all the same
    late = [RequestSpec(7, 0, 1, 1, after=6), RequestSpec(6, 0, 1, 1, after=5), RequestSpec(8, 0, 1, 1),
            RequestSpec(5, 0, 1, 1), RequestSpec(9, 0, 1, 1, after=7)]
    assert session_keys(late) == ["session-5", "session-5", None, "session-5", "session-5"]


def test_one_instance_with_sessions_is_the_single_engine_bit_for_bit():
    reqs = _sessions()
    alone = simulate(reqs, make_engine(EngineConfig(SCHED, 1 << 20, 4096, prefix_caching=True)), _Scaled())
    for name in ("least_outstanding", "prefix_exact"):
        cluster = simulate_cluster(reqs, [make_engine(EngineConfig(SCHED, 1 << 20, 4096, prefix_caching=True))], [_Scaled()], make_router(name))
        for a, b in zip(alone, cluster):
            same(a, b)


def test_under_affinity_each_instance_runs_its_sessions_as_a_single_engine_would():
    """Sessions never cross instances under affinity: instance k's records are a single-engine
    run of the sessions placed on k, exactly (the conservative advance routes every release at
    the right time, whatever the other instance is doing)."""
    reqs = _sessions(turns=3)  # every request in a session of 3 (a lone request goes by load)
    keys = session_keys(reqs)
    assert None not in keys
    r = make_router("session_affinity")
    records = simulate_cluster(reqs, [make_engine(EngineConfig(SCHED, 8192, 4096, prefix_caching=True)) for _ in range(2)], [_Scaled()] * 2, r)
    for k in range(2):
        mine = [i for i, key in enumerate(keys) if r.owner(key, 2) == k]
        assert mine
        alone = simulate([reqs[i] for i in mine], make_engine(EngineConfig(SCHED, 8192, 4096, prefix_caching=True)), _Scaled())
        for i, b in zip(mine, alone):
            same(records[i], b)


def test_cache_aware_routing_finds_more_than_load_balancing():
    reqs = _sessions(200, 8.0, 3)

    def rate(name):
        engines = [make_engine(EngineConfig(SCHED, 4096, 4096, prefix_caching=True)) for _ in range(2)]
        simulate_cluster(reqs, engines, [_Scaled()] * 2, make_router(name))
        return sum(e.blocks.stats.hits for e in engines) / sum(e.blocks.stats.queries for e in engines)
    rr = rate("round_robin")
    assert all(rate(name) > rr + 0.05 for name in ("session_affinity", "prefix_aware", "prefix_exact"))


# -- the live router's view ----------------------------------------------------------------------
def test_the_live_router_sees_the_session_and_the_prompts_block_hashes():
    from engines.server.router.fleet import Pool, render_metrics, route_request
    ids = list(range(40))
    req = route_request({"prompt": ids, "user": "session-7"}, 16)
    assert req.session == "session-7"
    assert req.block_hashes == tuple(TokenIds(ids, 16).block_hash(i) for i in range(2))  # as the server's cache hashes
    assert route_request({"prompt": "some text"}, 16) == RouteRequest(None, ())  # no ids: no hashes
    pool = Pool(("http://a", "http://b"), "prefix_aware")
    text = render_metrics(pool, ['engine:prefix_cache_queries_total{model_name="m"} 100\n'
                                 'engine:prefix_cache_hits_total{model_name="m"} 40\n',
                                 "engine:prefix_cache_queries_total 50\nengine:prefix_cache_hits_total 35\n", None])
    assert parse_counters(text) == {"prefix_cache_queries_total": 150.0, "prefix_cache_hits_total": 75.0}
    assert 'router:decisions_total{branch="cache"} 0' in text


def test_knobs_reach_the_live_router_and_decisions_the_simulators_stats():
    from engines.server.router.__main__ import parse_args
    from harness.backends.live import cluster_spec
    from harness.config import compose
    from harness.config import plan_experiment

    cfg = parse_args(["--replica", "http://127.0.0.1:1", "--replica", "http://127.0.0.1:2", "--router", "prefix_aware",
                      "--router-option=cache_threshold=0.5", "--router-option", "index_blocks=4096", "--block-size", "32"])
    assert (cfg.router_options, cfg.block_size) == ((("cache_threshold", 0.5), ("index_blocks", 4096)), 32)
    plan = plan_experiment(compose([*SMALL, "backend=live", "cluster.instances=2", "cluster.router=prefix_exact",
                                    "cluster.router_options={balance_abs_threshold: 8}"]))
    spec = cluster_spec(plan.job("sarathi", progress=False))
    assert (spec.router, spec.router_options) == ("prefix_exact", (("balance_abs_threshold", 8),))
    stats: dict = {}
    reqs = _sessions(60)
    simulate_cluster(reqs, [make_engine(EngineConfig(SCHED, 1 << 20, 4096, prefix_caching=True)) for _ in range(2)], [_Scaled()] * 2,
                     make_router("prefix_aware"), stats=stats)
    assert sum(stats["router_decisions"].values()) == len(reqs) == sum(stats["instance_requests"])


@pytest.mark.parametrize("router", ["least_outstanding", "prefix_exact"])
def test_the_lookahead_changes_nothing(monkeypatch, router):
    """The session loop lets an instance run ahead up to the earliest turn another could release
    (cluster._release_bound); with no lookahead at all (every instance bounded by its own clock)
    every record is the same, bit for bit, for routers that read every instance's state."""
    import harness.backends.sim.cluster as cluster
    reqs = _sessions(150, 9.0, 6)

    def run():
        return simulate_cluster(reqs, [make_engine(EngineConfig(SCHED, 6000, 4096, prefix_caching=True)) for _ in range(3)], [_Scaled()] * 3,
                                make_router(router))
    ahead = run()
    monkeypatch.setattr(cluster, "_release_bound", lambda inst, run, floor: inst.t)
    for a, b in zip(ahead, run()):
        same(a, b)
