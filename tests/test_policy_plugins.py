"""Policies are plugins: one registration point (a decorator, or the `sarathi_harness.policies`
entry points of another package), the config schema derived from the constructor, the rules of
ARCHITECTURE.md ("Policies") kept by every registered policy (the example plugin included), and
the planner and the vLLM exporter asking the policy instead of branching on its name."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from engines.external.vllm import UnsupportedPolicy, policy_flags
from engines.core import BasePolicy
from engines.schedulers import Axis, SchedulerConfig, Sweep, make_policy, policy_names, policy_spec, register_policy, registry
from engines.schedulers.sarathi import SarathiPolicy
from harness.backends.sim import simulate
from harness.records import RequestSpec
from tests.policy_workloads import build, drive
from tests.test_sim import HalfStageTimer, WindowedTimer

ROOT = Path(__file__).resolve().parent.parent
MAX_LEN = 512


@pytest.fixture
def scratch_registry(monkeypatch):
    """Policies registered inside a test stay inside it."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def _busy_workload(seed: int, n: int = 60, rate: float = 80.0) -> list[RequestSpec]:
    """Arrivals faster than a small KV cache drains, prompts of every length: a blocked head of
    the queue while shorter requests arrive, decode runs interrupted by admissions and turns."""
    rng = np.random.default_rng(seed)
    p = rng.integers(1, 400, n)
    o = np.minimum(rng.integers(1, 120, n), MAX_LEN - p + 1)
    t = np.cumsum(rng.exponential(1 / rate, n))
    return [RequestSpec(i, float(t[i]), int(p[i]), int(o[i])) for i in range(n)]


@pytest.mark.parametrize("policy", policy_names())  # every one (policy_workloads imported the example)
def test_decode_batch_repeats_contract(policy):
    """The simulator advances a run of decode-only iterations in one step when the policy's
    `decode_batch_repeats` says the batch would repeat (no hook: yes, which only FCFS admission
    earns). A policy that claims a repeat it would not make gives other records than plain
    stepping: this fails for shortest_prompt_first and chunked_only without their hooks."""
    kv = 16 * MAX_LEN if make_policy(SchedulerConfig(policy), MAX_LEN).reserves_kv else 2 * MAX_LEN  # 16 reserved slots
    for seed in range(3):
        reqs = _busy_workload(seed)
        for pp, timer in ((1, WindowedTimer()), (2, HalfStageTimer())):
            runs = [simulate(reqs, build(policy, 128, 16, kv, MAX_LEN), timer, pp=pp, fast_forward=ff) for ff in (False, True)]
            for a, b in zip(*runs):
                assert np.array_equal(a.token_times_s, b.token_times_s) and a.first_scheduled_s == b.first_scheduled_s, \
                    (policy, seed, pp, a.request_id)


def test_shortest_prompt_first_admits_the_shortest_waiting_prompt():
    batches, produced = drive(build("shortest_prompt_first", 64, 4, 4096, MAX_LEN), [(300, 5), (10, 5), (200, 3), (5, 2)])
    first = {s.seq_id: n for s, n in zip(batches[0].seqs, batches[0].new_tokens)}
    assert first == {3: 5, 1: 10, 2: 49}  # 5, then 10, then the 200-token prompt's chunk; the 300 waits
    assert produced == {0: 5, 1: 5, 2: 3, 3: 2}
    fcfs, _ = drive(build("sarathi", 64, 4, 4096, MAX_LEN), [(300, 5), (10, 5), (200, 3), (5, 2)])
    assert {s.seq_id for s in fcfs[0].seqs} == {0}


def test_knobs_schema_and_defaults_come_from_the_constructor(scratch_registry):
    from harness.config.schedulers import scheduler_schema

    @register_policy("knobby")
    class Knobby(SarathiPolicy):
        def __init__(self, slack_s: float, token_budget: int = 256, max_num_seqs: int = 8, lifo: bool = False,
                     label: str | None = None, *, max_model_len: int) -> None:
            super().__init__(token_budget, max_num_seqs)
            self.slack_s, self.lifo, self.label, self.max_model_len = slack_s, lifo, label, max_model_len

    spec = policy_spec("knobby")
    # max_model_len is context; prefix caching is the engine's (engines.core.EngineConfig), never a policy's knob
    assert spec.knob_names == ("slack_s", "token_budget", "max_num_seqs", "lifo", "label")
    cfg = SchedulerConfig("knobby", slack_s=0.5, lifo=True)
    assert cfg.as_dict() == {"policy": "knobby", "slack_s": 0.5, "token_budget": 256, "max_num_seqs": 8, "lifo": True,
                             "label": None}
    policy = make_policy(cfg, 777)
    assert (policy.slack_s, policy.lifo, policy.max_model_len, policy.max_batch_tokens) == (0.5, True, 777, 256)
    with pytest.raises(ValueError, match="policy knobby has no knob 'prefix_caching'"):
        SchedulerConfig("knobby", slack_s=0.5, prefix_caching=True)
    with pytest.raises(ValueError, match="knob 'slack_s' has no default and must be set"):
        SchedulerConfig("knobby")
    with pytest.raises(ValueError, match="policy knobby has no knob 'slack'; its knobs: slack_s, token_budget"):
        SchedulerConfig("knobby", slack=1.0)
    schema = scheduler_schema(spec)
    from omegaconf import OmegaConf
    from omegaconf.errors import ValidationError

    node = OmegaConf.structured(schema)
    assert node.policy == "knobby" and node.token_budget == 256 and OmegaConf.is_missing(node, "slack_s")
    assert list(node)[-1] == "prefix_caching" and node.prefix_caching is False  # the engine's, set per scheduler
    with pytest.raises(ValidationError):
        node.lifo = "maybe"


