"""Operator cost functions: pure numpy, vectorized over any leading shape.

Each takes token counts (float64 arrays of whole numbers, or ints) and hardware rates and returns
seconds. Conventions: a count of 0 means the operator does not run and costs 0; every function is
non-decreasing in its counts. Roofline: an operator takes max(FLOPs / achievable FLOP/s,
bytes / achievable B/s). The *_coefficients helpers fold the constants once per deployment, so
the per-call work is a handful of numpy operations.
"""
from __future__ import annotations

import math

import numpy as np

from collections.abc import Sequence

from .links import Cheapest, Curve, LinkSpec, engine_allreduce

# Per-item attention times are rounded down to whole units of 0.1 ps before they are summed, so a
# batch's sum is exact whatever order numpy reduces in: a (k, B) call and k single-row calls agree
# bit for bit. 0.1 ps is far below any modelled effect; float64 sums whole units exactly up to
# 2**53 units (900 s) per row.
TIME_QUANTUM_S = 1e-13


def gemm_coefficients(k: int, n: int, *, flops: float, bandwidth: float,
                      bytes_per_elem: int, k_half: float = 0.0,
                      weight_bytes_per_elem: int | None = None) -> tuple[float, float, float]:
    """Constants of an [m x k] @ [k x n] roofline: (seconds per tiled row of compute,
    seconds to stream the weights once, seconds per row of activations in and out). `k_half`: a
    measured kernel reaches flops x k / (k + k_half) (kernels.GemmKernel). `weight_bytes_per_elem`:
    the weights' width where it is not the activations' (FP8 weights: 1)."""
    per_tiled_row = 2.0 * k * n / flops
    if k_half:
        per_tiled_row = per_tiled_row * (k + k_half) / k
    wb = bytes_per_elem if weight_bytes_per_elem is None else weight_bytes_per_elem
    return (per_tiled_row, wb * float(k * n) / bandwidth, bytes_per_elem * float(k + n) / bandwidth)


def gemm_time_from(m: np.ndarray, m_tiled: np.ndarray, per_tiled_row, weights, per_row) -> np.ndarray:
    """Roofline of a GEMM from its coefficients (scalars, or (G, 1) arrays for G GEMMs at once):
    max(compute on the tiled row count, weights + activations); 0 where m == 0."""
    t = np.maximum(m_tiled * per_tiled_row, weights + m * per_row)
    t *= m > 0
    return t


def gemm_time_smooth_from(m: np.ndarray, m_tiled: np.ndarray, per_tiled_row, weights, per_row,
                          fixed: float) -> np.ndarray:
    """A measured GEMM kernel (kernels.GemmKernel): fixed + (C^4 + W^4)^(1/4) with C the compute on the
    tiled rows and W the weights + activations; 0 where m == 0. Square roots (correctly rounded in
    IEEE arithmetic) rather than a power, so Python floats give the same bits (analytical.py)."""
    comp = m_tiled * per_tiled_row
    mem = weights + m * per_row
    comp *= comp
    mem *= mem
    comp *= comp
    mem *= mem
    comp += mem
    t = fixed + np.sqrt(np.sqrt(comp))
    t *= m > 0
    return t


def gemm_time_one(m: float, m_tiled: float, per_tiled_row: float, weights: float, per_row: float,
                  fixed: float, smooth: bool) -> float:
    """gemm_time_from / gemm_time_smooth_from for one Python float m > 0: the same IEEE operations
    in the same order, so the simulator's one-batch path agrees bit for bit."""
    if not smooth:
        return max(m_tiled * per_tiled_row, weights + m * per_row)
    comp = m_tiled * per_tiled_row
    mem = weights + m * per_row
    comp *= comp
    mem *= mem
    return fixed + math.sqrt(math.sqrt(comp * comp + mem * mem))


def tiled(m: np.ndarray, tile: int) -> np.ndarray:
    """m rounded up to a multiple of the GEMM tile (tile quantization). Exact for whole numbers
    below 2**53: m / tile is exact or at least 1/tile away from an integer."""
    return np.ceil(m / tile) * tile


def gemm_time(m: np.ndarray, k: int, n: int, *, tile: int, flops: float, bandwidth: float,
              bytes_per_elem: int) -> np.ndarray:
    """[m x k] @ [k x n]: compute on m rounded up to the CTA tile (tile quantization),
    memory = weights once + activations in and out."""
    m = np.asarray(m, dtype=np.float64)
    coeffs = gemm_coefficients(k, n, flops=flops, bandwidth=bandwidth, bytes_per_elem=bytes_per_elem)
    return gemm_time_from(m, tiled(m, tile), *coeffs)


