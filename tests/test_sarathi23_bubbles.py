"""The pipeline study's bubbles a request as a distribution (harness/analysis/sarathi23/bubble_figs.py):
drawn from the percentiles each offline run saves, and skipped, with the reason, for runs saved
before they were (never drawn from the median alone)."""
from __future__ import annotations

import pandas as pd

from harness.analysis.sarathi23 import STUDY
from harness.analysis.sarathi23.claims import load_claims
from harness.analysis.sarathi23.figures import Study
from harness.analysis.sarathi23.matrix import CPU_COSTS, PIPELINE


def runs(quantiles: dict) -> pd.DataFrame:
    rows = [{"experiment": PIPELINE + suffix, "scheduler": name, "pd_ratio": 10,
             "bubble_quantiles_s": {k: v * scale for k, v in quantiles.items()}}
            for suffix in CPU_COSTS.values() for name, scale in (("orca_best", 6.0), ("decode_maximal", 1.0))]
    return pd.DataFrame(rows)


def test_drawn_from_the_saved_percentiles(tmp_path):
    q = {"p10": 1.0, "p25": 2.0, "p50": 3.0, "p75": 5.0, "p90": 8.0, "p99": 20.0}
    (out,) = STUDY.draw_figures(Study(runs(q), load_claims()), tmp_path, only=("sarathi23_bubbles",))
    assert out.path is not None and out.path.stat().st_size > 10_000


def test_runs_without_percentiles_are_skipped_with_why(tmp_path):
    (out,) = STUDY.draw_figures(Study(runs({}), load_claims()), tmp_path, only=("sarathi23_bubbles",))
    assert out.path is None and "no bubble percentiles" in out.skipped
