"""The pricer's per-item sums, a decode run's rows and their ends on Python scalars, compiled by mypyc.

BatchPricer sums table entries over a batch's decodes (`sum(map(table.__getitem__, decodes))`,
some hundred items a Sarathi batch, once per row of a chunk run) and prices decode runs with
some twenty numpy calls on arrays of a few rows (decode_runs.py), each call's fixed cost (about a
microsecond) the whole price. Compiled (engines/compiled.py names this module), the same sums
and each row's operations cost a few nanoseconds an item. Interpreted they are slower than the
numpy and `sum(map(...))` they replace, so the pricer takes them only where `COMPILED`.

The same doubles either way: the sums are of whole numbers (attention units, cached lengths and
K/V blocks; exact in any order below 2**53) and every other operation is the numpy path's, one
IEEE operation at a time in its order (as run_kernel.py's numba kernel does).
tests/test_perf_scalar_rows.py compares them with the numpy path, bit for bit.
"""
from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from itertools import accumulate

from .mypyc_options import mypyc_attr

COMPILED = not __file__.endswith(".py")  # this module's extension module was imported, not its source


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # (as engines/compiled.py's)
class DecodeUnits:
    """A decode's attention units at context x, the entry BatchPricer._grow's table holds
    (operators.attention_units of one new token: prefill_units' operations with n = 1, whose
    products by n are exact), worked out instead of read: a table of boxed floats out of the
    cache costs a run's rows more than these dozen operations."""

    def __init__(self, window: int | None, causal: bool, k_pairs: float, k_kv: float, k_qo: float, big: float,
                 seq_units: float) -> None:
        self.windowed = window is not None
        self.wf = 0.0 if window is None else float(window)
        self.causal = causal
        self.k_pairs = k_pairs
        self.k_kv = k_kv
        self.k_qo = k_qo
        self.big = big
        self.seq_units = seq_units  # attention_units' decode_seq_units (adding 0.0 changes no sum here)

    def at(self, x: int) -> float:
        c = float(x)
        a = c + 1.0
        if not self.causal:
            if self.windowed:
                a = min(a, 1.0 + (self.wf - 1.0))
            pairs = a * 2.0
        elif not self.windowed:
            pairs = a + c + 1.0
        else:
            wf = self.wf
            hi = min(a, wf)
            pairs = hi * (hi + 1.0)
            lo = min(c, wf)
            pairs -= (lo + 1.0) * lo
            pairs += (max(c + 1.0 - wf, 0.0) - max(c - wf, 0.0)) * (2.0 * wf)
            a = min(c + 1.0, 1.0 + (wf - 1.0))
        a = min(a, self.big)
        pairs *= self.k_pairs
        a = a * self.k_kv + self.k_qo
        return float(math.floor(max(pairs, a))) + self.seq_units


def table_sum(table: list[float], items: Sequence[int], shift: int) -> float:
    """sum(table[c + shift] for c in items), left to right."""
    total = 0.0
    for c in items:
        total += table[c + shift]
    return total


def count_sum(table: list[int], items: Sequence[int], shift: int) -> int:
    """sum(table[c + shift] for c in items) of an int table (exact)."""
    total = 0
    for c in items:
        total += table[c + shift]
    return total


def prefill_units(n: float, c: float, w: int | None, causal: bool, k_pairs: float, k_kv: float, k_qo: float,
                  big: float, fixed: float) -> float:
    """operators.attention_units of one item with n >= 2 new tokens on context c, on Python floats in
    its order (`w` the window, the k_ its constants as BatchPricer evaluates them, `big` its _BIG,
    `fixed` its prefill_fixed_units)."""
    a = c + n
    if not causal:
        if w is not None:
            a = min(a, n + (float(w) - 1.0))
        pairs = n * a * 2.0
    elif w is None:
        pairs = (a + c + 1.0) * n
    else:
        wf = float(w)
        hi = min(a, wf)
        pairs = hi * (hi + 1.0)
        lo = min(c, wf)
        pairs -= (lo + 1.0) * lo
        beyond = (max(c + n - wf, 0.0) - max(c - wf, 0.0)) * (2.0 * wf)
        pairs += beyond
        a = min(c + n, n + (wf - 1.0))
    a = min(a, n * big)
    pairs *= k_pairs
    a = a * k_kv + n * k_qo
    return math.floor(max(pairs, a)) + fixed


