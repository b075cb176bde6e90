"""Arrival processes: exactness, seeding, scaling across rates, validation."""
import math

import numpy as np
import pytest
from scipy import stats

from common.errors import HarnessError
from harness.records import RequestSpec
from harness.workload import arrival_offsets, load_workload, make_requests

POISSON = {"name": "poisson"}


def test_poisson_gaps_are_exponential_at_rate():
    rate = 4.0
    t = arrival_offsets(POISSON, rate, 20_000, seed=0)
    gaps = np.diff(np.concatenate([[0.0], t]))
    ks = stats.kstest(gaps, "expon", args=(0, 1 / rate))
    assert ks.pvalue > 0.01, ks
    assert abs(gaps.mean() * rate - 1) < 0.03


def test_poisson_offsets_shape():
    t = arrival_offsets(POISSON, 2.0, 100, 1)
    assert t.shape == (100,) and t[0] > 0 and np.all(np.diff(t) >= 0)
    assert np.array_equal(t, arrival_offsets(POISSON, 2.0, 100, 1))
    assert not np.array_equal(t, arrival_offsets(POISSON, 2.0, 100, 2))


def test_rates_are_scaled_copies():
    a = arrival_offsets(POISSON, 1.0, 500, 5)
    b = arrival_offsets(POISSON, 3.0, 500, 5)
    np.testing.assert_allclose(a, 3.0 * b, rtol=1e-12)


@pytest.mark.parametrize("rate", [0, -1.0, math.inf, math.nan, "2", None])
def test_bad_rate(rate):
    with pytest.raises(HarnessError, match="rate"):
        arrival_offsets(POISSON, rate, 10, 0)


def test_unknown_process():
    with pytest.raises(HarnessError, match="unknown arrival process 'weird'"):
        arrival_offsets({"name": "weird"}, 1.0, 10, 0)


def test_make_requests():
    w = load_workload({"name": "openchat_sharegpt4", "max_total_tokens": 8192}, 64, 0)
    t = arrival_offsets(POISSON, 1.0, 64, 0)
    reqs = make_requests(w, t)
    assert all(isinstance(r, RequestSpec) for r in reqs)
    assert [r.request_id for r in reqs] == list(range(64))
    assert reqs[5].prompt_len == w.prompt_lens[5] and reqs[5].arrival_s == t[5]
    assert type(reqs[0].prompt_len) is int and reqs[0].prompt_token_ids is None
    with pytest.raises(HarnessError, match="63 arrival offsets for 64 requests"):
        make_requests(w, t[:-1])


def test_lengths_independent_of_arrival_draws():
    # Separate random streams: the same seed gives the same lengths whatever arrivals are drawn.
    ds = {"name": "openchat_sharegpt4", "max_total_tokens": 8192}
    a = load_workload(ds, 50, 0)
    arrival_offsets(POISSON, 1.0, 1000, 0)
    assert np.array_equal(a.prompt_lens, load_workload(ds, 50, 0).prompt_lens)
