"""The harness beside Vidur on Vidur's own stream: loop speed pair by pair, and end-to-end metrics.

Vidur (github.com/microsoft/vidur) generates its stream (a trace's lengths, shuffled by its seed,
Poisson arrivals capped at 3x the mean gap, prompt + output cut to 4,096) and runs it; the
harness replays exactly that stream (written as a trace, `arrival=trace`: the run checks that
the requests are Vidur's, row by row). Default stream: Llama-2-70B TP2 on Vidur's A100
(pairwise-NVLink node; the harness's `hardware=a100_80g`, the paper's servers), splitwise_conv,
2,048 requests, 1 QPS; Sarathi with a 512-token budget and vLLM.

    python benchmarks/bench_vidur.py --vidur ../vidur --vidur-python ../vidur-venv/bin/python \\
        [--scheduler sarathi vllm] [--requests 2048] [--qps 1] [--repeats 1] \\
        [--set perf.kv_memory=vidur ...] [--vidur-arg=--vllm_scheduler_config_num_blocks=3328 ...] \\
        [--no-cpu-costs] [--records DIR]

Vidur must be a checkout with its Llama-2-70B A100 attention.csv present (Git LFS in the repo:
copy ../shared/profiles/vidur/compute/a100/meta-llama/Llama-2-70b-hf/attention.csv there) and a
venv with its requirements; its first run trains its predictors into <checkout>/cache (minutes).

Per scheduler and side it prints: iterations (Vidur: batches), the event loop's wall time and
microseconds per iteration (Vidur: Simulator.run(); harness: the sim backend's run of the same
requests), each process's wall and CPU time (Vidur's `vidur_probe.py`; the harness's `python -m
harness` one-probe run on the stream: imports, set-up, loop, output), and both runs' end-to-end
metrics computed by the harness's own definitions (harness.metrics.summarize) from each side's
per-request and per-token times. Speed comes from runs without per-iteration logging (Vidur's
chrome trace and plots off, its in-loop metrics on); the metrics from a logged run of each, which
must reproduce the unlogged one exactly (checked). --records DIR writes both sides' per-iteration
records and prints where they differ (benchmarks/vidur_records.py). Run on a quiet machine and
note the load: every number here is a wall-clock time.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from harness.backends import open_backend
from harness.config import compose
from harness.metrics import Summary, summarize
from harness.records import RequestRecord, RequestSpec
from harness.config import plan_experiment
from harness.experiment import ExperimentPlan
from harness.search.probe import probe_requests
from vidur_records import compare_iterations, harness_iterations, without_cpu_costs

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
LFS_POINTER = b"version https://git-lfs"
ATTENTION = Path("data/profiling/compute/a100/meta-llama/Llama-2-70b-hf/attention.csv")
# Vidur's flags for the stream and the deployment (its CLI: `python -m vidur.main -h`)
VIDUR_STREAM = [
    "--replica_config_device", "a100", "--replica_config_network_device", "a100_pairwise_nvlink",
    "--replica_config_model_name", "meta-llama/Llama-2-70b-hf", "--replica_config_tensor_parallel_size", "2",
    "--replica_config_num_pipeline_stages", "1", "--cluster_config_num_replicas", "1",
    "--request_generator_config_type", "synthetic", "--length_generator_config_type", "trace",
    "--trace_request_length_generator_config_trace_file", "./data/processed_traces/splitwise_conv.csv",
    "--interval_generator_config_type", "poisson",
    "--no-metrics_config_enable_chrome_trace", "--no-metrics_config_store_plots",
]
# The same deployment in the harness; the stream replayed as a trace
HARNESS_STREAM = ["model=llama2-70b", "hardware=a100_80g", "parallel=tp2", "dataset=splitwise_conv",
                  "dataset.max_total_tokens=4096", "arrival=trace", "progress=false", "cache=false"]


@dataclass(frozen=True)
class ProcessTime:
    wall_s: float
    cpu_s: float  # user + system of the child process


@dataclass
class Loop:
    """The event loop's time, the best of the repeats (a shared machine only ever adds time)."""

    wall_s: float = float("inf")
    cpu_s: float = float("inf")

    def add(self, wall_s: float, cpu_s: float) -> None:
        self.wall_s, self.cpu_s = min(self.wall_s, wall_s), min(self.cpu_s, cpu_s)


@dataclass(frozen=True)
class SideRun:
    iterations: int
    loop: Loop
    process: ProcessTime
    summary: Summary
    kv_tokens: int


def fail(message: str, status: int) -> None:
    print(f"bench_vidur: {message}", file=sys.stderr)
    sys.exit(status)


