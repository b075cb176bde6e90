"""The torch engine's speed paths on a GPU, one call, one table (issue 53): eager (SDPA over the
gathered cache), FlexAttention over the paged cache, and flex + decode CUDA graphs + compiled
elementwise kernels, each iteration timed beside the performance model's price for vLLM 0.32 as
it ships (`perf.stack=vllm-0.32`) on the detected GPU.

    python scripts/gpu_speed_check.py                    # on the GPU machine (< 8 minutes on an H100)
    python scripts/gpu_speed_check.py --tiny             # the same pipeline on CPU, tiny model (tests)
    python scripts/gpu_speed_check.py --configs eager,graphs --budget-s 300 --out DIR

Shapes: the first Sarathi paper's three batches (prefill 1,024; 4 decodes at 1,024 of context;
1,021 prefill tokens + 3 decodes) and a grid of decodes (1, 8, 32, 128 sequences at 1k and 4k of
context, where the KV fits) and prefills (128, 512, 2,048 tokens); Mistral-7B-shaped random
weights, fp16. Before timing, each configuration serves a few greedy requests with a small fp32
model on the device; the tokens must equal the eager configuration's (exit 1 otherwise).

Compilation (flex per shape bucket, the elementwise kernels, graph capture) happens while an
executor is built and in each shape's warm-up runs, never inside the timed runs; shapes left when
--budget-s runs out are marked skipped (exit 1). Exit 2, one line: no CUDA (without --tiny) or a
bad argument. Writes speed_check.json to --out (default $OUT or results/gpu_speed_check).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CONFIGS = ("eager", "flex", "graphs")
STACK = "vllm-0.32"
T0 = time.monotonic()


class UsageError(Exception):
    """Bad arguments: one line and exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own usage errors: one line, exit 2 as well
        raise UsageError(message)


def parse_args(argv=None) -> argparse.Namespace:
    ap = _Parser(prog="gpu_speed_check", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated subset of {', '.join(CONFIGS)}")
    ap.add_argument("--model", default=None, help="catalog name (default mistral-7b; tiny-llama with --tiny)")
    ap.add_argument("--gpu", default=None, help="performance-model GPU (default: detected from the device name)")
    ap.add_argument("--kv-tokens", type=int, default=None, help="KV capacity (default 150,000; 4,096 with --tiny)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--budget-s", type=float, default=420.0, help="start no shape after this many seconds")
    ap.add_argument("--tiny", action="store_true", help="CPU, tiny model, small shapes: the pipeline without a GPU")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or ROOT / "results" / "gpu_speed_check"))
    a = ap.parse_args(argv)
    a.configs = [c.strip() for c in a.configs.split(",") if c.strip()]
    bad = [c for c in a.configs if c not in CONFIGS]
    if bad or not a.configs:
        raise UsageError(f"--configs: unknown {bad or 'empty'}; choose from {', '.join(CONFIGS)}")
    if a.repeats < 1 or a.budget_s <= 0:
        raise UsageError("--repeats must be >= 1 and --budget-s > 0")
    a.model = a.model or ("tiny-llama" if a.tiny else "mistral-7b")
    a.kv_tokens = a.kv_tokens or (4096 if a.tiny else 150_000)
    a.device, a.dtype = ("cpu", "float32") if a.tiny else ("cuda", "float16")
    return a


def shapes(tiny: bool) -> list[tuple[str, list[tuple[int, int]]]]:
    """(name, [(context_len, new_tokens), ...]) in table order."""
    from scripts.gpu_check.sarathi_batches import shapes as sarathi23

    paper = [(f"paper: {n}", items) for n, items in sarathi23(64 if tiny else 1024)[:3]]
    batches, contexts, prefills = ((1, 4), (32,), (16, 48)) if tiny else ((1, 8, 32, 128), (1024, 4096), (128, 512, 2048))
    grid = [(f"decode {b} x ctx {c}", [(c, 1)] * b) for c in contexts for b in batches]
    grid += [(f"prefill {n}", [(0, n)]) for n in prefills]
    return paper + grid


