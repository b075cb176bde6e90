"""Property checks over random rates, seeds, limits (hypothesis)."""
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from common.errors import HarnessError
from harness.workload import arrival_offsets, load_workload, make_requests
from harness.workload.embedded import EMBEDDED
from harness.workload.joint_table import load_joint_table
from harness.workload.paths import DATA_DIR

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


def _check_respects(w, limit, n=500):
    total = w.prompt_lens + w.output_lens
    assert len(total) == n and total.max() <= limit and w.output_lens.min() >= 1 and w.prompt_lens.min() >= 1


# The smallest prompt + output of any cell of the embedded ShareGPT4 table (11 today).
_SHAREGPT = load_joint_table(DATA_DIR / EMBEDDED["openchat_sharegpt4"].file)
SHAREGPT_MIN_TOTAL = int((_SHAREGPT.prompt_lo + _SHAREGPT.output_lo).min())


@settings(max_examples=30, deadline=None)
@given(limit=st.one_of(st.integers(2, 40), st.integers(41, 20000)), seed=seeds)
@example(limit=SHAREGPT_MIN_TOTAL - 1, seed=0)
@example(limit=SHAREGPT_MIN_TOTAL, seed=0)
def test_sharegpt_table_raises_only_when_the_limit_is_below_every_cell(limit, seed):
    spec = {"name": "openchat_sharegpt4", "max_total_tokens": limit}
    if limit < SHAREGPT_MIN_TOTAL:
        with pytest.raises(HarnessError, match="excludes every cell"):
            load_workload(spec, 500, seed)
    else:
        _check_respects(load_workload(spec, 500, seed), limit)


# The arxiv fit (lognormals, median prompt 7059) keeps draws with prompt + output <= limit and
# gives up after 1000 rounds of ~600 draws. Measured share of draws kept: 0.026 % at 1024 (about
# 150 of the 500 needed in the whole budget: always raises), 1.2 % at 2048 (500 found in well
# under 100 rounds: never raises). Limits in between are judged by the draw budget, not here.
@settings(max_examples=20, deadline=None)
@given(limit=st.one_of(st.integers(2, 1024), st.integers(2048, 40000)), seed=seeds)
@example(limit=1024, seed=0)
@example(limit=2048, seed=0)
def test_arxiv_fit_raises_only_when_the_limit_admits_too_few_draws(limit, seed):
    spec = {"name": "arxiv_summarization", "max_total_tokens": limit}
    if limit <= 1024:
        with pytest.raises(HarnessError, match="admits too few draws"):
            load_workload(spec, 500, seed)
    else:
        _check_respects(load_workload(spec, 500, seed), limit)


@pytest.mark.parametrize("bad", [[0.0, np.nan], [1.0, 0.5], [-1.0, 2.0]])
def test_make_requests_rejects_bad_offsets(bad):
    w = load_workload({"name": "openchat_sharegpt4", "max_total_tokens": 8192}, 2, 0)
    with pytest.raises(HarnessError, match="nondecreasing"):
        make_requests(w, np.array(bad))
