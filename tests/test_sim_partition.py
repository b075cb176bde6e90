"""A fleet simulated apart (cluster.workers > 1, issue 39 part 4): when no routing decision reads
an instance's state, every request is routed up front and each instance runs alone in a process
pool; the merged records and diagnostics are exactly the sequential loop's. A router that reads
state (or anything else coupling the instances) is refused with its reason, and the loop runs."""
from __future__ import annotations

import mmap
import os

import numpy as np
import pytest

from engines.core import EngineConfig
from engines.routers import make_router
from engines.schedulers import make_engine
from harness.backends import open_backend
from harness.backends.sim import simulate_cluster
from harness.backends.sim.cache_stats import cache_stats
from harness.backends.sim.keyed_heap import KeyedHeap
from harness.backends.sim.partition import partition_plan, simulate_partitioned
from harness.backends.sim.shared_array import SHM
from harness.config import compose
from harness.records import session_keys
from harness.config import plan_experiment
from harness.search.probe import probe_requests
from tests.cli import assert_refused
from tests.test_cache_routing import _sessions
from tests.test_live_sessions import SCHED, _Scaled
from tests.test_sim_cluster import SMALL, same
from harness.workload import load_workload, requests_at_rate

AFFINITY = {"without_session": "round_robin"}


def _engines(n):
    return [make_engine(EngineConfig(SCHED, 6000, 4096, prefix_caching=True)) for _ in range(n)]


def _both(reqs, name, knobs, n=3, limit=None):
    """(sequential records, its caches' counters), (partitioned records, its caches' counters)."""
    seq_engines, seq_stats = _engines(n), {}
    seq = simulate_cluster(reqs, seq_engines, [_Scaled()] * n, make_router(name, **knobs), time_limit_s=limit,
                           stats=seq_stats)
    plan = partition_plan(reqs, make_router(name, **knobs), n, [1] * n)
    assert not isinstance(plan, str), plan
    part_stats: dict = {}
    part, caches = simulate_partitioned(reqs, _engines(n), [_Scaled()] * n, plan, 2, time_limit_s=limit, caching=True,
                                        stats=part_stats)
    assert part_stats == seq_stats
    assert caches == [cache_stats(e) for e in seq_engines]
    return seq, part


@pytest.mark.parametrize("limit", [None, 12.0, 15.0])  # 15: a turn released after its instance's last start
def test_affinity_with_sessions_apart_is_the_loop_bit_for_bit(limit):
    reqs = _sessions(150, 9.0, 6)
    keys = session_keys(reqs)
    assert None in keys and len(set(keys)) > 10  # lone requests and sessions of several turns
    seq, part = _both(reqs, "session_affinity", AFFINITY, limit=limit)
    assert len(seq) == len(part) == len(reqs)
    for a, b in zip(seq, part):
        same(a, b)
    if limit is not None:
        assert any(r.error for r in seq)  # the limit cut something


def test_round_robin_without_sessions_apart_is_the_loop_bit_for_bit():
    reqs = requests_at_rate(load_workload({"name": "openchat_sharegpt4", "max_total_tokens": 4096}, 90, 2),
                            {"name": "poisson"}, 12.0, 2)
    for a, b in zip(*_both(reqs, "round_robin", {})):
        same(a, b)


@pytest.mark.parametrize("name,knobs,why", [
    ("least_outstanding", {}, "reads the instances' state"),
    ("prefix_exact", {}, "reads the instances' state"),
    ("session_affinity", {}, "without a session by the instances' load"),  # lone requests go by load by default
    ("round_robin", {}, "orders its choices by releases"),  # sessions: releases depend on every instance's finishes
])
def test_a_router_that_reads_state_is_refused_with_its_reason(name, knobs, why):
    assert why in partition_plan(_sessions(60), make_router(name, **knobs), 2, [1, 1])


def test_pipeline_instances_are_refused():
    assert "pipeline" in partition_plan(_sessions(20), make_router("session_affinity", **AFFINITY), 2, [1, 2])


def _fleet(workers, router="session_affinity", knobs="{without_session: round_robin}", sink=None):
    plan = plan_experiment(compose([
        "experiment=mistral7b_strict", "dataset=sharegpt_conversations", "scheduler=[sarathi]",
        "engine.prefix_caching=true", "search.num_requests=80", "max_model_len=16384", "cluster.instances=3",
        f"cluster.router={router}", f"cluster.router_options={knobs}", f"cluster.workers={workers}"]))
    reqs = probe_requests(plan, 3.0)
    with open_backend(plan.job("sarathi", progress=False)) as backend:
        backend.record_sink = sink
        return backend.run(reqs)


