"""The server's flags are derived from its config: every field has a flag, and a config turned into
flags (as the live backend starts a server) parses back to the same config."""
from __future__ import annotations

from dataclasses import fields

from hypothesis import given, settings
from hypothesis import strategies as st

from engines.schedulers import SchedulerConfig, policy_spec
from engines.server.__main__ import parse_args
from engines.server.config import EXECUTORS, ServerConfig, server_flags
from harness.backends.live import LiveServerSpec
from tests.policy_workloads import BUILT_IN

maybe_int = st.none() | st.integers(1, 1 << 20)
configs = st.builds(
    ServerConfig,
    model=st.sampled_from(["tiny", "yi-34b", "/models/some dir"]),
    served_model_name=st.none() | st.just("served"),
    port=st.integers(0, 65535),
    scheduler=st.builds(SchedulerConfig.shared, st.sampled_from(BUILT_IN), max_num_seqs=st.integers(1, 512),
                        token_budget=st.integers(1, 8192), max_num_batched_tokens=maybe_int),
    max_model_len=maybe_int,
    executor=st.sampled_from(EXECUTORS),
    tp=st.integers(1, 8),
    gpu_memory_utilization=st.floats(0.05, 1.0),
    kv_capacity_tokens=maybe_int,
    block_size=st.sampled_from([8, 16, 32]),
    prefix_caching=st.booleans(),  # the engine's (EngineConfig), its own flag beside the policy's knobs
    time_scale=st.floats(0.01, 100.0),
    seed=st.integers(0, 2**31 - 1),
    shutdown_grace_s=st.floats(0.0, 60.0),
    tokenizer=st.none() | st.just("/models/some dir/tokenizer.json"),
    role=st.sampled_from(["both", "prefill"]),  # decode: needs a link with the realtime executor, refuses torch
    kv_link=st.none() | st.just("eth100g,nvlink3"),
    kv_transfer_lanes=st.integers(1, 8),
    kv_transfer=st.sampled_from(["after_prefill", "layerwise"]),
)


@settings(max_examples=60, deadline=None)
@given(cfg=configs)
def test_flags_round_trip(cfg):
    assert parse_args(server_flags(cfg)) == cfg


def test_defaults_are_the_dataclass_defaults():
    assert parse_args([]) == ServerConfig()


def test_every_field_has_a_flag():
    flags = set(server_flags(ServerConfig(kv_capacity_tokens=1, max_model_len=2, served_model_name="x", api_key="k",
                                          tokenizer="tok.json", attention_kernel="fa2-ideal",
                                          weight_dtype="fp8", kv_dtype="fp8", kv_link="eth100g",
                                          scheduler=SchedulerConfig("vllm", max_num_batched_tokens=3)))[::2])
    names = [f.name for f in fields(ServerConfig) if f.name != "scheduler"] + ["policy", *policy_spec("vllm").knob_names]
    assert flags == {"--" + n.replace("_", "-") for n in names}


def test_a_knob_the_policy_lacks_is_refused():
    import pytest

    with pytest.raises(SystemExit):
        parse_args(["--policy", "orca", "--token-budget", "512"])


def test_live_backend_starts_the_server_it_was_given():
    spec = LiveServerSpec(kind="inrepo", scheduler=SchedulerConfig("chunked_only", max_num_seqs=64, token_budget=256), model="tiny",
                          max_model_len=2048, seed=7,
                          config=ServerConfig(time_scale=4.0, kv_capacity_tokens=65536, prefix_caching=True))
    cmd = spec.command(port=4321)
    assert cmd[1:3] == ["-m", "engines.server"]
    assert parse_args(cmd[3:]) == spec.server_config(4321)
    got = parse_args(cmd[3:])
    assert got.scheduler == spec.scheduler and got.time_scale == 4.0 and got.kv_capacity_tokens == 65536
    assert got.prefix_caching and got.engine_config(65536, 2048).prefix_caching  # the job's, to the server's engine
    assert "--prefix-caching" in cmd and "prefix_caching" not in dict(got.scheduler.knobs)