def stream_time(nbytes: np.ndarray, bandwidth: float) -> np.ndarray:
    """A bandwidth-bound kernel moving `nbytes` (norms, residual adds, rotary, activations, copies)."""
    return np.asarray(nbytes, dtype=np.float64) / bandwidth


def allreduce_curve(ranks: int, link: LinkSpec | None, kernels: str | None = None) -> Curve | Cheapest:
    """All-reduce time by payload bytes: the link's measured curve over NCCL's bus bytes
    (2(p-1)/p of the payload), or a ring over the slowest hop, 2(p-1)/p / bandwidth a byte after
    2(p-1) hop latencies (reduce-scatter then all-gather, p-1 steps each). Zero for one rank.
    With an engine's own all-reduce `kernels` for the link (links.ALLREDUCE_KERNELS), the faster
    of the two at each size."""
    ring = _ring_curve(ranks, link, 2 * (ranks - 1))
    own = engine_allreduce(kernels, link, ranks)
    return ring if own is None else Cheapest((ring, own.scaled(2 * (ranks - 1) / ranks)))


def allgather_curve(ranks: int, link: LinkSpec | None) -> Curve:
    """All-gather of a tensor of B bytes in total (each rank holds B/p): bus bytes (p-1)/p of B
    on the link's measured curve, or (p-1)/p / bandwidth a byte after p-1 hop latencies."""
    return _ring_curve(ranks, link, ranks - 1)


def _ring_curve(ranks: int, link: LinkSpec | None, steps: int) -> Curve:
    if ranks <= 1 or link is None:
        return _NOTHING
    if link.allreduce_curve is not None:
        return link.allreduce_curve.scaled(steps / ranks)
    fixed = steps * link.latency_s if link.collective_latency_s is None else link.collective_latency_s
    return Curve(fixed, (steps / ranks / link.ring_bandwidth(ranks),))


def p2p_curve(link: LinkSpec | None) -> Curve:
    """One point-to-point send (pipeline stage boundary, KV transfer): the link's measured curve,
    or one hop latency + bytes over its send bandwidth."""
    if link is None:
        return _NOTHING
    if link.p2p_curve is not None:
        return link.p2p_curve
    return Curve(link.latency_s, (1.0 / link.p2p_bandwidth,))


_NOTHING = Curve(0.0, (0.0,))


def allreduce_time(nbytes: np.ndarray, ranks: int, link: LinkSpec | None) -> np.ndarray:
    return allreduce_curve(ranks, link).time(nbytes)


def p2p_time(nbytes: np.ndarray, link: LinkSpec | None) -> np.ndarray:
    return p2p_curve(link).time(nbytes)


def attended_keys_x2(new: np.ndarray, context: np.ndarray, window: int | None) -> np.ndarray:
    """Twice the number of (query, key) pairs of a chunk of `new` tokens after `context` cached
    tokens, causal within the chunk: query j (1-based) sees context + j keys, capped at `window`.

    Without a window: 2 * sum_j (c + j) = n (2c + n + 1). With one (a = c + n):
    hi(hi+1) - lo(lo+1) + 2W (max(a-W, 0) - max(c-W, 0)), hi = min(a, W), lo = min(c, W).
    Works on int64 or on float64 holding integers (exact below 2**53); 0 where new == 0.
    """
    a = context + new
    if window is None:
        return (a + context + 1) * new
    hi = np.minimum(a, window)
    lo = np.minimum(context, window)
    beyond = np.maximum(a - window, 0) - np.maximum(context - window, 0)
    return hi * (hi + 1) - lo * (lo + 1) + (2 * window) * beyond


def kv_tokens_read(new: np.ndarray, context: np.ndarray, window: int | None) -> np.ndarray:
    """KV entries the chunk's attention reads: the cached context plus its own tokens, or, with a
    sliding window, only the last W + n - 1 positions any of its queries can see. 0 where new == 0."""
    if window is None:
        total = context + new
    else:
        total = np.minimum(context + new, new + (window - 1))
    return np.minimum(total, new * _BIG)


_BIG = float(2**40)  # larger than any token count: min(x, new * _BIG) zeroes padding items only


def _pad_mixed_decodes(n: np.ndarray, pairs: np.ndarray, rows: float) -> None:
    """Scales in place the (query, key) pairs x 2 of each decode (n == 1) in a row that also holds a
    prefill chunk (n >= 2) by `rows`: a decode's pairs are 2 x its keys under every formula above, so
    the product is the rows x keys rectangle of a padded query tile (kernels.py [FA2-VARLEN])."""
    mixed = (n == 1.0) & np.any(n > 1.0, axis=-1, keepdims=True)
    if mixed.any():
        pairs[mixed] *= rows


