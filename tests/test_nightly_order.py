"""`nightly` runs the reference's configs longest first (harness.commands.nightly.run_order), so
the two jobs at once end together instead of on one long job: the same runs, another order."""
from pathlib import Path

from harness.commands.nightly import run_order, simulated_requests

REFERENCE = Path(__file__).resolve().parent.parent / "results" / "reference"


def test_simulated_requests_counts_every_probe_and_offline_run():
    capacity = {"mode": "capacity", "schedulers": {"a": {"probes": [{"num_completed": 100, "num_errors": 2},
                                                                    {"num_completed": 50, "num_errors": 0}]},
                                                   "b": {"probes": [{"num_completed": 10, "num_errors": 0}]}}}
    assert simulated_requests(capacity) == 162
    offline = {"mode": "offline", "offline": {"a": {"num_requests": 360}, "b": {"num_requests": 360}}}
    assert simulated_requests(offline) == 720
    assert simulated_requests({"mode": "capacity"}) == 0


def test_reference_runs_longest_first():
    order = run_order(REFERENCE)
    assert sorted(order) == sorted(REFERENCE.glob("*/*/config.yaml"))  # every run, once
    names = [p.parent.parent.name for p in order]
    assert names != sorted(names)  # not alphabetical
    # the pipelines' long runs lead, the 128-request fixed-rate ablation comes in the last few
    first = names[:12]
    assert "sarathi23_pipeline" in first and "llama2_70b_tp4pp2_strict" in first
    assert "yi34b_tp2_ablation" in names[-4:]
