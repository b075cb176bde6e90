"""Which SLO an experiment is judged by: the paper's published values (`slo=paper`), the paper's
definition applied to the simulated deployment (`slo=derived`), or an explicit `slo.tbt_s`; and by
which criterion (`slo.criterion`: the paper's quantiles, or DistServe's per-request attainment)."""
from __future__ import annotations

from dataclasses import fields

from common.errors import HarnessError
from engines.perf.queries import decode_iteration_time
from harness.metrics import Slo, SloCriterion
from harness.settings.slo import SLO_KINDS, SloSettings


def resolve_slo(s: SloSettings, model_name: str, perf=None) -> Slo:
    if s.kind not in SLO_KINDS:
        raise HarnessError(f"slo.kind must be one of {', '.join(SLO_KINDS)}, got {s.kind!r}")
    tbt = s.tbt_s
    if tbt is None and s.source == "derived":
        if perf is None:
            raise HarnessError("slo=derived needs the deployment's performance model")
        # multiplier x the latency of a decode-only iteration of decode_batch sequences at decode_context tokens
        tbt = float(s.multipliers[s.kind]) * decode_iteration_time(perf, s.decode_batch, s.decode_context)
    if tbt is None:
        if model_name not in s.table:
            raise HarnessError(f"slo: no {s.source} SLO for model {model_name!r} "
                               f"(table has {', '.join(s.table) or 'nothing'}); set slo.tbt_s=SECONDS")
        tbt = s.table[model_name][s.kind]
    try:
        # the settings' criterion (max_error_fraction is the search's: the plan sets it)
        return Slo(**{**{f.name: getattr(s, f.name) for f in fields(SloCriterion)}, "tbt_s": float(tbt)})
    except (TypeError, ValueError) as e:
        raise HarnessError(f"slo: {e}") from None
