"""Questions asked of a performance model in several places (SLO derivation, figures, reports,
tests): answered once, here."""
from __future__ import annotations

import numpy as np


def chunked_prefill_time(perf, prompt: int, chunk: int) -> float:
    """Seconds to prefill `prompt` tokens alone, `chunk` tokens per iteration (each later chunk
    re-reads the KV cache of the earlier ones)."""
    starts = np.arange(0, prompt, chunk, dtype=np.int64)
    sizes = np.minimum(chunk, prompt - starts)
    return float(perf.batch_times(sizes[:, None], starts[:, None]).sum())


def decode_iteration_time(perf, batch: int = 32, context: int = 4096) -> float:
    """Seconds of one decode-only iteration of `batch` sequences at `context` tokens each, without
    prefill interference (with pp > 1: one micro-batch through every stage): the paper's SLO unit."""
    return float(perf.pipeline_latency(np.ones(batch, dtype=np.int64), np.full(batch, context, dtype=np.int64)))