def attention_units(new: np.ndarray, context: np.ndarray, *, window: int | None, flops_per_pair: float,
                    kv_bytes_per_token: float, qo_bytes_per_token: float, flops: float,
                    bandwidth: float, scratch: Sequence[np.ndarray] | None = None, causal: bool = True,
                    prefill_fixed_units: int = 0, decode_fixed_units: int = 0,
                    mixed_decode_rows: int = 0, decode_seq_units: int = 0) -> np.ndarray:
    """Per-sequence attention time of one layer, in whole TIME_QUANTUM_S units (rounded down),
    summed over the last axis. `new` and `context` are float64 arrays of token counts.

    Each sequence is its own roofline (prefill chunks are compute-bound, decodes read their KV),
    and the batch's attention is their sum: prefill and decode attention run as separate kernels
    in the paper-era engines, and a decode-only batch is bandwidth-bound either way.

    Same arithmetic as attended_keys_x2 / kv_tokens_read, written with a few reused float64
    buffers (`scratch`: three float64 arrays shaped like `new`, or None to allocate them): the
    simulator calls this on (k, B) arrays of decode steps, where fresh 300 KB temporaries cost
    more than the arithmetic (the allocator returns them to the OS and page-faults them back). Token
    counts are integers far below 2**53, so float64 holds every intermediate exactly, and the
    per-item units are whole numbers, so their sum is exact in any order.

    The kernel (kernels.AttentionKernel): `causal` prices the causal (query, key) pairs; otherwise
    the full rectangle of n queries x the keys read (a kernel that computes masked tiles).
    `prefill_fixed_units` is added per prefill item (n >= 2: one kernel call each),
    `decode_fixed_units` once per row holding a decode (n == 1: one batched call).
    `mixed_decode_rows` (kernels.AttentionKernel.mixed_decode_rows): in a row that also holds a
    prefill chunk, each decode computes a query tile of that many rows against its keys (the
    rectangle, rows x keys) instead of its one row; 0: a decode costs the same in any row.
    `decode_seq_units` is added per decode item (n == 1): its own CTAs' cost beyond its KV stream.
    """
    n = new
    if scratch is None:
        scratch = [np.empty_like(new) for _ in range(3)]
    a, pairs, tmp = scratch[0], scratch[1], scratch[2]
    np.add(context, new, out=a)
    if not causal:  # the rectangle: every query against every key it reads
        if window is not None:
            np.add(n, float(window) - 1.0, out=tmp)
            np.minimum(a, tmp, out=a)  # KV read: min(c + n, W + n - 1)
        np.multiply(n, a, out=pairs)
        pairs *= 2.0  # as pairs x 2 below
    elif window is None:
        np.add(a, context, out=pairs)
        pairs += 1.0
        pairs *= n  # n (2c + n + 1)
    else:
        w = float(window)
        np.minimum(a, w, out=pairs)  # hi
        np.add(pairs, 1.0, out=tmp)
        pairs *= tmp  # hi (hi + 1)
        np.minimum(context, w, out=tmp)  # lo
        np.add(tmp, 1.0, out=a)
        a *= tmp
        pairs -= a  # - lo (lo + 1)
        np.subtract(context, w, out=tmp)
        np.maximum(tmp, 0.0, out=tmp)
        np.add(context, new, out=a)
        a -= w
        np.maximum(a, 0.0, out=a)
        a -= tmp
        a *= 2.0 * w
        pairs += a  # + 2W (max(a - W, 0) - max(c - W, 0))
        np.add(context, new, out=a)
        np.add(n, w - 1.0, out=tmp)
        np.minimum(a, tmp, out=a)  # KV read: min(c + n, W + n - 1)
    np.multiply(n, _BIG, out=tmp)
    np.minimum(a, tmp, out=a)  # padding items read nothing
    if mixed_decode_rows:
        _pad_mixed_decodes(n, pairs, float(mixed_decode_rows))
    pairs *= 0.5 * flops_per_pair / flops / TIME_QUANTUM_S
    a *= kv_bytes_per_token / bandwidth / TIME_QUANTUM_S
    np.multiply(n, qo_bytes_per_token / bandwidth / TIME_QUANTUM_S, out=tmp)
    a += tmp
    np.maximum(pairs, a, out=pairs)
    np.floor(pairs, out=pairs)
    if prefill_fixed_units:
        np.greater(n, 1.0, out=tmp)
        tmp *= float(prefill_fixed_units)
        pairs += tmp
    if decode_seq_units:
        np.equal(n, 1.0, out=tmp)
        tmp *= float(decode_seq_units)
        pairs += tmp
    units = pairs.sum(axis=-1)
    if decode_fixed_units:
        units += float(decode_fixed_units) * np.any(n == 1.0, axis=-1)
    return units
