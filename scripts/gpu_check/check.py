"""The GPU check behind scripts/gpu_check.sh (see there for usage). Phases, each timed and
skipped with a note when the budget runs short:

1. environment: torch / CUDA / GPU, which attention backends are importable and which was chosen;
2. correctness on the device: a small model's chunked prefill (chunks 1, 7, 16, 64) against a
   full prefill, and the chosen backend against the reference backend, in the run's dtype;
3. the model: a random-weight Mistral-7B-shaped model (engines.perf catalog shapes), fp16;
4. iterations: measured step times of a few batch shapes (the paper's SLO-defining decode
   iteration among them) next to the performance model's prediction;
5. serving: one Poisson workload per policy through make_engine + TorchExecutor on the real clock,
   and the same arrivals through the simulator with the performance model; throughput,
   TTFT and TBT side by side;
6. sarathi23 batches: the first Sarathi paper's three basic batches on a LLaMA-13B-shaped model
   (sarathi_batches.py), measured beside the model's prediction, and the decode speedup of each.

Writes gpu_check.json and serving.csv / iterations.csv to --out.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from engines.executors.base import SamplingParams  # noqa: E402
from engines.executors.torch import TorchExecutor  # noqa: E402
from engines.executors.torch.loop import OfflineRequest, run_realtime  # noqa: E402
from engines.schedulers import EngineConfig, SchedulerConfig, make_engine  # noqa: E402
from harness.records import RequestRecord, RequestSpec  # noqa: E402

T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


# A CUDA device name (upper case) -> the performance model's GPU: the first row whose words are all
# in the name and whose excluded words are not (so H100 PCIe before H100, H200 before H20).
_GPU_NAMES = (
    (("H200",), (), "h200-141g"), (("H100", "PCIE"), (), "h100-80g-pcie"), (("H100",), (), "h100-80g-sxm"),
    (("H20",), (), "h20-96g"), (("B200",), (), "b200-180g"),
    (("RTX PRO 6000", "SERVER"), ("MAX-Q",), "rtx-pro-6000-server-96g"),
    (("RTX PRO 6000",), ("MAX-Q",), "rtx-pro-6000-ws-96g"),  # "... Workstation Edition"
    (("RTX 4090",), (), "rtx-4090-24g"), (("L40S",), (), "l40s-48g"),
    (("A100", "PCIE"), (), "a100-80g-pcie"), (("A100",), (), "a100-80g-sxm"), (("A40",), (), "a40-48g"),
    (("A6000",), (), "rtx-a6000-48g"),
)


def gpu_catalog_key(name: str) -> str | None:
    """The performance model's GPU for a CUDA device name (None: not in the catalog)."""
    n = name.upper()
    return next((gpu for need, avoid, gpu in _GPU_NAMES if all(w in n for w in need) and not any(w in n for w in avoid)),
                None)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "gpu_check")
    ap.add_argument("--tiny", action="store_true", help="CPU, tiny model, small workload: the pipeline without a GPU")
    ap.add_argument("--model", default=None, help="catalog name or HF directory (default mistral-7b; tiny-llama with --tiny)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--gpu", default=None, help="performance-model GPU (default: detected; h200-141g on CPU)")
    ap.add_argument("--policies", default="sarathi,vllm")
    ap.add_argument("--requests", type=int, default=None)
    ap.add_argument("--qps", default=None,
                    help="request rate(s) of the serving phase, comma-separated (each rate one run per policy)")
    ap.add_argument("--prompt-median", type=int, default=None)
    ap.add_argument("--prompt-max", type=int, default=None)
    ap.add_argument("--output-median", type=int, default=None)
    ap.add_argument("--output-max", type=int, default=None)
    ap.add_argument("--token-budget", type=int, default=512, help="sarathi token budget (the paper's strict setting)")
    ap.add_argument("--max-num-seqs", type=int, default=128)
    ap.add_argument("--kv-tokens", type=int, default=None, help="KV capacity (default 262144 on GPU; 0 = all free memory)")
    ap.add_argument("--attention-backend", default="auto")
    ap.add_argument("--budget-s", type=float, default=450.0, help="stop starting phases after this")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    tiny = a.tiny
    a.model = a.model or ("tiny-llama" if tiny else "mistral-7b")
    a.device = a.device or ("cpu" if tiny else ("cuda" if torch.cuda.is_available() else "cpu"))
    a.dtype = a.dtype or ("float32" if a.device == "cpu" else "float16")
    a.requests = a.requests or (16 if tiny else 128)
    a.qps = [float(q) for q in str(a.qps).split(",")] if a.qps else [8.0 if tiny else 6.0]
    a.prompt_median = a.prompt_median or (64 if tiny else 512)
    a.prompt_max = a.prompt_max or (256 if tiny else 2048)
    a.output_median = a.output_median or (16 if tiny else 128)
    a.output_max = a.output_max or (32 if tiny else 384)
    if a.kv_tokens is None:
        a.kv_tokens = 16384 if a.device == "cpu" else 262144
    return a


