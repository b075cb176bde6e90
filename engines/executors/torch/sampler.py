"""Next-token sampling: greedy, or temperature + top-p with a per-request seeded generator.

A request with a seed gets its own generator, so its tokens depend only on its seed and its own
logits, not on which other requests shared its batches (the property that makes outputs the same
under every scheduling policy). Requests without a seed share one executor-wide generator.
"""
from __future__ import annotations

import torch

from engines.executors.base import SamplingParams


class Sampler:
    def __init__(self, seed: int = 0) -> None:
        self._shared = torch.Generator().manual_seed(seed)
        self._gens: dict[int, torch.Generator] = {}

    def free(self, seq_id: int) -> None:
        self._gens.pop(seq_id, None)

    def __call__(self, logits: torch.Tensor, seq_ids: list[int], params: list[SamplingParams]) -> list[int]:
        """logits: [S, vocab] (any device) -> one token id per row."""
        out = logits.float().argmax(dim=-1).tolist()  # greedy rows, and a placeholder for the rest
        for row, (sid, p) in enumerate(zip(seq_ids, params)):
            if p.temperature > 0:
                out[row] = self._sample_row(logits[row].float().cpu(), sid, p)
        return out

    def _sample_row(self, logits: torch.Tensor, seq_id: int, p: SamplingParams) -> int:
        probs = torch.softmax(logits / p.temperature, dim=-1)
        if p.top_p < 1.0:
            sorted_probs, order = probs.sort(descending=True)
            # Keep the smallest prefix whose mass reaches top_p: a token stays if the mass before it is < top_p.
            keep = (sorted_probs.cumsum(0) - sorted_probs) < p.top_p
            keep[0] = True
            sorted_probs = sorted_probs * keep
            probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
        return int(torch.multinomial(probs, 1, generator=self._generator(seq_id, p)).item())

    def _generator(self, seq_id: int, p: SamplingParams) -> torch.Generator:
        if p.seed is None:
            return self._shared
        gen = self._gens.get(seq_id)
        if gen is None:
            gen = self._gens[seq_id] = torch.Generator().manual_seed(p.seed)
        return gen