def kv_blocks(x: int, cap: int, block: float, split: float) -> float:
    """The K/V blocks a CTA streams of a decode at context x under `split` splits, the pricer's
    tables' entry by their IEEE operations (BatchPricer._grow's ceil((min(x, cap) + 1) / block) of
    the windowed cached length, then _split_blocks' ceil(that / split)): no table read."""
    n = float(math.ceil((float(x if x < cap else cap) + 1.0) / block))
    return n if split == 1.0 else float(math.ceil(n / split))


def ones_sum(new_tokens: tuple[int, ...], context_lens: tuple[int, ...], table: list[float]) -> float:
    """The sum of table[c] over a batch's items (n, c) with n == 1 (its decodes), left to right."""
    total = 0.0
    for i in range(len(new_tokens)):
        if new_tokens[i] == 1:
            total += table[context_lens[i]]
    return total


def ones_sums(new_tokens: tuple[int, ...], context_lens: tuple[int, ...], units_t: DecodeUnits, cap: int, block: float,
              split: float) -> tuple[float, int, float]:
    """Over a batch's decodes: the sums of their units (`units_t`), cached lengths (min(c, cap)) and
    K/V blocks under `split` splits (kv_blocks)."""
    units = 0.0
    keys = 0
    blocks = 0.0
    for i in range(len(new_tokens)):
        if new_tokens[i] == 1:
            c = context_lens[i]
            units += units_t.at(c)
            keys += c if c < cap else cap
            blocks += kv_blocks(c, cap, block, split)
    return units, keys, blocks


def ones_blocks(new_tokens: tuple[int, ...], context_lens: tuple[int, ...], cap: int, block: float, split: float) -> float:
    """The third of ones_sums alone."""
    blocks = 0.0
    for i in range(len(new_tokens)):
        if new_tokens[i] == 1:
            blocks += kv_blocks(context_lens[i], cap, block, split)
    return blocks


