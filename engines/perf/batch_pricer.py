"""Pricing one batch in a few microseconds, bit for bit what the vectorized model computes.

The simulator prices an iteration at a time (and runs of decode-only iterations in bulk: decode_runs.py). The
vectorized path (`PerfModel._stage_times(_components(...))`) spends ~30 numpy calls on a (1, B)
row, where the arithmetic is nothing. But the price of a batch depends on very little:

* everything outside attention on (tokens, sequences) alone: the GEMMs, elementwise kernels,
  collectives, embedding, LM head, CPU and launch costs are cached per (tokens, sequences);
* attention on a sum over items of whole TIME_QUANTUM_S units, each a function of the item's
  (new tokens, context): a decode's read from a table by its context (or worked out as the table
  does: scalar_rows.DecodeUnits), a prefill chunk's computed by `_prefill_units`, the IEEE
  operations of `operators.attention_units` in the same order, on Python floats;
* the split-KV decode call on the decodes' count, longest context, summed contexts and summed
  K/V blocks (tables by context again, or their entries' operations: scalar_rows.kv_blocks).

Sums of whole units are exact in any order (float64 holds them exactly), the per-item and per-shape
parts are the very operations of the vectorized path, so the result is the same double.
tests/test_perf_pricer.py prices thousands of random batches both ways and compares them bit for
bit; `python benchmarks/bench_perf_model.py` measures the speed.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from common.errors import HarnessError

from . import operators as ops
from .coefficients import Coefficients
from .decode_runs import DecodeRunPricing, Shape, slowest_stage
from .mypyc_options import mypyc_attr
from .scalar_rows import COMPILED, DecodeUnits, count_sum, ones_blocks, ones_sum, ones_sums, prefill_units, table_sum
from .vllm_releases import padded

_SHAPE_CACHE_LIMIT = 1 << 18  # (tokens, sequences) entries kept; cleared when full (a few tens of MB)
_SHAPE_ROWS = 1 << 16  # token counts whose shapes are found by a list's index (the rest by a dict's key)
_TABLE_MIN = 4096  # context entries a per-context table starts with; doubled as contexts grow
_NEGATIVE = "new_tokens and context_lens must be >= 0"


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # (as engines/compiled.py's)
class BatchPricer(DecodeRunPricing):
    """The one-batch and decode-run prices of a model whose components are the analytical ones:
    its coefficients `k`, and (an MoE model) its `expert_gemms(tokens, tiled)`, the MoE layer's
    two GEMM slots for one batch, which the expert-parallel model prices its own way."""

    def __init__(self, k: Coefficients, expert_gemms: Callable[[float, float], list[float]] | None = None) -> None:
        self.k = k
        self.expert_gemms = expert_gemms
        att = self.att = k.attention
        self.window = att.window
        self.causal = att.causal
        q = ops.TIME_QUANTUM_S
        # The constants operators.attention_units multiplies by, evaluated as it evaluates them.
        self.k_pairs = 0.5 * att.flops_per_pair / att.flops / q
        self.k_kv = att.kv_bytes_per_token / att.bandwidth / q
        self.k_qo = att.qo_bytes_per_token / att.bandwidth / q
        self.prefill_fixed = float(att.prefill_fixed_units)
        self.decode_fixed = float(att.decode_fixed_units)
        self.units_at = DecodeUnits(self.window, self.causal, self.k_pairs, self.k_kv, self.k_qo, ops._BIG,
                                    float(att.decode_seq_units))
        self.call = att.decode_call  # the split-KV decode kernel, or None
        self.mixed_rows = float(att.mixed_decode_rows)  # a decode's query tile in a mixed step, or 0
        self.layers = k.stage_layers
        self.last = k.pp - 1
        self.overlap = k.overlap_cpu  # async scheduling: the last stage costs max(GPU, CPU)
        self._shapes: list[dict[int, Shape] | None] = []  # [tokens] then {sequences: shape}: no key built
        self._wide: dict[int, dict[int, Shape]] = {}  # the same, of _SHAPE_ROWS tokens or more
        self._shape_count = 0
        self._by_tokens: dict[int, tuple[float, float, float, float]] = {}  # _shape's parts, per count
        self._by_seqs: dict[int, tuple[float, float]] = {}
        # Per context c of a decode: its attention units, its windowed cached length, its K/V blocks.
        self._decode_units = []
        self._decode_units_arr = np.zeros(0)
        self._cached = []
        self._cached_arr = np.zeros(0)
        self._blocks = []
        self._blocks_arr = np.zeros(0)
        self._by_splits: dict[int, list[float]] = {}  # _split_blocks' tables
        self._floors: dict[int, float] = {}  # decode_floor's, per batch size
        self._alone: list[float] = []  # alone_decode_times's: per context, a lone decode's iteration
        self._mixed: list[float] = []  # per context, a decode's units in a mixed step (mixed_rows > 0)
        self._start_runs()

    # -- tables ------------------------------------------------------------------------------
    def _grow(self, top: int) -> None:
        """Tables cover contexts 0..top at least."""
        size = max(_TABLE_MIN, 2 * len(self._decode_units))
        while size <= top:
            size *= 2
        c = np.arange(size, dtype=np.float64)[:, None]
        att = self.att
        units = ops.attention_units(
            np.ones_like(c), c, window=self.window, flops_per_pair=att.flops_per_pair,
            kv_bytes_per_token=att.kv_bytes_per_token, qo_bytes_per_token=att.qo_bytes_per_token,
            flops=att.flops, bandwidth=att.bandwidth, causal=self.causal, decode_seq_units=att.decode_seq_units)
        self._decode_units_arr = units
        self._decode_units = units.tolist()
        cached = c[:, 0] if self.window is None else np.minimum(c[:, 0], float(self.window - 1))
        self._cached_arr = cached
        self._cached = cached.astype(np.int64).tolist()
        if self.call is not None:
            self._blocks_arr = np.ceil((cached + 1.0) / self.call.block)
            self._blocks = self._blocks_arr.tolist()
        if self.mixed_rows:  # a decode's units in a step with a prefill chunk (_mixed_decode_units)
            a = c[:, 0] + 1.0 if self.window is None else np.minimum(c[:, 0] + 1.0, float(self.window))
            self._mixed = (np.floor(np.maximum((a * 2.0) * self.mixed_rows * self.k_pairs,
                                               a * self.k_kv + self.k_qo)) + float(att.decode_seq_units)).tolist()

    def _split_blocks(self, splits: int) -> list[float]:
        """Per context: the K/V blocks a CTA of one sequence streams under `splits` splits
        (split_kv.DecodeCall.layout's ceil(ceil((cached + 1) / block) / splits)), a table per split count."""
        if splits == 1:
            return self._blocks
        table = self._by_splits.get(splits)
        if table is None or len(table) != len(self._blocks):
            table = self._by_splits[splits] = np.ceil(self._blocks_arr / float(splits)).tolist()
        return table

    # -- per (tokens, sequences) ---------------------------------------------------------------
    def _shape(self, tokens: int, seqs: int) -> Shape:
        """(linear, elementwise, all-reduces of a layer, embedding, LM head, CPU, launches per stage):
        the operations of PerfModel._row_stage_times on Python floats, once per shape, its parts of
        the tokens alone and of the sequences alone once per count (most shapes meet one seen)."""
        row = self._shape_row(tokens)
        got = row.get(seqs)
        if got is not None:
            return got
        k = self.k
        by_tokens = self._by_tokens.get(tokens)
        if by_tokens is None:
            by_tokens = self._by_tokens[tokens] = self._tokens_part(tokens)
        by_seqs = self._by_seqs.get(seqs)
        if by_seqs is None:
            by_seqs = self._by_seqs[seqs] = self._seqs_part(float(seqs))
        launches = tuple(k.launch_s(float(seqs), float(tokens), i) for i in range(k.pp)) if k.launch else None
        got = Shape(*by_tokens, *by_seqs, launches)
        if self._shape_count >= _SHAPE_CACHE_LIMIT:
            self._shapes.clear()
            self._wide.clear()
            self._by_tokens.clear()
            self._by_seqs.clear()
            self._shape_count = 0
            row = self._shape_row(tokens)
        row[seqs] = got
        self._shape_count += 1
        return got

    def _shape_row(self, tokens: int) -> dict[int, Shape]:
        """_shape's cache of the shapes of `tokens` tokens, by sequences."""
        rows = self._shapes
        if tokens >= _SHAPE_ROWS:
            return self._wide.setdefault(tokens, {})
        if tokens >= len(rows):
            rows.extend([None] * (tokens + 1 - len(rows)))
        row = rows[tokens]
        if row is None:
            row = rows[tokens] = {}
        return row

    def _tokens_part(self, tokens: int) -> tuple[float, float, float, float]:
        """_shape's linear, elementwise, all-reduces of a layer and embedding: of the tokens alone."""
        k = self.k
        t = float(padded(k.graph_sizes, tokens))  # the rows a CUDA graph runs (analytical.py)
        tiled = float(math.ceil(t / k.tile) * k.tile)
        g = [k.gemm_one(t, tiled, *coeffs) for coeffs in k.gemm_scalars]
        if self.expert_gemms is not None:
            g[2:] = self.expert_gemms(t, tiled)
        linear = g[0] + g[1] + g[2] + g[3]
        allreduce = k.allreduce.seconds(t)
        elementwise = t * k.elementwise_per_token + k.elementwise_fixed
        embedding = (t * k.embedding_per_token + k.embedding_fixed) + allreduce
        return linear, elementwise, k.allreduces_per_layer * allreduce, embedding

    def _seqs_part(self, s: float) -> tuple[float, float]:
        """_shape's LM head and CPU: of the sequences alone."""
        k = self.k
        seqs_tiled = float(math.ceil(s / k.tile) * k.tile)
        lm_head = ((s * k.lm_norm_per_row + k.lm_norm_fixed)
                   + k.gemm_one(s, seqs_tiled, *k.lm_head)
                   + k.allgather.seconds(s))
        return lm_head, s * k.cpu_per_seq + k.cpu_fixed

    def _stages(self, shape: Shape, attention: float) -> list[float]:
        embedding, lm_head, cpu, launches = shape.embedding, shape.lm_head, shape.cpu, shape.launches
        layer = shape.linear + attention + shape.elementwise + shape.tp_comm
        if not self.last:  # one stage: the loop below's operations for s = 0, in its order
            t = ((self.layers[0] * layer) + embedding) + lm_head
            t = max(t, cpu) if self.overlap else t + cpu
            return [t if launches is None else t + launches[0]]
        out = []
        for s, layers in enumerate(self.layers):
            t = layers * layer
            if s == 0:
                t = t + embedding
            if s == self.last:
                t = t + lm_head
                t = max(t, cpu) if self.overlap else t + cpu
            if launches is not None:
                t = t + launches[s]
            out.append(t)
        return out

    def decode_floor(self, b: int) -> float:
        """A decode-only batch of b sequences priced with no attention: never above any such batch's
        slowest stage (attention adds >= 0, and IEEE sums, products and max are monotone)."""
        got = self._floors.get(b)
        if got is None:
            got = self._floors[b] = max(self._stages(self._shape(b, b), 0.0))
        return got

    def alone_decode_times(self, top: int) -> list[float]:
        """Per context c (0..top at least): the seconds of a decode-only iteration of one sequence
        at context c, its slowest stage: row c of decode_run_stages([0], 0, n), so a lone
        sequence's decode run is a slice of it, priced once per context instead of a dozen numpy
        calls a run (tests/test_perf_pricer_runs.py: each entry is that iteration's price)."""
        table = self._alone
        if top >= len(table):
            n = max(_TABLE_MIN, 2 * len(table))
            while n <= top:
                n *= 2
            table += slowest_stage(self.decode_run_stages(np.zeros(1, dtype=np.int64), len(table), n)).tolist()
        return table

    # -- one batch -----------------------------------------------------------------------------
    def iteration_time(self, new_tokens, context_lens) -> float:
        """max(stage_times(...)), the slowest stage of one batch (PerfModel.iteration_time). Where
        compiled, a one-stage model's batch given as tuples of ints is priced in one pass over its
        items (_one_stage_time): stage_times' operations on native scalars, no lists built."""
        if COMPILED and not self.last and type(new_tokens) is tuple and type(context_lens) is tuple:
            try:
                return self._one_stage_time(new_tokens, context_lens)
            except TypeError:  # items that are not ints: stage_times' way (and its error)
                pass
        return max(self.stage_times(new_tokens, context_lens))

    def _one_stage_time(self, new_tokens: tuple[int, ...], context_lens: tuple[int, ...]) -> float:
        """stage_times of a one-stage model, its one stage: the items' prefill units, their decodes'
        count and longest context in one pass, then the decodes' sums (whole numbers, as every
        attention unit: exact in any order) and the stage's operations in _stages' order."""
        b = len(new_tokens)
        if not b or b != len(context_lens):
            return max(self.stage_times(new_tokens, context_lens))  # (its zeros, its error)
        tokens = seqs = decodes = 0
        top = -1
        units = 0.0
        for i in range(b):
            n = new_tokens[i]
            c = context_lens[i]
            if n < 0 or c < 0:
                raise HarnessError(_NEGATIVE)
            if n == 1:
                decodes += 1
                if c > top:
                    top = c
            elif n:
                units += self._prefill_units(float(n), float(c))
            else:
                continue
            tokens += n
            seqs += 1
        if not seqs:
            return 0.0
        if decodes:
            if top >= len(self._decode_units):
                self._grow(top)
            if decodes < seqs and self.mixed_rows:  # a prefill chunk shares the step (_mixed_decode_units)
                units += ones_sum(new_tokens, context_lens, self._mixed) + self.decode_fixed
            else:
                units += self._decodes_units(new_tokens, context_lens, decodes, top)
        sh = self._shape(tokens, seqs)
        layer = sh.linear + units * ops.TIME_QUANTUM_S + sh.elementwise + sh.tp_comm
        t = ((self.layers[0] * layer) + sh.embedding) + sh.lm_head
        t = max(t, sh.cpu) if self.overlap else t + sh.cpu
        return t if sh.launches is None else t + sh.launches[0]

    def _decodes_units(self, new_tokens: tuple[int, ...], context_lens: tuple[int, ...], decodes: int, top: int) -> float:
        """_decode_units_of the batch's items of one new token (`decodes` of them, the longest at
        context `top`, within the tables): the per-item sums of the three tables in one pass."""
        if self.call is None:
            return ones_sum(new_tokens, context_lens, self._decode_units) + self.decode_fixed
        units, keys, blocks = ones_sums(new_tokens, context_lens, self.units_at, self.cap, self.block, 1.0)
        seqs = float(decodes)
        splits, n_blocks, waves = self._one_split(decodes, top)
        if splits != 1:  # the blocks a CTA streams under that many splits
            blocks = ones_blocks(new_tokens, context_lens, self.cap, self.block, float(splits))
        return (units + self.decode_fixed) + self._split_units(seqs, float(keys) + seqs, blocks, splits, n_blocks, waves)

    def stage_times(self, new_tokens, context_lens) -> list[float]:
        """Seconds of each stage of one batch, given as sequences (tuples or lists) of ints."""
        b = len(new_tokens)
        if b != len(context_lens):
            raise HarnessError(f"new_tokens shape ({b},) != context_lens shape ({len(context_lens)},)")
        if not b:
            return [0.0] * len(self.layers)
        if min(context_lens) < 0:  # (a negative new_tokens is refused where it is met, below: not a 1)
            raise HarnessError(_NEGATIVE)
        ones = new_tokens.count(1)
        units = 0.0
        mixed = False  # a prefill chunk shares the step: decodes pay the varlen call's tile (kernels.py)
        if ones == b:  # decode-only
            seqs = tokens = b
            decodes = context_lens
        else:
            if ones and new_tokens[:ones].count(1) == ones:  # decodes first (Batch.mixed), then chunks
                decodes = context_lens[:ones]
                rest = zip(new_tokens[ones:], context_lens[ones:])
            else:
                decodes = [c for n, c in zip(new_tokens, context_lens) if n == 1]
                rest = zip(new_tokens, context_lens)
            for n, c in rest:  # every item that is not a 1 is met here
                if n > 1:
                    mixed = True
                    units += self._prefill_units(float(n), float(c))
                elif n < 0:
                    raise HarnessError(_NEGATIVE)
            seqs = b - new_tokens.count(0)
            if not seqs:
                return [0.0] * len(self.layers)
            tokens = sum(new_tokens)
        if ones:
            units += self._mixed_decode_units(decodes) if mixed and self.mixed_rows else self._decode_units_of(decodes)
        return self._stages(self._shape(tokens, seqs), units * ops.TIME_QUANTUM_S)

    def chunk_run_times(self, new_tokens: tuple, context_lens: tuple, k: int) -> list[float] | None:
        """The slowest stage of each of k rows of a chunk run (the simulator's _chunk_run): row i is
        the batch of decodes (one token each) then one chunk of n > 1 tokens, each decode's context
        + i and the chunk's + i * n. Per row, stage_times' operations in its order; what is the same
        in every row (the checks, the counts, the shape) once. None where the batch is not so."""
        chunk = new_tokens[-1]
        d = len(new_tokens) - 1
        if chunk <= 1 or new_tokens.count(1) != d or len(context_lens) != d + 1 or min(context_lens) < 0:
            return None
        decodes, prompt = context_lens[:-1], context_lens[-1]
        shape = self._shape(d + chunk, d + 1)  # (tokens, sequences) of every row: sum(new_tokens), b
        n = float(chunk)
        decode_units = (self._mixed_decode_units if self.mixed_rows else self._decode_units_of) if d else None
        prefill_units, stages, q = self._prefill_units, self._stages, ops.TIME_QUANTUM_S
        out = []
        for i in range(k):
            units = 0.0
            units += prefill_units(n, float(prompt + i * chunk))
            if decode_units is not None:
                units += decode_units(decodes, i)
            out.append(max(stages(shape, units * q)))
        return out

    def _decode_units_of(self, decodes, shift: int = 0) -> float:
        """Attention units of a batch's decodes at contexts `decodes` + `shift`: theirs from the table,
        the call's fixed cost, and what the split-KV critical path adds (split_kv.DecodeCall.row_units,
        term for term)."""
        top = max(decodes) + shift
        if top >= len(self._decode_units):
            self._grow(top)
        if shift and not COMPILED:
            decodes, shift = [c + shift for c in decodes], 0
        units = _sum(self._decode_units, decodes, shift) + self.decode_fixed
        if self.call is None:
            return units
        seqs = float(len(decodes))
        if COMPILED:
            keys = float(count_sum(self._cached, decodes, shift)) + seqs
        else:
            keys = float(sum(map(self._cached.__getitem__, decodes)) if self.window is not None else sum(decodes)) + seqs
        splits, n_blocks, waves = self._one_split(len(decodes), top)
        return units + self._split_units(seqs, keys, _sum(self._split_blocks(splits), decodes, shift), splits, n_blocks, waves)

    def _split_units(self, seqs: float, keys: float, blocks: float, splits: int, n_blocks: int, waves: int) -> float:
        """What the split-KV critical path adds to `seqs` decodes' KV stream of `keys` keys, the
        longest's `n_blocks` K/V blocks, `blocks` a CTA streams in all (split_kv.DecodeCall.row_units)."""
        mean_blocks = blocks / seqs
        critical = max(float(math.ceil(n_blocks / splits)), waves * mean_blocks) * self.block_units
        stream = keys * self.kv_units + seqs * self.qo_units
        return float(math.floor(self.combine_units * (splits > 1) + max(critical - stream, 0.0)))

    def _mixed_decode_units(self, decodes, shift: int = 0) -> float:
        """Attention units of the decodes of a step that also holds a prefill chunk, each a query tile
        of mixed_rows rows over its keys (operators._pad_mixed_decodes, same order: a table by context,
        keys read a = min(c + 1, window), floor(max(2a x rows x k_pairs, a x k_kv + k_qo))); no split-KV term."""
        top = max(decodes) + shift
        if top >= len(self._decode_units):
            self._grow(top)
        if shift and not COMPILED:
            decodes, shift = [c + shift for c in decodes], 0
        return _sum(self._mixed, decodes, shift) + self.decode_fixed

    def _prefill_units(self, n: float, c: float) -> float:
        """operators.attention_units of one item with n >= 2 new tokens (scalar_rows.prefill_units)."""
        return prefill_units(n, c, self.window, self.causal, self.k_pairs, self.k_kv, self.k_qo, self.units_at.big, self.prefill_fixed)


def _map_sum(table: list[float], items, shift: int) -> float:
    """table_sum interpreted: `sum(map(...))` is faster there (`shift` is 0: the callers shifted the items)."""
    return sum(map(table.__getitem__, items))


_sum = table_sum if COMPILED else _map_sum  # sum(table[c + shift] for c in items)