def test_a_policy_without_a_yaml_is_a_scheduler_option(scratch_registry, tmp_path):
    from harness.config import compose
    from harness.config import plan_experiment

    @register_policy("tiny_budget_sarathi")
    class TinyBudget(SarathiPolicy):
        def __init__(self, token_budget: int = 64, max_num_seqs: int = 16) -> None:
            super().__init__(token_budget, max_num_seqs)

    cfg = compose(["experiment=yi34b_tp2_strict", "scheduler=[sarathi,tiny_budget_sarathi]",
                   "scheduler.tiny_budget_sarathi.max_num_seqs=4", "search.num_requests=16"])
    plan = plan_experiment(cfg)
    assert plan.schedulers["tiny_budget_sarathi"] == SchedulerConfig("tiny_budget_sarathi", token_budget=64, max_num_seqs=4)
    from common.errors import HarnessError

    with pytest.raises(HarnessError, match="scheduler.tiny_budget_sarathi.lifo"):
        compose(["experiment=yi34b_tp2_strict", "scheduler=[tiny_budget_sarathi]", "scheduler.tiny_budget_sarathi.lifo=1"])


def test_registration_refuses_what_cannot_be_a_knob(scratch_registry):
    with pytest.raises(TypeError, match="knob 'order' needs a type annotation"):
        @register_policy("bad_annotation")
        class A:
            def __init__(self, order: list = ()) -> None: ...
    with pytest.raises(TypeError, match=r"\*args/\*\*kwargs"):
        @register_policy("bad_kwargs")
        class B:
            def __init__(self, **knobs) -> None: ...
    with pytest.raises(TypeError, match="takes no parameter 'chunked'"):
        register_policy("bad_fixed", chunked=False)(SarathiPolicy)
    with pytest.raises(ValueError, match="policy 'sarathi' is registered twice"):
        @register_policy("sarathi")
        class C(SarathiPolicy): ...
    with pytest.raises(TypeError, match="plan sweeps 'chunked_prefill', not an int knob"):  # the planner steps along numbers
        register_policy("bad_sweep", plan=Sweep(Axis("chunked_prefill", (1,), "c", "chunked {}")))(SarathiPolicy)
    with pytest.raises(TypeError, match="knob 'prefix_caching' is the engine's setting"):  # the engine reads it, not the policy
        @register_policy("own_cache")
        class D(SarathiPolicy):
            def __init__(self, prefix_caching: bool = False) -> None: ...


def test_a_policy_is_the_whole_protocol(scratch_registry):
    """What the engine and the harness ask is asked directly (no getattr): a class that is not all
    of engines.core.Policy is refused by name when built; BasePolicy gives the defaults."""
    @register_policy("bare")
    class Bare:
        reserves_kv = False

        def __init__(self, max_num_seqs: int = 8) -> None:
            self.max_num_seqs = max_num_seqs

        def schedule(self, engine): ...
    with pytest.raises(TypeError, match="Bare lacks max_batch_tokens, max_micro_batch_seqs, vllm_flags, check_kv, "
                                        "decode_batch_repeats, chunk_batch_repeats of engines.core.Policy"):
        make_policy(SchedulerConfig("bare"), MAX_LEN)
    register_policy("based")(type("Based", (BasePolicy, Bare), {}))
    policy = make_policy(SchedulerConfig("based"), MAX_LEN)
    assert (policy.max_batch_tokens, policy.max_micro_batch_seqs, policy.vllm_flags) == (None, None, ())
    assert policy.decode_batch_repeats(None) and policy.check_kv(1, 2) is None
    assert not policy.chunk_batch_repeats(None, None)  # chunk runs: only where a policy knows (Sarathi)


