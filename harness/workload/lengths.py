"""`Workload`: the request lengths of one experiment, without arrival times.

Arrivals are kept apart on purpose: a capacity search probes many rates with the *same* lengths,
so only the arrival offsets change from probe to probe.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class Workload:
    prompt_lens: np.ndarray  # int64, >= 1
    output_lens: np.ndarray  # int64, >= 1 (the first output token counts, see ARCHITECTURE.md)
    source: str  # provenance in words: embedded table + origin, or trace path, seed, drops
    # Sessions (harness/workload/sessions.py): requests that are turns of conversations or agent
    # runs, with their prompts' token identity; None: independent requests.
    sessions: object | None = None

    def __post_init__(self) -> None:
        p = np.array(self.prompt_lens, dtype=np.int64)
        o = np.array(self.output_lens, dtype=np.int64)
        if p.ndim != 1 or p.shape != o.shape:
            raise ValueError(f"prompt_lens {p.shape} and output_lens {o.shape} must be 1-D and equal length")
        if p.size and (p.min() < 1 or o.min() < 1):
            raise ValueError("prompt and output lengths must be >= 1")
        # Read-only copies, so a frozen Workload really cannot change under a running search.
        p.setflags(write=False)
        o.setflags(write=False)
        object.__setattr__(self, "prompt_lens", p)
        object.__setattr__(self, "output_lens", o)

    def __len__(self) -> int:
        return int(self.prompt_lens.size)
