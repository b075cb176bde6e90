"""What-if: the iteration time of one batch on a deployment, with a per-operator breakdown.

    python -m engines.perf --model yi-34b --gpu a100-80g-sxm --tp 2 --batch 4096:0
    python -m engines.perf --model llama2-70b --gpu a40 --tp 4 --pp 2 --batch 32x1:4096 --json
    python -m engines.perf --model path/to/config.json --gpu h100 --batch 512:0 --batch 64x1:2048
    python -m engines.perf --model mixtral-8x7b --gpu h100 --tp 2 --weight-dtype fp8 --kv-dtype fp8 --batch 32x1:4096
    python -m engines.perf --model yi-34b --tp 2 --batch 32x1:4096 --set cpu_overhead_s=0 --set multi_gpu_overhead_s=0
    python -m engines.perf --model qwen3-30b-a3b --gpu h100 --dp 2 --ep --batch 32x1:4096   # each of 2 DP ranks runs it

Each `--batch` item is `new_tokens:context_len` (tokens computed this iteration over tokens
already cached), optionally repeated as `Nxnew:ctx`. The last line is the iteration time in ms
(with pp > 1: the latency of one micro-batch through every stage and send).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from common.errors import HarnessError
from engines.perf import Deployment, ModelArch, known_gpus, known_models, known_topologies
from engines.perf.factory import build_perf_model
from engines.perf.kernels import DEFAULT_STACK, known_attention_kernels, known_stacks
from engines.perf.hardware import get_gpu, get_topology


def parse_batch(items: list[str]) -> tuple[np.ndarray, np.ndarray]:
    new, ctx = [], []
    for item in items:
        count, _, pair = item.rpartition("x") if "x" in item else ("1", "", item)
        try:
            n, c = (int(v) for v in pair.split(":"))
            reps = int(count)
        except ValueError:
            raise HarnessError(f"--batch {item!r}: expected new_tokens:context_len or Nxnew_tokens:context_len") from None
        if n < 1 or c < 0 or reps < 1:
            raise HarnessError(f"--batch {item!r}: need new_tokens >= 1, context_len >= 0, N >= 1")
        new += [n] * reps
        ctx += [c] * reps
    return np.array(new), np.array(ctx)


# Deployment fields a what-if may override with --set (engine overheads, kernel tile, reserve).
SETTABLE = {"cpu_overhead_s": float, "cpu_overhead_per_seq_s": float, "multi_gpu_overhead_s": float,
            "multi_gpu_overhead_per_seq_s": float, "gemm_tile_tokens": int, "activation_tokens": int}


def parse_sets(items: list[str]) -> dict:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or name not in SETTABLE:
            raise HarnessError(f"--set {item!r}: expected NAME=VALUE with NAME one of {', '.join(SETTABLE)}")
        try:
            out[name] = SETTABLE[name](value)
        except ValueError:
            raise HarnessError(f"--set {item!r}: {value!r} is not a {SETTABLE[name].__name__}") from None
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engines.perf", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="yi-34b", help=f"catalog name ({', '.join(known_models())}) or a HF config.json")
    ap.add_argument("--gpu", default="a100-80g-sxm", help=f"one of {', '.join(known_gpus())}")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--dp", type=int, default=1, help="data-parallel ranks (with --ep): every rank runs the batch")
    ap.add_argument("--ep", action="store_true", help="expert parallelism over dp x tp GPUs (an MoE model)")
    ap.add_argument("--ep-comm", default="allgather_reducescatter", help="allgather_reducescatter (vLLM's default) or all2all")
    ap.add_argument("--topology", default=None, help=f"one of {', '.join(known_topologies())}")
    ap.add_argument("--gpus-per-node", type=int, default=None)
    ap.add_argument("--stack", default=DEFAULT_STACK, help=f"the engine's kernels: one of {', '.join(known_stacks())}")
    ap.add_argument("--attention-kernel", default=None, help=f"one of {', '.join(known_attention_kernels())}")
    ap.add_argument("--weight-dtype", default=None, help="fp8: FP8 linear-layer weights (GPUs with FP8 tensor cores); default 16-bit")
    ap.add_argument("--kv-dtype", default=None, help="fp8: an FP8 KV cache (GPUs with FP8 tensor cores); default 16-bit")
    ap.add_argument("--batch", action="append", default=[], metavar="NEW:CTX", help="a batch item; repeatable")
    ap.add_argument("--mem-util", type=float, default=0.9, help="GPU memory utilization for the KV capacity")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help=f"override a deployment field ({', '.join(SETTABLE)}); repeatable")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = ap.parse_args(argv)
    try:
        model = ModelArch.from_hf_config(args.model) if Path(args.model).suffix == ".json" else args.model
        d = Deployment.create(model=model, gpu=args.gpu, tp=args.tp, pp=args.pp, topology=args.topology,
                              gpus_per_node=args.gpus_per_node, stack=args.stack,
                              attention_kernel=args.attention_kernel, weight_dtype=args.weight_dtype,
                              kv_dtype=args.kv_dtype, dp=args.dp, ep=args.ep, ep_comm=args.ep_comm, **parse_sets(args.set))
        perf = build_perf_model(d)
        new, ctx = parse_batch(args.batch or ["1:0"])
        parts = perf.breakdown(new, ctx)
        stages = perf.stage_times(new, ctx).tolist()
        latency = float(perf.pipeline_latency(new, ctx))
        kv = perf.kv_capacity_tokens(args.mem_util)
    except HarnessError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({
            "deployment": d.describe(), "batch_items": len(new), "tokens": int(new.sum()),
            "breakdown_s": parts, "stage_times_s": stages, "iteration_s": latency, "kv_capacity_tokens": kv,
        }, indent=2))
        return 0
    print(d.describe())
    if args.topology is None and d.num_gpus > 1:
        print(f"topology: {get_topology(None, get_gpu(args.gpu)).name}, the {args.gpu} part's usual node (--topology to choose)")
    print(f"batch: {len(new)} items, {int(new.sum())} new tokens, {int(ctx.sum())} cached context tokens")
    print(f"slowest stage ({int(parts['stage'])}, {int(parts['layers'])} layers), per operator "
          "(the outer rows add up to the stage; an inner row is a part of the subtotal below it):")
    shown = {k: v for k, v in parts.items() if k not in ("stage", "layers", "total", "pp_send")}
    for name, value in shown.items():
        subtotal = any(k.startswith(name + ".") for k in shown)
        label = f"{name} (subtotal)" if subtotal else name
        indent = "    " if "." in name else "  "
        print(f"{indent}{label:<{22 - len(indent)}}{value * 1e3:>10.3f} ms")
    if args.pp > 1:
        print("stages: " + ", ".join(f"{s * 1e3:.3f} ms" for s in stages) + f"; send {parts['pp_send'] * 1e3:.3f} ms")
    print(f"KV capacity at {args.mem_util:g} memory utilization: {kv} tokens")
    print(f"iteration: {latency * 1e3:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
