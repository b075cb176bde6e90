"""`slo`: which SLO an experiment is judged by (experiments/slo/*.yaml); harness.experiment.slo resolves it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engines.perf.queries import SLO_DECODE_BATCH, SLO_DECODE_CONTEXT, SLO_MULTIPLIERS
from harness.metrics import DISTSERVE_ATTAINMENT, PAPER_SCHEDULING_DELAY_QUANTILE, PAPER_SCHEDULING_DELAY_S, PAPER_TBT_QUANTILE

SLO_KINDS = ("strict", "relaxed")


@dataclass(frozen=True)
class SloSettings:
    """The schema of experiments/slo/*.yaml; defaults are the paper's criterion and definition."""

    source: str = "paper"  # paper: the published table | derived: multipliers x the model's decode iteration
    kind: str = "strict"  # strict | relaxed
    tbt_s: float | None = None  # set a number to override the table or the derivation
    tbt_quantile: float = PAPER_TBT_QUANTILE
    scheduling_delay_s: float = PAPER_SCHEDULING_DELAY_S
    scheduling_delay_quantile: float = PAPER_SCHEDULING_DELAY_QUANTILE
    table: dict[str, Any] = field(default_factory=dict)  # source=paper: model -> {kind: seconds}
    multipliers: dict[str, float] = field(default_factory=lambda: dict(SLO_MULTIPLIERS))  # source=derived
    decode_batch: int = SLO_DECODE_BATCH
    decode_context: int = SLO_DECODE_CONTEXT
    ttft_s: float | None = None  # optional extra criterion (not the paper's): TTFT quantile <= ttft_s
    ttft_quantile: float = PAPER_TBT_QUANTILE
    min_goodput_fraction: float | None = None  # optional: share of requests with TPOT <= tpot_s (and TTFT <= ttft_s)
    # DistServe's per-request TPOT SLO (harness.metrics.good_requests); None: the TBT SLO above.
    tpot_s: float | None = None
    # paper: the quantile criterion above | attainment: >= `attainment` of the requests meet TTFT <= ttft_s
    # and TPOT <= tpot_s each (DistServe, OSDI'24; supersedes min_goodput_fraction, which must be unset).
    criterion: str = "paper"
    attainment: float = DISTSERVE_ATTAINMENT