def timed_child(cmd: list[str], cwd: Path, log: Path) -> ProcessTime:
    """Run `cmd`, its output to `log`; its wall time and its CPU time (getrusage of children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with open(log, "w") as out:
        rc = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                            env={**os.environ, "WANDB_MODE": "disabled"}).returncode
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if rc != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        fail(f"{' '.join(cmd[:3])} ... exited {rc}; the end of {log}:\n{tail}", 3)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return ProcessTime(wall, cpu)


# ----------------------------------------------------------------------------- Vidur's side
def vidur_flags(scheduler: str, requests: int, qps: float, budget: int, extra: list[str]) -> list[str]:
    sched = ["--replica_scheduler_config_type", scheduler]
    if scheduler == "sarathi":
        sched += ["--sarathi_scheduler_config_chunk_size", str(budget)]
    return [*VIDUR_STREAM, "--synthetic_request_generator_config_num_requests", str(requests),
            "--poisson_request_interval_generator_config_qps", repr(qps), *sched, *extra]


def run_vidur(args, scheduler: str, out: Path, records: bool) -> ProcessTime:
    cmd = [args.vidur_python, str(HERE / "vidur_probe.py"), "--out", str(out), *(["--records"] if records else []),
           "--", *vidur_flags(scheduler, args.requests, args.qps, args.budget, args.vidur_arg),
           "--metrics_config_output_dir", str(out / "vidur_output")]
    return timed_child(cmd, args.vidur, out.with_suffix(".log"))


def vidur_records(out: Path) -> list[RequestRecord]:
    """Vidur's requests as the harness's records: first scheduled, tokens at the ends of the
    batches that produced them (the first at prefill completion), restarts as preemptions."""
    req = pd.read_csv(out / "requests.csv")
    stream = pd.read_csv(out / "stream.csv")
    tok = pd.read_csv(out / "tokens.csv")
    times = {i: g["time"].to_numpy(np.float64) for i, g in tok.groupby("id", sort=False)}
    recs = []
    for k, (r, s) in enumerate(zip(req.itertuples(), stream.itertuples())):
        t = times.get(r.id, np.empty(0))
        done = bool(r.completed) and len(t) == s.num_decode_tokens
        recs.append(RequestRecord(
            request_id=k, arrival_s=r.arrived_at, prompt_len=s.num_prefill_tokens, output_len=s.num_decode_tokens,
            first_scheduled_s=r.scheduled_at, first_token_s=float(t[0]) if len(t) else float("nan"),
            finished_s=r.completed_at if done else float("nan"), token_times_s=t, num_preemptions=int(r.num_restarts),
            error=None if done else "vidur: unfinished or token count differs"))
    return recs


def vidur_timed(args, scheduler: str, out: Path, logged: Path) -> tuple[dict, ProcessTime]:
    """An unlogged run of Vidur: its timing.json and process time; it must be the logged run."""
    proc = run_vidur(args, scheduler, out, records=False)
    if not pd.read_csv(out / "requests.csv").equals(pd.read_csv(logged / "requests.csv")):
        fail(f"Vidur's logged and unlogged runs of {scheduler} differ ({logged}, {out}): the logging changed the run", 3)
    return json.loads((out / "timing.json").read_text()), proc


# ----------------------------------------------------------------------------- the harness's side
def stream_as_trace(vidur_out: Path, path: Path) -> list[RequestSpec]:
    s = pd.read_csv(vidur_out / "stream.csv")
    s[["arrived_at", "num_prefill_tokens", "num_decode_tokens"]].to_csv(path, index=False, float_format="%.17g")
    return [RequestSpec(request_id=i, arrival_s=float(a), prompt_len=int(p), output_len=int(o))
            for i, (a, p, o) in enumerate(zip(s.arrived_at, s.num_prefill_tokens, s.num_decode_tokens))]


def harness_overrides(args, scheduler: str, trace: Path) -> list[str]:
    return [*HARNESS_STREAM, f"dataset.trace_file={trace}", f"scheduler=[{scheduler}]",
            f"search.num_requests={args.requests}", f"search.fixed_qps={args.qps}",
            *([f"scheduler.sarathi.token_budget={args.budget}"] if scheduler == "sarathi" else []), *args.set]


def harness_plan(args, scheduler: str, trace: Path, expected: list[RequestSpec]) -> tuple[ExperimentPlan, dict]:
    """The plan of the harness's run on the stream, and its perf config."""
    cfg = compose(harness_overrides(args, scheduler, trace))
    plan = plan_experiment(cfg)
    if args.no_cpu_costs:
        plan = without_cpu_costs(plan, cfg["perf"])
    got = probe_requests(plan, args.qps)
    if [(r.arrival_s, r.prompt_len, r.output_len) for r in got] != [(r.arrival_s, r.prompt_len, r.output_len) for r in expected]:
        fail(f"the harness's requests from {trace} are not Vidur's stream: the comparison would be of two streams", 3)
    return plan, cfg["perf"]


