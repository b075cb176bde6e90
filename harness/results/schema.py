"""The one schema of what summary.json holds per probe: the writer (harness.commands.run) builds
`ProbeRow`s, the analysis loader reads `PROBE_COLUMNS`. Older runs may lack newer columns
(read as NaN)."""
from __future__ import annotations

from dataclasses import dataclass, field, fields


@dataclass(frozen=True)
class ProbeRow:
    qps: float
    passed: bool
    reason: str
    tbt_quantile_s: float  # the SLO's TBT quantile (P99 for the paper)
    scheduling_delay_quantile_s: float | None  # the SLO's delay quantile (median); None: never started
    ttft_p50_s: float
    ttft_p99_s: float
    tbt_p50_s: float
    tbt_p99_s: float
    e2e_p50_s: float
    request_throughput: float
    goodput: float  # requests per second that met their own TTFT and TPOT SLOs (harness.metrics)
    goodput_fraction: float  # their share of the probe's requests: DistServe's SLO attainment
    output_token_throughput: float
    num_completed: int
    num_preemptions: int
    num_errors: int = 0  # failed requests (a time limit's cut-off not counted)
    errors: dict[str, int] = field(default_factory=dict)  # failed requests by kind (harness.records.ERROR_KINDS)
    goodput_per_gpu: float = float("nan")  # goodput / the deployment's GPUs (TP x PP x cluster instances)
    # A passing probe's signs of starvation (harness.starvation: completed throughput, P99 TTFT), "" if none;
    # beside the verdict, never part of it.
    starvation: str = ""
    # Prefix caching (harness.metrics.CacheSummary): NaN for runs saved before it was measured
    cache_token_hit_rate: float = float("nan")
    cache_block_hit_rate: float = float("nan")
    ttft_p50_hit_s: float = float("nan")  # requests that found cached prompt tokens
    ttft_p50_miss_s: float = float("nan")  # requests that found none
    ttft_p99_hit_s: float = float("nan")
    ttft_p99_miss_s: float = float("nan")


PROBE_COLUMNS = tuple(f.name for f in fields(ProbeRow))
