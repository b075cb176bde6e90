"""Metrics from RequestRecords, whichever backend produced them. Names are defined once, here.

- `ttft`: first token time - arrival.
- `tbt`: gap between consecutive output tokens of one request (the first token is not a sample);
  pooled over all requests, so P99 TBT is the paper's "P99 time between tokens".
- `tpot`: per-request mean TBT.
- `scheduling_delay`: first scheduled - arrival; a request that never started counts as +inf
  (a violation, never an absence). Servers that do not report when they first scheduled a
  request (vLLM) leave first_scheduled NaN: its TTFT is then used, an upper bound.
- `e2e`: finish - arrival.
- `dispatch_lag` (live only): actual - planned send time.
- `goodput`: completed requests per second that met the SLO themselves: TPOT <= the TPOT SLO
  (`tpot_s`, the TBT SLO unless set) and, when a TTFT SLO is set, TTFT <= it. Its share of all
  requests, `goodput_fraction`, is DistServe's "SLO attainment" (Zhong et al., DistServe, OSDI'24,
  Sec. 2 and 6: the percentage of requests that meet both their TTFT and TPOT SLOs); goodput per
  GPU divides by the deployment's GPUs (harness.commands.run).

Two capacity criteria (`Slo.criterion`): `paper` (Sarathi-Serve Sec. 5.1: P99 TBT and median
scheduling delay, pooled over the probe) and `attainment` (DistServe: the probe passes iff at
least `Slo.attainment`, 90 % by default, of its requests meet both TTFT and TPOT SLOs).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from harness.records import CUT_OFF_KINDS, RequestRecord, error_kind

QUANTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True)
class Distribution:
    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float

    @staticmethod
    def of(values: np.ndarray) -> Distribution:
        values = np.asarray(values, dtype=np.float64)
        if values.size == 0:
            return Distribution(0, *[float("nan")] * 5)
        with np.errstate(invalid="ignore"):
            qs = np.quantile(values, QUANTILES)
            mean = float(np.mean(values))
        if np.isinf(values).any():  # interpolating between two +inf gives NaN; the answer is +inf
            qs = np.where(np.isnan(qs), np.inf, qs)
        p50, p90, p99 = qs
        return Distribution(int(values.size), mean, float(p50), float(p90), float(p99), float(np.max(values)))


@dataclass(frozen=True)
class Summary:
    num_requests: int
    num_completed: int
    num_unstarted: int
    num_preemptions: int
    duration_s: float  # first arrival to last token
    request_throughput: float  # completed requests per second of duration
    output_token_throughput: float
    ttft: Distribution
    tbt: Distribution
    tpot: Distribution
    scheduling_delay: Distribution
    e2e: Distribution


@dataclass(frozen=True)
class CacheSummary:
    """What a prefix cache held for a probe's requests at their first admission (RequestRecord.
    cached_tokens). `token_hit_rate`: cached over prompt tokens of the requests that started;
    `block_hit_rate`: full blocks found over the full blocks a prompt could find ((prompt - 1) //
    block_size: its last token is always computed). TTFT split by requests that found any cached
    token (hit) and those that found none (miss)."""

    token_hit_rate: float
    block_hit_rate: float
    hit_requests: int
    miss_requests: int
    ttft_hit: Distribution
    ttft_miss: Distribution


def summarize_cache(prompt_len, cached_tokens, ttft, started, block_size: int) -> CacheSummary:
    """From per-request arrays (a probe's records or its saved rows); `ttft` NaN where no token came."""
    prompt = np.asarray(prompt_len, dtype=np.int64)
    cached = np.asarray(cached_tokens, dtype=np.int64)
    ttft = np.asarray(ttft, dtype=np.float64)
    started = np.asarray(started, dtype=bool)
    hit = started & (cached > 0)
    miss = started & (cached == 0)
    tokens = prompt[started].sum()
    blocks = ((prompt[started] - 1) // block_size).sum()
    return CacheSummary(
        token_hit_rate=float(cached[started].sum() / tokens) if tokens else float("nan"),
        block_hit_rate=float((cached[started] // block_size).sum() / blocks) if blocks else float("nan"),
        hit_requests=int(hit.sum()), miss_requests=int(miss.sum()),
        ttft_hit=Distribution.of(ttft[hit & ~np.isnan(ttft)]), ttft_miss=Distribution.of(ttft[miss & ~np.isnan(ttft)]))


@dataclass(frozen=True)
class TokenGaps:
    """The gaps between each request's consecutive tokens, taken once per probe for all that judges,
    summarizes or saves it (check_slo, summarize, records_frame take it to skip taking it again).
    `samples`: every gap, request by request (the pooled TBT samples); per request `num`, its gaps,
    and (NaN where it has none) `tpot`, their np.mean, and `max`, the largest."""

    samples: np.ndarray
    num: np.ndarray
    tpot: np.ndarray
    max: np.ndarray

    @staticmethod
    def of(records: Sequence[RequestRecord]) -> TokenGaps:
        counts = np.array([len(r.token_times_s) for r in records], dtype=np.int64)
        times = np.concatenate([r.token_times_s for r in records]) if records else np.empty(0)
        owner = np.repeat(np.arange(len(records)), counts)
        samples = np.diff(times)[owner[1:] == owner[:-1]]  # a gap within one request, never across two
        n = np.maximum(counts - 1, 0)
        has, ends = n > 0, np.cumsum(n)
        starts = (ends - n)[has]
        tpot, top = np.full(len(records), np.nan), np.full(len(records), np.nan)
        # np.mean's own steps, a pairwise sum of the slice then / its size (add.reduceat sums in another order)
        sums = [np.add.reduce(samples[a:b]) for a, b in zip(starts.tolist(), ends[has].tolist())]
        tpot[has] = np.array(sums) / n[has]
        if samples.size:
            top[has] = np.maximum.reduceat(samples, starts)
        return TokenGaps(samples, n, tpot, top)

    def check(self, records: Sequence[RequestRecord]) -> TokenGaps:
        """Itself, if it can be of `records`: a caller passes the gaps it took of the same records."""
        if len(self.tpot) != len(records):
            raise ValueError(f"token gaps of {len(self.tpot)} requests given for {len(records)}")
        return self


def tbt_samples(records: Sequence[RequestRecord]) -> np.ndarray:
    return TokenGaps.of(records).samples


def scheduling_delays(records: Sequence[RequestRecord]) -> np.ndarray:
    first = np.array([r.first_scheduled_s for r in records], dtype=np.float64)
    token = np.array([r.first_token_s for r in records], dtype=np.float64)
    start = np.where(np.isnan(first), token, first)  # unreported scheduling: TTFT bounds it
    delays = start - np.array([r.arrival_s for r in records], dtype=np.float64)
    return np.where(np.isnan(delays), np.inf, delays)


def summarize(records: Sequence[RequestRecord], gaps: TokenGaps | None = None) -> Summary:
    if not records:
        raise ValueError("no records to summarize")
    gaps = TokenGaps.of(records) if gaps is None else gaps.check(records)
    arrival = np.array([r.arrival_s for r in records])
    first_token = np.array([r.first_token_s for r in records])
    finished = np.array([r.finished_s for r in records])
    completed = np.array([r.completed for r in records])
    n_tokens = sum(len(r.token_times_s) for r in records)
    last = max((r.token_times_s[-1] for r in records if len(r.token_times_s)), default=np.nan)
    duration = float(last - arrival.min()) if np.isfinite(last) else float("nan")
    return Summary(
        num_requests=len(records), num_completed=int(completed.sum()), num_unstarted=int(sum(not r.started for r in records)),
        num_preemptions=int(sum(r.num_preemptions for r in records)), duration_s=duration,
        request_throughput=float(completed.sum() / duration) if duration > 0 else float("nan"),
        output_token_throughput=float(n_tokens / duration) if duration > 0 else float("nan"),
        ttft=Distribution.of((first_token - arrival)[~np.isnan(first_token)]), tbt=Distribution.of(gaps.samples),
        tpot=Distribution.of(gaps.tpot[gaps.num > 0]), scheduling_delay=Distribution.of(scheduling_delays(records)),
        e2e=Distribution.of((finished - arrival)[completed]))


# The paper's capacity criterion (Sarathi-Serve Sec. 5.1): P99 TBT within the SLO, median
# scheduling delay at most 2 s. The one place these numbers are written.
PAPER_TBT_QUANTILE = 0.99
PAPER_SCHEDULING_DELAY_S = 2.0
PAPER_SCHEDULING_DELAY_QUANTILE = 0.5
# DistServe (OSDI'24) Sec. 6 reports the rate each system sustains at 90 % SLO attainment.
DISTSERVE_ATTAINMENT = 0.9
CRITERIA = ("paper", "attainment")


@dataclass(frozen=True)
class SloCriterion:
    """The criterion's knobs as a config writes them (`slo.*`: harness.settings.slo.SloSettings adds
    where tbt_s comes from); the paper's criterion and DistServe's attainment by default."""

    tbt_s: float | None = None  # the TBT limit; in `slo`, a number overrides the table or the derivation
    tbt_quantile: float = PAPER_TBT_QUANTILE
    scheduling_delay_s: float = PAPER_SCHEDULING_DELAY_S
    scheduling_delay_quantile: float = PAPER_SCHEDULING_DELAY_QUANTILE
    ttft_s: float | None = None  # optional: also require this TTFT quantile (not the paper's)
    ttft_quantile: float = PAPER_TBT_QUANTILE
    min_goodput_fraction: float | None = None  # optional: also require this share of good requests
    tpot_s: float | None = None  # per-request TPOT limit (DistServe's TPOT SLO, good_requests); None: tbt_s
    # paper: the quantile criterion above | attainment: >= `attainment` of the requests meet TTFT <= ttft_s
    # and TPOT <= tpot_s each (DistServe, OSDI'24; supersedes min_goodput_fraction, which must be unset).
    criterion: str = "paper"
    attainment: float = DISTSERVE_ATTAINMENT


@dataclass(frozen=True, kw_only=True)
class Slo(SloCriterion):
    """The capacity criterion. `paper` (the default): P99 TBT <= tbt_s and median scheduling delay
    <= 2 s, plus the optional extras (a TTFT quantile, a share of good requests). `attainment`:
    at least `attainment` of the requests each have TTFT <= ttft_s and TPOT <= tpot_s (DistServe's
    SLO attainment; the pooled quantiles and the extras are not judged). Either way failed requests
    beyond max_error_fraction fail the probe."""

    tbt_s: float
    # Requests that failed (any error kind but a time limit's cut-off) may be at most this share of
    # the probe: 0 by default, so one failed request fails the probe, and the verdict says why.
    # The plan sets it from search.max_error_fraction, whose settings check it is in [0, 1].
    max_error_fraction: float = 0.0

    def __post_init__(self) -> None:
        limits = (self.tbt_s, self.scheduling_delay_s, self.ttft_s, self.tpot_s)
        if not all(x is None or x > 0 for x in limits) or self.tbt_s is None:
            raise ValueError(f"SLO limits must be > 0, got tbt {self.tbt_s}, scheduling delay {self.scheduling_delay_s}, "
                             f"ttft {self.ttft_s}, tpot {self.tpot_s}")
        if self.criterion not in CRITERIA:
            raise ValueError(f"criterion must be one of {', '.join(CRITERIA)}, got {self.criterion!r}")
        if self.criterion == "attainment" and self.ttft_s is None:
            # Without a TTFT limit a queue could grow without bound while every TPOT stays small.
            raise ValueError("criterion=attainment judges TTFT and TPOT per request: set ttft_s too")
        if self.criterion == "attainment" and self.min_goodput_fraction is not None:
            raise ValueError("min_goodput_fraction is the paper criterion's extra; with criterion=attainment "
                             "the share of good requests is attainment")
        for name in ("attainment", "min_goodput_fraction", "tbt_quantile", "scheduling_delay_quantile", "ttft_quantile"):
            value = getattr(self, name)
            if value is not None and not 0 < value <= 1:  # shares and quantiles; min_goodput_fraction is optional
                raise ValueError(f"{name} must be in (0, 1], got {value}")

    @property
    def tpot_limit_s(self) -> float:
        return self.tbt_s if self.tpot_s is None else self.tpot_s

    def describe(self) -> str:
        """The criterion in words, for a run's header line."""
        if self.criterion == "attainment":
            return (f"SLO attainment >= {self.attainment:.0%} of requests with TTFT <= {self.ttft_s:.3g} s and "
                    f"TPOT <= {self.tpot_limit_s:.3g} s")
        return (f"SLO P{self.tbt_quantile * 100:g} TBT <= {self.tbt_s:.3g} s and "
                f"P{self.scheduling_delay_quantile * 100:g} scheduling delay <= {self.scheduling_delay_s:g} s")


@dataclass(frozen=True)
class SloVerdict:
    passed: bool
    tbt_s: float  # the measured TBT quantile
    scheduling_delay_s: float  # the measured scheduling-delay quantile
    reason: str
    goodput: float = float("nan")  # good requests per second (see module docstring)
    goodput_fraction: float = float("nan")  # the share of good requests: DistServe's SLO attainment
    num_errors: int = 0  # failed requests (a time limit's cut-off not counted)
    errors: dict[str, int] = field(default_factory=dict)  # failed requests by kind (harness.records.ERROR_KINDS)


def good_requests(records: Sequence[RequestRecord], slo: Slo, gaps: TokenGaps | None = None) -> np.ndarray:
    """Per request: completed, TPOT (mean TBT) <= slo.tpot_limit_s and (if set) TTFT <= slo.ttft_s."""
    gaps = TokenGaps.of(records) if gaps is None else gaps.check(records)
    good = np.zeros(len(records), dtype=bool)
    for i, r in enumerate(records):
        if not r.completed:
            continue
        tpot = float(gaps.tpot[i]) if gaps.num[i] else 0.0
        ttft_ok = slo.ttft_s is None or r.first_token_s - r.arrival_s <= slo.ttft_s
        good[i] = tpot <= slo.tpot_limit_s and ttft_ok
    return good


def check_slo(records: Sequence[RequestRecord], slo: Slo, gaps: TokenGaps | None = None) -> SloVerdict:
    gaps = TokenGaps.of(records) if gaps is None else gaps.check(records)
    tbts = gaps.samples
    tbt_q = float(np.quantile(tbts, slo.tbt_quantile)) if tbts.size else 0.0
    # "higher" so that unstarted requests (+inf) are never interpolated away.
    delay_q = float(np.quantile(scheduling_delays(records), slo.scheduling_delay_quantile, method="higher"))
    good = good_requests(records, slo, gaps)
    fraction = float(good.mean()) if len(good) else float("nan")
    paper = slo.criterion == "paper"
    reasons = []
    if paper and slo.ttft_s is not None:
        ttft = np.array([r.first_token_s - r.arrival_s for r in records], dtype=np.float64)
        ttft_q = float(np.quantile(np.where(np.isnan(ttft), np.inf, ttft), slo.ttft_quantile, method="higher"))
        if ttft_q > slo.ttft_s:
            reasons.append(f"P{slo.ttft_quantile * 100:g} TTFT {ttft_q:.3f}s > {slo.ttft_s:g}s")
    if paper and tbt_q > slo.tbt_s:
        reasons.append(f"P{slo.tbt_quantile * 100:g} TBT {tbt_q:.3f}s > {slo.tbt_s:g}s")
    if paper and delay_q > slo.scheduling_delay_s:
        reasons.append(f"P{slo.scheduling_delay_quantile * 100:g} scheduling delay {delay_q:.3f}s > {slo.scheduling_delay_s:g}s")
    if not paper and not fraction >= slo.attainment:
        reasons.append(f"attainment {fraction:.1%} < {slo.attainment:.1%} (TTFT <= {slo.ttft_s:g}s and "
                       f"TPOT <= {slo.tpot_limit_s:g}s per request)")
    # Failed requests by kind, a time limit's cut-off (unfinished, not sent) left out.
    errors = dict(sorted(Counter(k for r in records if (k := error_kind(r.error)) and k not in CUT_OFF_KINDS).items()))
    num_errors = sum(errors.values())
    if records and num_errors / len(records) > slo.max_error_fraction:
        kinds = ", ".join(f"{n} {k}" for k, n in errors.items())
        reasons.append(f"{num_errors} of {len(records)} requests failed ({kinds})")
    if slo.min_goodput_fraction is not None and not fraction >= slo.min_goodput_fraction:
        reasons.append(f"goodput {fraction:.1%} of requests < {slo.min_goodput_fraction:.1%}")
    ends = [r.finished_s for r in records if r.completed]
    span = max(ends) - min(r.arrival_s for r in records) if ends else float("nan")
    rate = float(good.sum() / span) if span > 0 else float("nan")
    return SloVerdict(not reasons, tbt_q, delay_q, "; ".join(reasons) or "ok", rate, fraction, num_errors, errors)