def make_workload(a: argparse.Namespace, qps: float) -> list[RequestSpec]:
    """Poisson arrivals; lognormal prompt and output lengths around the medians, clipped."""
    rng = np.random.default_rng(a.seed)
    gaps = rng.exponential(1.0 / qps, a.requests)
    arrivals = np.cumsum(gaps) - gaps[0]
    prompts = np.clip(np.round(rng.lognormal(math.log(a.prompt_median), 0.8, a.requests)), 8, a.prompt_max)
    outputs = np.clip(np.round(rng.lognormal(math.log(a.output_median), 0.6, a.requests)), 2, a.output_max)
    return [RequestSpec(i, float(t), int(p), int(o)) for i, (t, p, o) in enumerate(zip(arrivals, prompts, outputs))]


# ---------------------------------------------------------------------------------- phases
def phase_environment(a) -> dict:
    from engines.executors.torch.attention import BACKENDS

    env = {"torch": torch.__version__, "device": a.device, "dtype": a.dtype, "cuda": torch.version.cuda,
           "python": sys.version.split()[0]}
    if a.device.startswith("cuda"):
        props = torch.cuda.get_device_properties(0)
        env.update(gpu_name=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1),
                   gpu_count=torch.cuda.device_count())
    dev, dt = torch.device(a.device), getattr(torch, a.dtype)
    env["attention_backends_available"] = [n for n, b in BACKENDS.items() if b.available(dev, dt)]
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception:
        env["triton"] = None
    return env


def phase_correctness(a) -> dict:
    """Chunked vs full prefill on the device with the auto-chosen backend, and that backend vs the
    reference, on a small Mistral-like model (sliding window shorter than the prompt)."""
    from engines.executors.torch.attention import BACKENDS, self_check
    from engines.executors.torch.model_runner import ModelRunner
    from engines.executors.torch.plan import StepItem, StepPlan
    from engines.models import ModelConfig

    cfg = ModelConfig(family="llama", vocab_size=512, hidden_size=256, num_layers=2, num_heads=8, num_kv_heads=2,
                      head_dim=32, intermediate_size=512, sliding_window=48, name="check-mistral-like")
    dev, dt = torch.device(a.device), getattr(torch, a.dtype)
    runner = ModelRunner(cfg, dtype=dt, device=dev, block_size=16, attention_backend=a.attention_backend)
    runner.allocate_kv(64)
    prompt = torch.randint(3, 512, (160,), generator=torch.Generator().manual_seed(1)).tolist()

    def logits(chunk: int, first_block: int, backend) -> torch.Tensor:
        runner.backend = backend
        table = tuple(range(first_block, first_block + 10))
        rows = []
        for s in range(0, len(prompt), chunk):
            item = StepItem(0, tuple(prompt[s:s + chunk]), s, table, False, SamplingParams())
            inputs = runner.prepare(StepPlan(0, (item,)))
            with torch.inference_mode():
                rows.append(runner.model.compute_logits(runner.forward(inputs)).float())
        return torch.cat(rows)

    chosen = runner.backend
    ref = logits(len(prompt), 0, BACKENDS["reference"]())
    out = {"backend": chosen.name, "chunks": {}}
    tol = 1e-3 if dt == torch.float32 else 5e-2
    scale = float(ref.abs().max())
    ok = True
    for chunk in (1, 7, 16, 64, len(prompt)):
        err = float((logits(chunk, 20, chosen) - ref).abs().max()) / scale
        out["chunks"][chunk] = err
        ok &= err <= tol
    out["backend_vs_reference_attention"] = self_check(chosen, dev, dt, 8, 2, 128, window=48)
    out["tolerance_relative"] = tol
    out["passed"] = bool(ok)
    return out


def phase_model(a) -> TorchExecutor:
    return TorchExecutor.from_config(model=a.model, dtype=a.dtype, device=a.device, block_size=16,
                                     kv_capacity_tokens=a.kv_tokens or None, attention_backend=a.attention_backend,
                                     seed=a.seed)


