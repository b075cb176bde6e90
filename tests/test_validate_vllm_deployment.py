"""`validate` and `calibrate` replay a vLLM deployment as vLLM runs it (issue 50).

Item 1: on a data-parallel deployment the replay runs one engine core per DP rank, each with its own
scheduler limits and KV pool, behind vLLM's DP balancing (harness/backends/sim/data_parallel.py
simulate_vllm_dp, the sim backend's own path), not one engine with one rank's limits.
Item 2: one vLLM release, said once: a stack pricing one release (perf.stack=vllm-X) and a vllm_v1
scheduler running another's rules (scheduler.vllm_v1.release) are refused in one line, exit 2, by
validate, calibrate and an experiment alike."""
from __future__ import annotations

import json

import numpy as np
import pytest

from harness.commands.main import main
from harness.config import config_for, experiment_config
from harness.validate.replay import replay, target_for
from tests.runfiles import write_run_file
from harness.validate.runfile import read_run
from tests.cli import assert_refused

MAX_NUM_SEQS = 4
DP2 = ["model=qwen3-30b-a3b", "hardware=h100_80g", "parallel=dp2_ep", "scheduler=vllm_v1", "perf.stack=vllm-0.32",
       f"scheduler.vllm_v1.max_num_seqs={MAX_NUM_SEQS}", "scheduler.vllm_v1.max_num_batched_tokens=2048",
       "max_model_len=1024"]


def _run_file(tmp_path, n: int = 16):
    """`n` requests arriving 1 ms apart, each long enough (200 output tokens) that all are running
    together when the last one arrives."""
    return write_run_file(tmp_path / "run.jsonl", n, gap_s=0.001, prompt_tokens=64, output_tokens=200,
                          ttft_s=0.1, tpot_s=0.02)


def _most_running(records) -> int:
    """The most requests between their first scheduled step and their end at any one time."""
    events = sorted([(r.first_scheduled_s, 1) for r in records] + [(r.finished_s, -1) for r in records])
    return int(np.max(np.cumsum([d for _, d in events])))


def test_a_dp2_replay_runs_max_num_seqs_on_each_rank(tmp_path):
    run = read_run(_run_file(tmp_path))
    target = target_for(run, experiment_config(config_for(run, DP2)))
    assert target.plan.dp == 2 and "per rank" in target.describe()
    sim = replay(target, run.records)
    assert all(r.error is None for r in sim)
    # one engine with one rank's limits ran at most MAX_NUM_SEQS at a time
    assert _most_running(sim) == 2 * MAX_NUM_SEQS


def test_validate_runs_a_dp2_deployment(tmp_path, capsys):
    """The user's path, `python -m harness validate RUN ... parallel=dp2_ep ...`, replays two engine
    cores of max_num_seqs each: the 16 requests run in two waves of 8, so the later ones wait about
    one request's service time for a first token (one engine with one rank's limits ran four waves
    of 4: a TTFT P90 of about three service times)."""
    code = main(["validate", str(_run_file(tmp_path)), *DP2, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 0, err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert "per rank (each of 2 DP ranks its own engine core)" in summary["deployment"]
    sim = {(row["metric"], row["stat"]): row["sim_s"] for row in summary["rows"]}
    service = 199 * sim["tpot", "mean"]  # a request's decodes, the bulk of its time on a rank
    assert sim["ttft", "p90"] < 1.5 * service, (sim["ttft", "p90"], service)


TWO_RELEASES = "perf.stack=vllm-0.19 prices vLLM 0.19 but scheduler.vllm_v1.release=0.32 runs 0.32's scheduler"


@pytest.mark.parametrize("command, out", [("validate", "out"), ("calibrate", "cal.json")])
def test_a_stack_and_a_scheduler_of_two_releases_are_refused(command, out, tmp_path, capsys):
    words = [w.replace("vllm-0.32", "vllm-0.19") for w in DP2]
    code = main([command, str(_run_file(tmp_path)), *words, "--out", str(tmp_path / out)])
    err = capsys.readouterr().err
    assert code == 2 and TWO_RELEASES in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / out).exists()


def test_an_experiment_of_two_releases_is_refused(tmp_path):
    assert_refused(tmp_path, ["experiment=mistral7b_strict", "scheduler=[vllm_v1]", "perf.stack=vllm-0.19",
                              "search.num_requests=8"], TWO_RELEASES)


def test_one_release_said_on_both_sides_runs(tmp_path):
    run = read_run(_run_file(tmp_path))
    words = [w.replace("vllm-0.32", "vllm-0.19") for w in DP2] + ["scheduler.vllm_v1.release=0.19"]
    target = target_for(run, experiment_config(config_for(run, words)))
    assert target.scheduler.release == "0.19"


def test_validate_warns_when_the_replay_was_kv_bound(tmp_path, capsys):
    """Item 7: a replay whose pool preempted requests says so (stderr, summary.json), naming where the
    pool came from; one with room says nothing."""
    path = _run_file(tmp_path)
    one = ["model=qwen3-30b-a3b", "hardware=h100_80g", "scheduler=vllm_v1", "perf.stack=vllm-0.32", "max_model_len=1024"]
    for kv, bound in ((2048, True), (None, False)):
        out = tmp_path / f"out{kv}"
        code = main(["validate", str(path), *one, "--out", str(out), *(["--kv-tokens", str(kv)] if kv else [])])
        err = capsys.readouterr().err
        assert code == 0, err
        assert ("the replay was KV-bound" in err and "pool of 2048 tokens (the --kv-tokens given)" in err) == bound, err
        assert json.loads((out / "summary.json").read_text())["kv_bound"] == bound
