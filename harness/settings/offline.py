"""`offline`: what an offline throughput run reports (harness/search/offline.py)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OfflineSettings:
    """The `offline` config node (experiments/config.yaml): what an offline run reports."""

    baseline: str | None = None  # the scheduler the others' throughput gains are over (one of the run's)
