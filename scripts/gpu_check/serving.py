"""The GPU check's serving phase (check.py): one Poisson workload per rate, served by the torch
engine under each policy (make_engine + TorchExecutor on the real clock) and the same arrivals
through the simulator priced by the performance model (vLLM 0.32 on the detected GPU). Each
measured run is written as a run file, one request a line (requests_<policy>_qps<rate>.jsonl),
the input `python -m harness validate` and `calibrate` read (docs/validate.md)."""
from __future__ import annotations

import math
import time

import numpy as np

from harness.records import RequestRecord, RequestSpec


def make_workload(a, qps: float) -> list[RequestSpec]:
    """Poisson arrivals; lognormal prompt and output lengths around the medians, clipped."""
    rng = np.random.default_rng(a.seed)
    gaps = rng.exponential(1.0 / qps, a.requests)
    arrivals = np.cumsum(gaps) - gaps[0]
    prompts = np.clip(np.round(rng.lognormal(math.log(a.prompt_median), 0.8, a.requests)), 8, a.prompt_max)
    outputs = np.clip(np.round(rng.lognormal(math.log(a.output_median), 0.6, a.requests)), 2, a.output_max)
    return [RequestSpec(i, float(t), int(p), int(o)) for i, (t, p, o) in enumerate(zip(arrivals, prompts, outputs))]


def max_model_len(a) -> int:
    """A power of two (like the paper's 4k/8k/16k) holding the longest prompt and output."""
    n = max(a.prompt_max + a.output_max, 512)
    return 1 << (n - 1).bit_length()


def scheduler_config(a, policy: str):
    from engines.schedulers import SchedulerConfig

    if policy in ("orca", "fastertransformer"):
        return SchedulerConfig(policy, max_num_seqs=16)
    if policy == "vllm":
        return SchedulerConfig(policy, max_num_seqs=a.max_num_seqs, max_num_batched_tokens=max_model_len(a))
    return SchedulerConfig(policy, max_num_seqs=a.max_num_seqs, token_budget=a.token_budget)


def records_from_stats(specs: list[RequestSpec], stats) -> list[RequestRecord]:
    out = []
    nan = float("nan")
    for s in specs:
        times = np.array(stats.token_times_s.get(s.request_id, []), dtype=np.float64)
        done = s.request_id not in stats.unfinished and len(times) == s.output_len
        out.append(RequestRecord(
            request_id=s.request_id, arrival_s=s.arrival_s, prompt_len=s.prompt_len, output_len=s.output_len,
            first_scheduled_s=stats.first_scheduled_s.get(s.request_id, nan),
            first_token_s=float(times[0]) if len(times) else nan,
            finished_s=float(times[-1]) if done else nan, token_times_s=times,
            num_preemptions=stats.num_preemptions.get(s.request_id, 0),
            error=None if done else "unfinished at time limit"))
    return out


def summary_row(policy: str, source: str, records, iterations: int | None, wall: float | None) -> dict:
    from harness.metrics import summarize

    s = summarize(records)
    return {"policy": policy, "source": source, "completed": s.num_completed, "requests": s.num_requests,
            "output_tok_per_s": s.output_token_throughput, "req_per_s": s.request_throughput,
            "ttft_p50_s": s.ttft.p50, "ttft_p99_s": s.ttft.p99, "tbt_p50_s": s.tbt.p50, "tbt_p99_s": s.tbt.p99,
            "sched_delay_p50_s": s.scheduling_delay.p50, "preemptions": s.num_preemptions,
            "iterations": iterations, "wall_s": wall}


def step_paths(log) -> str:
    """Shares of a run's steps by path: graph (decode / mixed), static, eager."""
    if not log:
        return "-"
    counts: dict[str, int] = {}
    for r in log:
        key = {"graph": f"g{(r.graph or '?')[0].upper()}", "static": "static"}.get(r.mode, "eager")
        counts[key] = counts.get(key, 0) + 1
    return " ".join(f"{k} {100 * v / len(log):.0f}%" for k, v in sorted(counts.items()))


