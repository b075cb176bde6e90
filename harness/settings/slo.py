"""`slo`: which SLO an experiment is judged by (experiments/slo/*.yaml); harness.experiment.slo resolves it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engines.perf.queries import SLO_DECODE_BATCH, SLO_DECODE_CONTEXT, SLO_MULTIPLIERS
from harness.metrics import SloCriterion

SLO_KINDS = ("strict", "relaxed")


@dataclass(frozen=True)
class SloSettings(SloCriterion):
    """The schema of experiments/slo/*.yaml: the criterion (the paper's by default) and where its TBT limit comes from."""

    source: str = "paper"  # paper: the published table | derived: multipliers x the model's decode iteration
    kind: str = "strict"  # strict | relaxed
    table: dict[str, Any] = field(default_factory=dict)  # source=paper: model -> {kind: seconds}
    multipliers: dict[str, float] = field(default_factory=lambda: dict(SLO_MULTIPLIERS))  # source=derived
    decode_batch: int = SLO_DECODE_BATCH
    decode_context: int = SLO_DECODE_CONTEXT
