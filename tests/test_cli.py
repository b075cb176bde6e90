"""`python -m harness`: the main job end to end (small), and bad input -> one line, exit 2, nothing written."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, cwd=cwd, timeout=600)


def test_main_job_small(tmp_path):
    p = run("experiment=yi34b_tp2_strict", "search.num_requests=128", f"results_dir={tmp_path}")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("yi34b_tp2_strict: yi-34b on 2x a100-80g-pcie (tp=2, pp=1)")
    run_dir = Path(lines[-1].removeprefix("results: "))
    assert run_dir.parent == tmp_path / "yi34b_tp2_strict"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert set(summary["schedulers"]) == {"sarathi", "vllm", "orca"}
    # The printed table and headline are the saved capacities (full precision), formatted.
    caps = {name: s["capacity_qps"] for name, s in summary["schedulers"].items()}
    assert all(c > 0 for c in caps.values()), caps
    for name, cap in caps.items():
        row = next(line for line in lines if line.startswith(name)).split()
        assert row[2] == f"{cap:.4g}" + ("+" if summary["schedulers"][name]["saturated"] else ""), row
    headline = next(line for line in lines if line.startswith("sarathi capacity: "))
    assert headline == f"sarathi capacity: {caps['sarathi'] / caps['vllm']:.2f}x vllm, {caps['sarathi'] / caps['orca']:.2f}x orca"
    assert summary["slo"]["tbt_s"] == 0.2 and summary["seed"] == 0
    for s in summary["schedulers"].values():
        passing = [p["qps"] for p in s["probes"] if p["passed"]]
        assert s["capacity_qps"] == max(passing)
    requests = pd.read_parquet(run_dir / "requests.parquet")
    assert set(requests.scheduler) == {"sarathi", "vllm", "orca"}
    assert len(requests) == 128 * sum(len(s["probes"]) for s in summary["schedulers"].values())
    tokens = pd.read_parquet(run_dir / "token_times.parquet")
    assert (tokens.token_times_s.map(len) > 0).all()
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())  # the config the run used, each scheduler's policy
    assert sorted(s["policy"] for s in saved["scheduler"].values()) == ["orca", "sarathi", "vllm"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["experiment=nope"], "experiment/nope"),
        (["experiment=yi34b_tp2_strict", "scheduler=[sarathi,foo]"], "scheduler/foo"),
        (["dataset.trace_file=does/not/exist.csv"], "does/not/exist.csv"),
        (["search.start_qps=0"], "start_qps"),
        (["search.min_qps=-1"], "min_qps"),
        (["max_model_len=1000"], "max_model_len 1000"),
        (["slo.kind=loose"], "slo.kind"),
        (["model=gpt-9"], "model/gpt-9"),
        (["scheduler.sarathi.token_budget=0"], "token_budget"),
    ],
)
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, args, message):
    p = run(*args, "search.num_requests=16", f"results_dir={tmp_path}")
    assert p.returncode == 2, (p.stdout, p.stderr)
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], p.stderr
    assert not any(tmp_path.iterdir())


def test_help_lists_experiments():
    p = run("--help")
    assert p.returncode == 0 and "yi34b_tp2_strict" in p.stdout


@pytest.mark.parametrize("command", ["plan", "validate", "calibrate"])
def test_a_command_s_help_is_its_own(command, capsys):
    from harness.commands.main import main

    assert main([command, "-h"]) == 0
    assert f"python -m harness {command} " in capsys.readouterr().out.splitlines()[0]


def test_help_imports_nothing_heavy():
    """--help lists experiments, schedulers and figures without seconds of imports (issue 27 item 4)."""
    heavy = ("pandas", "matplotlib", "seaborn", "scipy", "aiohttp", "ray", "torch", "hydra", "pyarrow")
    code = ("import sys; from harness.commands.main import main; main(['--help']); "
            f"print([m for m in {heavy!r} if m in sys.modules])")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "fig10_11_capacity" in p.stdout and "sarathi23_pd_sweep" in p.stdout
    assert p.stdout.strip().splitlines()[-1] == "[]"
    # a simulated run composes its config without the servers' HTTP stack
    code = ("import sys; from harness.config import compose; compose(['experiment=yi34b_tp2_strict']); "
            "print([m for m in ('aiohttp', 'engines.server.app', 'torch', 'ray', 'matplotlib') if m in sys.modules])")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "[]", p.stdout + p.stderr


def test_nothing_chosen_prints_usage_and_runs_nothing(tmp_path):
    p = run(cwd=tmp_path)
    assert p.returncode == 2 and "usage: python -m harness" in p.stdout and "sarathi" in p.stdout
    assert "no experiment chosen" in p.stderr
    assert not any(tmp_path.iterdir())  # no results/ written


def test_multirun_runs_every_job(tmp_path):
    p = run("-m", "experiment=yi34b_tp2_strict,mistral7b_strict", "scheduler=[sarathi]", "search.num_requests=16",
            f"results_dir={tmp_path}", "progress=false")
    assert p.returncode == 0, p.stderr
    for name in ("yi34b_tp2_strict", "mistral7b_strict"):
        runs = [d for d in (tmp_path / name).iterdir() if not d.name.startswith(".")]
        assert len(runs) == 1 and (runs[0] / "summary.json").exists()


def test_measured_profile_drives_the_simulation(tmp_path):
    p = run("model=llama2-7b", "perf=profile", "perf.path=tests/fixtures/profiles/vidur_llama2_7b_a100", "slo.tbt_s=0.1",
            "scheduler=[sarathi]", "search.num_requests=32", f"results_dir={tmp_path}", "progress=false")
    assert p.returncode == 0, p.stderr
    assert "measured profile" in p.stdout.splitlines()[0]
    p = run("perf=profile", "search.num_requests=8", f"results_dir={tmp_path / 'x'}")
    assert p.returncode == 2 and "perf.path" in p.stderr


@pytest.mark.parametrize("hardware,gpu", [("a100_80g", "a100-80g-pcie"), ("a100_80g_sxm", "a100-80g-sxm"),
                                          ("a40", "a40-48g"), ("h100_80g", "h100-80g-sxm"), ("h200", "h200-141g")])
def test_every_hardware_preset_plans(hardware, gpu):
    from harness.config import compose
    from harness.config import plan_experiment

    plan = plan_experiment(compose(["experiment=llama2_70b_tp4pp2_strict", f"hardware={hardware}"]))
    d = plan.deployment.timer.deployment
    assert d.gpu.name == gpu and d.tp == 4 and d.pp == 2
    assert plan.deployment.kv_capacity_tokens > 0


def test_the_perf_group_names_the_engine_stack_and_kv_recipe():
    # perf.stack / perf.attention_kernel / perf.kv_memory reach the deployment the simulator prices
    from harness.config import compose
    from harness.config import plan_experiment

    default = plan_experiment(compose(["experiment=yi34b_tp2_strict"])).deployment
    assert default.timer.deployment.stack == "sarathi-serve-2024"
    chosen = plan_experiment(compose(["experiment=yi34b_tp2_strict", "perf.stack=ideal",
                                      "perf.attention_kernel=sarathi-2024", "perf.kv_memory=vidur"])).deployment
    d = chosen.timer.deployment
    assert (d.stack, d.attention_kernel, d.kv_memory) == ("ideal", "sarathi-2024", "vidur")
    assert chosen.kv_capacity_tokens != default.kv_capacity_tokens
    assert chosen.timer.iteration_time([512], [0]) != default.timer.iteration_time([512], [0])
    p = run("experiment=yi34b_tp2_strict", "perf.stack=vllm-v9", "search.num_requests=8")
    assert p.returncode == 2 and "unknown engine stack 'vllm-v9'" in p.stderr
    # perf.cuda_graphs=false: vLLM V1's captured decode graphs launched eagerly (a typed bool, not "False")
    v1 = ["experiment=yi34b_tp2_strict", "perf.stack=vllm-v1-2025"]
    graphed = plan_experiment(compose(v1)).deployment.timer
    eager = plan_experiment(compose([*v1, "perf.cuda_graphs=false"])).deployment.timer
    assert (graphed.deployment.cuda_graphs, eager.deployment.cuda_graphs) == (None, False)
    decode = ([1] * 16, [700] * 16)
    assert eager.iteration_time(*decode) > graphed.iteration_time(*decode) + 1e-3  # 2.9 ms of launches


def test_planning_refuses_what_the_server_would_refuse():
    # prompt + output == max_model_len + 1 fits the KV cache (the last token is never fed back), but
    # an OpenAI-style server (ours, vLLM) answers 400 to prompt + max_tokens > max_model_len.
    from types import SimpleNamespace

    import numpy as np

    from common.errors import HarnessError
    from harness.experiment.checks import check_lengths

    ok = SimpleNamespace(prompt_lens=np.array([100, 28]), output_lens=np.array([28, 100]))
    check_lengths(ok, 128, "w")
    edge = SimpleNamespace(prompt_lens=np.array([100, 100]), output_lens=np.array([28, 29]))
    with pytest.raises(HarnessError, match="request 1 has prompt 100 \\+ output 29 tokens, over max_model_len 128"):
        check_lengths(edge, 128, "w")
