"""FlashAttention-2's split-KV decode: what one batched decode call costs when too few CTAs run.

A decode batch is one `flash_attn_with_kvcache` call. Its KV reads are priced as a stream at a
fraction of HBM bandwidth, but a small batch does not have enough thread blocks (CTAs) to reach it:
each CTA streams its share of one sequence's K/V block by block at what one CTA can pull, so a
small batch costs its busiest CTA's blocks, not its bytes. FlashAttention-2 splits the KV length
across more CTAs to fill the GPU, by a heuristic this module reproduces:

[FA2-SPLITKV] Dao-AILab/flash-attention, csrc/flash_attn/flash_api.cpp (the 2.x split-KV path
    Sarathi-Serve's flash_attn_with_kvcache calls; which release Vidur's profile ran is not recorded):
    * mha_fwd_kvcache always runs the split-KV kernel (run_mha_fwd(..., force_split_kernel=true));
    * one query token over grouped KV heads (GQA/MQA) with no sliding window swaps the query groups
      into the row dimension (seqlenq_ngroups_swapped): the grid is batch x kv_heads x
      ceil(groups / 64) CTAs per split, 64 the split kernel's kBlockM; otherwise batch x q_heads;
    * set_params_splitkv: block_n = 256 / 128 / 64 keys for head_dim <= 64 / <= 128 / larger;
      num_splits = num_splits_heuristic(CTAs, 2 x SMs ("we're using 128 threads per block"),
      n_blocks of the longest sequence, 128): one split when the CTAs nearly fill the GPU, else the
      fewest eligible splits whose wave efficiency is within 85 % of the best;
    * more than one split: a second kernel (flash_fwd_splitkv_combine) merges the partial outputs.
    Of the four readings of the heuristic across releases (query groups swapped or not, SMs or
    2 x SMs) the one above, the newest, is the one Vidur's decode profile follows: 8.3 % held-out against 10.0-11.0 %
    (benchmarks/fit_operators.py prints all four).

Cost of one decode call: fixed + combine (when split) + max(KV bytes / (eta HBM), waves x blocks per
CTA x block bytes / CTA bandwidth), waves = ceil(CTAs / (2 x SMs)). The fixed cost and eta are the
attention kernel's decode_fixed_s and decode_efficiency, combine and the CTA bandwidth
`SplitKvDecode`'s: fits of Vidur's A100 decode-attention profile (kernels.py cites them).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import operators as ops

SPLIT_KERNEL_ROWS = 64  # [FA2-SPLITKV] kBlockM of the split-KV kernel
MAX_SPLITS = 128  # [FA2-SPLITKV] num_splits_heuristic(..., 128)
CTAS_PER_SM = 2  # [FA2-SPLITKV] the heuristic's 2 x SMs: two 128-thread CTAs resident per SM


@dataclass(frozen=True)
class SplitKvDecode:
    """Measured constants of one split-KV decode kernel (kernels.py)."""

    combine_s: float  # the combine kernel, paid when the call splits
    cta_bandwidth: float  # B/s one CTA streams K/V blocks at (paged KV, 16-token pages)


def block_keys(head_dim: int) -> int:
    """Keys per K/V block of the split kernel ([FA2-SPLITKV] set_params_splitkv's block_n)."""
    return 256 if head_dim <= 64 else (128 if head_dim <= 128 else 64)


@lru_cache(maxsize=65536)
def num_splits(ctas: int, slots: int, n_blocks: int, max_splits: int = MAX_SPLITS) -> int:
    """[FA2-SPLITKV] num_splits_heuristic, as written there: `ctas` the CTAs of one split, `slots`
    the SMs as the heuristic counts them (2 x SMs), `n_blocks` the longest sequence's K/V blocks."""
    if ctas >= 0.8 * slots:
        return 1
    max_splits = min(max_splits, slots, n_blocks)

    def eligible(s: int) -> bool:  # more splits that leave the blocks per split unchanged are no split
        return s == 1 or -(-n_blocks // s) != -(-n_blocks // (s - 1))

    efficiency = [0.0] * (max_splits + 1)
    for s in range(1, max_splits + 1):
        if eligible(s):
            waves = ctas * s / slots
            efficiency[s] = waves / math.ceil(waves)
    best = max(efficiency)
    for s in range(1, max_splits + 1):
        if eligible(s) and efficiency[s] >= 0.85 * best:
            return s
    return 1


class DecodeCall:
    """Prices the one decode call of each batch row (n == 1 items) under the split-KV model, as the
    time its critical path adds to the KV stream `operators.attention_units` already summed."""

    def __init__(self, kernel: SplitKvDecode, *, sm_count: int, q_heads: int, kv_heads: int, head_dim: int,
                 kv_bytes_per_token: float, qo_bytes_per_token: float, bandwidth: float, window: int | None,
                 swap_groups: bool = True, ctas_per_sm: int = CTAS_PER_SM):
        # swap_groups / ctas_per_sm: the older readings of [FA2-SPLITKV], for fit_operators.py to compare
        groups = max(1, q_heads // kv_heads)
        # [FA2-SPLITKV] seqlenq_ngroups_swapped. FA2 keeps q heads apart under a window, but Sarathi-Serve's
        # wrapper passes none: a window here caps the blocks the call reads (vLLM-style block tables)
        swapped = swap_groups and groups > 1
        self.ctas_per_seq = kv_heads * math.ceil(groups / SPLIT_KERNEL_ROWS) if swapped else q_heads
        self.slots = ctas_per_sm * sm_count
        self.block = block_keys(head_dim)
        q = ops.TIME_QUANTUM_S
        # a CTA streams one KV head's K and V: block keys x its share of a token's KV bytes
        self._block_units = self.block * kv_bytes_per_token / kv_heads / kernel.cta_bandwidth / q
        self._kv_units = kv_bytes_per_token / bandwidth / q
        self._qo_units = qo_bytes_per_token / bandwidth / q
        self._combine_units = kernel.combine_s / q
        self._window = window
        self._table = np.zeros((1, 1))  # splits by (decodes, blocks); 0 until worked out

    def _splits(self, seqs: np.ndarray, n_blocks: np.ndarray) -> np.ndarray:
        """The heuristic's splits per row, from a table of (decodes, blocks) filled as rows need it."""
        si, bi = seqs.astype(np.intp), n_blocks.astype(np.intp)
        rows, cols = int(si.max(initial=0)) + 1, int(bi.max(initial=0)) + 1
        if rows > self._table.shape[0] or cols > self._table.shape[1]:
            grown = np.zeros((max(rows, self._table.shape[0]), max(cols, self._table.shape[1])))
            grown[:self._table.shape[0], :self._table.shape[1]] = self._table
            self._table = grown
        splits = self._table[si, bi]
        if not splits.all():  # 0: not worked out yet
            for b, nb in set(zip(si[splits == 0].tolist(), bi[splits == 0].tolist())):
                self._table[b, nb] = num_splits(b * self.ctas_per_seq, self.slots, nb) if b and nb else 1
            splits = self._table[si, bi]
        return splits

    def layout(self, n: np.ndarray, c: np.ndarray, scratch: np.ndarray | None = None):
        """Per row: (decodes, KV tokens they read, splits, K/V blocks on the critical path).

        The critical path: the longest sequence's CTAs (its blocks over the splits), or waves of CTAs
        x the blocks a CTA holds on average, whichever is longer (for the profile's equal lengths:
        waves x blocks a CTA). `scratch`: a float64 buffer shaped like `n` to work in, or None."""
        decode = n == 1.0
        seqs = np.count_nonzero(decode, axis=-1).astype(np.float64)
        cached = np.empty_like(c) if scratch is None else scratch
        cached.fill(-1.0)  # off the decodes: + 1 below makes them read nothing
        np.copyto(cached, c, where=decode)
        if self._window is not None:  # a sliding window's engine keeps only the window's blocks
            np.minimum(cached, float(self._window - 1), out=cached)
        keys = cached.sum(axis=-1) + float(n.shape[-1])  # the kernel appends the new token's K/V first
        n_blocks = np.ceil((cached.max(axis=-1, initial=-1.0) + 1.0) / self.block)
        splits = self._splits(seqs, n_blocks)
        waves = np.ceil(seqs * self.ctas_per_seq * splits / self.slots)
        cached += 1.0  # each sequence's keys, then its blocks a CTA
        cached /= self.block
        np.ceil(cached, out=cached)
        cached /= splits[..., None]
        np.ceil(cached, out=cached)
        mean_blocks = cached.sum(axis=-1) / np.maximum(seqs, 1.0)
        return seqs, keys, splits, np.maximum(np.ceil(n_blocks / splits), waves * mean_blocks)

    def units(self, n: np.ndarray, c: np.ndarray, scratch: np.ndarray | None = None) -> np.ndarray:
        """Per row, whole TIME_QUANTUM_S units: the combine kernel where the call splits, plus how much
        longer its busiest CTAs take than the row's decode KV stream (0 where the stream is longer).
        The call's fixed cost is the kernel's decode_fixed_s, priced with the stream."""
        seqs, keys, splits, critical_blocks = self.layout(n, c, scratch)
        stream = keys * self._kv_units + seqs * self._qo_units
        critical = critical_blocks * self._block_units
        extra = self._combine_units * (splits > 1.0) + np.maximum(critical - stream, 0.0)
        return np.floor(extra) * (seqs > 0)
