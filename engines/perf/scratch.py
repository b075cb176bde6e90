"""The batch arrays the performance model prices (analytical.py): validated, then copied into
per-thread float64 work space it reuses across calls."""
from __future__ import annotations

import threading

import numpy as np

from common.errors import HarnessError


class Scratch(threading.local):
    """Per-thread float64 work space for the (rows, B) arrays of one call, reused across calls:
    allocating a few hundred KB per array per call costs more than the arithmetic on them.
    Calls needing more than CACHE_LIMIT elements get fresh arrays (their arithmetic dominates)."""

    CACHE_LIMIT = 1 << 22  # 32 MiB of float64 kept per thread at most

    def __init__(self) -> None:
        self.flat = np.empty(0)

    def views(self, shape: tuple[int, int], first: int, count: int) -> list[np.ndarray]:
        """`count` arrays of `shape`, slots first..first+count-1 of the work space."""
        size = shape[0] * shape[1]
        need = (first + count) * size
        if need > self.CACHE_LIMIT:
            return [np.empty(shape) for _ in range(count)]
        if self.flat.size < need:
            self.flat = np.empty(min(max(need, 2 * self.flat.size, 5 * 8192), self.CACHE_LIMIT))
        return [self.flat[i * size:(i + 1) * size].reshape(shape) for i in range(first, first + count)]


SCRATCH = Scratch()


def check_counts(n: np.ndarray, c: np.ndarray) -> None:
    """new_tokens and context_lens: the same shape, no negative counts."""
    if n.shape != c.shape:
        raise HarnessError(f"new_tokens shape {n.shape} != context_lens shape {c.shape}")
    if n.size and (n.min() < 0 or c.min() < 0):
        raise HarnessError("new_tokens and context_lens must be >= 0")


def prepare(new_tokens: np.ndarray, context_lens: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple]:
    """Validate and copy into (rows, B) float64 scratch arrays. Token counts are whole numbers
    far below 2**53, so float64 is exact, and it avoids numpy's slow mixed int/float loops."""
    n = np.asarray(new_tokens)
    c = np.asarray(context_lens)
    check_counts(n, c)
    if n.ndim == 0:
        raise HarnessError("batch_times needs arrays of shape (..., B), got scalars")
    shape = n.shape[:-1]
    flat = (int(np.prod(shape, dtype=np.int64)), n.shape[-1])
    nf, cf = SCRATCH.views(flat, 0, 2)
    np.copyto(nf, n.reshape(flat), casting="unsafe")
    np.copyto(cf, c.reshape(flat), casting="unsafe")
    return nf, cf, shape
