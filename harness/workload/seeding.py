"""Independent random streams from one user seed.

Lengths, arrivals and prompt ids each get their own stream (a SeedSequence spawn key), so that
changing how many numbers one of them draws never shifts the others, and the same seed gives the
same lengths whatever the arrival process.
"""
from __future__ import annotations

import numbers

import numpy as np

from common.errors import HarnessError

LENGTHS, ARRIVALS, PROMPTS = 1, 2, 3


def check_seed(seed: object) -> int:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise HarnessError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def rng_for(stream: int, seed: int, *extra: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(check_seed(seed), spawn_key=(stream, *extra)))
