"""A one-stage model's decode run priced in one compiled call (numba), the same doubles as numpy's.

`BatchPricer._one_split_run_units` and `_run_stages` price a decode run with some twenty-five
numpy calls on arrays of a few dozen rows: each call's fixed cost (about a microsecond) is the
whole price, and a replica's day prices some 150,000 such runs. `one_split_run_times` is those
calls' operations, row by row, in their order, on the same doubles, compiled by numba without
`fastmath` (so no reassociation and no fused multiply-adds: every operation is IEEE's, rounded as
numpy rounds it). The per-row sums are of whole numbers (the tables hold whole attention units,
cached lengths and block counts), exact in any order.

numba is optional: `kernel()` is None where it is not installed, and the pricer keeps numpy's
path. tests/test_perf_pricer_runs.py compares both on thousands of runs, bit for bit.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from functools import cache

import numpy as np



def _one_split_run_times(table, base, lo, k, seqs, waves, top, block_units, kv_units, stream_qo, combine,
                         decode_fixed, quantum, linear, elementwise, tp_comm, layers, embedding, lm_head,
                         cpu, overlap, launch, out):
    """out[i] = the seconds of decode-only iteration lo + i of a one-stage model's run (contexts
    base + lo + i), for a run whose longest sequence keeps its K/V block count (one split count):
    BatchPricer._one_split_run_units then _run_stages, operation for operation."""
    units_t, keys_t, blocks_t = table[0], table[1], table[2]
    b = base.shape[0]
    for i in range(k):
        shift = lo + i
        units = 0.0
        keys = 0.0
        blocks = 0.0
        for j in range(b):
            c = base[j] + shift
            units += units_t[c]
            keys += keys_t[c]
            blocks += blocks_t[c]
        blocks = blocks / seqs  # the mean blocks a CTA (seqs >= 1 here: max(seqs, 1.0) is seqs)
        blocks = blocks * waves
        blocks = max(top, blocks)  # np.maximum(top, blocks): equal operands are the same double
        blocks = blocks * block_units  # the critical path
        keys = keys + seqs
        keys = keys * kv_units
        keys = keys + stream_qo  # the KV stream
        blocks = blocks - keys
        blocks = max(blocks, 0.0)
        blocks = blocks + combine
        blocks = np.floor(blocks)
        units = units + decode_fixed
        units = units + blocks
        t = units * quantum  # the attention seconds; then _run_stages' one-stage sums
        t = t + linear
        t = t + elementwise
        t = t + tp_comm
        t = t * layers
        t = t + embedding
        t = t + lm_head
        if overlap:
            t = max(t, cpu)
        else:
            t = t + cpu
        t = t + launch
        out[i] = t


@cache  # once a process (numba's import is ~0.2 s)
def kernel() -> Callable | None:
    """The compiled `_one_split_run_times` (numba's on-disk cache keeps the compilation across
    processes; where no cache location is writable, compiled in each process), or None without
    numba, or where it fails to compile (said once on stderr: numpy's path prices the same)."""
    try:
        import numba
    except ImportError:
        return None
    try:
        try:
            run = numba.njit(cache=True, fastmath=False, nogil=True)(_one_split_run_times)
        except RuntimeError:  # "cannot cache function ...: no locator available" (a read-only install)
            run = numba.njit(fastmath=False, nogil=True)(_one_split_run_times)
        out = np.empty(1)  # compiled (or loaded) here, with the argument types the pricer passes
        run(np.ones((3, 2)), np.zeros(1, dtype=np.int64), 0, 1, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0,
            0.0, 1.0, 0.0, 0.0, 0.0, False, 0.0, out)
    except Exception as e:  # noqa: BLE001  (any failure of the compiler: numpy's path is the same prices)
        print(f"engines.perf.run_kernel: numba could not compile the decode-run kernel ({type(e).__name__}: {e}); "
              "pricing runs with numpy", file=sys.stderr)
        return None
    return run
