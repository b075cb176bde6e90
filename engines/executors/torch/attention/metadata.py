"""Per-iteration attention metadata, shared by all layers of one forward pass.

A batch is a flat concatenation of sequences' new tokens. Sequence i brings query_lens[i] new
tokens at absolute positions context_lens[i] .. kv_lens[i] - 1, on top of context_lens[i]
tokens already cached. Every new token attends to its sequence's keys at positions <= its own
(earlier chunks through the cache, this chunk causally), limited to the last `sliding_window`
positions (itself included) when the model has a window. A decode is the case query_lens == 1.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class AttentionMetadata:
    query_lens: list[int]
    context_lens: list[int]
    block_size: int
    sliding_window: int | None
    scale: float
    slot_mapping: torch.Tensor  # [T] cache slot of each new token
    block_tables: torch.Tensor  # [S, max_blocks] int64, padded with 0 (never read past kv_lens)
    kv_lens_t: torch.Tensor  # [S]
    cu_query: torch.Tensor  # [S + 1] int32 prefix sums of query_lens
    scratch: dict = field(default_factory=dict)  # per-step tensors a backend derives once for all layers

    @property
    def num_seqs(self) -> int:
        return len(self.query_lens)

    @property
    def kv_lens(self) -> list[int]:
        return [c + q for c, q in zip(self.context_lens, self.query_lens)]

    @property
    def query_starts(self) -> list[int]:
        starts = [0]
        for n in self.query_lens:
            starts.append(starts[-1] + n)
        return starts

    def kv_start(self, i: int) -> int:
        """First key position sequence i's new tokens can see (the window of its first new token)."""
        if self.sliding_window is None:
            return 0
        return max(0, self.context_lens[i] - self.sliding_window + 1)

    @staticmethod
    def build(query_lens: list[int], context_lens: list[int], block_tables: list[list[int]], block_size: int,
              sliding_window: int | None, scale: float, device: torch.device | str) -> AttentionMetadata:
        slots: list[int] = []
        for n, c, table in zip(query_lens, context_lens, block_tables):
            for p in range(c, c + n):
                slots.append(table[p // block_size] * block_size + p % block_size)
        width = max((len(t) for t in block_tables), default=1) or 1
        padded = [list(t) + [0] * (width - len(t)) for t in block_tables]
        cu = [0]
        for n in query_lens:
            cu.append(cu[-1] + n)
        return AttentionMetadata(
            query_lens=list(query_lens),
            context_lens=list(context_lens),
            block_size=block_size,
            sliding_window=sliding_window,
            scale=scale,
            slot_mapping=torch.tensor(slots, dtype=torch.long, device=device),
            block_tables=torch.tensor(padded, dtype=torch.long, device=device),
            kv_lens_t=torch.tensor([c + n for c, n in zip(context_lens, query_lens)], dtype=torch.long, device=device),
            cu_query=torch.tensor(cu, dtype=torch.int32, device=device),
        )

    def packed_kv_slots(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Cache slots of every sequence's visible keys, packed one sequence after the other, and
        the [S + 1] int32 prefix sums of their counts. Vectorized on the device: a 128-sequence
        decode batch over long contexts gathers hundreds of thousands of slots."""
        if "packed" in self.scratch:
            return self.scratch["packed"]
        dev = self.block_tables.device
        starts = torch.tensor([self.kv_start(i) for i in range(self.num_seqs)], dtype=torch.long, device=dev)
        counts = self.kv_lens_t - starts
        cu = torch.zeros(self.num_seqs + 1, dtype=torch.long, device=dev)
        cu[1:] = torch.cumsum(counts, 0)
        total = int(cu[-1])
        seq_of = torch.repeat_interleave(torch.arange(self.num_seqs, device=dev), counts, output_size=total)
        pos = torch.arange(total, device=dev) - cu[seq_of] + starts[seq_of]
        slots = self.block_tables[seq_of, pos // self.block_size] * self.block_size + pos % self.block_size
        self.scratch["packed"] = (slots, cu.to(torch.int32))
        return self.scratch["packed"]


def gather_keys(cache: torch.Tensor, table: torch.Tensor, n: int) -> torch.Tensor:
    """The first n cached tokens of one sequence: [n, heads, dim] from its block table."""
    blocks = -(-n // cache.shape[1])
    return cache[table[:blocks]].flatten(0, 1)[:n]


def visible_mask(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int | None) -> torch.Tensor:
    """[..., q, k] True where a query at q_pos may attend to a key at k_pos."""
    allowed = k_pos.unsqueeze(-2) <= q_pos.unsqueeze(-1)
    if window is not None:
        allowed &= k_pos.unsqueeze(-2) > q_pos.unsqueeze(-1) - window
    return allowed