def test_the_vllm_exporter_and_the_planner_ask_the_policy(scratch_registry):
    assert policy_flags(SchedulerConfig("sarathi"), 8192) == [
        "--enable-chunked-prefill", "--max-num-batched-tokens", "512", "--max-num-seqs", "128"]
    assert policy_flags(SchedulerConfig("vllm", max_num_seqs=32), 8192) == [
        "--no-enable-chunked-prefill", "--max-num-batched-tokens", "8192", "--max-num-seqs", "32"]
    assert policy_flags(SchedulerConfig("hybrid_only", token_budget=1024), 4096)[:3] == [
        "--no-enable-chunked-prefill", "--max-num-batched-tokens", "4096"]
    for name in ("orca", "fastertransformer", "chunked_only", "shortest_prompt_first"):
        with pytest.raises(UnsupportedPolicy, match=f"policy '{name}' cannot be expressed"):
            policy_flags(SchedulerConfig(name), 8192)

    @register_policy("wide_sarathi", vllm="chunked_prefill")  # a plugin that declares its vLLM equivalent
    class Wide(SarathiPolicy):
        def __init__(self, token_budget: int = 3000, max_num_seqs: int = 64) -> None:
            super().__init__(token_budget, max_num_seqs)

    assert policy_flags(SchedulerConfig("wide_sarathi"), 8192)[1:3] == ["--max-num-batched-tokens", "3000"]

    from harness.config import compose
    from harness.planner.bounds import capacity_bound
    from harness.config import plan_experiment

    plan = plan_experiment(compose(["experiment=mistral7b_strict", "scheduler=[sarathi]", "search.num_requests=128"]))
    plan = replace(plan, schedulers={**plan.schedulers, "spf": SchedulerConfig("shortest_prompt_first"),
                                     "wide": SchedulerConfig("wide_sarathi", max_num_seqs=128)})
    # the same batch limits give the same bound, whatever the name; a bigger budget a looser one
    assert capacity_bound(plan, "spf") == capacity_bound(plan, "sarathi")
    assert capacity_bound(plan, "wide").qps >= capacity_bound(plan, "sarathi").qps


PLUGIN = """
from engines.schedulers import register_policy
from engines.schedulers.sarathi import SarathiPolicy


@register_policy("newest_first_sarathi")
class NewestFirst(SarathiPolicy):
    \"\"\"A researcher's policy in their own package: Sarathi-Serve admitting the newest request first.\"\"\"

    def __init__(self, token_budget: int = 256, max_num_seqs: int = 64) -> None:
        super().__init__(token_budget, max_num_seqs)

    def schedule(self, engine):
        engine.waiting = type(engine.waiting)(sorted(engine.waiting, key=lambda s: -s.seq_id))
        return super().schedule(engine)

    def decode_batch_repeats(self, engine):
        return not engine.waiting or len(engine.running) >= self.max_num_seqs
"""


def test_a_plugin_package_is_found_through_its_entry_point(tmp_path):
    """What `pip install` of a researcher's package writes (its module and a dist-info with
    entry_points.txt) is all the harness needs: no YAML, no edit of the harness, any directory."""
    site = tmp_path / "site"
    dist = site / "newest_first-0.1.dist-info"
    dist.mkdir(parents=True)
    (site / "newest_first.py").write_text(PLUGIN)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: newest-first\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[sarathi_harness.policies]\nnewest_first_sarathi = newest_first\n")
    env = {**os.environ, "PYTHONPATH": str(site)}
    run = subprocess.run(
        [sys.executable, "-m", "harness", "experiment=mistral7b_strict", "scheduler=[sarathi,newest_first_sarathi]",
         "scheduler.newest_first_sarathi.max_num_seqs=32", "search.num_requests=64", "search.fixed_qps=1.0",
         f"results_dir={tmp_path / 'results'}", "progress=false"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert run.returncode == 0, run.stderr
    summary = json.loads(next((tmp_path / "results").glob("mistral7b_strict/*/summary.json")).read_text())
    assert summary["schedulers"]["newest_first_sarathi"]["config"] == {
        "policy": "newest_first_sarathi", "token_budget": 256, "max_num_seqs": 32,
            "prefix_caching": False}
    usage = subprocess.run([sys.executable, "-m", "harness", "--help"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert "newest_first_sarathi" in usage.stdout
    # without the package the name is unknown, and the known ones are listed
    bare = subprocess.run([sys.executable, "-m", "harness", "experiment=mistral7b_strict", "scheduler=[newest_first_sarathi]"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert bare.returncode == 2 and "scheduler/newest_first_sarathi" in bare.stderr and "sarathi" in bare.stderr
    # a plugin that fails to import says so when its name is asked for
    (site / "newest_first.py").write_text("raise ImportError('a missing dependency')\n")
    broken = subprocess.run([sys.executable, "-m", "harness", "experiment=mistral7b_strict", "scheduler=[newest_first_sarathi]"],
                            capture_output=True, text=True, cwd=tmp_path, env=env)
    assert broken.returncode == 2 and "policy plugin newest_first_sarathi (newest_first) failed to load: ImportError: " \
        "a missing dependency" in broken.stderr, broken.stderr
