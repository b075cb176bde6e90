"""A simulation collects its youngest objects less often and its older ones almost never
(harness/backends/sim/gc_pacing.py), and the process's thresholds are the caller's again
afterwards, however the run ends."""
from __future__ import annotations

import gc

import pytest

from harness.backends.sim.gc_pacing import OLDER_THRESHOLD, YOUNG_THRESHOLD, fewer_collections


def test_the_thresholds_are_raised_inside_and_restored_after():
    before = gc.get_threshold()
    with fewer_collections():
        inside = gc.get_threshold()
    assert inside == (max(before[0], YOUNG_THRESHOLD), *(max(t, OLDER_THRESHOLD) for t in before[1:])) and gc.isenabled()
    assert gc.get_threshold() == before


def test_thresholds_are_restored_when_the_run_raises():
    before = gc.get_threshold()
    with pytest.raises(RuntimeError):
        with fewer_collections():
            raise RuntimeError("a broken run")
    assert gc.get_threshold() == before
