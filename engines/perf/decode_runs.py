"""A decode run's prices, row by row, bit for bit what the vectorized model computes: the part of
BatchPricer (batch_pricer.py, whose tables it reads) that prices decode-only iterations in bulk.

The simulator advances a run of decode-only iterations (the same sequences, one token each, until
an arrival or a finish) in one step: row i has contexts base + i. A run whose longest sequence keeps
its K/V block count (most: arrivals and finishes cut runs to a few dozen rows) has one split count,
priced from one gather of the stacked tables with scalar split-KV terms, or, for a one-stage model
where numba is installed, in one compiled call (run_kernel.py); the rest row by row (`_run_units`).
Where the engine core's build is imported (engines/compiled.py: this module and scalar_rows.py are
in it), the simulator's `decode_run_list` prices a one-stage model's runs in scalar_rows' compiled
rows instead, never loading numba. tests/test_perf_pricer_runs.py and test_perf_scalar_rows.py
compare every path with the vectorized one, bit for bit.
"""
from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import operators as ops
from . import run_kernel
from .mypyc_options import mypyc_attr
from .scalar_rows import COMPILED, DecodeUnits, one_split_run_times
from .split_kv import num_splits

# Decode runs a process prices with numpy before the compiled kernel is looked up (run_kernel.py):
# numba's import and the load of its cached compilation cost ~0.35 s a process, ~20,000 runs' numpy
# overhead (~18 us a run), so a short simulation (a test, a probe) never pays it. Counted across the
# process's pricers (a fleet's replicas each have their own), as the cost is the process's.
KERNEL_AFTER = 20_000
_numpy_runs_left = KERNEL_AFTER
# Runs of at most this many rows are priced on Python floats after their gather (_short_run_times):
# per row ~1 us of scalar arithmetic against ~20 numpy calls a run (~1 us each on a (k,) array).
SCALAR_ROWS = 16