def one_split_run_times(units_t: DecodeUnits, base: tuple[int, ...], lo: int, k: int, cap: int, block: float,
                        split: float, seqs: float, waves: float, top: float, block_units: float, kv_units: float,
                        stream_qo: float, combine: float, decode_fixed: float, quantum: float, linear: float,
                        elementwise: float, tp_comm: float, layers: float, embedding: float, lm_head: float,
                        cpu: float, overlap: bool, launch: float | None, out: list[float]) -> None:
    """Appends to `out` the seconds of decode-only iterations lo..lo+k-1 of a one-stage model's run
    (contexts base + i) whose longest sequence keeps its K/V block count (one split count):
    decode_runs' _one_split_run_units then _run_stages, operation for operation (`units_t` a
    decode's units by context; a context's windowed cached length min(c, cap) and its K/V blocks a
    CTA streams under `split` splits, kv_blocks, worked out as the tables hold them)."""
    per_cta = max(seqs, 1.0)
    # A decode's units, its cached length and its K/V blocks only grow with its context (the
    # formulas of operators.attention_units for one new token are nondecreasing in it, and IEEE
    # products, sums, max and floor keep that order): units stop growing past a sliding window, the
    # cached length grows by one a row up to its cap, the blocks step where the context crosses a
    # block. A sequence whose first and last rows tell every row's entry (the same; one more key a
    # row; one step of blocks, found by bisection) is summed in closed form, the others row by
    # row: the same sums (whole numbers, exact in any order), with fewer reads.
    last = lo + k - 1
    windowed, wf, causal, big, seq_units = units_t.windowed, units_t.wf, units_t.causal, units_t.big, units_t.seq_units
    k_pairs, k_kv, k_qo = units_t.k_pairs, units_t.k_kv, units_t.k_qo
    units0 = 0.0  # the units of the sequences whose units are the same every row
    keys0 = 0  # row lo's keys of the sequences in closed form
    growing = 0  # how many of them gain a key a row
    blocks0 = 0.0  # row lo's blocks of the sequences in closed form
    steps = [0] * k  # per row, the blocks those gain there
    read_units: list[int] = []
    read_keys: list[int] = []
    read_blocks: list[int] = []
    for c in base:
        u0 = units_t.at(c + lo)
        if u0 == units_t.at(c + last):
            units0 += u0
        else:
            read_units.append(c)
        if c + last <= cap:
            keys0 += c + lo
            growing += 1
        elif c + lo >= cap:
            keys0 += cap
        else:
            read_keys.append(c)
        b0 = kv_blocks(c + lo, cap, block, split)
        b1 = kv_blocks(c + last, cap, block, split)
        if b1 == b0:
            blocks0 += b0
            continue
        x_lo, x = c + lo, c + last  # bisect_right over lo..last: the first row with more blocks
        while x_lo < x:
            mid = (x_lo + x) // 2
            if b0 < kv_blocks(mid, cap, block, split):
                x = mid
            else:
                x_lo = mid + 1
        if kv_blocks(x, cap, block, split) == b1:
            blocks0 += b0
            steps[x - c - lo] += int(b1 - b0)
        else:
            read_blocks.append(c)
    stepped = 0
    for i in range(lo, lo + k):
        units = units0
        for c in read_units:  # DecodeUnits.at inlined (its locals hoisted), but for a causal window's longer form
            cf = float(c + i)
            a = cf + 1.0
            if not causal:
                if windowed:
                    a = min(a, 1.0 + (wf - 1.0))
                pairs = a * 2.0
            elif not windowed:
                pairs = a + cf + 1.0
            else:
                units += units_t.at(c + i)
                continue
            a = min(a, big)
            pairs *= k_pairs
            a = a * k_kv + k_qo
            units += float(math.floor(max(pairs, a))) + seq_units
        keys = keys0 + growing * (i - lo)
        for c in read_keys:
            keys += c + i if c + i < cap else cap
        stepped += steps[i - lo]
        blocks = blocks0 + float(stepped)
        for c in read_blocks:
            blocks += kv_blocks(c + i, cap, block, split)
        bl = blocks / per_cta * waves
        if bl < top:  # np.maximum(top, blocks): equal operands are the same double
            bl = top
        bl = bl * block_units  # the critical path
        kv = (float(keys) + seqs) * kv_units + stream_qo  # the KV stream
        bl = bl - kv
        if bl < 0.0:
            bl = 0.0
        bl = bl + combine
        t = ((units + decode_fixed) + float(math.floor(bl))) * quantum
        t = (((t + linear) + elementwise) + tp_comm) * layers
        t = (t + embedding) + lm_head
        if overlap:
            if t < cpu:
                t = cpu
        else:
            t = t + cpu
        if launch is not None:
            t = t + launch
        out.append(t)


def run_ends(dts: list[float], t: float, horizon: float) -> list[float]:
    """The ends of a decode run's iterations of `dts` seconds from `t`, summed left to right as
    stepping sums them (the same clock), cut before the first iteration that starts (its end less
    its seconds) at or after `horizon`, one kept at least: the cut bisected as bisect_left probes
    (the same on any input). The simulator's (harness/backends/sim/loop.py); compiled, one native
    loop instead of accumulate's list and a key call per probe."""
    if not COMPILED:  # interpreted, a loop costs more than accumulate and bisect in C (and numpy's cumsum
        # more than both on a run of ~40 floats: its per-call cost)
        return _accumulated_ends(dts, t, horizon)
    out = [0.0] * len(dts)
    end = t
    for i in range(len(dts)):
        end = end + dts[i]
        out[i] = end
    if not (math.isinf(horizon) or math.isnan(horizon)):  # math.isfinite, as mypyc compiles these two natively
        lo, hi = 0, len(out)
        while lo < hi:  # bisect_left's probes
            mid = (lo + hi) // 2
            if out[mid] - dts[mid] < horizon:
                lo = mid + 1
            else:
                hi = mid
        del out[max(1, lo):]
    return out


def _accumulated_ends(dts: list[float], t: float, horizon: float) -> list[float]:
    """run_ends interpreted (apart: its key's closure would cost the compiled loop an environment a call)."""
    ends = list(accumulate(dts, initial=t))
    del ends[0]
    if math.isfinite(horizon):
        del ends[max(1, bisect_left(range(len(ends)), horizon, key=lambda i: ends[i] - dts[i])):]
    return ends
