"""Vocabulary-parallel token embedding and LM head: each TP rank holds a contiguous slice of
ceil(vocab / tp) rows (the last slice zero-padded)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engines.models.parallel import get_parallel, tp_all_gather, tp_all_reduce


class _VocabShard(nn.Module):
    def __init__(self, vocab_size: int, hidden: int) -> None:
        super().__init__()
        st = get_parallel()
        self.tp_size = st.tp_size
        self.vocab_size = vocab_size
        self.rows = -(-vocab_size // st.tp_size)
        self.start = st.tp_rank * self.rows
        self.end = min(vocab_size, self.start + self.rows)
        self.weight = nn.Parameter(torch.zeros(self.rows, hidden), requires_grad=False)
        self.weight.weight_loader = self._load

    def _load(self, param: nn.Parameter, full: torch.Tensor, shard_id: object = None) -> None:
        n = self.end - self.start
        param.data.zero_()
        if n > 0:
            param.data[:n].copy_(full[self.start:self.end])


class VocabParallelEmbedding(_VocabShard):
    """Each rank looks up the ids in its slice (zeros elsewhere); an all-reduce sums them."""

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.tp_size == 1:
            return F.embedding(ids, self.weight)
        mine = (ids >= self.start) & (ids < self.end)
        out = F.embedding((ids - self.start) * mine, self.weight) * mine.unsqueeze(-1).to(self.weight.dtype)
        return tp_all_reduce(out)


class ParallelLMHead(_VocabShard):
    """Each rank scores its vocabulary slice; an all-gather assembles the full logits row on
    every rank (the sampler runs on one of them)."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = F.linear(hidden, self.weight)
        if self.tp_size > 1:
            logits = tp_all_gather(logits, dim=-1)
        return logits[..., : self.vocab_size]
