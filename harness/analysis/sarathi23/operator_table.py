"""The first Sarathi paper's profiling numbers as the performance model prices them (arXiv 2308.16369:
the table of three basic batches in the section on decode-maximal batching, and the per-token costs and
prefill saturation of its profiling of LLaMA-13B on one RTX A6000).

The table's columns are linear and attention time and their sum ("total": 224.8 + 10.0 = 234.8 ms),
so a batch's time here is the model's linear + attention time of every layer; norms, embeddings and
CPU costs are left out as the table leaves them out. A batch is a list of [new tokens, context]
items: [[1024, 0]] is a 1,024-token prefill, [[1, 1024]] x 4 a decode-only batch of four at 1,024.
"""
from __future__ import annotations

from collections.abc import Sequence

PARTS = ("linear", "attention", "total")


def batch_ms(perf, batch: Sequence[Sequence[int]], part: str = "total") -> float:
    """Milliseconds of one iteration's `part` (linear, attention, or their sum) for `batch`."""
    if part not in PARTS:
        raise ValueError(f"part {part!r} is not one of {', '.join(PARTS)}")
    b = perf.breakdown([int(n) for n, _ in batch], [int(c) for _, c in batch])
    return 1e3 * (b["linear"] + b["attention"] if part == "total" else b[part])


def decode_cost_ms(perf, batch: Sequence[Sequence[int]], alone: Sequence[Sequence[int]] | None = None) -> float:
    """Milliseconds a decode token of `batch` costs: the batch's total over its decodes, or, with
    `alone` (the batch less its decodes), the decodes' marginal total (the paper's example: (238.4 -
    234.8) / 3 = 1.2 ms riding on a chunk against 49.96 / 4 = 12.49 ms in a decode-only batch)."""
    decodes = sum(1 for n, _ in batch if int(n) == 1)
    if not decodes:
        raise ValueError("the batch holds no decode")
    return (batch_ms(perf, batch) - (batch_ms(perf, alone) if alone else 0.0)) / decodes


def cost_ratio(perf, batch_size: int, context: int) -> float:
    """A decode token's cost over a prefill token's, both at `batch_size` sequences of `context` tokens
    (the paper's profiling: about 200x at batch 1, 100x at 2, 16.7x at 18, for 1,024 tokens)."""
    decode = batch_ms(perf, [[1, context]] * batch_size) / batch_size
    prefill = batch_ms(perf, [[context, 0]] * batch_size) / (batch_size * context)
    return decode / prefill


def prefill_tokens_per_ms(perf, batches: Sequence[int], prompt: int) -> float:
    """Prefill throughput of one layer, tokens per millisecond, for `b` prompts of `prompt` tokens
    each: the smallest over `batches` (the paper: about 180 tokens/ms once B x L >= 512)."""
    layers = sum(perf.stage_layers)
    return min(b * prompt / (batch_ms(perf, [[prompt, 0]] * b) / layers) for b in batches)


# An operator-level claim's `metric` -> its value from (the model, the claim's params).
OPERATOR_METRICS = {
    "op_time": lambda perf, p: batch_ms(perf, p["batch"], p["part"]),
    "decode_cost": lambda perf, p: decode_cost_ms(perf, p["batch"], p.get("alone")),
    "cost_ratio": lambda perf, p: cost_ratio(perf, p["batch_size"], p["context"]),
    "prefill_throughput": lambda perf, p: prefill_tokens_per_ms(perf, p["batches"], p["prompt"]),
}
