"""Property checks over random rates, seeds, limits (hypothesis)."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import HarnessError
from harness.workload import arrival_offsets, load_workload, make_requests

import pytest

rates = st.floats(min_value=1e-3, max_value=1e4, allow_nan=False, allow_infinity=False)
seeds = st.integers(min_value=0, max_value=2**32)


@settings(max_examples=40, deadline=None)
@given(rate=rates, seed=seeds, n=st.integers(0, 300),
       name=st.sampled_from(["poisson", "gamma", "constant", "poisson_capped"]))
def test_offsets_positive_nondecreasing(rate, seed, n, name):
    t = arrival_offsets({"name": name, "cv": 3.0}, rate, n, seed)
    assert t.shape == (n,) and np.all(np.isfinite(t))
    if n:
        assert t[0] > 0 and np.all(np.diff(t) >= 0)


@settings(max_examples=25, deadline=None)
@given(limit=st.integers(50, 20000), seed=seeds, name=st.sampled_from(["openchat_sharegpt4", "arxiv_summarization"]))
def test_embedded_respects_any_limit(limit, seed, name):
    try:
        w = load_workload({"name": name, "max_total_tokens": limit}, 500, seed)
    except HarnessError:
        return  # a limit below every cell is reported, not silently ignored
    total = w.prompt_lens + w.output_lens
    assert total.max() <= limit and w.output_lens.min() >= 1 and w.prompt_lens.min() >= 1


@pytest.mark.parametrize("bad", [[0.0, np.nan], [1.0, 0.5], [-1.0, 2.0]])
def test_make_requests_rejects_bad_offsets(bad):
    w = load_workload({"name": "openchat_sharegpt4", "max_total_tokens": 8192}, 2, 0)
    with pytest.raises(HarnessError, match="nondecreasing"):
        make_requests(w, np.array(bad))
