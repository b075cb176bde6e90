"""`python -m harness` under a rate-free arrival (closed_loop, at_once): one offline throughput run
per scheduler, no capacity search, in simulation and against a live server alike; what it saves,
what the capacity readers make of it (nothing), and the bad input it refuses in one line."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from engines.core import Sequence
from engines.schedulers import EngineConfig, make_engine
from harness.analysis.loader import load_results
from harness.config import compose
from harness.config import plan_experiment
from tests.cli import ROOT, assert_refused

A6000 = ["model=llama-13b", "hardware=rtx_a6000", "perf.stack=sarathi-2023", "backend.gpu_memory_utilization=1.0",
         "dataset=synthetic_pd", "dataset.synthetic.pd_ratio=50", "progress=false"]
RUN = [*A6000, "arrival=closed_loop", "arrival.concurrency=6", "scheduler=[decode_maximal,orca_worst]",
       "scheduler.decode_maximal.max_num_seqs=6", "scheduler.orca_worst.max_num_seqs=6", "search.num_requests=30",
       "offline.baseline=orca_worst", "name=offline_test"]


def _harness(args, tmp_path):
    p = subprocess.run([sys.executable, "-m", "harness", *args, f"results_dir={tmp_path}"], capture_output=True,
                       text=True, cwd=ROOT, timeout=600)
    assert p.returncode == 0, (p.stdout, p.stderr)
    run = next((tmp_path / "offline_test").iterdir())
    return p.stdout, run, json.loads((run / "summary.json").read_text())


def test_an_offline_run_in_simulation(tmp_path):
    out, run, summary = _harness(RUN, tmp_path)
    assert summary["mode"] == "offline" and "schedulers" not in summary
    dm, base = summary["offline"]["decode_maximal"], summary["offline"]["orca_worst"]
    assert dm["completed"] == base["completed"] == 30
    assert summary["gains"]["decode_maximal"] == pytest.approx(dm["token_throughput"] / base["token_throughput"])
    assert summary["gains"]["decode_maximal"] > 1.1  # piggybacked decodes: the point of the paper
    assert dm["hybrid"] > 0 and base["hybrid"] == 0 and dm["decode_speedup"] > 2
    requests = pd.read_parquet(run / "requests.parquet")
    for name, s in (("decode_maximal", dm), ("orca_worst", base)):  # against a schedule priced here, batch by batch
        mine = requests[requests["scheduler"] == name].sort_values("request_id")
        lengths = list(zip(mine["prompt_len"].tolist(), mine["output_len"].tolist()))
        makespan = _closed_loop_makespan(name, lengths, 6)
        assert s["makespan_s"] == pytest.approx(makespan, rel=1e-9)
        assert s["token_throughput"] == pytest.approx(sum(p + o for p, o in lengths) / makespan, rel=1e-9)
    assert len(requests) == 60 and set(requests["scheduler"]) == {"decode_maximal", "orca_worst"}
    log = pd.read_parquet(run / "iterations.parquet")
    assert log.groupby("scheduler").size().to_dict() == {"decode_maximal": dm["iterations"], "orca_worst": base["iterations"]}
    assert "decode_maximal" in out and "gain" in out
    runs, probes = load_results(tmp_path)  # the capacity readers pass an offline run by
    assert runs.empty and probes.empty


def _closed_loop_makespan(scheduler: str, lengths: list[tuple[int, int]], concurrency: int) -> float:
    """The run's schedule stepped here, without the simulator: `concurrency` requests outstanding, each
    finish releasing the next; every batch priced by the performance model's array method (the
    simulator prices through its per-batch path and fast-forwards decode runs) and summed. The engine
    never idles in a closed loop, so the last finish is the sum."""
    job = plan_experiment(compose(RUN)).job(scheduler, progress=False)
    d = job.deployment
    engine = make_engine(EngineConfig(job.scheduler, d.kv_capacity_tokens, job.max_model_len, d.block_size))
    seqs = [Sequence(i, p, o) for i, (p, o) in enumerate(lengths)]
    for s in seqs[:concurrency]:
        engine.add(s)
    released, t = concurrency, 0.0
    while engine.has_unfinished:
        batch = engine.schedule()
        t += float(d.timer.batch_times(np.array(batch.new_tokens), np.array(batch.context_lens)))
        for _ in engine.complete(batch).finished:
            if released < len(seqs):
                engine.add(seqs[released])
                released += 1
    return t


def test_pipeline_bubbles_are_reported(tmp_path):
    args = ["model=llama-13b", "hardware=a100_80g_sxm", "parallel=tp1", "parallel.pp=2", "dataset=synthetic_zipf",
            "dataset.synthetic.max_sequence_length=2048", "arrival=at_once", "scheduler=[decode_maximal]",
            "scheduler.decode_maximal.max_num_seqs=32", "search.num_requests=40", "name=offline_test", "progress=false"]
    _, run, summary = _harness(args, tmp_path)
    s = summary["offline"]["decode_maximal"]
    assert s["bubble_p50_s"] > 0 and sum(s["bubble_share"].values()) == pytest.approx(1.0)
    requests = pd.read_parquet(run / "requests.parquet")
    assert {"bubble_schedule_s", "bubble_send_s", "bubble_upstream_s"} <= set(requests.columns)
    # the distribution a request, not only its median: percentiles of the requests' summed bubble time
    total = requests[["bubble_schedule_s", "bubble_send_s", "bubble_upstream_s"]].sum(axis=1).to_numpy()
    q = s["bubble_quantiles_s"]
    assert list(q) == ["p10", "p25", "p50", "p75", "p90", "p99"] and q["p50"] == pytest.approx(s["bubble_p50_s"])
    assert q == pytest.approx({k: float(np.percentile(total, int(k[1:]))) for k in q}) and q["p10"] < q["p99"]


@pytest.mark.parametrize("override,message", [
    ("scheduler.decode_maximal.chunk_size=0", "chunk_size must be >= 1"),
    ("scheduler.decode_maximal.max_num_seqs=31", "does not fit the KV cache: 30 sequences"),
    ("dataset.synthetic.pd_ratio=1000", "no decode token"),
    ("offline.baseline=vllm", "offline.baseline='vllm' is not one of the run's schedulers"),
    ("search.fixed_qps=2", "search.fixed_qps: an offline run"),
])
def test_bad_input_is_one_line(tmp_path, override, message):
    assert_refused(tmp_path, [*A6000, "arrival=closed_loop", "arrival.concurrency=6", "scheduler=[decode_maximal]",
                              "search.num_requests=4", "name=x", override], message)


@pytest.mark.live
def test_an_offline_run_against_a_live_server(tmp_path):
    """The same mode through the in-repo server (its perf-model executor in real time): the load
    generator keeps the closed loop; a server keeps no iteration log, so composition is absent."""
    args = ["experiment=live_smoke", "arrival=closed_loop", "arrival.concurrency=4", "search.num_requests=16",
            "search.time_limit_s=null", "scheduler=[decode_maximal]", "scheduler.decode_maximal.max_num_seqs=8",
            "name=offline_test"]
    _, run, summary = _harness(args, tmp_path)
    s = summary["offline"]["decode_maximal"]
    assert summary["backend"] == "live" and s["completed"] == 16 and s["token_throughput"] > 0
    assert s["iterations"] is None and not (run / "iterations.parquet").exists()
    requests = pd.read_parquet(run / "requests.parquet")
    # closed loop: at most 4 outstanding, by the records' own arrival (release) times
    times = sorted(requests["finished_s"])
    assert max(((requests["arrival_s"] <= t) & (requests["finished_s"] > t)).sum() for t in [0.0, *times]) <= 4


def test_the_planner_refuses_a_rate_free_arrival(tmp_path):
    assert_refused(tmp_path, ["plan", "model=mistral-7b", "hardware=a100_80g", "arrival=at_once", "slo.tbt_s=0.1",
                              "target_qps=2", f"plan.out={tmp_path / 'plan'}"], "arrival=at_once: the planner searches request rates")