def same_records(a: list[RequestRecord], b: list[RequestRecord]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x.token_times_s, y.token_times_s) and
                                    x.first_scheduled_s == y.first_scheduled_s for x, y in zip(a, b))


def harness_process(args, scheduler: str, trace: Path, work: Path, ttft_p50: float) -> ProcessTime:
    """`python -m harness`, one probe of the stream: its process time; it must give the same P50 TTFT."""
    if args.no_cpu_costs:  # no config setting prices it: no process to time
        return ProcessTime(np.nan, np.nan)
    results = work / f"results_{scheduler}"
    proc = timed_child([sys.executable, "-m", "harness", *harness_overrides(args, scheduler, trace),
                        f"results_dir={results}", f"name=vidur_{scheduler}"], REPO, work / f"harness_{scheduler}.log")
    saved = pd.read_parquet(next(results.rglob("requests.parquet")))
    p50 = float((saved["first_token_s"] - saved["arrival_s"]).median())
    if not np.isclose(p50, ttft_p50, rtol=1e-12, atol=0):
        fail(f"python -m harness on the stream gave another P50 TTFT ({p50}) than the benchmark's run ({ttft_p50}): "
             "not the same run", 3)
    return proc


def compare_side_by_side(args, scheduler: str, work: Path) -> tuple[SideRun, SideRun, ExperimentPlan, dict, Path]:
    """Vidur's logged run (its stream and records), the harness's on that stream, then the timed
    runs, Vidur's and the harness's in turn (pairs under the same load)."""
    logged = work / f"vidur_{scheduler}_records"
    run_vidur(args, scheduler, logged, records=True)
    trace = work / f"stream_{scheduler}.csv"
    requests = stream_as_trace(logged, trace)
    plan, perf_cfg = harness_plan(args, scheduler, trace, requests)
    iterations, records = harness_iterations(plan, scheduler, requests)
    if args.records:
        iterations.to_csv(args.records / f"harness_{scheduler}_iterations.csv", index=False)
    summary = summarize(records)
    hproc = harness_process(args, scheduler, trace, work, summary.ttft.p50)
    vloop, hloop, vbest = Loop(), Loop(), None
    for k in range(args.repeats):
        timing, proc = vidur_timed(args, scheduler, work / f"vidur_{scheduler}_{k}", logged)
        vloop.add(timing["loop_wall_s"], timing["loop_cpu_s"])
        if vbest is None or proc.wall_s < vbest[1].wall_s:
            vbest = (timing, proc)
        with open_backend(plan.job(scheduler, progress=False)) as backend:
            w0, c0 = time.perf_counter(), time.process_time()
            out = backend.run(requests)
            hloop.add(time.perf_counter() - w0, time.process_time() - c0)
        if not same_records(out.records, records):
            fail(f"the harness's logged run of {scheduler} differs from its probe: the per-iteration log is not of this run", 3)
    timing, vproc = vbest
    vidur = SideRun(timing["batches"], vloop, vproc, summarize(vidur_records(logged)),
                    int(timing["num_blocks"] * timing["block_size"]))
    harness = SideRun(len(iterations), hloop, hproc, summary, plan.deployment.kv_capacity_tokens)
    return vidur, harness, plan, perf_cfg, logged


# ----------------------------------------------------------------------------- the table
ROWS = (("iterations", lambda r: r.iterations, "{:.0f}"),
        ("loop wall s", lambda r: r.loop.wall_s, "{:.2f}"), ("loop CPU s", lambda r: r.loop.cpu_s, "{:.2f}"),
        ("wall us / iteration", lambda r: 1e6 * r.loop.wall_s / r.iterations, "{:.0f}"),
        ("CPU us / iteration", lambda r: 1e6 * r.loop.cpu_s / r.iterations, "{:.0f}"),
        ("process wall s", lambda r: r.process.wall_s, "{:.1f}"), ("process CPU s", lambda r: r.process.cpu_s, "{:.1f}"),
        ("KV tokens", lambda r: r.kv_tokens, "{:.0f}"),
        ("P50 TTFT s", lambda r: r.summary.ttft.p50, "{:.3f}"), ("P90 TTFT s", lambda r: r.summary.ttft.p90, "{:.3f}"),
        ("P50 sched. delay s", lambda r: r.summary.scheduling_delay.p50, "{:.4f}"),
        ("P90 sched. delay s", lambda r: r.summary.scheduling_delay.p90, "{:.3f}"),
        ("P50 TBT s", lambda r: r.summary.tbt.p50, "{:.4f}"), ("P90 TBT s", lambda r: r.summary.tbt.p90, "{:.4f}"),
        ("P99 TBT s", lambda r: r.summary.tbt.p99, "{:.4f}"), ("P50 E2E s", lambda r: r.summary.e2e.p50, "{:.2f}"),
        ("preemptions", lambda r: r.summary.num_preemptions, "{:.0f}"),
        ("completed", lambda r: r.summary.num_completed, "{:.0f}"), ("last token s", lambda r: r.summary.duration_s, "{:.1f}"))


