"""backend=endpoint against servers that misbehave on purpose (tests/misbehaving_endpoint.py, a real
aiohttp process on loopback): every way of answering wrongly fails each request with its own kind,
a search whose every probe fails so ends with exit 3 and one line naming the fault, each probe
stops at its first failed request, and nothing saved reads as a capacity. A server that sends no
usage is named; an honest one is measured under its own name."""
from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from harness.backends.live.lifecycle import LaunchSpec, ServerProcess, free_port
from harness.loadgen.http import Target
from harness.loadgen.options import LoadOptions
from harness.loadgen.pool import ConnectionPool
from harness.loadgen.collect import NEVER_ENDED_S, UNFINISHED
from harness.loadgen.pacer import Pacer
from harness.loadgen.run import _continuous_usage_needed, run_load
from harness.records import RequestSpec

pytestmark = pytest.mark.live  # starts a real server (pyproject.toml markers)

ROOT = Path(__file__).resolve().parent.parent
NUM_REQUESTS = 48


def misbehaving(fault: str, every: int = 1, *extra: str) -> ServerProcess:
    port = free_port()
    cmd = [sys.executable, "-m", "tests.misbehaving_endpoint", "--port", str(port), "--fault", fault,
           "--every", str(every), *extra]
    return ServerProcess(LaunchSpec(cmd, f"http://127.0.0.1:{port}", model=None, cwd=str(ROOT),
                                    env={"PYTHONPATH": str(ROOT)}))


LENGTHS = ("dataset.max_total_tokens=256", "max_model_len=1024")


def harness(server: ServerProcess, tmp_path: Path, *extra: str, lengths=LENGTHS) -> subprocess.CompletedProcess:
    """`python -m harness` against `server`; `extra` key=value words replace the defaults' own."""
    words = ["experiment=yi34b_tp2_strict", "model.name=tiny", *lengths, "slo.tbt_s=0.5",
             f"search.num_requests={NUM_REQUESTS}", "search.start_qps=8", "backend=endpoint",
             f"backend.base_url={server.base_url}/v1", f"results_dir={tmp_path}", "progress=false",
             "backend.strict=false",  # the subject is the server's answers, not the client's timing
             *extra]
    args = list({w.partition("=")[0]: w for w in words}.values())
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env=env)


def partial_run(tmp_path: Path) -> Path:
    runs = list((tmp_path / "yi34b_tp2_strict").iterdir())
    assert not [d for d in runs if not d.name.startswith(".")], runs  # nothing that reads as a finished run
    (partial,) = [d for d in runs if d.name.endswith(".partial")]
    return partial


@pytest.mark.parametrize("fault, every, kind, says", [
    ("non_json", 1, "malformed", "unparseable SSE event"),
    ("other_model", 1, "model", "answered as 'someone-else'"),
    ("usage_lie", 1, "usage", "the final usage claims"),
    ("prompt_miscount", 1, "prompt_len", "prompt counted as"),
    ("extra_tokens", 1, "extra_output", "extra tokens: received"),
    ("http500", 20, "http_status", "HTTP 500"),
    ("cut", 10, "stream_cut", "connection lost"),
])
def test_a_search_whose_every_probe_fails_on_errors_breaks_naming_the_fault(tmp_path, fault, every, kind, says):
    with misbehaving(fault, every) as server:
        p = harness(server, tmp_path)
    assert p.returncode == 3, p.stderr[-3000:]
    errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "answers wrongly, not slowly" in errors[0], p.stderr[-3000:]
    assert f" {kind}" in errors[0] and says in errors[0], errors[0]
    assert "results:" not in p.stdout
    partial = partial_run(tmp_path)
    assert "answers wrongly" in (partial / "FAILED.txt").read_text()
    entry = json.loads((partial / "summary.json").read_text())["schedulers"]["misbehaving"]
    assert "capacity_qps" not in entry  # nothing that reads as a capacity
    probes = entry["broken"]["probes"]
    assert [pr["qps"] for pr in probes] == [8, 4] and not any(pr["passed"] for pr in probes)
    rows = pd.read_parquet(partial / "requests.parquet")
    for qps, probe in rows.groupby("qps"):
        # Stopped at its first failed request (max_error_fraction 0): the rest was never sent.
        assert (probe["error"] == "stopped early: the probe's failure was certain").sum() >= NUM_REQUESTS // 2, qps


def test_a_stream_that_never_ends_is_cut_when_it_stalls(tmp_path):
    with misbehaving("never_end") as server:
        t0 = time.monotonic()
        p = harness(server, tmp_path, "backend.stall_timeout_s=2")
        took = time.monotonic() - t0
    assert p.returncode == 3 and "stream did not end after its last token" in p.stderr, p.stderr[-3000:]
    # Two probes, each stopped at its first stall: a hang waits request_timeout_s = 600 s per probe; 300 s
    # leaves a loaded host's start-up and judging room (120 s was a margin of the host).
    assert took < 300, took


