"""The paper's headline, end to end: on a paper cell Sarathi-Serve's capacity is well above vLLM's and Orca's."""
from __future__ import annotations

import json

from harness.commands.run import run_experiment
from harness.config import compose

# Measured on yi34b_tp2_strict (openchat_sharegpt4, paper SLO 0.2 s P99 TBT), Sarathi / vLLM and
# Sarathi / Orca capacity: 3.66x and 3.66x at 512 requests (seed 0; seeds 1, 2: 3.48-3.63x and
# 3.72-3.80x), 3.56x and 3.64x in the 2048-request reference. 2.5x leaves room for model tuning
# while still failing if the scheduler's advantage were lost.
MIN_RATIO = 2.5


def test_sarathi_beats_vllm_and_orca_on_yi34b_tp2_strict(tmp_path, capsys):
    cfg = compose(["experiment=yi34b_tp2_strict", "search.num_requests=512", f"results_dir={tmp_path}",
                   "progress=false", "cache=false"])
    assert list(cfg.scheduler) == ["sarathi", "vllm", "orca"] and cfg.dataset.name == "openchat_sharegpt4"
    run = run_experiment(cfg)
    schedulers = json.loads((run / "summary.json").read_text())["schedulers"]
    cap = {name: s["capacity_qps"] for name, s in schedulers.items()}
    assert not any(s["saturated"] for s in schedulers.values()), schedulers
    assert min(cap.values()) > 0.1, cap
    assert cap["sarathi"] > MIN_RATIO * cap["vllm"], cap
    assert cap["sarathi"] > MIN_RATIO * cap["orca"], cap
    assert f"sarathi capacity: {cap['sarathi'] / cap['vllm']:.2f}x vllm" in capsys.readouterr().out
