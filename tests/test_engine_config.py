"""The engine's own configuration (engines/core/config.py): one frozen value per engine instance,
built by every backend and handed to make_engine; prefix caching is the engine's, never a
policy's knob, though users still set it as `engine.prefix_caching` or `scheduler.NAME.prefix_caching`."""
from __future__ import annotations

import dataclasses

import pytest

from engines.core import Engine, EngineConfig, PrefixCachingEngine
from engines.schedulers import DecodeOnlyPolicy, SchedulerConfig, make_engine

SARATHI = SchedulerConfig("sarathi", token_budget=256, max_num_seqs=16)


def test_make_engine_builds_what_the_config_says():
    plain = make_engine(EngineConfig(SARATHI, 4096, 1024, 16))
    assert type(plain) is Engine and plain.blocks.num_blocks == 256 and plain.max_model_len == 1024
    assert plain.policy.max_batch_tokens == 256 and plain.policy_name == "sarathi"
    cached = make_engine(EngineConfig(SARATHI, 4096, 1024, 32, prefix_caching=True, host_kv_blocks=8))
    assert type(cached) is PrefixCachingEngine and cached.blocks.num_blocks == 128 and cached.blocks.tier.capacity_blocks == 8
    decode = make_engine(EngineConfig(SARATHI, 4096, 1024, role="decode"))
    assert isinstance(decode.policy, DecodeOnlyPolicy) and decode.policy.max_num_seqs == 16
    assert decode.policy_name == "sarathi (decode instance)"
    orca = make_engine(EngineConfig(SchedulerConfig("orca"), 4096, 1024))
    assert orca.blocks.reserve_tokens == 1024  # the policy, not the config, says it reserves KV


@pytest.mark.parametrize("kwargs, message", [
    (dict(role="both2"), "unknown engine role 'both2'; known: both, prefill, decode"),
    (dict(kv_capacity_tokens=1000), "KV cache of 1000 tokens cannot hold one sequence of max_model_len 1024"),
    (dict(host_kv_blocks=8), "a host KV tier holds evicted prefix-cache blocks: it needs prefix caching on"),
    (dict(block_size=0), "need block_size >= 1"),
])
def test_a_config_the_engine_cannot_run_is_refused_when_built(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EngineConfig(**{"scheduler": SARATHI, "kv_capacity_tokens": 4096, "max_model_len": 1024, **kwargs})


def test_it_is_frozen_and_its_scheduler_has_no_engine_setting():
    cfg = EngineConfig(SARATHI, 4096, 1024, prefix_caching=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.prefix_caching = False  # type: ignore[misc]
    assert "prefix_caching" not in dict(cfg.scheduler.knobs)
    with pytest.raises(ValueError, match="policy sarathi has no knob 'prefix_caching'"):
        SchedulerConfig("sarathi", prefix_caching=True)


def _plan(*overrides: str):
    from harness.config import compose
    from harness.config import plan_experiment

    return plan_experiment(compose(["experiment=yi34b_tp2_strict", "scheduler=[sarathi,vllm]", "search.num_requests=16",
                                    *overrides]))


def test_the_experiment_gives_each_schedulers_engine_its_prefix_cache():
    from harness.backends.sim import SimBackend

    def caching(plan) -> dict[str, bool]:
        return {name: plan.job(name).engine_config(plan.deployment).prefix_caching for name in plan.schedulers}

    off = _plan()
    assert caching(off) == {"sarathi": False, "vllm": False}
    everyone = _plan("engine.prefix_caching=true")
    assert caching(everyone) == {"sarathi": True, "vllm": True}
    assert everyone.schedulers == off.schedulers  # the schedulers' own settings do not change
    one = _plan("scheduler.vllm.prefix_caching=true")  # the key users write beside the knobs, for one scheduler
    assert caching(one) == {"sarathi": False, "vllm": True}
    assert one.scheduler_knobs["vllm"]["prefix_caching"] is True and one.scheduler_knobs["sarathi"]["prefix_caching"] is False
    # the simulator builds its engines from the job's configuration, once
    (config, offload), = SimBackend(one.job("vllm")).configs
    assert config == one.job("vllm").engine_config(one.deployment) and offload is None
    assert type(make_engine(config)) is PrefixCachingEngine


def test_the_engine_setting_is_named_as_a_schedulers_key():
    from common.errors import HarnessError

    with pytest.raises(HarnessError, match=r"scheduler.sarathi.prefix_cachin: unknown key \(did you mean 'prefix_caching'\?\) of policy sarathi; "
                                          "known: policy, token_budget, max_num_seqs, prefix_caching"):
        _plan("+scheduler.sarathi.prefix_cachin=true")


def test_a_sweep_over_policies_refuses_an_engine_setting_rather_than_drop_it():
    """`SchedulerConfig.shared` keeps the knobs each policy has; an engine setting passed to it
    would be dropped for every policy and the sweep would run without the cache it asked for."""
    assert SchedulerConfig.shared("vllm", token_budget=256) == SchedulerConfig("vllm")  # a knob vllm lacks: dropped
    with pytest.raises(ValueError, match="prefix_caching: an engine setting"):
        SchedulerConfig.shared("sarathi", token_budget=256, prefix_caching=True)