def perf_model(a, executor):
    from engines.perf import Deployment, PerfModel

    gpu = a.gpu
    if gpu is None:
        gpu = gpu_catalog_key(torch.cuda.get_device_properties(0).name) if a.device.startswith("cuda") else "h200-141g"
    if gpu is None:
        return None, None
    model = a.model if not Path(a.model).is_dir() else None
    if model is None:
        from engines.perf.architectures import ModelArch

        model = ModelArch.from_hf_config(a.model)
    return PerfModel(Deployment.create(model=model, gpu=gpu)), gpu


def phase_iterations(a, executor, perf) -> list[dict]:
    from harness.profile.iteration import IterationBench
    from harness.profile.ops import measure

    # The paper's SLO-defining decode iteration (batch 32 at 4k context), a large decode batch,
    # two prefills and a Sarathi hybrid batch; scaled down with --tiny.
    c_long, c_mid, chunk, long_prefill, big_batch = (4096, 1024, 512, 2048, 128) if not a.tiny else (256, 128, 64, 128, 16)
    shapes = [
        (f"decode b=32 c={c_long}", [(c_long, 1)] * 32),
        (f"decode b={big_batch} c={c_mid}", [(c_mid, 1)] * big_batch),
        (f"prefill {chunk}", [(0, chunk)]),
        (f"prefill {long_prefill}", [(0, long_prefill)]),
        (f"mixed {chunk}-chunk + 31 decodes c={2 * c_mid}", [(2 * c_mid, chunk)] + [(2 * c_mid, 1)] * 31),
    ]
    bench = IterationBench(executor)
    rows = []
    for name, items in shapes:
        if not bench.fits(items):
            rows.append({"shape": name, "note": "KV cache too small"})
            continue
        med, best = measure(bench.batch(items), torch.device(a.device), warmup=2, repeats=5)
        row = {"shape": name, "measured_s": med, "measured_min_s": best}
        if perf is not None:
            row["predicted_s"] = perf.iteration_time([n for _, n in items], [c for c, _ in items])
            row["measured_over_predicted"] = med / row["predicted_s"]
        rows.append(row)
        log(f"  {name:<40} measured {med * 1e3:8.2f} ms" +
            (f"   predicted {row['predicted_s'] * 1e3:8.2f} ms" if "predicted_s" in row else ""))
    bench.release()
    return rows


def scheduler_config(a, policy: str, max_model_len: int) -> SchedulerConfig:
    if policy in ("orca", "fastertransformer"):
        return SchedulerConfig(policy, max_num_seqs=16)
    if policy == "vllm":
        return SchedulerConfig(policy, max_num_seqs=a.max_num_seqs, max_num_batched_tokens=max_model_len)
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


def phase_serving(a, executor, perf, specs, deadline: float, qps: float) -> list[dict]:
    from harness.backends.sim import simulate
    from harness.validate.runfile import write_jsonl

    max_model_len = max(a.prompt_max + a.output_max, 512)
    max_model_len = 1 << (max_model_len - 1).bit_length()  # a power of two, like the paper's 4k/8k/16k
    rows = []
    reqs = [OfflineRequest(s.request_id, None, s.output_len, prompt_len=s.prompt_len, arrival_s=s.arrival_s)
            for s in specs]
    for policy in a.policies.split(","):
        cfg = scheduler_config(a, policy, max_model_len)
        left = deadline - time.monotonic()
        if left < 30:
            log(f"  {policy}: skipped, {left:.0f}s of budget left")
            continue
        engine = make_engine(EngineConfig(cfg, executor.kv_capacity_tokens, max_model_len))
        t = time.monotonic()
        stats = run_realtime(engine, executor, reqs, time_limit_s=left - 20)
        wall = time.monotonic() - t
        measured = records_from_stats(specs, stats)
        write_jsonl(a.out / f"requests_{policy}_qps{qps:g}.jsonl", measured)  # the run file validate reads
        rows.append(summary_row(policy, "torch", measured, stats.iterations, wall) | {"qps": qps})
        if perf is not None:
            sim_engine = make_engine(EngineConfig(cfg, executor.kv_capacity_tokens, max_model_len))
            rows.append(summary_row(policy, "perf-model", simulate(specs, sim_engine, perf), None, None) | {"qps": qps})
        for r in rows[-2:]:
            log(f"  {r['policy']:<9} {r['source']:<10} {r['output_tok_per_s']:9.1f} tok/s  TTFT p50 "
                f"{r['ttft_p50_s']:.3f}s p99 {r['ttft_p99_s']:.3f}s  TBT p50 {r['tbt_p50_s'] * 1e3:.1f}ms "
                f"p99 {r['tbt_p99_s'] * 1e3:.1f}ms  done {r['completed']}/{r['requests']}")
    return rows