def print_pair(scheduler: str, vidur: SideRun, harness: SideRun) -> None:
    print(f"\n{scheduler}: {'':<18}{'Vidur':>12}{'harness':>12}{'harness/Vidur':>15}")
    for name, get, fmt in ROWS:
        v, h = float(get(vidur)), float(get(harness))
        ratio = h / v if v not in (0.0,) and np.isfinite(v) and np.isfinite(h) else float("nan")
        print(f"  {name:<25}{fmt.format(v):>12}{fmt.format(h):>12}{ratio:>14.2f}x")
    per_it = [(side.loop.wall_s / side.iterations, side.loop.cpu_s / side.iterations) for side in (vidur, harness)]
    print(f"  per iteration the harness is {per_it[0][0] / per_it[1][0]:.1f}x faster than Vidur in wall time, "
          f"{per_it[0][1] / per_it[1][1]:.1f}x in CPU time; per process {vidur.process.wall_s / harness.process.wall_s:.1f}x "
          f"in wall time, {vidur.process.cpu_s / harness.process.cpu_s:.1f}x in CPU time")


def parse_args(argv: list[str] | None = None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vidur", type=Path, required=True, help="a microsoft/vidur checkout")
    ap.add_argument("--vidur-python", required=True, help="the python of Vidur's own venv")
    ap.add_argument("--scheduler", nargs="+", default=["sarathi", "vllm"], choices=["sarathi", "vllm"])
    ap.add_argument("--requests", type=int, default=2048)
    ap.add_argument("--qps", type=float, default=1.0)
    ap.add_argument("--budget", type=int, default=512, help="Sarathi's token budget (Vidur: chunk_size)")
    ap.add_argument("--repeats", type=int, default=1, help="unlogged runs a side; the fastest loop is reported")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a harness override (Hydra)")
    ap.add_argument("--vidur-arg", action="append", default=[], metavar="FLAG", help="an extra flag for Vidur")
    ap.add_argument("--no-cpu-costs", action="store_true",
                    help="price the harness's iterations without the engine's CPU costs, as Vidur's default run")
    ap.add_argument("--records", type=Path, help="write both sides' per-iteration records here and compare them")
    args = ap.parse_args(argv)
    args.vidur = args.vidur.resolve()
    if not (args.vidur / "vidur" / "simulator.py").is_file():
        fail(f"--vidur {args.vidur}: not a Vidur checkout (vidur/simulator.py missing)", 2)
    att = args.vidur / ATTENTION
    if not att.is_file() or att.open("rb").read(len(LFS_POINTER)) == LFS_POINTER:
        fail(f"{att}: missing or a Git LFS pointer; copy ../shared/profiles/vidur/compute/a100/meta-llama/"
             f"Llama-2-70b-hf/attention.csv there", 2)
    if subprocess.run([args.vidur_python, "-c", "import sklearn, pandas, fasteners"], capture_output=True).returncode:
        fail(f"--vidur-python {args.vidur_python}: cannot import Vidur's requirements (sklearn, pandas, fasteners)", 2)
    if args.requests < 1 or not args.qps > 0 or args.repeats < 1 or args.budget < 1:
        fail("--requests, --qps, --repeats and --budget must be positive", 2)
    if args.records:
        args.records.mkdir(parents=True, exist_ok=True)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    print(f"Vidur {args.vidur} beside the harness: Llama-2-70B TP2 A100, splitwise_conv, {args.requests} requests at "
          f"{args.qps:g} QPS, Sarathi budget {args.budget}; harness overrides: {' '.join(args.set) or 'none'}"
          f"{', no CPU costs' if args.no_cpu_costs else ''}; Vidur flags: {' '.join(args.vidur_arg) or 'none'}; "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench_vidur_") as tmp:
        work = Path(tmp)
        for scheduler in args.scheduler:
            vidur, harness, plan, perf_cfg, logged = compare_side_by_side(args, scheduler, work)
            print_pair(scheduler, vidur, harness)
            if args.records:
                compare_iterations(plan, perf_cfg, scheduler, logged, args.records)
    print(f"\nload at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