def slowest_stage(stages: np.ndarray) -> np.ndarray:
    """(k,) iteration seconds of (k, pp) stage seconds: a one-stage model's own, a pipeline's slowest."""
    return stages[:, 0] if stages.shape[1] == 1 else np.max(stages, axis=-1)


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # (as engines/compiled.py's)
class Shape:
    """What a batch's stage seconds take from its (tokens, sequences) alone (BatchPricer._shape): a
    layer's linear layers, elementwise kernels and all-reduces, the embedding, the LM head, the CPU
    and the launches per stage (None: the stack prices none); compiled, read as native fields."""

    def __init__(self, linear: float, elementwise: float, tp_comm: float, embedding: float, lm_head: float,
                 cpu: float, launches: tuple[float, ...] | None) -> None:
        self.linear = linear
        self.elementwise = elementwise
        self.tp_comm = tp_comm
        self.embedding = embedding
        self.lm_head = lm_head
        self.cpu = cpu
        self.launches = launches


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # (as engines/compiled.py's)
class DecodeRunPricing:
    """BatchPricer's decode runs (its base: the tables, `_shape` and the attention constants are
    BatchPricer's, declared here for the compiled build's types, engines/compiled.py)."""

    call: Any  # split_kv.DecodeCall, or None
    layers: tuple[int, ...]
    last: int
    overlap: bool
    window: int | None
    decode_fixed: float
    _decode_units: list[float]
    units_at: DecodeUnits  # _decode_units' entries worked out (scalar_rows)
    _cached: list[int]
    _blocks: list[float]
    _decode_units_arr: np.ndarray
    _cached_arr: np.ndarray
    _blocks_arr: np.ndarray

    def _shape(self, tokens: int, seqs: int) -> Shape:
        raise NotImplementedError  # BatchPricer's

    def _grow(self, top: int) -> None:
        raise NotImplementedError  # BatchPricer's

    def _split_blocks(self, splits: int) -> list[float]:
        raise NotImplementedError  # BatchPricer's

    def _start_runs(self) -> None:
        self._run_tables: dict[int, np.ndarray] = {}  # _run_table's, per split count
        self._kernel: Any = False  # decode_run_times' compiled run (a Callable, or None): False, not looked up yet
        self._steps: dict[tuple[int, int], np.ndarray] = {}  # _row_steps', per (lo, hi)
        self._split_rows: list[list[int]] = []  # _one_split's split counts, [sequences][K/V blocks] (0: not yet)
        call = self.call  # its constants as native fields (a DecodeCall's attributes are read by name)
        self.ctas_per_seq: int = 0 if call is None else call.ctas_per_seq
        self.slots: int = 1 if call is None else call.slots
        self.block: float = 1.0 if call is None else float(call.block)
        self.block_units: float = 0.0 if call is None else call._block_units
        self.kv_units: float = 0.0 if call is None else call._kv_units
        self.qo_units: float = 0.0 if call is None else call._qo_units
        self.combine_units: float = 0.0 if call is None else call._combine_units
        self.cap: int = 1 << 60 if self.window is None else self.window - 1  # a context's cached keys: min(c, cap)

    def _row_steps(self, lo: int, hi: int) -> np.ndarray:
        """(hi - lo, 1) int64 steps lo..hi-1: a run's contexts are base + these (broadcast). Kept per
        (lo, hi), read-only: most runs are a few rows from 0, and an arange and two views cost
        more than the run's own gather."""
        got = self._steps.get((lo, hi))
        if got is None:
            got = np.arange(lo, hi, dtype=np.int64)[:, None]
            got.flags.writeable = False
            if len(self._steps) < 4096:
                self._steps[(lo, hi)] = got
        return got

    def decode_run_stages(self, base: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """(hi - lo, pp) stage seconds of decode-only iterations lo..hi-1 of a run whose iteration 0
        has contexts `base` (int64, every item one new token): iteration i has contexts base + i."""
        b = len(base)
        k = hi - lo
        if b == 0 or k <= 0:
            return np.zeros((max(k, 0), len(self.layers)), dtype=np.float64)
        longest = self._cover(base, hi)
        call = self.call
        if call is not None and self._blocks[longest + lo] == self._blocks[longest + hi - 1]:
            units = self._one_split_run_units(base, lo, hi, longest)
        else:
            units = self._run_units(base, lo, hi, longest)
        units *= ops.TIME_QUANTUM_S  # a fresh array: the attention seconds
        return self._run_stages(units, b, k)

    def decode_run_times(self, base: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """(hi - lo,) seconds of the iterations of decode_run_stages(base, lo, hi), their slowest
        stage. A one-stage model's run is priced in compiled calls where numba is installed (once
        the process priced KERNEL_AFTER runs with numpy), one for each stretch of rows whose longest
        sequence keeps its K/V block count, so its split count (run_kernel.py: numpy's doubles);
        else with numpy."""
        global _numpy_runs_left
        run = self._kernel
        if run is False:
            if _numpy_runs_left > 0:
                _numpy_runs_left -= 1
                return self._numpy_run_times(base, lo, hi)
            run = self._kernel = run_kernel.kernel() if len(self.layers) == 1 and self.call is not None else None
        b = len(base)
        if run is None or b == 0 or hi <= lo:
            return self._numpy_run_times(base, lo, hi)
        longest = self._cover(base, hi)
        call = self.call
        seqs = float(b)
        sh = self._shape(b, b)
        launch = 0.0 if sh.launches is None else sh.launches[0]
        out = np.empty(hi - lo)
        for i, j, splits, n_blocks, waves in self._stretches(b, longest, lo, hi):
            split = float(splits)
            run(self._run_table(splits), base, i, j - i, seqs, float(waves), float(math.ceil(n_blocks / split)),
                call._block_units, call._kv_units, seqs * call._qo_units, call._combine_units * (split > 1.0),
                self.decode_fixed, ops.TIME_QUANTUM_S, sh.linear, sh.elementwise, sh.tp_comm, float(self.layers[0]),
                sh.embedding, sh.lm_head, sh.cpu, bool(self.overlap), launch, out[i - lo:j - lo])
        return out

    def decode_run_list(self, base: Sequence[int], lo: int, hi: int) -> list[float]:
        """decode_run_times as a list, `base` any sequence of ints. Where scalar_rows is compiled, a
        one-stage model's run is priced there, a call for each stretch of rows with one K/V block
        count (as decode_run_times' numba kernel: the same doubles), never loading numba."""
        b = len(base)
        if not COMPILED or self.call is None or len(self.layers) != 1 or b == 0 or hi <= lo:
            return self.decode_run_times(np.asarray(base, dtype=np.int64), lo, hi).tolist()
        if type(base) is not tuple:
            base = tuple(base.tolist() if isinstance(base, np.ndarray) else base)
        try:
            return self._run_list(base, lo, hi)
        except TypeError:  # items that are not ints (numpy's): numpy's way
            return self.decode_run_times(np.asarray(base, dtype=np.int64), lo, hi).tolist()

    def _run_list(self, base: tuple[int, ...], lo: int, hi: int) -> list[float]:
        """decode_run_list of a one-stage model's run of ints: its stretches (_stretches') priced in
        scalar_rows, each stretch's constants read once."""
        b = len(base)
        longest = base[0]
        for c in base:
            if c > longest:
                longest = c
        if longest + hi - 1 >= len(self._decode_units):
            self._grow(longest + hi - 1)
        seqs = float(b)
        sh = self._shape(b, b)
        launch = None if sh.launches is None else sh.launches[0]
        blocks = self._blocks
        end = blocks[longest + hi - 1]
        qo, layers, quantum = seqs * self.qo_units, float(self.layers[0]), ops.TIME_QUANTUM_S
        out: list[float] = []
        i = lo
        while i < hi:
            n = blocks[longest + i]
            j = hi if end == n else bisect_right(blocks, n, longest + i, longest + hi) - longest
            splits, n_blocks, waves = self._one_split(b, longest + i)
            split = float(splits)
            one_split_run_times(self.units_at, base, i, j - i, self.cap, self.block, split, seqs, float(waves),
                                float(math.ceil(n_blocks / split)), self.block_units, self.kv_units, qo,
                                self.combine_units * (split > 1.0), self.decode_fixed, quantum, sh.linear,
                                sh.elementwise, sh.tp_comm, layers, sh.embedding, sh.lm_head, sh.cpu,
                                bool(self.overlap), launch, out)
            i = j
        return out

    def _stretches(self, b: int, longest: int, lo: int, hi: int) -> list[tuple[int, int, int, int, int]]:
        """A run's rows lo..hi as stretches of one K/V block count (blocks only grow along a run),
        each (first row, past its last, splits, K/V blocks, waves): both pricings walk these."""
        blocks = self._blocks
        out: list[tuple[int, int, int, int, int]] = []
        i = lo
        while i < hi:
            n = blocks[longest + i]
            j = hi if blocks[longest + hi - 1] == n else bisect_right(blocks, n, longest + i, longest + hi) - longest
            splits, n_blocks, waves = self._one_split(b, longest + i)
            out.append((i, j, splits, n_blocks, waves))
            i = j
        return out

    def _cover(self, base: np.ndarray, hi: int) -> int:
        """The run's longest context at iteration 0, the tables grown to cover its rows up to hi."""
        longest = int(np.maximum.reduce(base))  # (ndarray.max's own reduce, without its Python wrapper: a run's fixed cost)
        if longest + hi - 1 >= len(self._decode_units):
            self._grow(longest + hi - 1)
        return longest

    def _one_split(self, b: int, longest: int) -> tuple[int, int, int]:
        """(splits, K/V blocks of the longest context, waves) of a decode batch of b sequences
        whose longest context is `longest`: split_kv.DecodeCall's layout, on Python scalars."""
        n_blocks = int(self._blocks[longest])
        rows = self._split_rows
        if b < 4096 and n_blocks < 65536:  # kept (a few small lists)
            while len(rows) <= b:
                rows.append([])
            row = rows[b]
            if n_blocks >= len(row):
                row.extend([0] * (n_blocks + 1 - len(row)))
            splits = row[n_blocks]
            if not splits:
                splits = row[n_blocks] = num_splits(b * self.ctas_per_seq, self.slots, n_blocks) if n_blocks else 1
        else:
            splits = num_splits(b * self.ctas_per_seq, self.slots, n_blocks) if n_blocks else 1
        return splits, n_blocks, math.ceil(float(b) * self.ctas_per_seq * float(splits) / self.slots)

    def _one_split_run_units(self, base: np.ndarray, lo: int, hi: int, longest: int) -> np.ndarray:
        """_run_units of a run whose longest sequence keeps its K/V block count (the common case:
        a run rarely crosses a block of keys), so every row has the same splits: the per-item sums
        come from one gather of _run_table and the split-KV terms are Python scalars, operation for
        operation those of _run_units (its sums are of whole numbers: exact in any order)."""
        call = self.call
        b = len(base)
        seqs = float(b)
        splits, n_blocks, waves = self._one_split(b, longest + lo)
        ctx = base + self._row_steps(lo, hi)  # (k, b): row i, contexts base + lo + i
        units, keys, blocks = np.add.reduce(self._run_table(splits).take(ctx, axis=1), axis=-1)  # each (k,), fresh
        split = float(splits)
        # In place, each of _run_units' operations, a few with their operands swapped (exact).
        blocks /= max(seqs, 1.0)  # the mean blocks a CTA
        blocks *= waves
        np.maximum(float(math.ceil(n_blocks / split)), blocks, out=blocks)
        blocks *= call._block_units  # the critical path
        keys += seqs
        keys *= call._kv_units
        keys += seqs * call._qo_units  # the KV stream
        blocks -= keys
        np.maximum(blocks, 0.0, out=blocks)
        blocks += call._combine_units * (split > 1.0)
        np.floor(blocks, out=blocks)
        units += self.decode_fixed
        units += blocks
        return units

    def _numpy_run_times(self, base: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """decode_run_times without the compiled kernel: a short one-stage run with one split count
        on Python floats after its gather (_short_run_times), else decode_run_stages' slowest stage."""
        if 0 < hi - lo <= SCALAR_ROWS and len(base) and len(self.layers) == 1 and self.call is not None:
            longest = self._cover(base, hi)
            if self._blocks[longest + lo] == self._blocks[longest + hi - 1]:
                return np.array(self._short_run_times(base, lo, hi, longest))
        return slowest_stage(self.decode_run_stages(base, lo, hi))

    def _short_run_times(self, base: np.ndarray, lo: int, hi: int, longest: int) -> list[float]:
        """decode_run_times of a short run of a one-stage model whose longest sequence keeps its K/V
        block count: the per-item sums from one gather (as _one_split_run_units), then each row's
        split-KV terms and stage sum on Python floats, operation for operation those of
        _one_split_run_units and _run_stages (IEEE doubles either way: the same results). Some 20
        numpy calls on arrays of a few rows cost more than the rows' arithmetic in Python."""
        call = self.call
        b = len(base)
        seqs = float(b)
        splits, n_blocks, waves = self._one_split(b, longest + lo)
        ctx = base + self._row_steps(lo, hi)  # (k, b): row i, contexts base + lo + i
        units, keys, blocks = np.add.reduce(self._run_table(splits).take(ctx, axis=1), axis=-1).tolist()
        split = float(splits)
        per_cta = max(seqs, 1.0)
        longest_blocks = float(math.ceil(n_blocks / split))
        block_units, kv_units, qo = call._block_units, call._kv_units, seqs * call._qo_units
        combine = call._combine_units * (split > 1.0)
        fixed, q = self.decode_fixed, ops.TIME_QUANTUM_S
        sh = self._shape(b, b)
        linear, elementwise, tp_comm, embedding, lm_head, cpu = sh.linear, sh.elementwise, sh.tp_comm, sh.embedding, sh.lm_head, sh.cpu
        layers, overlap = self.layers[0], self.overlap
        launch = None if sh.launches is None else sh.launches[0]
        out = []
        for u, kv, bl in zip(units, keys, blocks):
            bl = bl / per_cta * waves
            bl = max(longest_blocks, bl) * block_units  # the critical path (np.maximum: no NaN here)
            kv = (kv + seqs) * kv_units + qo  # the KV stream
            bl = max(bl - kv, 0.0) + combine
            t = ((u + fixed) + float(math.floor(bl))) * q
            t = (((t + linear) + elementwise) + tp_comm) * layers
            t = (t + embedding) + lm_head
            t = max(t, cpu) if overlap else t + cpu
            if launch is not None:
                t = t + launch
            out.append(t)
        return out

    def _run_table(self, splits: int) -> np.ndarray:
        """(3, contexts): per context its decode units, windowed cached length and K/V blocks a CTA
        streams under `splits`, the three tables _run_units gathers, stacked for one gather."""
        table = self._run_tables.get(splits)
        if table is None or table.shape[1] != len(self._blocks_arr):
            blocks = self._blocks_arr if splits == 1 else np.ceil(self._blocks_arr / float(splits))
            table = np.stack([self._decode_units_arr, self._cached_arr, blocks])
            self._run_tables[splits] = table
        return table

    def _run_units(self, base: np.ndarray, lo: int, hi: int, longest: int) -> np.ndarray:
        """Attention units of each iteration of a decode run (the tables cover its contexts)."""
        b = len(base)
        k = hi - lo
        steps = np.arange(lo, hi, dtype=np.int64)
        ctx = base[None, :] + steps[:, None]
        longest_of = longest + steps  # each row's longest context
        units = self._decode_units_arr[ctx].sum(axis=-1) + self.decode_fixed
        call = self.call
        if call is not None:
            seqs = float(b)
            if self.window is None:  # the cached contexts are the contexts: their sum in closed form (exact integers)
                keys = (float(base.sum()) + b * steps) + seqs
            else:
                keys = self._cached_arr[ctx].sum(axis=-1) + seqs
            n_blocks = self._blocks_arr[longest_of]
            if b * call.ctas_per_seq >= 0.8 * call.slots:  # split_kv.num_splits: enough CTAs, one split
                splits = np.ones(k)
            else:
                splits = call._splits(np.full(k, seqs), n_blocks)
            waves = np.ceil(seqs * call.ctas_per_seq * splits / call.slots)
            blocks = self._blocks_arr[ctx]
            if splits.max() > 1.0:
                blocks = np.ceil(blocks / splits[:, None])
            mean_blocks = blocks.sum(axis=-1) / max(seqs, 1.0)
            critical = np.maximum(np.ceil(n_blocks / splits), waves * mean_blocks) * call._block_units
            stream = keys * call._kv_units + seqs * call._qo_units
            units = units + np.floor(call._combine_units * (splits > 1.0) + np.maximum(critical - stream, 0.0))
        return units

    def _run_stages(self, attention: np.ndarray, b: int, k: int) -> np.ndarray:
        """(k, pp) stage seconds of decode-only rows of b sequences, given each row's attention
        (consumed: a one-stage model sums in it, commuting the first sum and product, exact)."""
        sh = self._shape(b, b)
        linear, elementwise, tp_comm, embedding, lm_head, cpu, launches = (
            sh.linear, sh.elementwise, sh.tp_comm, sh.embedding, sh.lm_head, sh.cpu, sh.launches)
        if len(self.layers) == 1:
            t = attention
            t += linear
            t += elementwise
            t += tp_comm
            t *= self.layers[0]
            t += embedding
            t += lm_head
            if self.overlap:
                np.maximum(t, cpu, out=t)
            else:
                t += cpu
            if launches is not None:
                t += launches[0]
            return t[:, None]
        layer = linear + attention
        layer += elementwise
        layer += tp_comm
        out = np.empty((k, len(self.layers)))
        for s, layers in enumerate(self.layers):
            t = layers * layer
            if s == 0:
                t += embedding
            if s == self.last:
                t += lm_head
                if self.overlap:
                    t = np.maximum(t, cpu)
                else:
                    t += cpu
            if launches is not None:
                t += launches[s]
            out[:, s] = t
        return out