def test_the_backend_runs_apart_with_the_same_records_and_diagnostics(capsys):
    one, two = _fleet(1), _fleet(2)
    assert capsys.readouterr().err == "cluster.workers=2: 3 instances in a process pool of 2\n"  # apart: no fallback
    assert one.diagnostics == two.diagnostics and one.diagnostics["prefix_cache"]["hits"] > 0
    for a, b in zip(one.records, two.records):
        same(a, b)
    if os.path.isdir(SHM):  # the token times came through shared memory (mapped), its directory gone after
        assert all(_mapped(r.token_times_s) for r in two.records if len(r.token_times_s))
        assert not [d for d in os.listdir(SHM) if d.startswith(f"sarathi-sim-{os.getpid()}-")]


def _mapped(a) -> bool:
    while isinstance(a, np.ndarray):
        a = a.base
    return isinstance(a, memoryview) and isinstance(a.obj, mmap.mmap)


@pytest.mark.parametrize("workers", [2, 1])  # apart (each instance's records as they come), the loop (at its end)
def test_a_record_sink_gets_every_record_once_and_none_are_returned(workers):
    whole = _fleet(1)
    got: dict[int, object] = {}
    calls = []

    def sink(indices, records):
        assert len(indices) == len(records) and not got.keys() & set(indices)
        got.update(zip(indices, records))
        calls.append(len(records))
    sunk = _fleet(workers, sink=sink)
    assert sunk.records == [] and sunk.diagnostics == whole.diagnostics
    assert len(calls) == (3 if workers > 1 else 1)  # apart: one call an instance, none holding all
    assert sorted(got) == list(range(len(whole.records)))
    for i, r in enumerate(whole.records):
        same(r, got[i])


def test_the_backend_falls_back_to_the_loop_and_says_why(capsys):
    one, two = _fleet(1, "least_outstanding", "{}"), _fleet(2, "least_outstanding", "{}")
    assert "cluster.workers=2: simulating the cluster in one process: router least_outstanding reads" \
        in capsys.readouterr().err
    for a, b in zip(one.records, two.records):
        same(a, b)


def test_bad_workers_one_line_exit_2_nothing_written(tmp_path):
    assert_refused(tmp_path, [*SMALL, "cluster.instances=2", "cluster.workers=0"], "workers must be an integer >= 1")


def test_keyed_heap_least_and_least_but_one():
    h = KeyedHeap()
    for k, key in ((0, 5.0), (1, 3.0), (2, 3.0), (1, 7.0), (1, 3.0)):  # 1 set, changed and set back
        h.set(k, key)
    assert h.least() == (3.0, 1)  # ties: lowest index
    assert h.least_key_except(1, -1.0) == 3.0 and h.least_key_except(2, -1.0) == 3.0
    h.set(2, None)
    assert h.least_key_except(1, -1.0) == 5.0
    h.set(0, None)
    assert h.least_key_except(1, -1.0) == -1.0 and h.least() == (3.0, 1)