def test_the_check_stream_before_a_probe_is_cut_when_it_stalls_too():
    """The one short stream sent before a probe's clock starts (is continuous usage needed?) is cut
    at the stall timeout like the probe's own: against a server whose streams never end it once
    held every probe's start for connect_timeout_s + 10 = 20 s."""
    opts = LoadOptions(base_url="", model="misbehaving", stall_timeout_s=0.5)
    first = RequestSpec(0, 0.0, 8, 4, prompt_token_ids=tuple(range(10, 18)))

    async def check(url: str) -> float:
        target = Target.parse(url)
        pool = ConnectionPool(target, 4, opts.connect_timeout_s, time.monotonic)
        t0 = time.monotonic()
        try:
            assert await _continuous_usage_needed(pool, target, first, dataclasses.replace(opts, base_url=url), {})
        finally:
            pool.close()
        return time.monotonic() - t0

    with misbehaving("never_end") as server:
        took = asyncio.run(check(server.base_url))
    assert took < 10, took  # 0.5 s of silence after the last token, not the 20 s timeout


def test_a_stream_silent_briefly_when_the_run_stops_is_a_cut_off_however_slow_the_cleanup(monkeypatch):
    """Its silence ends when the run stops reading, not when it has finished cleaning up. CI once
    judged a stream never ended (142 of 142 tokens, then the probe stopped at another's fault) and
    the search named that as its fault; the silence was measured to the cleanup's end, and a
    loaded host's cleanup is no silence of the server's."""
    real_stop = Pacer.stop

    def slow_stop(self):  # a loaded host's cleanup, made certain
        time.sleep(NEVER_ENDED_S + 0.5)
        real_stop(self)
    monkeypatch.setattr(Pacer, "stop", slow_stop)
    spec = RequestSpec(0, 0.0, 8, 4, prompt_token_ids=tuple(range(10, 18)))
    with misbehaving("never_end") as server:
        opts = LoadOptions(base_url=server.base_url, model="misbehaving", time_limit_s=0.2, progress=False,
                           stall_timeout_s=NEVER_ENDED_S)  # the check stream before the run ends at its stall
        (record,) = run_load([spec], opts).records
    assert record.error == UNFINISHED and len(record.token_times_s) == 4, record


def test_without_a_stall_timeout_the_plans_time_limit_ends_the_probe(tmp_path):
    """backend.stall_timeout_s=null: the probe still ends, at its last arrival + the plan's drain
    time (2 x (2 s + the longest output at the TBT SLO)), and the never-ended streams are failures,
    not passes: they sent every token, then held the probe."""
    with misbehaving("never_end") as server:
        p = harness(server, tmp_path, "backend.stall_timeout_s=null", "slo.tbt_s=0.02", "search.fixed_qps=16",
                    "search.num_requests=8")
    assert p.returncode == 3 and "stream did not end after its last token" in p.stderr, p.stderr[-3000:]
    assert "each probe cut" in p.stdout  # the derived limit, printed before the run


def test_a_server_that_sends_no_usage_is_named(tmp_path):
    with misbehaving("no_usage") as server:
        p = harness(server, tmp_path, "search.fixed_qps=8", "search.num_requests=16")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "WARNING:" in p.stderr and "the server sent no usage for 16 of 16 requests" in p.stderr, p.stderr
    assert "UserWarning" not in p.stderr
    run = Path(p.stdout.strip().splitlines()[-1].removeprefix("results: "))
    notes = json.loads((run / "summary.json").read_text())["notes"]
    assert any("sent no usage" in n for n in notes), notes


def test_an_honest_server_is_measured_under_its_own_name(tmp_path):
    with misbehaving("honest") as server:
        p = harness(server, tmp_path, "search.rel_tol=0.5", "search.max_qps=16")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "probes of 48 requests from 8 QPS" in p.stdout and "client: " in p.stdout  # said before the run
    rows = [line.split() for line in p.stdout.splitlines() if line.startswith("misbehaving ")]
    assert len(rows) == 1 and "capacity:" not in p.stdout  # one label, no cross-scheduler ratios
    run = Path(p.stdout.strip().splitlines()[-1].removeprefix("results: "))
    summary = json.loads((run / "summary.json").read_text())
    assert list(summary["schedulers"]) == ["misbehaving"]
    assert summary["schedulers"]["misbehaving"]["capacity_qps"] >= 8


def test_the_plan_is_fitted_to_the_servers_max_model_len(tmp_path):
    """The preset plans sharegpt requests of up to 8,192 tokens; the server takes 512: the plan is
    fitted to it (a note says so and which flag would take the preset's), and a max_model_len set
    apart from the dataset's limit is refused naming the flag."""
    with misbehaving("honest", 1, "--max-model-len", "512") as server:
        fitted = harness(server, tmp_path, "search.fixed_qps=8", "search.num_requests=16", lengths=())
        refused = harness(server, tmp_path / "refused", "search.fixed_qps=8", "search.num_requests=16")
    assert fitted.returncode == 0, fitted.stderr[-3000:]
    assert "the plan is fitted to it" in fitted.stdout and "--max-model-len" in fitted.stdout
    run = Path(fitted.stdout.strip().splitlines()[-1].removeprefix("results: "))
    assert "max_model_len: 512" in (run / "config.yaml").read_text()
    assert refused.returncode == 2 and "--max-model-len" in refused.stderr, refused.stderr[-2000:]
    assert len(refused.stderr.strip().splitlines()) == 1
