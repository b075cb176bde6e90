"""Which SLO an experiment is judged by: the paper's published values (`slo=paper`), the paper's
definition applied to the simulated deployment (`slo=derived`), or an explicit `slo.tbt_s`."""
from __future__ import annotations

from collections.abc import Mapping

from engines.perf.queries import decode_iteration_time

from common.errors import HarnessError
from harness.metrics import Slo

SLO_KINDS = ("strict", "relaxed")


def derived_tbt_slo(perf, kind: str, multipliers: Mapping, batch: int = 32, context: int = 4096) -> float:
    """Multiplier x the latency of a decode-only iteration of `batch` sequences at `context` tokens."""
    return float(multipliers[kind]) * decode_iteration_time(perf, batch, context)


def resolve_slo(slo_cfg: Mapping, model_name: str, perf=None) -> Slo:
    kind = slo_cfg.get("kind")
    if kind not in SLO_KINDS:
        raise HarnessError(f"slo.kind must be one of {', '.join(SLO_KINDS)}, got {kind!r}")
    tbt = slo_cfg.get("tbt_s")
    if tbt is None and slo_cfg.get("source") == "derived":
        if perf is None:
            raise HarnessError("slo=derived needs the deployment's performance model")
        tbt = derived_tbt_slo(
            perf, kind, slo_cfg.get("multipliers", {"strict": 5, "relaxed": 25}),
            int(slo_cfg.get("decode_batch", 32)), int(slo_cfg.get("decode_context", 4096)),
        )
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
            ttft_s=None if slo_cfg.get("ttft_s") is None else float(slo_cfg["ttft_s"]),
            ttft_quantile=float(slo_cfg.get("ttft_quantile", 0.99)),
            min_goodput_fraction=None if slo_cfg.get("min_goodput_fraction") is None else float(slo_cfg["min_goodput_fraction"]),
        )
    except (TypeError, ValueError) as e:
        raise HarnessError(f"slo: {e}") from None
