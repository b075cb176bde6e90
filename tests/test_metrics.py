"""Metric definitions: TBT excludes the first token, unstarted requests violate, SLO verdicts."""
from __future__ import annotations

import numpy as np
import pytest

from harness.metrics import Slo, TokenGaps, check_slo, summarize, tbt_samples
from harness.records import RequestRecord


def rec(i, arrival, sched, times, output_len=None):
    times = np.asarray(times, dtype=float)
    return RequestRecord(
        request_id=i,
        arrival_s=arrival,
        prompt_len=10,
        output_len=len(times) if output_len is None else output_len,
        first_scheduled_s=sched,
        first_token_s=times[0] if len(times) else np.nan,
        finished_s=times[-1] if len(times) else np.nan,
        token_times_s=times,
    )


def test_tbt_samples_exclude_first_token():
    r = rec(0, 0.0, 0.1, [1.0, 1.5, 2.5])
    np.testing.assert_allclose(tbt_samples([r]), [0.5, 1.0])
    s = summarize([r])
    assert s.tbt.count == 2 and s.ttft.p50 == 1.0 and s.scheduling_delay.p50 == pytest.approx(0.1)
    assert s.e2e.p50 == 2.5 and s.num_completed == 1


def test_unstarted_requests_count_as_violations():
    done = [rec(i, 0.0, 0.1, [0.5, 0.6]) for i in range(4)]
    never = [rec(10 + i, 0.0, np.nan, [], output_len=5) for i in range(5)]
    v = check_slo(done + never, Slo(tbt_s=1.0))
    assert not v.passed and v.scheduling_delay_s == np.inf and "scheduling delay" in v.reason
    assert summarize(done + never).num_unstarted == 5


def test_slo_verdict_on_tbt():
    rs = [rec(i, 0.0, 0.0, np.arange(101) * (0.05 if i else 0.5)) for i in range(2)]
    v = check_slo(rs, Slo(tbt_s=0.2))
    assert not v.passed and v.tbt_s == pytest.approx(0.5)
    assert check_slo(rs, Slo(tbt_s=0.6)).passed


def test_bad_slo():
    with pytest.raises(ValueError):
        Slo(tbt_s=0)
    with pytest.raises(ValueError):
        Slo(tbt_s=1, tbt_quantile=1.5)


def test_unreported_scheduling_is_bounded_by_ttft():
    # vLLM does not report when it first scheduled a request: its first token bounds the delay.
    r = rec(0, 1.0, np.nan, [1.5, 1.6])
    assert r.started
    v = check_slo([r], Slo(tbt_s=1.0))
    assert v.passed and v.scheduling_delay_s == pytest.approx(0.5)


def test_goodput_counts_requests_meeting_their_own_slo():
    fast = [rec(i, 0.0, 0.0, [0.5, 0.6, 0.7]) for i in range(3)]  # TPOT 0.1 s
    slow = [rec(9, 0.0, 0.0, [0.5, 1.5, 2.5])]  # TPOT 1 s
    v = check_slo(fast + slow, Slo(tbt_s=0.2))
    assert v.goodput_fraction == pytest.approx(0.75) and v.goodput == pytest.approx(3 / 2.5)
    assert not check_slo(fast + slow, Slo(tbt_s=5.0, min_goodput_fraction=1.0, ttft_s=0.4)).passed
    assert check_slo(fast, Slo(tbt_s=0.2, min_goodput_fraction=1.0, ttft_s=0.5)).passed


def _p99_fails_p90_passes():
    """One request, 100 TBT samples: 95 of 10 ms, 5 of 500 ms. P90 = 10 ms, P99 = 500 ms."""
    gaps = np.r_[np.full(95, 0.01), np.full(5, 0.5)]
    times = 1.0 + np.concatenate([[0.0], np.cumsum(gaps)])
    r = rec(0, 0.0, 0.0, times)
    assert np.quantile(tbt_samples([r]), 0.9) == pytest.approx(0.01)
    assert np.quantile(tbt_samples([r]), 0.99) == pytest.approx(0.5)
    return [r]


