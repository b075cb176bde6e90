"""`backend=sim`: the simulated backend's settings (harness.backends.sim)."""
from __future__ import annotations

from dataclasses import dataclass

from harness.settings.backend import BackendSettings


@dataclass(frozen=True)
class SimSettings(BackendSettings):
    name: str = "sim"
    fast_forward: bool = True  # advance runs of identical decode iterations in one exact step
