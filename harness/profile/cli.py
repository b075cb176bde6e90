"""`python -m harness.profile`: measure operator and iteration times of the torch executor.

    python -m harness.profile --model mistral-7b --device cuda --dtype float16 --out profiles/h200_mistral.csv
    python -m harness.profile --model tiny-llama --device cpu --quick --out /tmp/tiny.csv
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from harness.errors import HarnessError


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from exc
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected non-negative integers, got {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m harness.profile", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny-llama", help="catalog name (random weights) or a Hugging Face directory")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto")
    p.add_argument("--dtype", default="auto", help="float32, float16, bfloat16 or auto (fp16 on GPU, fp32 on CPU)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (shard shapes; iterations use tp processes)")
    p.add_argument("--num-tokens", type=_ints, default=[1, 16, 64, 128, 256, 512, 1024, 2048],
                   help="new tokens per batch for GEMMs, elementwise ops and prefill chunks")
    p.add_argument("--context-lens", type=_ints, default=[0, 1024, 4096], help="cached tokens per sequence")
    p.add_argument("--batch-sizes", type=_ints, default=[1, 8, 32, 64, 128], help="sequences per decode batch")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--attention-backend", default="auto")
    p.add_argument("--no-ops", action="store_true", help="skip per-operator rows")
    p.add_argument("--no-iterations", action="store_true", help="skip whole-iteration rows")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice)")
    p.add_argument("--quick", action="store_true", help="small grids (CPU smoke test)")
    p.add_argument("--out", type=Path, default=Path("profile.csv"))
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        rows = run(args)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from harness.profile.table import write_table

    path = write_table(rows, args.out)
    print(f"wrote {len(rows)} rows to {path}")
    return 0


def run(args: argparse.Namespace) -> list:
    try:
        import torch
    except ImportError as exc:
        raise HarnessError("the profiler needs torch (pip install -e '.[engine]')") from exc
    from engines.executors.torch import TorchExecutor
    from engines.models import resolve_model_config
    from harness.profile.iteration import IterationBench
    from harness.profile.ops import LayerOps, measure
    from harness.profile.table import ProfileRow

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.quick:
        args.num_tokens, args.context_lens, args.batch_sizes = [1, 16, 64], [0, 256], [1, 8]
        args.repeats, args.warmup = 3, 1
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    dtype_name = args.dtype if args.dtype != "auto" else ("float16" if device.type == "cuda" else "float32")
    dtype = getattr(torch, dtype_name)
    config, _ = resolve_model_config(args.model)
    rows: list[ProfileRow] = []

    def add(op, phase, num_tokens, context_len, batch_size, times, layers=1):
        rows.append(ProfileRow(op, phase, num_tokens, context_len, batch_size, args.tp, times[0], times[1],
                               args.repeats, layers, config.name, str(device), dtype_name))

    def timed(fn):
        return measure(fn, device, args.warmup, args.repeats)

    start = time.perf_counter()
    if not args.no_ops:
        ops = LayerOps(config, args.tp, dtype, device, args.attention_backend,
                       max_tokens=max(args.num_tokens))
        for n in args.num_tokens:
            for name in ("linear.qkv", "linear.attn_out", "linear.mlp_up", "linear.mlp_down"):
                add(name, "any", n, 0, 1, timed(ops.gemm(name, n)))
            add("elementwise", "any", n, 0, 1, timed(ops.elementwise(n)))
            add("embedding", "any", n, 0, 1, timed(ops.embedding(n)))
            for c in args.context_lens:
                add("attention", "prefill", n, c, 1, timed(ops.attention(1, n, c)))
        for b in args.batch_sizes:
            add("lm_head", "any", b, 0, b, timed(ops.lm_head(b)))
            for c in args.context_lens:
                add("attention", "decode", b, max(c, 1), b, timed(ops.attention(b, 1, max(c, 1))))
        del ops
    if not args.no_iterations:
        need = max(max(args.context_lens) + max(args.num_tokens),
                   max(args.batch_sizes) * (max(args.context_lens) + 1)) + 64 * 16
        with TorchExecutor.from_config(config, dtype=dtype_name, device=str(device), tp=args.tp,
                                       kv_capacity_tokens=None if device.type == "cuda" else need,
                                       attention_backend=args.attention_backend) as ex:
            bench = IterationBench(ex)
            shapes = []
            for n in args.num_tokens:
                for c in args.context_lens:
                    shapes.append(("prefill", n, c, 1, [(c, n)]))
            for b in args.batch_sizes:
                for c in args.context_lens:
                    shapes.append(("decode", b, max(c, 1), b, [(max(c, 1), 1)] * b))
                    chunk = max(args.num_tokens)
                    shapes.append(("mixed", chunk + b - 1, max(c, 1), b, [(max(c, 1), chunk)] + [(max(c, 1), 1)] * (b - 1)))
            for phase, n, c, b, items in shapes:
                if not bench.fits(items):
                    print(f"skip {phase} tokens={n} context={c} batch={b}: KV cache too small", file=sys.stderr)
                    continue
                add("iteration", phase, n, c, b, timed(bench.batch(items)), layers=config.num_layers)
            bench.release()
    print(f"profiled {config.name} on {device} ({dtype_name}, tp={args.tp}) in {time.perf_counter() - start:.1f}s",
          file=sys.stderr)
    return rows
