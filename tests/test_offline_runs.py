"""`python -m harness` under a rate-free arrival (closed_loop, at_once): one offline throughput run
per scheduler, no capacity search, in simulation and against a live server alike; what it saves,
what the capacity readers make of it (nothing), and the bad input it refuses in one line."""
from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from harness.analysis.loader import load_results
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
    assert dm["token_throughput"] == pytest.approx(30 * 1024 / dm["makespan_s"])
    requests = pd.read_parquet(run / "requests.parquet")
    assert len(requests) == 60 and set(requests["scheduler"]) == {"decode_maximal", "orca_worst"}
    log = pd.read_parquet(run / "iterations.parquet")
    assert log.groupby("scheduler").size().to_dict() == {"decode_maximal": dm["iterations"], "orca_worst": base["iterations"]}
    assert "decode_maximal" in out and "gain" in out
    runs, probes = load_results(tmp_path)  # the capacity readers pass an offline run by
    assert runs.empty and probes.empty


def test_pipeline_bubbles_are_reported(tmp_path):
    args = ["model=llama-13b", "hardware=a100_80g_sxm", "parallel=tp1", "parallel.pp=2", "dataset=synthetic_zipf",
            "dataset.synthetic.max_sequence_length=2048", "arrival=at_once", "scheduler=[decode_maximal]",
            "scheduler.decode_maximal.max_num_seqs=32", "search.num_requests=40", "name=offline_test", "progress=false"]
    _, run, summary = _harness(args, tmp_path)
    s = summary["offline"]["decode_maximal"]
    assert s["bubble_p50_s"] > 0 and sum(s["bubble_share"].values()) == pytest.approx(1.0)
    requests = pd.read_parquet(run / "requests.parquet")
    assert {"bubble_schedule_s", "bubble_send_s", "bubble_upstream_s"} <= set(requests.columns)


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
