"""Which SLO an experiment is judged by: the paper's published values (`slo=paper`), the paper's
definition applied to the simulated deployment (`slo=derived`), or an explicit `slo.tbt_s`; and by
which criterion (`slo.criterion`: the paper's quantiles, or DistServe's per-request attainment)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from common.errors import HarnessError
from engines.perf.queries import SLO_DECODE_BATCH, SLO_DECODE_CONTEXT, SLO_MULTIPLIERS, decode_iteration_time
from harness.metrics import (DISTSERVE_ATTAINMENT, PAPER_SCHEDULING_DELAY_QUANTILE, PAPER_SCHEDULING_DELAY_S,
                             PAPER_TBT_QUANTILE, Slo)
from harness.typed import typed

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


def derived_tbt_slo(perf, kind: str, multipliers: Mapping, batch: int = SLO_DECODE_BATCH,
                    context: int = SLO_DECODE_CONTEXT) -> float:
    """Multiplier x the latency of a decode-only iteration of `batch` sequences at `context` tokens."""
    return float(multipliers[kind]) * decode_iteration_time(perf, batch, context)


def resolve_slo(slo_cfg: Mapping, model_name: str, perf=None) -> Slo:
    s = typed(SloSettings, slo_cfg, "slo")
    if s.kind not in SLO_KINDS:
        raise HarnessError(f"slo.kind must be one of {', '.join(SLO_KINDS)}, got {s.kind!r}")
    tbt = s.tbt_s
    if tbt is None and s.source == "derived":
        if perf is None:
            raise HarnessError("slo=derived needs the deployment's performance model")
        tbt = derived_tbt_slo(perf, s.kind, s.multipliers, s.decode_batch, s.decode_context)
    if tbt is None:
        if model_name not in s.table:
            raise HarnessError(
                f"slo: no {s.source} SLO for model {model_name!r} "
                f"(table has {', '.join(s.table) or 'nothing'}); set slo.tbt_s=SECONDS"
            )
        tbt = s.table[model_name][s.kind]
    try:
        return Slo(
            tbt_s=float(tbt), tbt_quantile=s.tbt_quantile, scheduling_delay_s=s.scheduling_delay_s,
            scheduling_delay_quantile=s.scheduling_delay_quantile, ttft_s=s.ttft_s, ttft_quantile=s.ttft_quantile,
            min_goodput_fraction=s.min_goodput_fraction, tpot_s=s.tpot_s, criterion=s.criterion,
            attainment=s.attainment,
        )
    except (TypeError, ValueError) as e:
        raise HarnessError(f"slo: {e}") from None