def test_slo_is_judged_on_p99_tbt_by_default():
    # P90 would pass this 100 ms SLO; the paper's criterion, P99, does not.
    rs = _p99_fails_p90_passes()
    v = check_slo(rs, Slo(tbt_s=0.1))
    assert not v.passed and v.tbt_s == pytest.approx(0.5)
    assert Slo(tbt_s=0.1).tbt_quantile == 0.99
    assert v.reason == "P99 TBT 0.500s > 0.1s"
    # ... and a SLO above the P99 passes.
    assert check_slo(rs, Slo(tbt_s=0.6)).passed


def test_slo_uses_its_own_tbt_quantile():
    rs = _p99_fails_p90_passes()
    v = check_slo(rs, Slo(tbt_s=0.1, tbt_quantile=0.9))
    assert v.passed and v.tbt_s == pytest.approx(0.01) and v.reason == "ok"
    v = check_slo(rs, Slo(tbt_s=0.03, tbt_quantile=0.95))  # P95 interpolates: 0.01 + 0.05 * 0.49
    assert not v.passed and v.tbt_s == pytest.approx(0.0345) and v.reason.startswith("P95 TBT 0.034s")
    assert not check_slo(rs, Slo(tbt_s=0.1, tbt_quantile=0.99)).passed


def _record(i: int, error: str | None = None, n: int = 5) -> RequestRecord:
    times = np.arange(1, n + 1, dtype=np.float64) * 0.01 + i
    if error is not None:
        times = times[:2]
    return RequestRecord(i, float(i), 10, n, float(i), float(times[0]), float(times[-1]) if error is None else np.nan,
                         times, error=error)


def test_failed_requests_fail_the_probe_by_default_and_say_why():
    from harness.records import error_kind

    records = [_record(i) for i in range(8)] + [_record(8, "HTTP 500: boom"), _record(9, "ClientPayloadError: cut")]
    assert [error_kind(r.error) for r in records[-2:]] == ["http_status", "stream_cut"]
    v = check_slo(records, Slo(tbt_s=1.0))
    assert not v.passed and v.num_errors == 2 and v.errors == {"http_status": 1, "stream_cut": 1}
    assert "2 of 10 requests failed (1 http_status, 1 stream_cut)" in v.reason
    assert check_slo(records, Slo(tbt_s=1.0, max_error_fraction=0.2)).passed  # 2/10 allowed
    assert not check_slo(records, Slo(tbt_s=1.0, max_error_fraction=0.1)).passed


def test_a_time_limit_cut_off_is_judged_by_latency_not_counted_as_failed():
    records = [_record(i) for i in range(9)] + [_record(9, "unfinished at time limit")]
    v = check_slo(records, Slo(tbt_s=1.0))
    assert v.num_errors == 0 and v.errors == {}


def test_token_gaps_taken_once_are_each_requests_own():
    """TokenGaps (taken once per probe for the verdict, summary and rows) gives exactly what each
    request's own np.diff gives: no gap across two requests, empty and one-token requests included."""
    # Seed 11's 299 gaps sum to another float in sequence (np.add.reduceat) than pairwise (np.mean).
    times = [np.cumsum(np.random.default_rng(11).lognormal(-3, 3, n)) for n in (5, 0, 1, 2, 300, 1, 9)]
    records = [rec(i, 0.0, 0.0, t) for i, t in enumerate(times)]
    gaps = TokenGaps.of(records)
    own = [np.diff(t) for t in times]
    assert gaps.samples.tolist() == np.concatenate(own).tolist()
    assert gaps.num.tolist() == [d.size for d in own]
    assert [gaps.tpot[i] for i in (0, 3, 4, 6)] == [np.mean(own[i]) for i in (0, 3, 4, 6)]  # bit for bit
    assert np.isnan(gaps.tpot[[1, 2, 5]]).all() and np.isnan(gaps.max[[1, 2, 5]]).all()
    assert gaps.max.tolist()[4::2] == [np.max(own[4]), np.max(own[6])]
    with pytest.raises(ValueError, match="token gaps of 7 requests given for 6"):
        summarize(records[:6], gaps)
