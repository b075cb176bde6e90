"""`python -m harness.profile`: operator and iteration times of the torch executor on this device.

    python -m harness.profile model=mistral-7b device=cuda dtype=float16 out=profiles/h200_mistral7b.csv
    python -m harness.profile model=tiny-llama device=cpu quick=true out=/tmp/tiny.csv

Writes the operator profile (the performance model's long format; perf=profile reads it) to
out= and whole-iteration times next to it (<out>.iterations.csv); harness/profile/table.py
documents both. Default grids follow engines/perf/profile_format.md's recommendation, up to
max_tokens=, max_context= and max_batch=.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from common.errors import HarnessError
from harness.overrides import exits_2, parse as parse_overrides


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from exc
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected non-negative integers, got {text!r}")
    return values


def linear_grid(max_tokens: int) -> list[int]:
    """1, 2, 4, .., 64, 96, then both sides of every 128-token GEMM tile boundary."""
    grid = [1, 2, 4, 8, 16, 32, 64, 96] + [n for m in range(128, max_tokens + 1, 128) for n in (m, m + 1)]
    return sorted({n for n in grid if n <= max_tokens + 1})


def _doubling(lo: int, hi: int) -> list[int]:
    """lo, 2 lo, 4 lo, ... up to hi (lo x 2^k <= hi while 2^k <= hi // lo)."""
    return [lo * 2 ** k for k in range(max(hi // lo, 0).bit_length())]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m harness.profile", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny-llama", help="catalog name (random weights) or a Hugging Face directory")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto")
    p.add_argument("--dtype", default="auto", help="float32, float16, bfloat16 or auto (fp16 on GPU, fp32 on CPU)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (shard shapes; iterations run tp processes)")
    p.add_argument("--max-tokens", type=int, default=4096, help="largest batch token count / prefill chunk")
    p.add_argument("--max-context", type=int, default=4096, help="largest cached context")
    p.add_argument("--context-step", type=int, default=1024, help="context grid step")
    p.add_argument("--max-batch", type=int, default=256, help="largest decode batch")
    p.add_argument("--num-tokens", type=_ints, help="explicit linear/elementwise grid (overrides --max-tokens)")
    p.add_argument("--chunk-sizes", type=_ints, help="explicit prefill chunk grid")
    p.add_argument("--context-lens", type=_ints, help="explicit context grid")
    p.add_argument("--batch-sizes", type=_ints, help="explicit decode batch grid")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice)")
    p.add_argument("--attention-backend", default="auto")
    p.add_argument("--no-iterations", action="store_true", help="skip whole-iteration rows")
    p.add_argument("--quick", action="store_true", help="small grids (a CPU smoke test)")
    p.add_argument("--out", type=Path, default=Path("profile.csv"))
    return p


@exits_2
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["fetch"]:  # Vidur's public profiles -> the long format (harness/profile/fetch.py)
        from harness.profile.fetch import fetch_command

        return fetch_command(argv[1:])
    args = parse_overrides(build_parser(), argv)
    rows = run(args)
    from harness.profile.table import write_tables

    ops_path, it_path = write_tables(rows, args.out)
    print(f"wrote {ops_path}" + (f" and {it_path}" if it_path else ""))
    return 0


def grids(args: argparse.Namespace) -> dict[str, list[int]]:
    if args.quick:
        return {"tokens": [1, 16, 64, 128, 129], "chunks": [16, 64], "contexts": [0, 256], "batches": [1, 8]}
    contexts = list(range(0, args.max_context + 1, args.context_step))
    return {"tokens": args.num_tokens or linear_grid(args.max_tokens),
            "chunks": args.chunk_sizes or _doubling(2, args.max_tokens), "contexts": args.context_lens or contexts,
            "batches": args.batch_sizes or _doubling(1, args.max_batch)}


def run(args: argparse.Namespace) -> list:
    try:
        import torch
    except ImportError as exc:
        raise HarnessError("the profiler needs torch (pip install -e '.[engine]')") from exc
    from engines.executors.torch import TorchExecutor
    from engines.models import resolve_model_config
    from harness.profile.iteration import IterationBench
    from harness.profile.ops import LayerOps, measure
    from harness.profile.table import Measurement

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.quick:
        args.repeats, args.warmup = min(args.repeats, 3), min(args.warmup, 1)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    dtype_name = args.dtype if args.dtype != "auto" else ("float16" if device.type == "cuda" else "float32")
    dtype = getattr(torch, dtype_name)
    config, weights_dir = resolve_model_config(args.model)
    g = grids(args)
    rows: list[Measurement] = []

    def add(op, n, c, b, times, **extra):
        rows.append(Measurement(op, n, c, b, args.tp, times[0], times[1], args.repeats, config.name, str(device),
                                dtype_name, **extra))

    def timed(fn):
        return measure(fn, device, args.warmup, args.repeats)

    start = time.perf_counter()
    ops = LayerOps(config, args.tp, dtype, device, args.attention_backend)
    for n in g["tokens"]:
        add("linear", n, 0, 0, timed(ops.linear(n)))
        add("elementwise", n, 0, 0, timed(ops.elementwise(n)))
    for n in g["chunks"]:
        for c in g["contexts"]:
            add("attention_prefill", n, c, 1, timed(ops.attention(1, n, c)))
    for b in g["batches"]:
        for c in g["contexts"]:
            add("attention_decode", b, max(c, 1), b, timed(ops.attention(b, 1, max(c, 1))))
    del ops
    if device.type == "cuda":
        torch.cuda.empty_cache()
    if not args.no_iterations:
        shapes = _iteration_shapes(g)
        need = max(sum(-(-(c + n) // 16) for c, n in items) for *_, items in shapes) * 16
        with TorchExecutor.from_config(weights_dir or config, dtype=dtype_name, device=str(device), tp=args.tp,
                                       kv_capacity_tokens=None if device.type == "cuda" else need,
                                       attention_backend=args.attention_backend) as ex:
            bench = IterationBench(ex)
            for phase, n, c, b, items in shapes:
                if not bench.fits(items):
                    print(f"skip {phase} tokens={n} context={c} batch={b}: KV cache too small", file=sys.stderr)
                    continue
                add("iteration", n, c, b, timed(bench.batch(items)), phase=phase, num_layers=config.num_layers)
            bench.release()
    print(f"profiled {config.name} on {device} ({dtype_name}, tp={args.tp}) in {time.perf_counter() - start:.1f}s",
          file=sys.stderr)
    return rows


def _iteration_shapes(g: dict[str, list[int]]) -> list[tuple]:
    """Prefill chunks, decode batches and Sarathi-style mixed batches over the grids."""
    contexts = sorted({g["contexts"][0], g["contexts"][len(g["contexts"]) // 2], g["contexts"][-1]})
    chunk = max(g["chunks"])
    shapes = [("prefill", n, c, 1, [(c, n)]) for n in g["chunks"] for c in contexts]
    for b in g["batches"]:
        for c in (max(c, 1) for c in contexts):
            shapes += [("decode", b, c, b, [(c, 1)] * b), ("mixed", chunk + b - 1, c, b, [(c, chunk)] + [(c, 1)] * (b - 1))]
    return shapes
