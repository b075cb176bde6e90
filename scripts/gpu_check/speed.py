"""The GPU check's iteration phases (check.py): the torch engine's speed paths, each iteration
timed beside the performance model's price for vLLM 0.32 as it ships (`perf.stack=vllm-0.32`) on
the detected GPU, and the greedy-token check that must pass before a configuration's times count.

Configurations: `eager` (SDPA over the gathered cache), `flex` (FlexAttention over the paged
cache), `graphs` (flex + CUDA graphs for decode and mixed steps + compiled elementwise kernels).
Shapes: the first Sarathi paper's three batches (prefill 1,024; 4 decodes at 1,024 of context;
1,021 prefill tokens + 3 decodes), a grid of decodes (1, 8, 32, 128 sequences at 1k and 4k of
context, where the KV fits) and prefills (128, 512, 2,048 tokens), and two Sarathi-style mixed
steps (a chunk beside 32 decodes at 1k, 128 and 512 tokens in all); Mistral-7B-shaped random
weights in fp16 (`--tiny`: the tiny model at small sizes, on CPU).

Compilation (flex per shape bucket, the elementwise kernels, graph capture) happens while an
executor is built and in each shape's warm-up runs, never inside the timed runs.
"""
from __future__ import annotations

import gc
import time

CONFIGS = ("eager", "flex", "graphs")
STACK = "vllm-0.32"
# The graphs configuration's capture sizes: a subset of vLLM's for 128 sequences and a 512-token
# budget (buckets.capture_sizes(128, 512): 35 sizes up to 256, so 54 graphs, 19 of them decode)
# that takes the table's shapes and the serving runs' steps up to 256 tokens with 14 graphs, so
# that compiling and capturing them fits the check's budget; a step padded to the next of these
# sizes carries more padding than under vLLM's, and larger steps run eagerly, as vLLM's do.
GRAPH_SIZES = (1, 4, 8, 16, 32, 64, 128, 256)
TINY_GRAPH_SIZES = (1, 4, 8, 32, 64)
CONFIG_WEIGHTS = {"eager": 1.0, "flex": 1.5, "graphs": 3.0}  # shares of the phase's time (compilation)


def shapes(tiny: bool) -> list[tuple[str, list[tuple[int, int]]]]:
    """(name, [(context_len, new_tokens), ...]) in table order."""
    from scripts.gpu_check.sarathi_batches import shapes as sarathi23

    paper = [(f"paper: {n}", items) for n, items in sarathi23(64 if tiny else 1024)[:3]]
    batches, contexts, prefills = ((1, 4), (32,), (16, 48)) if tiny else ((1, 8, 32, 128), (1024, 4096), (128, 512, 2048))
    grid = [(f"decode {b} x ctx {c}", [(c, 1)] * b) for c in contexts for b in batches]
    grid += [(f"prefill {n}", [(0, n)]) for n in prefills]
    ctx, decodes, steps = (32, 4, (16, 32)) if tiny else (1024, 32, (128, 512))
    grid += [(f"mixed {s - decodes} + {decodes} decodes ctx {ctx}", [(0, s - decodes)] + [(ctx, 1)] * decodes)
             for s in steps]
    return paper + grid


def executor_options(config: str, tiny: bool, graph_sizes: tuple[int, ...] | None = None,
                     max_num_seqs: int = 128) -> dict:
    if config == "eager":
        return {"attention_backend": "sdpa"}
    if config == "flex":
        return {"attention_backend": "flex"}
    # Elementwise compilation is skipped on CPU (tens of seconds there, and nothing to gain).
    return {"attention_backend": "flex", "cuda_graphs": True, "compile_elementwise": not tiny,
            "graph_sizes": graph_sizes or (TINY_GRAPH_SIZES if tiny else GRAPH_SIZES), "graph_max_seqs": max_num_seqs}


def price_fn(model: str, gpu: str | None):
    """Seconds the performance model gives an iteration of (context, new) items under vLLM 0.32 on
    `gpu`; None when the GPU is not in its catalog."""
    if gpu is None:
        return None
    from engines.perf import Deployment, PerfModel

    perf = PerfModel(Deployment.create(model=model, gpu=gpu, stack=STACK))
    return lambda items: perf.iteration_time([n for _, n in items], [c for c, _ in items])


def greedy_tokens(a, config: str) -> dict[int, list[int]]:
    """Greedy outputs of a small fp32 model on the device under `config` ("reference": the
    reference attention backend). Graph sizes 4 and 32, decode graphs up to 4 sequences and a
    40-token budget: decode steps pad to 4, mixed steps of up to 32 tokens take the mixed graph,
    40-token ones run eagerly, so every path of a configuration serves tokens (on CPU 14, 2 and 1
    of the graphs configuration's 17 steps)."""
    from engines.executors.base import SamplingParams
    from engines.executors.torch import TorchExecutor
    from engines.executors.torch.loop import OfflineRequest, run_to_completion
    from engines.models import ModelConfig
    from engines.schedulers import EngineConfig, SchedulerConfig, make_engine

    cfg = ModelConfig(family="llama", vocab_size=512, hidden_size=256, num_layers=2, num_heads=8, num_kv_heads=2,
                      head_dim=32, intermediate_size=512, sliding_window=48, max_position_embeddings=512,
                      name="check-small")
    opts = {"attention_backend": "reference"} if config == "reference" else \
        executor_options(config, a.tiny, graph_sizes=(4, 32), max_num_seqs=4)
    with TorchExecutor(cfg, dtype="float32", device=a.device, kv_capacity_tokens=1024, **opts) as ex:
        engine = make_engine(EngineConfig(SchedulerConfig.shared("sarathi", max_num_seqs=4, token_budget=40),
                                          ex.kv_capacity_tokens, 512))
        reqs = [OfflineRequest(i, tuple(3 + (7 * i + 13 * j) % 500 for j in range(20 + 23 * i)), 12,
                               sampling=SamplingParams()) for i in range(4)]
        outputs = run_to_completion(engine, ex, reqs).outputs
        paths = sorted({f"{r.mode}/{r.graph}" if r.graph else r.mode for r in ex.step_log})
    return {"outputs": outputs, "paths": paths}