def print_table(rows: list[dict]) -> None:
    cols = ("policy", "qps", "source", "completed", "output_tok_per_s", "ttft_p50_s", "ttft_p99_s", "tbt_p50_s",
            "tbt_p99_s", "sched_delay_p50_s", "preemptions")
    print("\n" + "  ".join(f"{c:>16}" for c in cols))
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c)
            cells.append(f"{v:>16.4g}" if isinstance(v, float) else f"{str(v):>16}")
        print("  ".join(cells))


def write_csv(path: Path, rows: list[dict]) -> None:
    import csv
    if rows:
        keys = sorted({k for r in rows for k in r}, key=lambda k: list(rows[0]).index(k) if k in rows[0] else 99)
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.tiny:
        torch.set_num_threads(1)  # small shared CPUs: OpenMP spinning costs more than it gives
    a.out.mkdir(parents=True, exist_ok=True)
    deadline = T0 + a.budget_s
    report: dict = {"args": {k: str(v) for k, v in vars(a).items()}, "phases": {}}
    ok = True

    def phase(name, fn, *args):
        nonlocal ok
        if time.monotonic() > deadline:
            report["phases"][name] = {"skipped": "out of budget"}
            log(f"{name}: skipped (out of budget)")
            ok = False
            return None
        log(f"{name} ...")
        t = time.monotonic()
        try:
            result = fn(*args)
        except Exception as exc:
            ok = False
            report["phases"][name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
            log(f"{name}: FAILED: {exc}")
            traceback.print_exc()
            return None
        report["phases"][name] = {"seconds": round(time.monotonic() - t, 2)}
        return result

    env = phase("environment", phase_environment, a)
    report["environment"] = env
    log(f"  {env}")
    corr = phase("correctness", phase_correctness, a)
    report["correctness"] = corr
    if corr is not None:
        log(f"  backend {corr['backend']}: chunked-vs-full relative errors {corr['chunks']}, "
            f"attention vs reference {corr['backend_vs_reference_attention']:.2e} -> "
            f"{'PASS' if corr['passed'] else 'FAIL'}")
        ok &= corr["passed"]
    executor = phase("model", phase_model, a)
    if executor is None:
        return _finish(a, report, False)
    report["model"] = {"name": executor.config.name, "layers": executor.config.num_layers,
                       "kv_capacity_tokens": executor.kv_capacity_tokens, "attention_backend": executor.attention_backend}
    log(f"  {report['model']}")
    perf, gpu = perf_model(a, executor)
    report["perf_model_gpu"] = gpu
    report["iterations"] = phase("iterations", phase_iterations, a, executor, perf)
    serving, report["workload"] = [], []
    for qps in a.qps:
        specs = make_workload(a, qps)
        report["workload"].append({"requests": len(specs), "qps": qps, "span_s": specs[-1].arrival_s,
                                   "prompt_tokens": sum(s.prompt_len for s in specs),
                                   "output_tokens": sum(s.output_len for s in specs)})
        log(f"  workload {report['workload'][-1]}")
        serving += phase(f"serving at {qps:g} QPS", phase_serving, a, executor, perf, specs, deadline, qps) or []
    report["serving"] = serving
    executor.close()
    from scripts.gpu_check.sarathi_batches import run as sarathi_batches  # the repo root is on sys.path (above)
    report["sarathi23_batches"] = phase("sarathi23 batches", sarathi_batches, a, gpu, log)
    if serving:
        print_table(serving)
        write_csv(a.out / "serving.csv", serving)
    if report.get("iterations"):
        write_csv(a.out / "iterations.csv", report["iterations"])
    ok &= bool(serving) and all(r["completed"] == r["requests"] for r in serving if r["source"] == "torch")
    return _finish(a, report, ok)


def _finish(a, report: dict, ok: bool) -> int:
    report["passed"] = bool(ok)
    report["total_s"] = round(time.monotonic() - T0, 1)
    (a.out / "gpu_check.json").write_text(json.dumps(report, indent=2, default=str))
    log(f"{'PASSED' if ok else 'FAILED'}; report in {a.out / 'gpu_check.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
