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


# The paper's SLO unit (Sarathi-Serve Sec. 5, Table 3): a decode-only iteration of 32 requests at
# 4k context each, without prefill interference; strict = 5x, relaxed = 25x it.
SLO_DECODE_BATCH = 32
SLO_DECODE_CONTEXT = 4096
SLO_MULTIPLIERS = {"strict": 5.0, "relaxed": 25.0}


def decode_iteration_time(perf, batch: int = SLO_DECODE_BATCH, context: int = SLO_DECODE_CONTEXT) -> float:
    """Seconds of one decode-only iteration of `batch` sequences at `context` tokens each, without
    prefill interference (with pp > 1: one micro-batch through every stage): the paper's SLO unit."""
    return float(perf.pipeline_latency(np.ones(batch, dtype=np.int64), np.full(batch, context, dtype=np.int64)))


def single_prefill_times(perf, lengths: np.ndarray, context: np.ndarray | int = 0) -> np.ndarray:
    """Seconds of one iteration holding just one chunk of each length (vectorized)."""
    n = np.asarray(lengths, dtype=np.int64)[:, None]
    c = np.broadcast_to(np.asarray(context, dtype=np.int64), n.shape[:1])[:, None]
    return perf.batch_times(n, c)


def decode_with_chunk_times(perf, decodes: int, decode_context: int, chunks: np.ndarray,
                            chunk_context: int = 0) -> np.ndarray:
    """Seconds of iterations with `decodes` decodes at `decode_context` plus one chunk of each size."""
    chunks = np.asarray(chunks, dtype=np.int64)
    n = np.ones((chunks.size, decodes + 1), dtype=np.int64)
    c = np.full(n.shape, decode_context, dtype=np.int64)
    n[:, -1] = chunks
    c[:, -1] = chunk_context
    return perf.batch_times(n, c)


def decode_only_time(perf, decodes: int, context: int) -> float:
    """Seconds of one decode-only iteration of `decodes` sequences at `context` tokens (0 for none)."""
    return perf.iteration_time([1] * decodes, [context] * decodes) if decodes else 0.0


def linear_time_per_layer(perf, tokens: np.ndarray) -> np.ndarray:
    """Seconds of one layer's linear layers (QKV, attention-out, MLP) on one GPU for each token count."""
    return np.array([perf.breakdown([int(t)], [0])["linear"] for t in tokens]) / perf.stage_layers[0]


def tile_aligned_chunk(chunk: int, decodes: int, tile: int) -> int:
    """The first Sarathi paper's chunk cut so chunk + decodes fills whole tiles (256 - (B - 1) with
    tiles of 128); the engine's policy applies the same rule (engines/schedulers/decode_maximal.py)."""
    if not tile:
        return chunk
    aligned = (chunk + decodes) // tile * tile - decodes
    return aligned if aligned > 0 else chunk


def decode_speedup(perf, batch: int, context: int, chunk: int = 256, tile: int = 128) -> float:
    """The first Sarathi paper's decode speedup (arXiv 2308.16369 Sec. 5.1) at batch size B =
    `batch`: the per-token time of a decode-only batch of B at `context` tokens, over the marginal
    per-token time of the B - 1 decodes that ride on a prefill chunk (the chunk with them, less the
    chunk alone), averaged over the chunks of a `context`-token prompt (each chunk at its own
    context, the tile-aligned chunk size). The paper's example (LLaMA-13B, A6000, B 4): 49.96 ms / 4
    = 12.49 ms a token alone against (238.4 - 234.8) / 3 = 1.2 ms riding."""
    d = batch - 1
    c = tile_aligned_chunk(chunk, d, tile)
    starts = np.arange(0, context, c, dtype=np.int64)
    sizes = np.minimum(c, context - starts)
    n = np.ones((starts.size, d + 1), dtype=np.int64)
    ctx = np.full(n.shape, context, dtype=np.int64)
    n[:, 0], ctx[:, 0] = sizes, starts
    together = perf.batch_times(n, ctx)
    alone = perf.batch_times(sizes[:, None], starts[:, None])
    marginal = float(np.mean(together - alone)) / d
    return decode_only_time(perf, batch, context) / batch / marginal


def chunked_attention_time(perf, prompt: int, chunk: int) -> float:
    """Seconds of attention (every layer, the slowest stage) to prefill `prompt` tokens in chunks of
    `chunk`, each chunk attending to the KV of the earlier ones."""
    return float(sum(perf.breakdown([min(chunk, prompt - s)], [s])["attention"] for s in range(0, prompt, chunk)))