def test_records_cross_the_process_boundary_as_columns_and_come_back_the_same():
    """A worker's records go back packed (record_columns.py): after pickling, every field is the
    same value of the same type (reprs equal) and every token time the same double; an error, an
    unstarted record and an empty share survive; a field a column would change is sent as it is."""
    import pickle

    import numpy as np

    from harness.backends.sim.record_columns import RecordColumns, field_column
    from harness.records import RequestRecord

    reqs = requests_at_rate(load_workload({"name": "openchat_sharegpt4", "max_total_tokens": 2048}, 60, 1),
                            {"name": "poisson"}, 30.0, 1)
    records = simulate_cluster(reqs, _engines(1), [_Scaled()], make_router("round_robin"), time_limit_s=3.0)
    assert any(r.error for r in records) and any(r.error is None for r in records)
    back = list(pickle.loads(pickle.dumps(RecordColumns.pack(records))).taken())
    fields = ("request_id", "arrival_s", "prompt_len", "output_len", "first_scheduled_s", "first_token_s",
              "finished_s", "dispatched_s", "num_preemptions", "error", "cached_tokens")
    for a, b in zip(records, back, strict=True):
        assert repr([getattr(a, f) for f in fields]) == repr([getattr(b, f) for f in fields])
        assert b.token_times_s.dtype == np.float64 and a.token_times_s.tobytes() == b.token_times_s.tobytes()
    assert list(RecordColumns.pack([]).taken()) == []
    odd = RequestRecord(1, 0, 5, 2, 0.1, 0.2, 0.3, np.array([0.2, 0.3]))  # an int arrival: a column says 0.0
    assert RecordColumns.pack([odd]) is None
    # As a sequence (what a record sink is handed): each record built as it is read, the same; a field whole
    columns = RecordColumns.pack(records)
    assert len(columns) == len(records)
    for i in (0, 7, len(records) - 1, -1, -len(records)):
        a, b = records[i], columns[i]
        assert repr([getattr(a, f) for f in fields]) == repr([getattr(b, f) for f in fields])
        assert a.token_times_s.tobytes() == b.token_times_s.tobytes()
    with pytest.raises(IndexError):
        columns[len(records)]
    for f in ("request_id", "cached_tokens", "arrival_s", "finished_s", "first_token_s"):
        want = field_column(records, f)  # (from each record)
        got = field_column(columns, f)
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), f


@pytest.mark.parametrize("limit", [None, 12.0])  # 12: turns cut unreleased, requests unfinished
def test_a_run_s_columns_are_its_records_field_for_field(limit):
    """A worker builds its records' columns from the timeline (SimRun.record_columns), without a
    record or an array each: unpacked, they are `records()` (reprs, token bytes), sessions, cut
    turns and a time limit's unfinished requests included; a field a column would change gives None."""
    import math

    import numpy as np

    from harness.backends.sim.cluster import ClusterSessionRun
    from harness.backends.sim.loop import SimRun, step_until
    from harness.backends.sim.timer import fast_timer
    from harness.records import RequestSpec

    reqs = _sessions(150, 9.0, 6)
    run = ClusterSessionRun(reqs, _engines(1)[0], None, None)
    step_until(run, fast_timer(_Scaled()), True, 0.0, limit or math.inf, final=True)
    records = run.records()
    assert limit is None or (any(r.error for r in records) and any(r.first_scheduled_s != r.first_scheduled_s
                                                                    for r in records))
    back = list(run.record_columns().taken())
    fields = ("request_id", "arrival_s", "prompt_len", "output_len", "first_scheduled_s", "first_token_s",
              "finished_s", "dispatched_s", "num_preemptions", "error", "cached_tokens")
    for a, b in zip(records, back, strict=True):
        assert repr([getattr(a, f) for f in fields]) == repr([getattr(b, f) for f in fields])
        assert b.token_times_s.dtype == np.float64 and a.token_times_s.tobytes() == b.token_times_s.tobytes()
    odd = SimRun([RequestSpec(0, 0, 5, 2)], _engines(1)[0], None)  # an int arrival: a column says 0.0
    step_until(odd, fast_timer(_Scaled()), True, 0.0, math.inf, final=True)
    assert odd.record_columns() is None and odd.records()[0].arrival_s == 0


def test_requests_cross_the_process_boundary_as_rows_and_come_back_the_same():
    """A replica's requests go to its worker as tuples of their fields (request_rows.py): after
    pickling, each is equal to what was sent and every field the same type (reprs equal), sessions'
    segments, token ids, text and None fields included."""
    import pickle

    from harness.backends.sim.request_rows import from_rows, to_rows
    from harness.records import RequestSpec

    plan = plan_experiment(compose([
        "experiment=mistral7b_strict", "dataset=agent_transcripts", "scheduler=[sarathi]", "search.num_requests=40"]))
    reqs = probe_requests(plan, 2.0) + [
        RequestSpec(900, 1.5, 3, 2, prompt_token_ids=(5, 6, 7), prompt_text="hi", think_s=0.25),
        RequestSpec(901, 2, 4, 1)]  # an int arrival stays an int
    assert any(r.after is not None and r.prompt_segments for r in reqs)
    back = from_rows(pickle.loads(pickle.dumps(to_rows(reqs))))
    assert back == reqs and [repr(r) for r in back] == [repr(r) for r in reqs]
    assert from_rows(to_rows([])) == []
