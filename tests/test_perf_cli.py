"""The what-if command: `python -m engines.perf`."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engines.perf import Deployment, PerfModel


def run(*args):
    return subprocess.run([sys.executable, "-m", "engines.perf", *args], capture_output=True, text=True, timeout=120)


def test_last_line_is_the_iteration_time_in_ms():
    p = run("--model", "yi-34b", "--gpu", "a100-80g-sxm", "--tp", "2", "--pp", "1", "--batch", "4096:0")
    assert p.returncode == 0, p.stderr
    last = p.stdout.strip().splitlines()[-1]
    ms = float(last.removeprefix("iteration: ").removesuffix(" ms"))
    expected = PerfModel(Deployment.create(model="yi-34b", gpu="a100-80g-sxm", tp=2)).iteration_time([4096], [0]) * 1e3
    assert ms == pytest.approx(expected, abs=1e-3)
    assert "linear.mlp_up" in p.stdout and "attention" in p.stdout


def test_the_outer_rows_add_up_and_a_subtotal_says_so():
    """`linear` is the sum of its linear.* parts: marked a subtotal, its parts set in under it, so
    the outer rows add up to the iteration (one stage) and nothing is counted twice."""
    p = run("--model", "yi-34b", "--gpu", "a100-80g-sxm", "--tp", "2", "--batch", "4096:0")
    rows = [line for line in p.stdout.splitlines() if line.startswith("  ") and line.endswith(" ms")]
    outer = {line.rsplit(None, 2)[0].strip(): float(line.split()[-2]) for line in rows if not line.startswith("    ")}
    inner = {line.rsplit(None, 2)[0].strip(): float(line.split()[-2]) for line in rows if line.startswith("    ")}
    iteration = float(p.stdout.strip().splitlines()[-1].removeprefix("iteration: ").removesuffix(" ms"))
    assert "linear (subtotal)" in outer and set(inner) == {"linear.qkv", "linear.attn_out", "linear.mlp_up", "linear.mlp_down"}
    assert sum(inner.values()) == pytest.approx(outer["linear (subtotal)"], abs=0.01)
    assert sum(outer.values()) == pytest.approx(iteration, abs=0.02)


def test_an_ambiguous_gpu_is_refused_with_the_choices():
    p = run("--model", "yi-34b", "--gpu", "a100-80g", "--batch", "1:0")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "ambiguous" in p.stderr and "a100-80g-pcie" in p.stderr and "a100-80g-sxm" in p.stderr
    assert "a100-80g-pcie" in run("--help").stdout  # --help names every card


def test_json_and_repeated_items():
    p = run("--model", "llama2-70b", "--gpu", "a40", "--tp", "4", "--pp", "2", "--batch", "32x1:4096", "--batch", "512:0", "--json")
    out = json.loads(p.stdout)
    assert out["batch_items"] == 33 and out["tokens"] == 544 and len(out["stage_times_s"]) == 2
    assert out["iteration_s"] > max(out["stage_times_s"])


def test_set_overrides_engine_overheads():
    base = json.loads(run("--model", "yi-34b", "--tp", "2", "--batch", "32x1:4096", "--json").stdout)
    lean = json.loads(run("--model", "yi-34b", "--tp", "2", "--batch", "32x1:4096", "--json",
                          "--set", "cpu_overhead_s=0", "--set", "cpu_overhead_per_seq_s=0",
                          "--set", "multi_gpu_overhead_s=0", "--set", "multi_gpu_overhead_per_seq_s=0").stdout)
    assert lean["breakdown_s"]["cpu_overhead"] == 0.0 < base["breakdown_s"]["cpu_overhead"]
    assert lean["iteration_s"] == pytest.approx(base["iteration_s"] - base["breakdown_s"]["cpu_overhead"], rel=1e-9)


@pytest.mark.parametrize("args", [["--model", "gpt-9"], ["--batch", "12"], ["--batch", "0:5"], ["--gpu", "tpu"],
                                  ["--set", "hbm=1"], ["--set", "gemm_tile_tokens=x"], ["--set", "cpu_overhead_s=-1"]])
def test_bad_input_exit_2(args):
    p = run(*args)
    assert p.returncode == 2 and p.stderr.startswith("error: ")


def test_a_gpu_comes_in_its_usual_node_and_the_choice_is_printed():
    """An SXM A100 is priced in its HGX/DGX node (8 on NVSwitch), not over Ethernet, unless asked."""
    p = run("--model", "gpt3-175b", "--gpu", "a100-80g-sxm", "--tp", "8", "--stack", "sarathi-2023", "--batch", "200:0")
    assert p.returncode == 0, p.stderr
    assert "topology: dgx-a100, the a100-80g-sxm part's usual node" in p.stdout and "TP over nvswitch-a100" in p.stdout
    asked = run("--model", "gpt3-175b", "--gpu", "a100-80g-sxm", "--tp", "8", "--topology", "paper_a100", "--batch", "200:0")
    assert "TP over eth100g" in asked.stdout and "usual node" not in asked.stdout
