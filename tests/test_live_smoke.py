"""`experiment=live_smoke` end to end: Hydra config -> plan -> one in-repo server -> a live
capacity search with the real-time twin of the tiny model, in well under two minutes."""
from __future__ import annotations

import time
import warnings

import numpy as np

from harness.backends import open_backend
from harness.backends.live import LiveBackend
from harness.config import compose
from harness.search.plan import plan_experiment
from harness.search.probe import search_capacity


def test_live_smoke_capacity_search_runs_quickly():
    cfg = compose(["experiment=live_smoke", "progress=false"])
    plan = plan_experiment(cfg)
    backend = open_backend(plan.job("sarathi", progress=False))
    assert isinstance(backend, LiveBackend)
    spec = backend.spec
    assert spec.kind == "inrepo" and spec.executor == "realtime" and spec.model == "tiny" and spec.host == "127.0.0.1"
    assert spec.kv_capacity_tokens == 65536 and spec.time_scale == 4.0
    t0 = time.monotonic()
    with warnings.catch_warnings(), backend:
        warnings.simplefilter("ignore")
        result = search_capacity(plan, "sarathi", backend.run)
    wall = time.monotonic() - t0
    assert wall < 120
    assert len(result.probes) >= 2
    assert 1 <= result.capacity_qps <= 512
    for p in result.probes:
        records = p.detail.records
        assert len(records) == plan.search.num_requests  # nothing dropped, failing probes included
        if p.passed:
            assert all(r.completed for r in records)
            assert np.all(np.isfinite([r.first_scheduled_s for r in records]))
