"""`experiment=live_smoke` end to end: Hydra config -> plan -> one in-repo server -> a live
capacity search with the real-time twin of the tiny model, in well under two minutes."""
from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

from harness.backends import open_backend
from harness.backends.live import LiveBackend
from harness.backends.live.twin_clock import disturbed_note
from harness.backends.sim import SimSettings
from harness.commands.table import disturbed_probes
from harness.config import compose
from harness.records import CUT_OFF_KINDS, error_kind
from harness.config import plan_experiment
from harness.search.probe import run_probe, search_capacity

pytestmark = pytest.mark.live  # starts a real server (pyproject.toml markers)


class Scaled:
    """The performance model stretched by the twin's time scale: the simulator priced like the server."""

    def __init__(self, timer, scale: float) -> None:
        self.timer, self.scale = timer, scale

    def batch_times(self, new_tokens, context_lens):
        return self.scale * self.timer.batch_times(new_tokens, context_lens)


# The preset's twin runs at 4x with a 20 ms TBT SLO: on a quiet host the server's own Python work per
# iteration (an engine step, a write to every stream) is small next to that, but on a busy one
# (load 13 on 2 cores, measured) it is starved of CPU, its iterations stretch and live capacity fell
# to 7 QPS against the simulator's 32. This test's subject is the live search agreeing with the
# simulator, not the host: so its twin runs 3x slower still, against a 3x SLO, where the same
# starvation is a third of the share of an iteration. (experiment=live_smoke as written is run
# end to end by tests/test_live_failures.py and the README's test.)
SLOWER = ["backend.time_scale=12", "slo.tbt_s=0.06"]


def test_live_smoke_capacity_search_runs_quickly():
    cfg = compose(["experiment=live_smoke", "progress=false", *SLOWER])
    plan = plan_experiment(cfg)
    backend = open_backend(plan.job("sarathi", progress=False))
    assert isinstance(backend, LiveBackend)
    spec = backend.spec
    assert spec.kind == "inrepo" and spec.config.executor == "realtime" and spec.model == "tiny" and spec.host == "127.0.0.1"
    assert spec.config.kv_capacity_tokens == 65536 and spec.config.time_scale == 12.0
    t0 = time.monotonic()
    with backend:
        result = search_capacity(plan, "sarathi", backend.run)
    wall = time.monotonic() - t0
    # Quick means each probe ends by its time limit: the search may take no longer than its probes'
    # limits allow (plus a few seconds each to judge them), however busy the host.
    assert wall < len(result.probes) * (plan.search.time_limit_s + 10), (wall, len(result.probes))
    assert len(result.probes) >= 2
    # Against the simulator's search on the same plan, priced like the twin: live may not beat the
    # simulator's first failing rate (the live server's HTTP and loop overheads only add latency);
    # it may lose up to two halvings of the search to CPU noise.
    sim_plan = dataclasses.replace(plan, backend=SimSettings(), deployment=dataclasses.replace(
        plan.deployment, timer=Scaled(plan.deployment.timer, spec.config.time_scale)))
    with open_backend(sim_plan.job("sarathi", progress=False)) as sim_backend:  # each passing rate runs again below
        sim = search_capacity(sim_plan, "sarathi", sim_backend.run)
        assert 4 <= sim.capacity_qps < sim.lowest_failing_qps <= 32, sim  # the plan's SLO binds: about ten QPS
        # Where the host held the twin back (a flake hunt at load ~4 saw it 39-353 % behind its timeline and
        # every rate fail: capacity 0), the contract is the harness's verdict: the result says it rests on
        # disturbed probes (table and summary: tests/test_twin_disturbed.py); otherwise it must agree.
        held = disturbed_probes(result)
        if held:
            print(f"the host disturbed {len(held)} of {len(result.probes)} probes: "
                  f"capacity {result.capacity_qps} not judged")
        else:
            assert sim.capacity_qps / 4 <= result.capacity_qps <= sim.lowest_failing_qps, (result.capacity_qps, sim)
        for p in result.probes:
            records = p.detail.records
            assert len(records) == plan.search.num_requests  # nothing dropped, failing probes included
            if p.passed:
                # A passing probe may end with requests its time limit cut (not a failure under the
                # paper's criterion: harness.metrics.check_slo); nothing else may be missing.
                cut = [r for r in records if not r.completed]
                assert all(error_kind(r.error) in CUT_OFF_KINDS for r in cut), [r.error for r in cut]
                # How many the limit cuts is first the workload's: at 4 QPS the last arrivals (14 s on, 226
                # tokens) cannot finish by the 20 s limit in the simulator either (it cuts the same five). The
                # live path may cut a few more (its overheads); where the host held the twin back, the
                # contract is the probe's own flag, saved with it.
                twin = sum(not r.completed for r in run_probe(sim_plan, "sarathi", p.qps, sim_backend.run).records)
                assert disturbed_note(p.detail.notes) is not None or len(cut) <= twin + 0.05 * len(records), \
                    (len(cut), twin, p.detail.notes)
                assert np.all(np.isfinite([r.first_scheduled_s for r in records if r.completed]))
