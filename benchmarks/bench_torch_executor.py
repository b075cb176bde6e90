"""Torch executor throughput on CPU with a tiny random model, per scheduling policy.

The same requests (seeded random prompts of 32..256 tokens, 32 output tokens each, all offered at
once) run through make_engine + TorchExecutor to completion; prints, for the fastest of --repeats
runs, generated tokens per second,
model tokens (prompt + decode) per second and iterations per policy, and checks that every
policy produced the same greedy tokens.

    python benchmarks/bench_torch_executor.py [--requests 32] [--output-len 32] [--threads 1]
"""
from __future__ import annotations

import argparse
import random
import time

import torch

from engines.executors.torch import TorchExecutor
from engines.executors.torch.loop import OfflineRequest, run_to_completion
from engines.models import ModelConfig
from engines.schedulers import EngineConfig, SchedulerConfig, make_engine

POLICIES = ("sarathi", "vllm", "orca", "fastertransformer", "chunked_only", "hybrid_only")


def tiny_model() -> ModelConfig:
    # Llama-shaped, small enough that per-iteration overheads (Python, input prep) show up as
    # they would next to a GPU's fast kernels.
    return ModelConfig(family="llama", vocab_size=4096, hidden_size=256, num_layers=4, num_heads=8, num_kv_heads=4,
                       head_dim=32, intermediate_size=688, max_position_embeddings=2048, name="bench-tiny-llama")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--token-budget", type=int, default=256)
    ap.add_argument("--max-num-seqs", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is steadiest on a shared box)")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--repeats", type=int, default=3, help="runs per policy; the fastest is reported (shared CPUs are noisy)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rng = random.Random(0)
    reqs = [OfflineRequest(i, None, args.output_len, prompt_len=rng.randint(32, 256)) for i in range(args.requests)]
    ex = TorchExecutor(tiny_model(), dtype="float32", device="cpu", kv_capacity_tokens=32768)
    max_len = 256 + args.output_len
    run_to_completion(make_engine(EngineConfig(SchedulerConfig("sarathi"), ex.kv_capacity_tokens, max_len)), ex, reqs[:4])  # warm-up
    print(f"{'policy':<18} {'gen tok/s':>10} {'model tok/s':>12} {'iterations':>10} {'wall s':>8}")
    reference = None
    for policy in args.policies.split(","):
        cfg = SchedulerConfig.shared(policy, max_num_seqs=args.max_num_seqs if policy not in ("orca", "fastertransformer") else 16,
                                     token_budget=args.token_budget)
        wall = float("inf")
        for _ in range(args.repeats):
            engine = make_engine(EngineConfig(cfg, ex.kv_capacity_tokens, max_len))
            t = time.perf_counter()
            stats = run_to_completion(engine, ex, reqs)
            wall = min(wall, time.perf_counter() - t)
        generated = sum(len(v) for v in stats.outputs.values())
        same = "" if reference is None or stats.outputs == reference else "  (outputs differ!)"
        reference = reference or stats.outputs
        print(f"{policy:<18} {generated / wall:>10.1f} {stats.tokens_computed / wall:>12.1f} {stats.iterations:>10d} "
              f"{wall:>8.2f}{same}")


if __name__ == "__main__":
    main()
