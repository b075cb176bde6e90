"""`perf.cpu_costs=engine|none`: the engine's CPU costs per iteration (the stack's profile,
engines/perf/cpu_costs.py) or GPU kernels only, as an operator-profile simulator prices them. The
default is `engine` (results unchanged); `none` removes exactly the CPU part, which only the last
pipeline stage carries. The measured vLLM CPU profiles (`vllm-0.32-cpu`, `vllm-0.32-cpu-plugin`) are
tests/test_validate_frontend.py's."""
from __future__ import annotations

import numpy as np
import pytest

from common.errors import HarnessError
from engines.perf.cpu_costs import CPU_FIELDS, CPU_PROFILES
from harness.backends.deployment import build_deployment
from harness.settings.deployment import HardwareSettings, ModelSettings, ParallelSettings, PerfSettings

MODEL, HW, PARALLEL = ModelSettings("gpt3-175b"), HardwareSettings("a100-80g-sxm", topology="dgx-a100"), ParallelSettings(8, 8)


def _plan(cpu_costs: str | None):
    perf = PerfSettings(stack="sarathi-2023", **({} if cpu_costs is None else {"cpu_costs": cpu_costs}))
    return build_deployment(MODEL, HW, PARALLEL, gpu_memory_utilization=1.0, block_size=16, max_model_len=4096,
                            perf=perf)


def test_engine_is_the_default_and_none_removes_only_the_cpu_part():
    assert PerfSettings().cpu_costs == "engine"
    default, engine, none = _plan(None), _plan("engine"), _plan("none")
    profile = CPU_PROFILES["vidur-2024"]
    for name in CPU_FIELDS:
        assert getattr(default.perf.deployment, name) == getattr(engine.perf.deployment, name) == getattr(profile, name)
        assert getattr(none.perf.deployment, name) == 0.0
    n, c = np.array([[235] + [1] * 21]), np.array([[0] + [2000] * 21])
    with_cpu, without = engine.perf.stage_times(n, c)[0], none.perf.stage_times(n, c)[0]
    np.testing.assert_array_equal(with_cpu[:-1], without[:-1])  # the first seven stages: GPU kernels only either way
    cpu = profile.cpu_overhead_s + profile.multi_gpu_overhead_s + 22 * (profile.cpu_overhead_per_seq_s
                                                                        + profile.multi_gpu_overhead_per_seq_s)
    assert with_cpu[-1] - without[-1] == pytest.approx(cpu)  # the last stage carries the engine's CPU costs


def test_an_unknown_choice_is_refused_by_name():
    with pytest.raises(HarnessError, match="perf.cpu_costs must be one of engine, none"):
        _plan("gpu")
