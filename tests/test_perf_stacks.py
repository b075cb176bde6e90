"""Engine stacks as named choices (engines/perf/kernels.py STACKS): CPU costs carried by the stack,
kernel launches eager or as CUDA graphs (engines/perf/launch.py), and the presets end to end."""
import subprocess
import sys

import numpy as np
import pytest

from cli import ROOT, assert_refused
from engines.perf import Deployment, PerfModel
from engines.perf.cpu_costs import CPU_PROFILES, HOST_OVERHEADS, cpu_costs
from engines.perf.kernels import STACKS, get_stack
from engines.perf.launch import LAUNCH_S


def deploy(**kw):
    return Deployment.create(**{"model": "yi-34b", "gpu": "a100-80g-pcie", "tp": 2, **kw})


def random_batches(rng, rows=30):
    n = rng.integers(1, 3, (rows, 24)).astype(float)
    n[rng.random(n.shape) < 0.1] = 384
    n[rng.random(n.shape) < 0.2] = 0
    return n, rng.integers(0, 3000, n.shape).astype(float)


# ----------------------------------------------------------------------------- the paper's stack
def test_default_stack_is_the_paper_engine_and_prices_no_launches():
    default, named = PerfModel(deploy()), PerfModel(deploy(stack="sarathi-serve-2024"))
    alias = PerfModel(deploy(stack="vllm_vidur_2024"))  # the vLLM Vidur profiled is Sarathi-Serve's engine
    assert default.deployment == named.deployment == alias.deployment
    assert default.launch is None and get_stack(None).graphs == "eager"
    n, c = random_batches(np.random.default_rng(0))
    want = default.batch_times(n, c)
    assert np.array_equal(named.batch_times(n, c), want) and np.array_equal(alias.batch_times(n, c), want)
    assert default.breakdown([512, 1], [0, 900])["launch"] == 0.0


def test_cpu_costs_come_from_the_stack_and_host_and_an_override_wins():
    vidur = CPU_PROFILES[get_stack(None).cpu]
    d = deploy()
    assert (d.cpu_overhead_s, d.cpu_overhead_per_seq_s) == (vidur.cpu_overhead_s, vidur.cpu_overhead_per_seq_s)
    a40 = Deployment.create(model="llama2-70b", gpu="a40", tp=4, pp=2, topology="paper_a40")
    assert a40.multi_gpu_overhead_s == HOST_OVERHEADS[("vidur-2024", "paper-a40")].multi_gpu_overhead_s
    assert deploy(cpu_overhead_s=0.3e-3).cpu_overhead_s == 0.3e-3
    direct = Deployment(model=d.model, gpu=d.gpu)  # no topology: the stack's own profile
    assert direct.cpu_overhead_s == cpu_costs("vidur-2024")["cpu_overhead_s"]
    lean = d.with_changes(cpu_overhead_s=0.0)
    assert lean.with_changes(stack="vllm-v1-2025").cpu_overhead_s == 0.0  # an explicit value stays
    # vLLM V1's own step costs (cpu_costs.py `vllm-v1`), not the 2024 engine's
    v1 = Deployment.create(model="yi-34b", gpu="h100", tp=2, stack="vllm-v1-2025")
    assert get_stack("vllm-v1-2025").cpu == "vllm-v1"
    assert (v1.cpu_overhead_s, v1.cpu_overhead_per_seq_s, v1.multi_gpu_overhead_s, v1.multi_gpu_overhead_per_seq_s) == (
        0.43e-3, 1.1e-6, 0.0, 9.5e-6)
    old = Deployment.create(model="yi-34b", gpu="h100", tp=2)
    cpu = {dep.stack: PerfModel(dep).breakdown([1] * 60, [4000] * 60)["cpu_overhead"] for dep in (v1, old)}
    assert cpu["vllm-v1-2025"] == pytest.approx(0.43e-3 + 60 * (1.1e-6 + 9.5e-6), rel=1e-9)
    assert cpu["sarathi-serve-2024"] > 10 * cpu["vllm-v1-2025"]  # 1.2 + 2.0 ms + 0.2 ms a sequence: 15.2 ms


# ----------------------------------------------------------------------------- CUDA graphs
V1 = deploy(stack="vllm-v1-2025")


def test_graphs_save_exactly_the_modelled_launches_on_small_decode_batches():
    graphed, eager = PerfModel(V1), PerfModel(V1.with_changes(cuda_graphs=False))
    m = V1.model
    # Eager kernels of a Yi-34B layer under V1 at TP2: 4 GEMMs, attention, fused add+norm x 2, rotary,
    # activation, KV-cache write, 2 all-reduces; plus embedding + its all-reduce, final norm, LM head,
    # logits all-gather. A full graph replays the rest as 1 launch; the LM head and all-gather stay eager.
    eager_kernels = m.num_layers * (4 + 1 + 5 + 2) + 2 + 3
    graph_kernels = 1 + 2
    n, c = [1] * 16, [700] * 16
    saved = eager.iteration_time(n, c) - graphed.iteration_time(n, c)
    assert saved == pytest.approx((eager_kernels - graph_kernels) * LAUNCH_S, rel=1e-9)
    assert graphed.breakdown(n, c)["launch"] == pytest.approx(graph_kernels * LAUNCH_S, rel=1e-12)
    for n, c in (([4096], [0]), ([1] * 600, [100] * 600)):  # past the 512 captured tokens: eager in both
        assert graphed.iteration_time(n, c) == eager.iteration_time(n, c)


def test_v1_pieces_mixed_batches_within_the_capture_size():
    graphed, eager = PerfModel(V1), PerfModel(V1.with_changes(cuda_graphs=False))
    layers = V1.model.num_layers
    n, c = [256, 1, 1], [0, 900, 3000]  # 258 tokens: one piece per layer + 1, attention + KV write eager
    pieces = layers + 1 + 2 * layers + 2
    assert graphed.breakdown(n, c)["launch"] == pytest.approx(pieces * LAUNCH_S, rel=1e-12)
    assert graphed.iteration_time(n, c) < eager.iteration_time(n, c)


def test_launches_keep_the_vectorized_path_equal_to_row_by_row():
    for d in (V1, deploy(stack="vllm-v1-2025", pp=2, tp=1, model="mistral-7b")):
        pm = PerfModel(d)
        n, c = random_batches(np.random.default_rng(3))
        rows = np.array([pm.iteration_time(n[i], c[i]) for i in range(len(n))])
        assert np.array_equal(pm.batch_times(n, c), rows)


def test_v1_picks_fa3_on_hopper_and_fa2_elsewhere():
    assert PerfModel(V1).kernels.attention.name == "fa2-ideal"
    assert PerfModel(deploy(stack="vllm-v1-2025", gpu="h100")).kernels.attention.name == "fa3-2024"
    assert set(STACKS) >= {"sarathi-serve-2024", "ideal", "vllm-v1-2025"}


# ----------------------------------------------------------------------------- the harness
def test_v1_stack_end_to_end(tmp_path):
    p = subprocess.run([sys.executable, "-m", "harness", "experiment=yi34b_tp2_strict", "perf.stack=vllm-v1-2025",
                        "search.num_requests=256", f"results_dir={tmp_path}"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "sarathi capacity:" in p.stdout
    (config,) = tmp_path.glob("yi34b_tp2_strict/*/config.yaml")
    assert "vllm-v1-2025" in config.read_text()


def test_unknown_stack_is_one_line_exit_2(tmp_path):
    assert_refused(tmp_path, ["experiment=yi34b_tp2_strict", "perf.stack=vllm-v9"], "unknown engine stack")