def phase_serving(a, executor, perf, deadline: float, log) -> list[dict]:
    """Every (rate, policy) run, each given an equal share of the time left, less 10 s to drain."""
    from engines.executors.torch.loop import OfflineRequest, run_realtime
    from engines.schedulers import EngineConfig, make_engine
    from harness.backends.sim import simulate
    from harness.validate.runfile import write_jsonl

    runs = [(qps, policy) for qps in a.qps for policy in a.policies]
    rows = []
    # Compile the attention buckets the runs meet outside the graphs now, in at most a fifth of the
    # phase; a bucket first met in a run compiles there, and the row's "new shapes" says so.
    t = time.monotonic()
    warmed = executor.warm_up(a.max_num_seqs, max(a.token_budget, a.prompt_max), t + (deadline - t) / 5)
    log(f"  warm-up: {warmed} attention shapes in {time.monotonic() - t:.1f}s")
    for i, (qps, policy) in enumerate(runs):
        specs = make_workload(a, qps)
        left = deadline - time.monotonic()
        share = left / (len(runs) - i) - 10
        if share < 5:
            rows.append({"policy": policy, "qps": qps, "source": "torch", "skipped": f"{left:.0f}s of budget left"})
            log(f"  {policy} at {qps:g} QPS: skipped, {left:.0f}s of budget left")
            continue
        cfg = scheduler_config(a, policy)
        engine = make_engine(EngineConfig(cfg, executor.kv_capacity_tokens, max_model_len(a)))
        reqs = [OfflineRequest(s.request_id, None, s.output_len, prompt_len=s.prompt_len, arrival_s=s.arrival_s)
                for s in specs]
        executor.step_log.clear()
        seen = executor.attention_shapes
        t = time.monotonic()
        stats = run_realtime(engine, executor, reqs, time_limit_s=share)
        wall = time.monotonic() - t
        measured = records_from_stats(specs, stats)
        write_jsonl(a.out / f"requests_{policy}_qps{qps:g}.jsonl", measured)  # the run file validate reads
        rows.append(summary_row(policy, "torch", measured, stats.iterations, wall)
                    | {"qps": qps, "steps": step_paths(executor.step_log), "new_shapes": executor.attention_shapes - seen})
        if perf is not None:
            sim_engine = make_engine(EngineConfig(cfg, executor.kv_capacity_tokens, max_model_len(a)))
            rows.append(summary_row(policy, "model", simulate(specs, sim_engine, perf), None, None) | {"qps": qps})
        for r in rows[-2:]:
            log(f"  {r['policy']:<8} {qps:g} QPS {r['source']:<6} {r['output_tok_per_s']:9.1f} tok/s  TTFT p50 "
                f"{r['ttft_p50_s']:.3f}s  TBT p50 {r['tbt_p50_s'] * 1e3:.1f}ms p99 {r['tbt_p99_s'] * 1e3:.1f}ms  "
                f"done {r['completed']}/{r['requests']}")
    return rows


COLUMNS = (("policy", "policy", "{}"), ("qps", "QPS", "{:g}"), ("source", "source", "{}"),
           ("completed", "done", "{}"), ("output_tok_per_s", "tok/s", "{:.1f}"), ("ttft_p50_s", "TTFT p50 s", "{:.3f}"),
           ("ttft_p99_s", "TTFT p99 s", "{:.3f}"), ("tbt_p50_s", "TBT p50 ms", "{:.1f}"),
           ("tbt_p99_s", "TBT p99 ms", "{:.1f}"), ("sched_delay_p50_s", "sched p50 s", "{:.3f}"),
           ("new_shapes", "new shapes", "{}"), ("steps", "steps", "{}"))


def render(rows: list[dict], config: str) -> str:
    lines = [f"serving: Poisson arrivals, the torch engine ({config}) beside the simulator priced by the model; "
             "new shapes: attention buckets compiled during the run (their compilation is in its times)",
             "  ".join(f"{h:>11}" for _, h, _ in COLUMNS)]
    for r in rows:
        if "skipped" in r:
            lines.append(f"{r['policy']:>11}  {r['qps']:>11g}  {'torch':>11}  skipped: {r['skipped']}")
            continue
        cells = []
        for key, _, fmt in COLUMNS:
            v = r.get(key)
            if v is None or (isinstance(v, float) and math.isnan(v)):
                cells.append(f"{'-':>11}")
                continue
            if key == "completed":
                v = f"{v}/{r['requests']}"
            cells.append(f"{fmt.format(v * 1e3 if key.startswith('tbt') else v):>11}")
        lines.append("  ".join(cells))
    return "\n".join(lines)
