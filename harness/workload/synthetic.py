"""Synthetic request lengths set by a sequence length and a P:D ratio: the first Sarathi paper's
offline workloads (arXiv 2308.16369 Sec. 5).

A request of sequence length L (prompt + output tokens) and P:D ratio r has D = round(L / (r + 1))
output tokens and P = L - D prompt tokens (P / D = r, up to rounding). `output_len` counts every
generated token (ARCHITECTURE.md): the first comes with the last prefill chunk, so a request has
D - 1 decode iterations, and a ratio that leaves D < 2 has no decode token at all (refused).

Lengths (`synthetic.lengths`):
  fixed   every request has L = sequence_length (the paper's throughput runs: 1K, 2K, 3K).
  zipf    L drawn from a Zipf law over [sequence_length, max_sequence_length]: the k-th length
          (k = 0, 1, ...) with probability proportional to (k + 1)^-zipf_theta, as Sarathi's
          ZipfGenerator draws (sarathi/benchmark/request_generator, unscrambled): the paper's
          pipeline study, 1K to 4K tokens, theta 0.4, P:D 10.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.errors import HarnessError

from .distributions import number
from .lengths import Workload
from .seeding import LENGTHS, rng_for

KINDS = ("fixed", "zipf")


@dataclass(frozen=True)
class SyntheticLengths:
    """`dataset.synthetic`: the lengths of a synthetic workload (module docstring)."""

    lengths: str = "fixed"  # fixed | zipf
    sequence_length: int = 1024  # L (fixed); the shortest L (zipf)
    pd_ratio: float = 10.0  # P:D, prompt over output tokens of a request
    max_sequence_length: int | None = None  # zipf: the longest L
    zipf_theta: float = 0.4

    def __post_init__(self) -> None:
        if self.lengths not in KINDS:
            raise HarnessError(f"dataset.synthetic.lengths must be one of {', '.join(KINDS)}, got {self.lengths!r}")
        number(self.sequence_length, "dataset.synthetic.sequence_length", 2, integer=True)
        number(self.pd_ratio, "dataset.synthetic.pd_ratio", 0, above=True)
        if self.lengths == "zipf":
            top = self.max_sequence_length
            if top is None or top < self.sequence_length:
                raise HarnessError("dataset.synthetic.max_sequence_length must be >= sequence_length for zipf lengths, "
                                   f"got {top!r}")
            if not self.zipf_theta > 0:
                raise HarnessError(f"dataset.synthetic.zipf_theta must be > 0, got {self.zipf_theta!r}")
        shortest = self.split(np.array([self.sequence_length]))[1][0]
        if shortest < 2:
            raise HarnessError(
                f"dataset.synthetic: P:D {self.pd_ratio:g} at sequence length {self.sequence_length} leaves "
                f"{shortest} output token(s): no decode token (need P:D <= {self.sequence_length / 2 - 1:g})")

    def split(self, total: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(prompt, output) tokens of requests of `total` tokens each."""
        output = np.rint(total / (self.pd_ratio + 1.0)).astype(np.int64)
        return total - output, output

    def describe(self) -> str:
        if self.lengths == "fixed":
            return f"every request {self.sequence_length} tokens at P:D {self.pd_ratio:g}"
        return (f"Zipf(theta {self.zipf_theta:g}) lengths in [{self.sequence_length}, {self.max_sequence_length}] "
                f"at P:D {self.pd_ratio:g}")


def synthetic_workload(spec: SyntheticLengths, n: int, seed: int, name: str) -> Workload:
    if spec.lengths == "fixed":
        total = np.full(n, spec.sequence_length, dtype=np.int64)
    else:
        k = np.arange(spec.max_sequence_length - spec.sequence_length + 1, dtype=np.float64)
        weights = (k + 1.0) ** -spec.zipf_theta
        draws = rng_for(LENGTHS, seed).choice(k.size, size=n, p=weights / weights.sum())
        total = spec.sequence_length + draws.astype(np.int64)
    prompt, output = spec.split(total)
    return Workload(prompt, output, f"{name}: synthetic, {spec.describe()}; {n} requests, seed {seed}")
