"""The policies inside vLLM's own scheduler (engines/external/vllm_scheduler): vLLM 0.32's
AsyncScheduler driven in-process with synthetic requests and a fake model output (no model runs;
tests/vllm_scheduler_driver.py, in the vLLM venv named by HARNESS_VLLM_PYTHON; those tests skip
without it). One workload separates the policies: four short requests decoding when long prompts
arrive. Each policy's iteration trace must obey its rule, on what vLLM actually scheduled."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from engines.core import BlockManager, Sequence
from engines.external.vllm_scheduler import (POLICY_ENV, TRACE_ENV, plugin_env, scheduler_from_env, supports)
from engines.external.vllm_scheduler.mirror import MirrorEngine
from engines.external.vllm_scheduler.trace import read_trace
from engines.schedulers import SchedulerConfig, make_policy

ROOT = Path(__file__).resolve().parent.parent
VLLM_PYTHON = os.environ.get("HARNESS_VLLM_PYTHON")
needs_vllm = pytest.mark.skipif(not VLLM_PYTHON or not os.access(VLLM_PYTHON, os.X_OK),
                                reason="no vLLM venv: set HARNESS_VLLM_PYTHON=DIR/bin/python (scripts/setup_vllm_cpu.sh)")

KV_BLOCKS, BLOCK, MAX_LEN, SEQS, BUDGET = 120, 16, 512, 8, 128
PER_SEQ = MAX_LEN // BLOCK  # blocks a reserving policy holds per request: 3 fit in the KV cache
# (arrival step, prompt tokens, max_tokens): short requests decode while long prompts arrive
WORKLOAD = [(0, 40, 60), (0, 50, 60), (0, 30, 60), (0, 60, 60), (6, 400, 20), (8, 380, 20), (10, 300, 30),
            (30, 350, 20), (31, 200, 40), (32, 250, 40)]
# (arrival, prompt, max_tokens, stop token as output token N (0: none), client abort at step (-1: none))
STOPS = [(0, 40, 60, 5, -1), (0, 50, 60, 0, -1), (0, 30, 60, 0, 12), (2, 400, 20, 3, -1), (3, 300, 30, 0, 4),
         (5, 380, 20, 0, -1), (20, 200, 40, 1, -1)]
POLICIES = {
    "sarathi": {"token_budget": BUDGET, "max_num_seqs": SEQS},
    "vllm": {"max_num_seqs": SEQS},
    "orca": {"max_num_seqs": SEQS},
    "fastertransformer": {"max_num_seqs": SEQS},
    "chunked_only": {"token_budget": BUDGET, "max_num_seqs": SEQS},
    "hybrid_only": {"token_budget": BUDGET, "max_num_seqs": SEQS},
    "decode_maximal": {"max_num_seqs": 3, "chunk_size": 96},
    "orca_best": {"max_num_seqs": 3},
    "orca_worst": {"max_num_seqs": 3},
    "vllm_v1": {"max_num_batched_tokens": 256, "max_num_seqs": SEQS},
    # a plugin policy (examples/policies), found through its module in vLLM's process
    "shortest_prompt_first": {"token_budget": BUDGET, "max_num_seqs": SEQS,
                              "module": "examples.policies.shortest_prompt_first"},
    # a KV cache a third of the size: decodes run out of blocks and preempt (by recompute)
    "sarathi_preempting": {"policy": "sarathi", "token_budget": BUDGET, "max_num_seqs": SEQS, "vllm": {"kv_blocks": 40}},
    "vllm_preempting": {"policy": "vllm", "max_num_seqs": SEQS, "vllm": {"kv_blocks": 40}},
    # requests that stop early (a stop token) or whose client goes away, one waiting and one running
    "sarathi_stops": {"policy": "sarathi", "token_budget": BUDGET, "max_num_seqs": SEQS, "workload": STOPS,
                      "vllm": {"kv_blocks": 40}},
    "vllm_stops": {"policy": "vllm", "max_num_seqs": SEQS, "workload": STOPS, "vllm": {"kv_blocks": 40}},
    "orca_stops": {"policy": "orca", "max_num_seqs": SEQS, "workload": STOPS},
    # refused, in one line each: what the adapter does not model
    "refused_prefix_caching": {"policy": "sarathi", "vllm": {"prefix_caching": True}},
    "refused_budget": {"policy": "orca", "max_num_seqs": SEQS, "vllm": {"max_num_batched_tokens": 2048}},
}


# -- without vLLM: the settings, the mirror, the trace file --------------------------------------
def test_the_policy_travels_in_the_environment_and_a_bad_one_is_one_line():
    cfg = SchedulerConfig("sarathi", token_budget=256)
    env = plugin_env(cfg, "/tmp/t.jsonl")
    assert scheduler_from_env(env) == cfg and env[TRACE_ENV] == "/tmp/t.jsonl"
    assert TRACE_ENV not in plugin_env(cfg)  # no path: no trace
    with pytest.raises(ValueError, match=POLICY_ENV):
        scheduler_from_env({})
    with pytest.raises(ValueError, match="no_such_policy"):
        scheduler_from_env({POLICY_ENV: '{"policy": "no_such_policy"}'})


def test_a_plugin_policy_travels_with_its_module():
    import examples.policies.shortest_prompt_first  # noqa: F401  (registers it)

    env = plugin_env(SchedulerConfig("shortest_prompt_first", token_budget=256))
    assert json.loads(env[POLICY_ENV])["module"] == "examples.policies.shortest_prompt_first"
    assert "module" not in json.loads(plugin_env(SchedulerConfig("orca"))[POLICY_ENV])  # built-ins need none
    with pytest.raises(ValueError, match="no_such_module"):
        scheduler_from_env({POLICY_ENV: '{"policy": "x", "module": "no_such_module"}'})


def test_supported_releases():
    assert supports("0.32.0") and supports("0.32.0+cpu") and supports("0.32.1")
    assert not supports("0.320.0") and not supports("0.31.2") and not supports("0.19.0")


def test_the_mirror_holds_a_finished_sequences_blocks_until_vllm_frees_them_and_parks_in_flight_preemptions():
    in_flight = {1}
    mirror = MirrorEngine(make_policy(SchedulerConfig("sarathi", token_budget=64), 256), BlockManager(6, 16, watermark=0),
                          256, "sarathi", on_preempt=lambda s: s.seq_id in in_flight)
    for i, (p, o) in enumerate([(32, 1), (32, 40), (16, 40)]):
        mirror.add(Sequence(i, p, o))
    mirror.complete(mirror.schedule())  # 0 and 1 whole (the budget): 4 blocks
    assert 0 in mirror.held and mirror.blocks.num_free == 2  # 0 finished, its 2 blocks kept
    mirror.release(0)
    assert mirror.blocks.num_free == 4
    mirror.preempt(mirror.seqs[1])  # a token of it in flight: not back in the queue yet
    assert [s.seq_id for s in mirror.parked] == [1] and [s.seq_id for s in mirror.waiting] == [2]
    mirror.unpark(lambda s: True)
    assert [s.seq_id for s in mirror.waiting] == [1, 2] and not mirror.parked


def test_a_trace_cut_short_by_a_killed_server_reads_without_its_last_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"header": {"policy": "vllm"}}\n{"step": 0, "wall_s": 0.1}\n{"step": 1, "wal')
    headers, steps = read_trace(path)
    assert headers == [{"policy": "vllm"}] and steps == [{"step": 0, "wall_s": 0.1}]
    path.write_text('{"step": 0}\nnot json\n{"step": 1}\n')
    with pytest.raises(ValueError, match=":2:"):
        read_trace(path)


# -- inside vLLM's scheduler ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """Every policy of POLICIES on WORKLOAD, in one vLLM process (about 15 s)."""
    out = tmp_path_factory.mktemp("vllm-plugin")
    spec = {"out": str(out), "max_steps": 3000, "workload": WORKLOAD, "policies": POLICIES,
            "vllm": {"kv_blocks": KV_BLOCKS, "block_size": BLOCK, "max_model_len": MAX_LEN, "max_num_seqs": SEQS,
                     "max_num_batched_tokens": SEQS * MAX_LEN}}
    (out / "spec.json").write_text(json.dumps(spec))
    subprocess.run([VLLM_PYTHON, str(ROOT / "tests" / "vllm_scheduler_driver.py"), str(out / "spec.json")], check=True,
                   cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, timeout=600)
    return out


def steps_of(runs: Path, name: str) -> list[dict]:
    result = json.loads((runs / f"{name}.json").read_text())
    assert "error" not in result and "refused" not in result, result
    # every request made all its tokens, in the order vLLM delivered them
    assert result["produced"] == {str(i): o for i, (_, _, o) in enumerate(WORKLOAD)}
    headers, steps = read_trace(runs / f"{name}.trace.jsonl")
    assert [h["policy"] for h in headers] == [POLICIES[name].get("policy", name)]
    assert [s["step"] for s in steps] == list(range(len(steps))) and all(s["wall_s"] >= 0 for s in steps)
    assert all(s["kv_blocks_used"] <= s["kv_blocks_policy"] for s in steps)  # vLLM's books within the policy's
    return steps


def appearances(steps: list[dict]) -> dict[str, list[int]]:
    seen: dict[str, list[int]] = {}
    for s in steps:
        for rid in s["prefill_ids"] + s["decode_ids"]:
            seen.setdefault(rid, []).append(s["step"])
    return seen


def no_decode_left_out(steps: list[dict]) -> None:
    """A request decoding runs in every step until it finishes, unless a step preempts it."""
    preempted_at = {rid: s["step"] for s in steps for rid in s["preempted"]}
    for rid, at in appearances(steps).items():
        first_decode = min((s["step"] for s in steps if rid in s["decode_ids"]), default=None)
        gaps = [(a, b) for a, b in zip(at, at[1:]) if b != a + 1 and a >= (first_decode or at[-1])]
        assert all(rid in preempted_at for _ in gaps), f"request {rid} left out of steps between {gaps}"


@needs_vllm
@pytest.mark.parametrize("name", ["vllm", "vllm_preempting"])
def test_vllm_never_mixes_prefills_with_decodes_and_never_chunks(runs, name):
    steps = steps_of(runs, name)
    assert all(not (s["prefill_ids"] and s["decode_ids"]) for s in steps)
    prompt = {str(i): p for i, (_, p, _) in enumerate(WORKLOAD)}
    for s in steps:  # whole prompts (after a preemption: prompt and outputs), from nothing computed
        assert s["prefill_context"] == [0] * len(s["prefill_ids"])
        assert all(n >= prompt[rid] for rid, n in zip(s["prefill_ids"], s["prefill_tokens"]))
    assert any(len(s["decode_ids"]) >= 4 for s in steps) and any(s["prefill_tokens"] for s in steps[5:])
    if name == "vllm_preempting":
        assert sum(len(s["preempted"]) for s in steps) > 0


@needs_vllm
@pytest.mark.parametrize("name", ["sarathi", "sarathi_preempting"])
def test_sarathi_stays_within_its_budget_and_never_leaves_a_running_decode_out(runs, name):
    steps = steps_of(runs, name)
    assert all(sum(s["prefill_tokens"]) + len(s["decode_ids"]) <= BUDGET for s in steps if s["prefill_ids"])
    assert any(s["prefill_ids"] and s["decode_ids"] for s in steps)  # hybrid batches: long prompts beside decodes
    assert any(c > 0 for s in steps for c in s["prefill_context"])  # chunked
    no_decode_left_out(steps)
    if name == "sarathi_preempting":
        assert sum(len(s["preempted"]) for s in steps) > 0


@needs_vllm
@pytest.mark.parametrize("name", ["orca", "orca_best", "orca_worst", "decode_maximal"])
def test_reserving_policies_never_admit_a_request_whose_maximum_length_does_not_fit(runs, name):
    steps = steps_of(runs, name)
    seen = appearances(steps)
    active = [sum(1 for at in seen.values() if at[0] <= s["step"] <= at[-1]) for s in steps]
    assert max(active) == KV_BLOCKS // PER_SEQ  # the KV cache, not max_num_seqs, bounded the batch
    assert all(s["kv_blocks_policy"] <= KV_BLOCKS for s in steps)
    if name == "orca":
        assert any(s["waiting"] for s in steps) and max(s["running"] for s in steps) < SEQS


@needs_vllm
def test_a_request_level_batch_admits_nothing_until_it_drains(runs):
    seen = appearances(steps_of(runs, "fastertransformer"))
    for rid, at in seen.items():
        earlier = [r for r, a in seen.items() if a[0] < at[0]]
        assert all(seen[r][-1] < at[0] for r in earlier), f"request {rid} admitted while an earlier batch ran"
    assert len({at[0] for at in seen.values()}) > 1  # more than one batch


@needs_vllm
def test_a_plugin_policy_runs_inside_vllm_and_admits_the_shortest_prompt_first(runs):
    steps = steps_of(runs, "shortest_prompt_first")
    assert all(sum(s["prefill_tokens"]) + len(s["decode_ids"]) <= BUDGET for s in steps if s["prefill_ids"])
    assert steps[0]["prefill_ids"] == ["2", "0", "1", "3"]  # by prompt length: 30, 40, 50, 60 (the chunk)
    assert steps_of(runs, "sarathi")[0]["prefill_ids"] == ["0", "1", "2", "3"]  # FCFS
    no_decode_left_out(steps)


@needs_vllm
def test_decode_maximal_takes_one_chunk_a_step(runs):
    steps = steps_of(runs, "decode_maximal")
    assert all(len(s["prefill_ids"]) <= 1 for s in steps)
    assert any(s["prefill_ids"] and s["decode_ids"] for s in steps)


@needs_vllm
def test_chunked_only_never_mixes_and_hybrid_only_never_chunks(runs):
    chunked = steps_of(runs, "chunked_only")
    assert all(not (s["prefill_ids"] and s["decode_ids"]) and sum(s["prefill_tokens"]) <= BUDGET for s in chunked)
    hybrid = steps_of(runs, "hybrid_only")
    assert all(c == 0 for s in hybrid for c in s["prefill_context"]) and any(s["prefill_ids"] and s["decode_ids"] for s in hybrid)
    no_decode_left_out(hybrid)
    no_decode_left_out(steps_of(runs, "vllm_v1"))


@needs_vllm
@pytest.mark.parametrize("name", ["sarathi_stops", "vllm_stops", "orca_stops"])
def test_requests_that_stop_early_or_are_aborted_leave_nothing_behind(runs, name):
    result = json.loads((runs / f"{name}.json").read_text())
    assert "error" not in result, result
    expected = {str(i): stop or o for i, (_, _, o, stop, abort) in enumerate(STOPS) if abort < 0}
    assert {r: n for r, n in result["produced"].items() if r in expected} == expected
    left = result["left"]  # once all finished: the mirror forgot every request, every block is free again
    assert left["mirror_sequences"] == 0 and left["mirror_free"] == left["vllm_free"] == left["kv_blocks"]


@needs_vllm
def test_what_the_adapter_does_not_model_is_refused_in_one_line(runs):
    for name, words in [("refused_prefix_caching", "prefix caching is on"), ("refused_budget", "--max-num-batched-tokens 2048")]:
        refused = json.loads((runs / f"{name}.json").read_text())["refused"]
        assert words in refused and "\n" not in refused


@needs_vllm
def test_another_vllm_release_is_refused_at_import():
    probe = "import vllm; vllm.__version__ = '0.19.1'; import engines.external.vllm_scheduler.scheduler"
    done = subprocess.run([VLLM_PYTHON, "-c", probe], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "supports vLLM 0.32 only, not 0.19.1" in done.stderr.strip().splitlines()[-1]


# -- the harness's wiring (no server started) ---------------------------------------------------
def test_a_live_vllm_server_runs_the_policy_through_the_plugin_unless_native_is_asked():
    from engines.external.vllm_scheduler import SCHEDULER_CLS
    from harness.backends.live import LiveServerSpec, scheduler_class

    sched = SchedulerConfig("orca", max_num_seqs=16)
    spec = LiveServerSpec(kind="vllm", scheduler=sched, model="tiny", max_model_len=1024, vllm_command=("python",),
                          vllm_scheduler="plugin", vllm_trace="/tmp/x/iterations.jsonl")
    launch, _ = spec.launch()
    at = launch.command.index("--scheduler-cls")
    assert launch.command[at + 1] == SCHEDULER_CLS and "--enable-chunked-prefill" in launch.command
    assert launch.command[launch.command.index("--max-num-batched-tokens") + 1] == str(16 * 1024)  # 16 whole prompts
    assert scheduler_from_env(launch.env) == sched and launch.env[TRACE_ENV] == "/tmp/x/iterations.jsonl"
    assert launch.env["PYTHONPATH"] == str(ROOT)
    native, _ = LiveServerSpec(kind="vllm", scheduler=SchedulerConfig("sarathi"), model="tiny", max_model_len=1024,
                               vllm_command=("python",), vllm_scheduler="native").launch()
    assert "--scheduler-cls" not in native.command and POLICY_ENV not in native.env
    assert scheduler_class("vllm", "plugin") == SCHEDULER_CLS and scheduler_class("inrepo", "plugin") is None
    assert scheduler_class("vllm", "native").endswith("AsyncScheduler")


def test_the_trace_becomes_the_run_directorys_iteration_table(tmp_path):
    from harness.backends.live.iterations import iteration_frame

    path = tmp_path / "t.jsonl"
    path.write_text('{"header": {"policy": "vllm"}}\n'
                    '{"step": 0, "t_s": 0.0, "wall_s": 0.02, "prefill_ids": ["a"], "prefill_tokens": [40], '
                    '"prefill_context": [0], "decode_ids": [], "decode_context": [], "preempted": [], '
                    '"kv_blocks_used": 3, "kv_blocks_policy": 3, "running": 1, "waiting": 0}\n')
    frame = iteration_frame(str(path), "vllm")
    assert list(frame["scheduler"]) == ["vllm"] and list(frame["prefill_tokens"]) == [[40]]
    frame.to_parquet(tmp_path / "iterations.parquet")  # list columns survive parquet
    assert list(__import__("pandas").read_parquet(tmp_path / "iterations.parquet")["prefill_tokens"][0]) == [40]


def test_an_unknown_vllm_scheduler_mode_is_one_line():
    from common.errors import HarnessError
    from harness.backends.live import LiveSettings

    assert LiveSettings().vllm_scheduler == "plugin"
    with pytest.raises(HarnessError, match="backend.vllm_scheduler must be one of plugin, native"):
        LiveSettings(vllm_scheduler="stock")