def phase_tokens(a, deadline: float, log) -> dict:
    """Each configuration's greedy tokens against the reference backend's, on the device."""
    ref = greedy_tokens(a, "reference")["outputs"]
    out = {}
    for config in a.configs:
        if time.monotonic() > deadline:
            out[config] = {"skipped": "out of budget"}
            continue
        try:
            got = greedy_tokens(a, config)
        except Exception as e:  # said, and the other configurations still run
            out[config] = {"error": f"{type(e).__name__}: {e}"}
        else:
            out[config] = {"same": got["outputs"] == ref, "paths": got["paths"]}
        log(f"  {config}: {out[config]}")
    return out


def build_executor(a, config: str):
    """The check's executor of `config`: its model, dtype, device, KV capacity and seed."""
    from engines.executors.torch import TorchExecutor

    return TorchExecutor(a.model, dtype=a.dtype, device=a.device, kv_capacity_tokens=a.kv_tokens, block_size=16,
                         seed=a.seed, **executor_options(config, a.tiny, max_num_seqs=a.max_num_seqs))


def measure_config(a, config: str, table, deadline: float, log, keep: bool = False):
    """Per shape {s, min_s, mode, padded} (or skipped / error), the seconds the executor took to
    build (weights, self-check, graph capture, elementwise compilation), and the executor when
    `keep` (for the serving phase; else closed)."""
    import torch

    from harness.profile.iteration import IterationBench
    from harness.profile.ops import measure

    t = time.monotonic()
    ex = build_executor(a, config)
    startup = time.monotonic() - t
    log(f"  {config}: executor ready in {startup:.1f}s ({ex.speed_paths})")
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
                med, best = measure(bench.batch(items), torch.device(a.device), warmup=1 if a.tiny else 3,
                                    repeats=a.repeats)
            except Exception as e:  # one shape's failure is reported, not the end of the table
                out[name] = {"error": f"{type(e).__name__}: {e}"}
                log(f"  {config}: {name} FAILED: {out[name]['error']}")
                continue
            rec = ex.step_log[-1]
            out[name] = {"s": med, "min_s": best, "mode": rec.mode, "graph": rec.graph, "padded": rec.padded_tokens}
    finally:
        bench.release()
    if keep:
        return out, startup, ex
    ex.close()
    del ex, bench
    gc.collect()  # the next configuration's weights and KV need this one's memory back
    if a.device == "cuda":
        torch.cuda.empty_cache()
    return out, startup, None


def render(table, results: dict, prices: dict, configs: list[str], gpu: str | None) -> str:
    head = [f"{'shape':<34}", f"{STACK + ' model':>16}"] + [f"{c + ' ms':>14}" for c in configs]
    head += [f"{c + '/model':>13}" for c in configs]
    lines = [f"iterations: ms per step, model price {STACK} on {gpu or 'no catalog GPU'}; "
             "'g' replayed graph (D decode, M mixed), 's' static buffers without capture, "
             "'*' skipped, '!' failed", "  ".join(head)]
    for name, _ in table:
        price = prices.get(name)
        cells = [f"{name:<34}", f"{price * 1e3:16.2f}" if price else f"{'-':>16}"]
        ratios = []
        for c in configs:
            r = results.get(c, {}).get(name, {"skipped": "not run"})
            if "s" not in r:
                cells.append(f"{'!' if 'error' in r else '*':>14}")
                ratios.append(f"{'-':>13}")
                continue
            tag = {"graph": " g", "static": " s"}.get(r["mode"], "  ")
            tag += {"decode": "D", "mixed": "M"}.get(r.get("graph") or "", " ") if r["mode"] != "eager" else " "
            cells.append(f"{r['s'] * 1e3:11.2f}{tag}")
            ratios.append(f"{r['s'] / price:13.2f}" if price else f"{'-':>13}")
        lines.append("  ".join(cells + ratios))
    return "\n".join(lines)


def targets(results: dict, prices: dict, tiny: bool) -> list[str]:
    """The issue's two targets, read off the table (graphs configuration)."""
    g = results.get("graphs", {})
    out = []
    big, one = ("decode 4 x ctx 32", "decode 1 x ctx 32") if tiny else ("decode 32 x ctx 4096", "decode 1 x ctx 1024")
    if "s" in g.get(big, {}) and prices.get(big):
        r = g[big]["s"] / prices[big]
        out.append(f"target {big}: graphs {r:.2f}x the model's price (target <= 1.5x): {'met' if r <= 1.5 else 'NOT met'}")
    if "s" in g.get(one, {}) and prices.get(one):
        extra = (g[one]["s"] - prices[one]) * 1e3
        out.append(f"target {one}: graphs {g[one]['s'] * 1e3:.2f} ms, {extra:+.2f} ms over the model's price "
                   f"(the step's cost beyond vLLM's; target < 1 ms): {'met' if extra < 1 else 'NOT met'}")
    return out
