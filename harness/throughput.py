"""Offline throughput metrics (the first Sarathi paper's figures of merit), from a run's records
and, where the backend keeps one, its iteration log (harness/backends/sim/iterations.py).

  makespan_s          completion time of the run's requests: the last finish, from t = 0
  token_throughput    prompt + output tokens of the completed requests per second of makespan
  composition         iterations by kind (prefill-only, decode-only, hybrid: a prefill chunk with
                      decodes), the share of time each took, the decodes a hybrid iteration carried
                      and the share of all decode tokens that rode on a prefill (piggybacked)
  decode cost         over the hybrid iterations: the marginal cost of a decode token that rides on
                      a chunk, (iteration - its prefill part alone) / decodes, and the per-token
                      cost of a decode-only batch of the run's B (iterations.py); the decode speedup is
                      their ratio, the first Sarathi paper's definition (Sec. 5.1; its example,
                      LLaMA-13B on an A6000: a decode-only batch of 4 takes 49.96 ms, 12.49 ms a
                      token, the 3 decodes riding on a chunk (238.4 - 234.8) / 3 = 1.2 ms). Ratios of
                      sums: every decode token weighs the same.
  bubbles             pipeline-bubble seconds per request (median, mean) and their split by cause
  gains               a scheduler's token throughput over a named baseline's (the same workload)
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from harness.records import RequestRecord

BUBBLE_CAUSES = ("schedule", "send", "upstream")
BUBBLE_QUANTILES = (10, 25, 50, 75, 90, 99)  # percentiles of the bubble time a request (the distribution, not only its median)


@dataclass(frozen=True)
class OfflineSummary:
    num_requests: int
    completed: int
    makespan_s: float
    token_throughput: float  # (prompt + output) tokens / s
    output_token_throughput: float
    request_throughput: float
    iterations: int | None = None  # None: the backend keeps no iteration log (a live server)
    prefill_only: int | None = None
    decode_only: int | None = None
    hybrid: int | None = None
    hybrid_time_share: float | None = None
    decodes_per_hybrid: float | None = None
    piggybacked_share: float | None = None  # decode tokens in hybrid iterations / all decode tokens
    marginal_decode_s: float | None = None
    decode_alone_s: float | None = None
    decode_speedup: float | None = None
    bubble_p50_s: float | None = None
    bubble_mean_s: float | None = None
    bubble_share: dict[str, float] = field(default_factory=dict)  # cause -> share of all bubble time
    bubble_quantiles_s: dict[str, float] = field(default_factory=dict)  # "p10" ... "p99" -> seconds a request


def _ratio(a: float, b: float) -> float | None:
    return float(a / b) if b > 0 else None


def composition(it: Mapping[str, np.ndarray]) -> dict:
    """The iteration-log fields of OfflineSummary."""
    pre, dec = np.asarray(it["prefills"]) > 0, np.asarray(it["decodes"]) > 0
    dt = np.asarray(it["end_s"]) - np.asarray(it["start_s"])
    decodes = np.asarray(it["decodes"], dtype=np.float64)
    hybrid = pre & dec
    out = {"iterations": int(dt.size), "prefill_only": int(np.sum(pre & ~dec)), "decode_only": int(np.sum(dec & ~pre)),
           "hybrid": int(hybrid.sum()), "hybrid_time_share": _ratio(dt[hybrid].sum(), dt.sum()),
           "decodes_per_hybrid": float(decodes[hybrid].mean()) if hybrid.any() else None,
           "piggybacked_share": _ratio(decodes[hybrid].sum(), decodes.sum())}
    if hybrid.any():
        riding = decodes[hybrid].sum()
        out["marginal_decode_s"] = float((dt[hybrid] - np.asarray(it["alone_prefill_s"])[hybrid]).sum() / riding)
        # per token of the decode-only batches priced: B each (iterations.py), decodes + 1 in a log without B
        priced = np.asarray(it["alone_decodes_n"])[hybrid].sum() if "alone_decodes_n" in it else riding + hybrid.sum()
        out["decode_alone_s"] = float(np.asarray(it["alone_decodes_s"])[hybrid].sum() / priced)
        out["decode_speedup"] = _ratio(out["decode_alone_s"], out["marginal_decode_s"])
    return out


def bubbles(per_request: Mapping[str, np.ndarray]) -> dict:
    """The bubble fields of OfflineSummary from per-request seconds by cause (bubble_<cause>_s)."""
    parts = np.stack([np.asarray(per_request[f"bubble_{c}_s"], dtype=np.float64) for c in BUBBLE_CAUSES])
    total = parts.sum(axis=0)
    if not total.size or not total.any():
        return {}
    return {"bubble_p50_s": float(np.median(total)), "bubble_mean_s": float(total.mean()),
            "bubble_share": {c: float(parts[i].sum() / total.sum()) for i, c in enumerate(BUBBLE_CAUSES)},
            "bubble_quantiles_s": {f"p{q}": float(np.percentile(total, q)) for q in BUBBLE_QUANTILES}}


def offline_summary(records: Sequence[RequestRecord], iterations: Mapping | None = None,
                    request_bubbles: Mapping | None = None) -> OfflineSummary:
    done = [r for r in records if r.completed]
    makespan = max((r.finished_s for r in done), default=float("nan"))
    tokens = sum(r.prompt_len + r.output_len for r in done)
    out = sum(r.output_len for r in done)
    extra = {}
    if iterations is not None and len(iterations.get("start_s", ())):
        extra.update(composition(iterations))
    if request_bubbles is not None:
        extra.update(bubbles(request_bubbles))
    return OfflineSummary(
        num_requests=len(records), completed=len(done), makespan_s=float(makespan),
        token_throughput=tokens / makespan if makespan > 0 else float("nan"),
        output_token_throughput=out / makespan if makespan > 0 else float("nan"),
        request_throughput=len(done) / makespan if makespan > 0 else float("nan"), **extra)


def gains(summaries: Mapping[str, OfflineSummary], baseline: str | None) -> dict[str, float]:
    """Each scheduler's token throughput over `baseline`'s ({} without one)."""
    if baseline is None or baseline not in summaries:
        return {}
    base = summaries[baseline].token_throughput
    return {name: s.token_throughput / base for name, s in summaries.items() if base > 0}
