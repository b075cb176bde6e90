"""What vLLM's engine does not hide (issue 50 item 9): the API server's output processing after
every step, and on a CPU platform the scheduler's time in series with the model
(engines/perf/cpu_costs.py, measured by scripts/vllm_cpu_costs.py; harness/validate/frontend.py)."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from common.errors import HarnessError
from engines.perf.cpu_costs import CPU_PROFILES, FrontendCosts, cpu_choice, frontend_costs
from engines.schedulers import make_engine
from harness.backends.sim import simulate
from harness.validate.frontend import deliver, delivery_times
from harness.config import config_for, experiment_config
from harness.validate.replay import replay, specs_of, target_for
from harness.validate.runfile import read_run
from tests.runfiles import write_run_file

CPU = ["model.name=tiny-llama", "hardware=cpu", "hardware.cpu_flops=3e11", "hardware.cpu_bandwidth=3e10",
       "perf.stack=ideal", "scheduler=sarathi", "scheduler.sarathi.token_budget=256",
       "scheduler.sarathi.max_num_seqs=4", "max_model_len=1024"]
PLUGIN = "perf.cpu_costs=vllm-0.32-cpu-plugin"


def _run_file(tmp_path, n: int = 8):
    return write_run_file(tmp_path / "run.jsonl", n, gap_s=0.004, prompt_tokens=100, output_tokens=20,
                          ttft_s=0.01, tpot_s=0.002)


def test_the_api_server_takes_one_step_after_another():
    costs = FrontendCosts(requests=(1, 2), seconds=(0.4e-3, 0.8e-3))
    # two tokens end a step at 0; one ends the next at 0.5 ms, while the first step's are still processed
    when = delivery_times(Counter({0.0: 2, 0.5e-3: 1}), costs)
    assert when[0.0] == pytest.approx(0.8e-3)
    assert when[0.5e-3] == pytest.approx(1.2e-3)  # queued: 0.8 + 0.4, not 0.5 + 0.4
    assert costs.time(0) == 0.0 and costs.time(3) == pytest.approx(1.2e-3)  # past the table: its last slope


def test_a_vllm_cpu_replay_delivers_each_token_after_its_steps_outputs_are_processed(tmp_path):
    run = read_run(_run_file(tmp_path))
    target = target_for(run, experiment_config(config_for(run, [*CPU, PLUGIN])))
    steps = simulate(specs_of(run.records), make_engine(target.engine), target.plan.timer)
    got = replay(target, run.records)
    front = frontend_costs("vllm-0.32-cpu-plugin")
    assert "API server's output processing" in target.describe()
    for a, b in zip(got, deliver(steps, front), strict=True):
        assert np.array_equal(a.token_times_s, b.token_times_s)
    for sim, plain in zip(got, steps):  # every token later than its step's end by at least one request's processing
        assert np.all(sim.token_times_s - plain.token_times_s >= front.time(1) - 1e-12)
        assert sim.first_token_s == sim.token_times_s[0] and sim.finished_s == sim.token_times_s[-1]


def test_the_vllm_cpu_profiles_price_the_scheduler_in_series_with_the_step(tmp_path):
    run = read_run(_run_file(tmp_path))
    none = target_for(run, experiment_config(config_for(run, [*CPU, "perf.cpu_costs=none"]))).plan.timer
    plugin = target_for(run, experiment_config(config_for(run, [*CPU, PLUGIN]))).plan.timer
    prof = CPU_PROFILES["vllm-0.32-cpu-plugin"]
    for n in (1, 4, 16):  # decodes at context 200: a CPU platform runs schedule, model, update in series
        extra = plugin.iteration_time([1] * n, [200] * n) - none.iteration_time([1] * n, [200] * n)
        assert extra == pytest.approx(prof.cpu_overhead_s + n * prof.cpu_overhead_per_seq_s)
    assert cpu_choice("vllm-0.32-cpu")["cpu_overhead_per_seq_s"] == CPU_PROFILES["vllm-0.32-cpu"].cpu_overhead_per_seq_s
    assert frontend_costs("engine") is None  # not measured on GPU hosts: not priced
    with pytest.raises(HarnessError, match="perf.cpu_costs"):
        cpu_choice("vllm-0.32-gpu")