def executor_options(config: str, decode_sizes: tuple[int, ...], tiny: bool) -> dict:
    if config == "eager":
        return {"attention_backend": "sdpa"}
    if config == "flex":
        return {"attention_backend": "flex"}
    # Graphs at the decode sizes the shapes use (each one of vLLM's capture sizes), so capture time
    # stays inside the budget; elementwise compilation is skipped on CPU (tens of seconds there).
    return {"attention_backend": "flex", "cuda_graphs": True, "graph_sizes": decode_sizes,
            "compile_elementwise": not tiny}


def price_fn(a):
    """Seconds the performance model gives an iteration on this GPU under vLLM 0.32; None when the
    GPU is not in its catalog."""
    import torch

    from engines.perf import Deployment, PerfModel
    from scripts.gpu_check.check import gpu_catalog_key

    gpu = a.gpu or ("h100-80g-sxm" if a.tiny else gpu_catalog_key(torch.cuda.get_device_properties(0).name))
    if gpu is None:
        return None, None
    perf = PerfModel(Deployment.create(model=a.model, gpu=gpu, stack=STACK))
    return (lambda items: perf.iteration_time([n for _, n in items], [c for c, _ in items])), gpu


def same_tokens(a, config: str) -> dict[int, list[int]]:
    """Greedy outputs of a small fp32 model on the device under `config` (exactness check)."""
    from engines.executors.base import SamplingParams
    from engines.executors.torch import TorchExecutor
    from engines.executors.torch.loop import OfflineRequest, run_to_completion
    from engines.models import ModelConfig
    from engines.schedulers import EngineConfig, SchedulerConfig, make_engine

    cfg = ModelConfig(family="llama", vocab_size=512, hidden_size=256, num_layers=2, num_heads=8, num_kv_heads=2,
                      head_dim=32, intermediate_size=512, sliding_window=48, max_position_embeddings=512,
                      name="speed-check-small")
    # Graph sizes 4 and 32 and a 24-token budget: decode steps pad to 4, short chunks with decodes
    # (mixed steps) to 32, longer chunks run eagerly: every path of the configuration is exercised.
    opts = executor_options(config, (4, 32), a.tiny)
    with TorchExecutor(cfg, dtype="float32", device=a.device, kv_capacity_tokens=2048, **opts) as ex:
        engine = make_engine(EngineConfig(SchedulerConfig.shared("sarathi", max_num_seqs=4, token_budget=24),
                                          ex.kv_capacity_tokens, 512))
        reqs = [OfflineRequest(i, tuple(3 + (7 * i + 13 * j) % 500 for j in range(20 + 37 * i)), 12,
                               sampling=SamplingParams()) for i in range(4)]
        return run_to_completion(engine, ex, reqs).outputs


def measure_config(a, config: str, table: list[tuple[str, list]], deadline: float, log) -> tuple[dict, float]:
    """Per shape {s, min_s, mode, padded} (or skipped / error), and the seconds the executor took
    to build (weights, self-check, graph capture, elementwise compilation)."""
    import torch

    from engines.executors.torch import TorchExecutor
    from harness.profile.iteration import IterationBench
    from harness.profile.ops import measure

    decode_sizes = tuple(sorted({len(items) for _, items in table if all(n == 1 for _, n in items)}))
    t = time.monotonic()
    ex = TorchExecutor(a.model, dtype=a.dtype, device=a.device, kv_capacity_tokens=a.kv_tokens, block_size=16,
                       **executor_options(config, decode_sizes, a.tiny))
    startup = time.monotonic() - t
    log(f"{config}: executor ready in {startup:.1f}s (attention {ex.attention_backend})")
    bench, out = IterationBench(ex), {}
    try:
        for name, items in table:
            if time.monotonic() > deadline:
                out[name] = {"skipped": "out of budget"}
                continue
            if not bench.fits(items):
                out[name] = {"skipped": "KV cache too small"}
                continue
            try:  # warm-up runs first: they pay this shape's compilation
                med, best = measure(bench.batch(items), torch.device(a.device), warmup=3, repeats=a.repeats)
            except Exception as e:  # one shape's failure is reported, not the end of the table
                out[name] = {"error": f"{type(e).__name__}: {e}"}
                log(f"{config}: {name} FAILED: {out[name]['error']}")
                continue
            rec = ex.step_log[-1]
            out[name] = {"s": med, "min_s": best, "mode": rec.mode, "padded": rec.padded_tokens}
    finally:
        bench.release()
        ex.close()
        del ex
        if a.device == "cuda":
            torch.cuda.empty_cache()
    return out, startup


