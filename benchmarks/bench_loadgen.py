"""Load generator capacity: how fast can the client keep its schedule and read streams?

Against the in-repo server with the null executor (iterations take zero time, so the server is
as fast as Python serves HTTP), pinned to the last core:

1. sustained rate: constant-rate runs at rising rates (short requests); the highest rate whose
   P99 dispatch lag (actual - planned send) stays <= 1 ms with no failed request (the client may
   use every core but the server's: its pacer thread and event loop must not share one core);
2. SSE events per second: a closed loop of long streams with the client pinned to one core;
   events read per second of wall time, and per second of the client's own CPU time (what one
   fully busy core would consume);
3. side by side, when a vLLM venv is present (HARNESS_VLLM_PYTHON): `vllm bench serve` against the
   same server at the same rates, its achieved throughput and TTFT next to ours.

    python benchmarks/bench_loadgen.py [--seconds 3] [--rates 50,100,200,400,800] [--no-pin]

Numbers depend on the host; on a shared machine, note the load average printed first.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.backends.live.lifecycle import LaunchSpec, ServerProcess, free_port  # noqa: E402
from harness.loadgen import LoadOptions, run_load  # noqa: E402
from harness.metrics import summarize  # noqa: E402
from harness.records import RequestSpec  # noqa: E402

PROMPT_LEN, OUTPUT_LEN = 32, 4


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _requests(n: int, rate: float | None, prompt: int, output: int) -> list[RequestSpec]:
    rng = np.random.default_rng(0)
    return [RequestSpec(i, 0.0 if rate is None else i / rate, prompt, output,
                        tuple(int(x) for x in rng.integers(3, 32000, prompt))) for i in range(n)]


REALTIME = [False]


def rate_sweep(base_url: str, rates: list[float], seconds: float) -> list[dict]:
    rows = []
    for rate in rates:
        n = max(50, int(rate * seconds))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = run_load(_requests(n, rate, PROMPT_LEN, OUTPUT_LEN),
                           LoadOptions(base_url=base_url, model="tiny", progress=False, realtime_priority=REALTIME[0]))
        s = summarize(res.records)
        lag = res.dispatch_lag_s[np.isfinite(res.dispatch_lag_s)]
        rows.append({
            "rate": rate, "requests": n, "errors": sum(r.error is not None for r in res.records),
            "lag_p50_ms": float(np.median(lag)) * 1e3, "lag_p99_ms": float(np.quantile(lag, 0.99)) * 1e3,
            "lag_max_ms": float(lag.max()) * 1e3, "achieved_rps": s.request_throughput,
            "ttft_p50_ms": s.ttft.p50 * 1e3,
        })
        r = rows[-1]
        print(f"  {rate:7.0f} req/s  n={n:5d}  lag p50 {r['lag_p50_ms']:6.3f} ms  p99 {r['lag_p99_ms']:7.3f} ms  "
              f"max {r['lag_max_ms']:7.2f} ms  errors {r['errors']}  TTFT p50 {r['ttft_p50_ms']:6.2f} ms", flush=True)
    return rows


def events_per_second(base_url: str, concurrency: int, requests: int, output: int) -> dict:
    reqs = _requests(requests, None, PROMPT_LEN, output)
    cpu0, t0 = _cpu_s(), time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = run_load(reqs, LoadOptions(base_url=base_url, model="tiny", progress=False, concurrency=concurrency))
    wall, cpu = time.monotonic() - t0, _cpu_s() - cpu0
    events = int(res.num_events.sum())
    tokens = sum(len(r.token_times_s) for r in res.records)
    return {"events": events, "tokens": tokens, "wall_s": wall, "client_cpu_s": cpu,
            "events_per_s": events / wall, "events_per_cpu_s": events / cpu,
            "errors": sum(r.error is not None for r in res.records)}


def vllm_bench(vllm_python: str, base_url: str, tokenizer: str, rate: float, n: int, pin: list[str]) -> dict | None:
    vllm = Path(vllm_python).parent / "vllm"
    out = Path(tempfile.mkdtemp(prefix="vllm-bench-"))
    cmd = [*pin, str(vllm), "bench", "serve", "--backend", "vllm", "--base-url", base_url, "--model", "tiny",
           "--tokenizer", tokenizer, "--dataset-name", "random", "--random-input-len", str(PROMPT_LEN),
           "--random-output-len", str(OUTPUT_LEN), "--num-prompts", str(n), "--request-rate", str(rate),
           "--ignore-eos", "--disable-tqdm", "--save-result", "--result-dir", str(out), "--result-filename", "r.json",
           "--seed", "0"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    f = out / "r.json"
    if p.returncode != 0 or not f.exists():
        print(f"  vllm bench serve failed ({p.returncode}): {(p.stderr or p.stdout)[-800:]}")
        return None
    r = json.loads(f.read_text())
    return {"rate": rate, "completed": r.get("completed"), "achieved_rps": r.get("request_throughput"),
            "ttft_p50_ms": r.get("median_ttft_ms"), "itl_p50_ms": r.get("median_itl_ms")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="length of each constant-rate run")
    ap.add_argument("--rates", default="50,100,200,400,800,1200")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--stream-requests", type=int, default=128)
    ap.add_argument("--stream-tokens", type=int, default=256)
    ap.add_argument("--vllm-rates", default="50,200")
    ap.add_argument("--no-pin", action="store_true", help="do not pin client and server to separate cores")
    ap.add_argument("--realtime", action="store_true", help="client threads under SCHED_FIFO (root)")
    ap.add_argument("--json", help="write all figures here")
    args = ap.parse_args()
    REALTIME[0] = args.realtime

    print(f"host: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}", flush=True)
    pin_ok = not args.no_pin and shutil.which("taskset") and len(os.sched_getaffinity(0)) >= 2
    last = max(os.sched_getaffinity(0)) if pin_ok else 0
    server_pin = ["taskset", "-c", str(last)] if pin_ok else []
    client_pin = ["taskset", "-c", "0"] if pin_ok else []
    all_cores = os.sched_getaffinity(0)
    port = free_port()
    cmd = [*server_pin, sys.executable, "-m", "engines.server", "--model", "tiny", "--executor", "null",
           "--port", str(port), "--max-num-seqs", "256", "--kv-capacity-tokens", str(1 << 20)]
    spec = LaunchSpec(cmd, f"http://127.0.0.1:{port}", model="tiny", cwd=str(ROOT), env={"PYTHONPATH": str(ROOT)})
    figures: dict = {"pinned": bool(pin_ok), "realtime_priority": args.realtime, "load_average": os.getloadavg()[0]}
    with ServerProcess(spec) as srv:
        print(f"in-repo server, null executor, {'server pinned to core 1' if pin_ok else 'unpinned'}"
              f"{', client SCHED_FIFO' if args.realtime else ''}")
        print(f"1. constant-rate runs ({PROMPT_LEN}-token prompts, {OUTPUT_LEN} output tokens):", flush=True)
        rows = rate_sweep(srv.base_url, [float(r) for r in args.rates.split(",")], args.seconds)
        ok = [r["rate"] for r in rows if r["lag_p99_ms"] <= 1.0 and r["errors"] == 0]
        figures["sweep"] = rows
        figures["sustained_rate_p99_lag_le_1ms"] = max(ok) if ok else 0.0
        print(f"   highest rate with P99 dispatch lag <= 1 ms: {figures['sustained_rate_p99_lag_le_1ms']:.0f} req/s")

        print(f"2. SSE events: closed loop, {args.concurrency} streams of {args.stream_tokens} tokens:", flush=True)
        if pin_ok:  # the client's threads (created from now on) on core 0 only
            os.sched_setaffinity(0, {0})
        ev = events_per_second(srv.base_url, args.concurrency, args.stream_requests, args.stream_tokens)
        os.sched_setaffinity(0, all_cores)
        figures["events"] = ev
        print(f"   {ev['events']} events ({ev['tokens']} tokens) in {ev['wall_s']:.2f} s: {ev['events_per_s']:.0f} events/s; "
              f"client CPU {ev['client_cpu_s']:.2f} s -> {ev['events_per_cpu_s']:.0f} events per CPU-second (one core)")

        vllm_python = os.environ.get("HARNESS_VLLM_PYTHON")
        if vllm_python and Path(vllm_python).exists():
            tok = os.environ.get("HARNESS_VLLM_MODEL")
            if not tok:
                tok = tempfile.mkdtemp(prefix="tiny-llama-")
                subprocess.run([vllm_python, str(ROOT / "scripts" / "make_tiny_model.py"), tok], check=True,
                               capture_output=True)
            print("3. side by side with `vllm bench serve` (same server, same rates, random prompts):", flush=True)
            side = []
            for rate in [float(r) for r in args.vllm_rates.split(",")]:
                n = max(50, int(rate * args.seconds))
                theirs = vllm_bench(vllm_python, srv.base_url, tok, rate, n, client_pin)
                ours = next((r for r in rows if r["rate"] == rate), None) or rate_sweep(srv.base_url, [rate], args.seconds)[0]
                side.append({"rate": rate, "ours": ours, "vllm_bench": theirs})
                if theirs:
                    print(f"  {rate:6.0f} req/s  ours: achieved {ours['achieved_rps']:7.1f} req/s, TTFT p50 {ours['ttft_p50_ms']:6.2f} ms, "
                          f"P99 lag {ours['lag_p99_ms']:.3f} ms | vllm bench: achieved {theirs['achieved_rps']:7.1f} req/s, "
                          f"TTFT p50 {theirs['ttft_p50_ms']:6.2f} ms, completed {theirs['completed']}/{n}", flush=True)
            figures["vllm_bench_side_by_side"] = side
        else:
            print("3. skipped: set HARNESS_VLLM_PYTHON to a vLLM venv's python for the `vllm bench serve` comparison")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
