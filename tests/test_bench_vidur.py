"""benchmarks/bench_vidur.py without Vidur: its refusals of bad input, how it reads Vidur's output
into the harness's records, and that the per-iteration log it compares is the harness's own run."""
from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.backends import open_backend

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks" / "bench_vidur.py"
sys.path.insert(0, str(BENCH.parent))

import bench_vidur as bv  # noqa: E402
import vidur_records as vr  # noqa: E402


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=300)


def test_bad_input_is_one_line_and_status_2(tmp_path):
    out = _run("--vidur", str(tmp_path), "--vidur-python", sys.executable)
    assert out.returncode == 2 and "not a Vidur checkout" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    # a checkout whose attention profile is still a Git LFS pointer
    (tmp_path / "vidur").mkdir()
    (tmp_path / "vidur" / "simulator.py").write_text("")
    att = tmp_path / bv.ATTENTION
    att.parent.mkdir(parents=True)
    att.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 1\n")
    out = _run("--vidur", str(tmp_path), "--vidur-python", sys.executable)
    assert out.returncode == 2 and "Git LFS pointer" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_vidur_output_read_as_records(tmp_path):
    """Tokens at the ends of the batches that made them (the first: prefill done), restarts as
    preemptions, a request short of its tokens flagged, never counted complete."""
    pd.DataFrame({"id": [7, 8], "arrived_at": [1.0, 2.0], "num_prefill_tokens": [100, 50],
                  "num_decode_tokens": [3, 2]}).to_csv(tmp_path / "stream.csv", index=False)
    pd.DataFrame({"id": [7, 8], "arrived_at": [1.0, 2.0], "scheduled_at": [1.5, 2.25], "prefill_completed_at": [1.75, 2.5],
                  "completed_at": [2.5, 0.0], "completed": [1, 0], "num_restarts": [1, 0]}).to_csv(tmp_path / "requests.csv", index=False)
    pd.DataFrame({"id": [7, 8, 7, 7], "time": [1.75, 2.5, 2.0, 2.5]}).to_csv(tmp_path / "tokens.csv", index=False)
    done, cut = bv.vidur_records(tmp_path)
    assert (done.first_scheduled_s, done.first_token_s, done.finished_s) == (1.5, 1.75, 2.5)
    assert done.token_times_s.tolist() == [1.75, 2.0, 2.5] and done.num_preemptions == 1 and done.completed
    assert not cut.completed and np.isnan(cut.finished_s) and cut.first_token_s == 2.5
    s = bv.summarize([done, cut])
    assert s.num_completed == 1 and s.num_preemptions == 1 and s.ttft.p50 == pytest.approx(0.625)


@pytest.fixture(scope="module")
def stream(tmp_path_factory):
    """A short Vidur-like stream (its stream.csv) and the plan of both policies on it."""
    d = tmp_path_factory.mktemp("stream")
    rng = np.random.default_rng(0)
    n = 96
    pd.DataFrame({"id": np.arange(n), "arrived_at": np.cumsum(rng.exponential(0.25, n)),
                  "num_prefill_tokens": rng.integers(16, 2500, n), "num_decode_tokens": rng.integers(1, 300, n)}
                 ).to_csv(d / "stream.csv", index=False, float_format="%.17g")
    requests = bv.stream_as_trace(d, d / "trace.csv")
    args = types.SimpleNamespace(requests=n, qps=1.0, budget=512, set=["perf.kv_memory=datasheet"], no_cpu_costs=False)
    return d, requests, args


def as_vidur(items: str) -> str:
    """A logged harness iteration's items as Vidur counts them: a decode's processed tokens include
    the token it feeds (Vidur counts the first output token as processed when the prefill ends)."""
    rows = (map(int, p.split(":")) for p in items.split())
    return " ".join(f"{n}:{c + d}:{d}" for n, c, d in rows)


@pytest.mark.parametrize("scheduler", ["sarathi", "vllm"])
def test_iteration_log_is_the_probe(stream, scheduler):
    """One logged row per iteration, in time order, of exactly the run the sim backend makes, each
    at the price the harness's model gives its batch."""
    d, requests, args = stream
    plan, perf_cfg = bv.harness_plan(args, scheduler, d / "trace.csv", requests)
    with open_backend(plan.job(scheduler, progress=False)) as backend:
        probe = backend.run(requests).records
    frame, logged = vr.harness_iterations(plan, scheduler, requests)
    assert bv.same_records(probe, logged)
    start, end = frame["scheduled_at"].to_numpy(), frame["completed_at"].to_numpy()
    assert (end > start).all() and (start[1:] >= end[:-1]).all()
    ends = set(end)
    assert all(t in ends for r in logged for t in r.token_times_s)  # every token at a logged iteration's end
    items = frame["items"].map(vr._items)
    fed = sum(int(x[:, 0].sum()) for x in items)  # tokens computed: each prompt, then each output but the last
    assert fed >= sum(r.prompt_len + r.output_len - 1 for r in requests)
    if not any(r.num_preemptions for r in logged):
        assert fed == sum(r.prompt_len + r.output_len - 1 for r in requests)
    assert frame["decode_tokens"].tolist() == [int(x[:, 2].sum()) for x in items]
    # KV blocks each batch ran with: the first batch's prompts' own (admission takes a whole prompt's)
    bs = plan.deployment.block_size
    assert frame["allocated_blocks"].iloc[0] == sum(-(-r.prompt_len // bs) for r in requests[:len(items.iloc[0])])
    assert frame["allocated_blocks"].max() <= plan.deployment.kv_capacity_tokens // bs
    held = [sum(-(-(c + n) // bs) for n, c, _ in x) for x in items]  # at least the blocks of what it computes
    assert (frame["allocated_blocks"].to_numpy() >= held).all()
    # the same batches read back as Vidur's come back at the logged price; without CPU costs, cheaper
    vidur_like = frame.head(300).assign(items=frame["items"].head(300).map(as_vidur))
    price = vr.price_vidur_batches(plan, vidur_like)
    assert np.array_equal(price, end[:300] - start[:300]) or np.allclose(price, end[:300] - start[:300], rtol=1e-12, atol=0)
    free = vr.price_vidur_batches(vr.without_cpu_costs(plan, perf_cfg), vidur_like)
    assert (free < price).all()
