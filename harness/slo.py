"""Which SLO an experiment is judged by: the paper's published values or explicit numbers."""
from __future__ import annotations

from collections.abc import Mapping

from harness.errors import HarnessError
from harness.metrics import Slo

SLO_KINDS = ("strict", "relaxed")


def resolve_slo(slo_cfg: Mapping, model_name: str) -> Slo:
    kind = slo_cfg.get("kind")
    if kind not in SLO_KINDS:
        raise HarnessError(f"slo.kind must be one of {', '.join(SLO_KINDS)}, got {kind!r}")
    tbt = slo_cfg.get("tbt_s")
    if tbt is None:
        table = slo_cfg.get("table") or {}
        if model_name not in table:
            raise HarnessError(
                f"slo: no {slo_cfg.get('source', 'paper')} SLO for model {model_name!r} "
                f"(table has {', '.join(table) or 'nothing'}); set slo.tbt_s=SECONDS"
            )
        tbt = table[model_name][kind]
    try:
        return Slo(
            tbt_s=float(tbt),
            tbt_quantile=float(slo_cfg.get("tbt_quantile", 0.99)),
            scheduling_delay_s=float(slo_cfg.get("scheduling_delay_s", 2.0)),
            scheduling_delay_quantile=float(slo_cfg.get("scheduling_delay_quantile", 0.5)),
        )
    except (TypeError, ValueError) as e:
        raise HarnessError(f"slo: {e}") from None
