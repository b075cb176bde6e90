"""SLO sources: the paper's Table 3, the paper's definition on the simulated deployment, explicit."""
from __future__ import annotations

import numpy as np
import pytest

from common.errors import HarnessError
from engines.perf import Deployment, PerfModel
from harness.config import compose, experiment_config
from harness.metrics import check_slo
from harness.records import RequestRecord
from harness.experiment.slo import resolve_slo
from harness.settings.slo import SloSettings

PAPER = {"source": "paper", "table": {"yi-34b": {"strict": 0.2, "relaxed": 1.0}}}
DERIVED = {"source": "derived", "multipliers": {"strict": 5, "relaxed": 25}, "decode_batch": 32, "decode_context": 4096}


def test_paper_table_and_override():
    assert resolve_slo(SloSettings(**{**PAPER, "kind": "strict"}), "yi-34b").tbt_s == 0.2
    assert resolve_slo(SloSettings(**{**PAPER, "kind": "relaxed"}), "yi-34b").tbt_s == 1.0
    assert resolve_slo(SloSettings(**{**PAPER, "kind": "strict", "tbt_s": 0.3}), "unknown").tbt_s == 0.3
    with pytest.raises(HarnessError, match="no paper SLO for model 'mistral-7b'"):
        resolve_slo(SloSettings(**{**PAPER, "kind": "strict"}), "mistral-7b")
    with pytest.raises(HarnessError, match="slo.kind"):
        resolve_slo(SloSettings(**{**PAPER, "kind": "tight"}), "yi-34b")


def test_derived_is_5x_and_25x_a_decode_iteration():
    perf = PerfModel(Deployment.create(model="yi-34b", gpu="a100-80g-sxm", tp=2))
    decode = float(perf.pipeline_latency(np.ones(32, int), np.full(32, 4096)))
    strict = resolve_slo(SloSettings(**{**DERIVED, "kind": "strict"}), "yi-34b", perf).tbt_s
    relaxed = resolve_slo(SloSettings(**{**DERIVED, "kind": "relaxed"}), "yi-34b", perf).tbt_s
    assert strict == pytest.approx(5 * decode) and relaxed == pytest.approx(25 * decode)
    # The paper's own strict SLO for this deployment is 0.2 s: the derivation lands near it (±35 %).
    assert 0.65 * 0.2 <= strict <= 1.35 * 0.2


def _records_p99_above_p90_below(slo_s):
    """One request whose P90 TBT is 0.1 x and P99 TBT 5 x `slo_s`."""
    gaps = np.r_[np.full(95, 0.1 * slo_s), np.full(5, 5 * slo_s)]
    times = np.concatenate([[1.0], 1.0 + np.cumsum(gaps)])
    return [RequestRecord(0, 0.0, 10, len(times), 0.0, float(times[0]), float(times[-1]), times)]


def test_config_without_tbt_quantile_judges_p99():
    slo = resolve_slo(SloSettings(**{**PAPER, "kind": "strict"}), "yi-34b")  # no tbt_quantile key
    assert slo.tbt_quantile == 0.99
    v = check_slo(_records_p99_above_p90_below(0.2), slo)
    assert not v.passed and v.tbt_s == pytest.approx(1.0) and v.reason.startswith("P99 TBT")
    slo90 = resolve_slo(SloSettings(**{**PAPER, "kind": "strict", "tbt_quantile": 0.9}), "yi-34b")
    assert check_slo(_records_p99_above_p90_below(0.2), slo90).passed


@pytest.mark.parametrize("slo_group", ["paper", "derived"])
def test_shipped_slo_configs_judge_p99(slo_group):
    cfg = compose([f"slo={slo_group}", "model=yi-34b", "parallel=tp2"])
    perf = PerfModel(Deployment.create(model="yi-34b", gpu="a100-80g-sxm", tp=2))
    slo = resolve_slo(experiment_config(cfg).slo, "yi-34b", perf)
    assert slo.tbt_quantile == 0.99 and slo.scheduling_delay_quantile == 0.5 and slo.scheduling_delay_s == 2.0
    assert not check_slo(_records_p99_above_p90_below(slo.tbt_s), slo).passed