def render(table, results: dict, prices: dict, configs: list[str], gpu: str | None) -> str:
    head = [f"{'shape':<34}", f"{STACK + ' model':>16}"] + [f"{c + ' ms':>16}" for c in configs]
    head += [f"{c + '/model':>13}" for c in configs]
    lines = [f"model price: {STACK} on {gpu or 'no catalog GPU'}; 'g' = replayed CUDA graph, 's' = static "
             "buffers without capture, '*' = skipped, '!' = failed", "  ".join(head)]
    for name, _ in table:
        price = prices.get(name)
        cells = [f"{name:<34}", f"{price * 1e3:16.2f}" if price else f"{'-':>16}"]
        ratios = []
        for c in configs:
            r = results.get(c, {}).get(name, {"skipped": "not run"})
            if "s" not in r:
                cells.append(f"{'!' if 'error' in r else '*':>16}")
                ratios.append(f"{'-':>13}")
                continue
            tag = {"graph": " g", "static": " s"}.get(r["mode"], "  ")
            cells.append(f"{r['s'] * 1e3:14.2f}{tag}")
            ratios.append(f"{r['s'] / price:13.2f}" if price else f"{'-':>13}")
        lines.append("  ".join(cells + ratios))
    return "\n".join(lines)


def main(argv=None) -> int:
    try:
        a = parse_args(argv)
    except UsageError as e:
        print(f"gpu_speed_check: {e}", file=sys.stderr)
        return 2
    import torch

    if not a.tiny and not torch.cuda.is_available():
        print("gpu_speed_check: needs a CUDA device (none found); --tiny runs the pipeline on CPU", file=sys.stderr)
        return 2
    if a.tiny:
        torch.set_num_threads(1)

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - T0:6.1f}s] {msg}", flush=True)

    a.out.mkdir(parents=True, exist_ok=True)
    deadline = T0 + a.budget_s
    table = shapes(a.tiny)
    price, gpu = price_fn(a)
    prices = {name: price(items) for name, items in table} if price else {}
    report: dict = {"args": {k: str(v) for k, v in vars(a).items()}, "gpu": gpu, "stack": STACK,
                    "device": torch.cuda.get_device_name(0) if a.device == "cuda" else "cpu", "torch": torch.__version__,
                    "prices_s": prices, "tokens": {}, "results": {}, "startup_s": {}, "errors": {}}
    reference, first = None, None
    ok = True
    for config in a.configs:
        try:
            tokens = same_tokens(a, config)
            if reference is None:
                reference, first = tokens, config
            agree = tokens == reference
            report["tokens"][config] = f"same as {first}" if agree else f"DIFFERENT from {first}"
            log(f"{config}: greedy tokens {report['tokens'][config]}")
            ok &= agree
            report["results"][config], report["startup_s"][config] = measure_config(a, config, table, deadline, log)
        except Exception as e:  # a configuration that cannot build or serve: said, and the others still run
            ok = False
            report["errors"][config] = f"{type(e).__name__}: {e}"
            log(f"{config}: FAILED: {report['errors'][config]}")
            traceback.print_exc()
    text = render(table, report["results"], prices, a.configs, gpu)
    print("\n" + text + "\n")
    missing = [(c, n) for c, rows in report["results"].items() for n, r in rows.items()
               if "error" in r or r.get("skipped", "KV cache too small") != "KV cache too small"]
    ok &= not missing
    report.update(table=text, missing=missing, passed=bool(ok), total_s=round(time.monotonic() - T0, 1))
    (a.out / "speed_check.json").write_text(json.dumps(report, indent=2, default=str))
    log(f"{'PASSED' if ok else 'FAILED'}{f' ({len(missing)} shapes skipped or failed)' if missing else ''}; "
        f"report in {a.out / 'speed_check.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
