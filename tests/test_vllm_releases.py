"""vLLM as it ships, as named stacks (engines/perf/vllm_releases.py, kernels.py `vllm-0.19`,
`vllm-0.32`): each default read from the release's source changes a priced batch or the KV cache by
a known amount, and the stacks are opt-in (the default stack prices as before)."""
import math
from dataclasses import replace

import numpy as np
import pytest

from common.errors import HarnessError
from engines.perf import Deployment, PerfModel, get_gpu
from engines.perf import memory
from engines.perf.kernels import get_stack, kernels_for
from engines.perf.vllm_releases import (GIB, StepRules, attention_backend, batch_defaults, capture_sizes,
                                        compute_capability, get_release, padded, padded_array, step_rules)

V19, V32 = get_release("vllm-0.19"), get_release("0.32")
H100, A100 = get_gpu("h100"), get_gpu("a100-80g-sxm")
NO_CPU = dict(cpu_overhead_s=0.0, cpu_overhead_per_seq_s=0.0, multi_gpu_overhead_s=0.0, multi_gpu_overhead_per_seq_s=0.0)


def model(stack="vllm-0.32", gpu="h100", **kw):
    return PerfModel(Deployment.create(**{"model": "llama3-8b", "gpu": gpu, "stack": stack, **kw}))


# ----------------------------------------------------------------------------- [ARGS] batch defaults
def test_batch_defaults_by_gpu_class_entry_point_and_release():
    assert batch_defaults(V32, A100.name, A100.visible_bytes) == (2048, 256)  # an A100 stays in the low tier
    assert batch_defaults(V32, H100.name, H100.visible_bytes) == (8192, 1024)
    assert batch_defaults(V32, H100.name, H100.visible_bytes, "llm") == (16384, 1024)
    assert batch_defaults(V32, "rtx-a6000-48g", 48 * GIB) == (2048, 256)
    assert batch_defaults(V32, "l40s", 48 * GIB, "llm") == (8192, 256)
    assert batch_defaults(V32, "b200-180g", 179 * GIB) == (16384, 1024)  # 0.32's >= 160 GiB tier
    assert batch_defaults(V19, "b200-180g", 179 * GIB) == (8192, 1024)  # 0.19 has none
    with pytest.raises(HarnessError, match="entry point"):
        batch_defaults(V32, H100.name, H100.visible_bytes, "grpc")
    with pytest.raises(HarnessError, match="unknown vLLM release"):
        get_release("0.7")
    assert (V19.gpu_memory_utilization, V32.gpu_memory_utilization) == (0.9, 0.92)


# ----------------------------------------------------------------------------- [GRAPHS] capture sizes
def test_capture_sizes_and_padding():
    h100 = capture_sizes(V32, H100.name, 1024, 8192)
    assert h100 == (1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)) and len(h100) == 51
    assert capture_sizes(V32, "b200-180g", 1024, 16384)[-1] == 1024  # 0.32: a 1024 ceiling on sm100
    assert capture_sizes(V19, "b200-180g", 1024, 16384)[-1] == 512
    assert capture_sizes(V32, A100.name, 100, 2048)[-1] == 200  # 2 x max_num_seqs, max_num_seqs captured too
    assert 100 in capture_sizes(V32, A100.name, 100, 2048) and 100 not in capture_sizes(V19, A100.name, 100, 2048)
    assert [padded(h100, n) for n in (0, 1, 3, 9, 257, 512, 513)] == [0, 1, 4, 16, 272, 512, 513]
    assert padded_array(h100, np.array([0.0, 3.0, 9.0, 513.0])).tolist() == [0.0, 4.0, 16.0, 513.0]


def test_a_decode_batch_runs_as_its_padded_capture_size():
    """Nine decodes cost the linear layers of sixteen (the capture size above nine); above 512 tokens
    nothing is padded; with graphs off the release prices as the unpadded V1 stack."""
    m = model()
    nine, sixteen = m.breakdown([1] * 9, [900] * 9), m.breakdown([1] * 16, [900] * 16)
    assert nine["linear"] == sixteen["linear"] and nine["tp_comm"] == sixteen["tp_comm"]
    v1 = model("vllm-v1-2025")
    assert v1.breakdown([1] * 9, [900] * 9)["linear"] < nine["linear"]
    assert model(cuda_graphs=False).breakdown([1] * 9, [900] * 9)["linear"] == v1.breakdown([1] * 9, [900] * 9)["linear"]
    assert m.breakdown([513], [0])["linear"] == v1.breakdown([513], [0])["linear"]
    assert m.breakdown([300, 1], [0, 50])["linear"] == v1.breakdown([304], [0])["linear"]  # piecewise: padded too


# ----------------------------------------------------------------------------- [ASYNC] CPU hidden behind the GPU
def test_async_scheduling_hides_the_cpu_time_a_gpu_step_covers():
    n, c = [1] * 32, [2000] * 32
    base = model(**NO_CPU).iteration_time(n, c)
    assert model(**{**NO_CPU, "cpu_overhead_s": 1e-3}).iteration_time(n, c) == base  # 1 ms < the GPU step: hidden
    slow = model(**{**NO_CPU, "cpu_overhead_s": 1.0})
    assert slow.iteration_time(n, c) == pytest.approx(1.0 + slow.breakdown(n, c)["launch"], abs=1e-12)
    assert slow.breakdown(n, c)["cpu_overhead"] == pytest.approx(1.0 - base + slow.breakdown(n, c)["launch"], abs=1e-9)
    # off with pipeline parallelism, and in the 2025 stack: the CPU time adds
    for kw in ({"pp": 2, "topology": "dgx-h100"}, {"stack": "vllm-v1-2025"}):
        off0, off1 = model(**{**NO_CPU, **kw}), model(**{**NO_CPU, "cpu_overhead_s": 1e-3, **kw})
        assert off1.iteration_time(n, c) - off0.iteration_time(n, c) == pytest.approx(1e-3, abs=1e-12)
    assert step_rules("0.32", H100.name, H100.visible_bytes, 2, True).overlap_cpu is False


def test_the_release_paths_price_bit_for_bit_alike():
    """The simulator's one-batch pricer and decode runs equal the vectorized model with padding and overlap."""
    m = model()
    rng = np.random.default_rng(1)
    for _ in range(200):
        b = int(rng.integers(1, 40))
        n = rng.integers(1, 3, b)
        n[rng.random(b) < 0.1] = 300
        c = rng.integers(0, 3000, b)
        assert m.iteration_stage_times(n.tolist(), c.tolist()) == m.stage_times(n[None] * 1.0, c[None] * 1.0)[0].tolist()
    base = np.array([100, 2000, 3000, 7])
    rows = np.array([m.stage_times(np.ones((1, 4)), (base + i)[None] * 1.0)[0] for i in range(6)])
    assert np.array_equal(m.decode_run_stage_times(base, 0, 6), rows)


# ----------------------------------------------------------------------------- [ATTN] backend per architecture
def test_attention_backend_by_compute_capability():
    assert [compute_capability(g) for g in ("a100-80g-pcie", "a40-48g", "l40s", "rtx-4090", "h100-80g-sxm", "h20",
                                            "b200-180g", "rtx-pro-6000-server")] == [80, 86, 89, 89, 90, 90, 100, 120]
    assert [attention_backend(g) for g in ("a100-80g-sxm", "l40s", "h200-141g", "b200-180g", "rtx-pro-6000-server")] == \
        ["fa2", "fa2", "fa3", "flashinfer", "fa2"]
    stack = get_stack("vllm-0.19")
    assert [kernels_for(stack, g, 0.8).attention.name for g in ("a100-80g-sxm", "h100-80g-sxm", "b200-180g")] == \
        ["fa2-ideal", "fa3-2024", "flashinfer-2025"]
    assert model(gpu="a100-80g-sxm").breakdown([2048], [0])["attention"] > model().breakdown([2048], [0])["attention"]


# ----------------------------------------------------------------------------- [MEM] KV after the profile run
def test_kv_is_sized_after_a_profile_run_of_the_default_budget():
    for gpu, tokens in (("h100", 8192), ("a100-80g-sxm", 2048)):
        m = model(gpu=gpu)
        d = m.deployment
        forward = memory.inputs(replace(d, activation_tokens=tokens))
        got = memory.inputs(d, m.rules)
        assert got.activation_bytes == forward.activation_bytes  # the forward pass of the default budget
        peak = max(got.activation_bytes, got.sampler_bytes)
        want = memory.kv_capacity_tokens("sarathi-serve", replace(forward, activation_bytes=peak), 0.9, 16)
        assert m.kv_capacity_tokens(0.9, 16) == want - 16  # less the null block
    assert model("vllm-0.19").kv_capacity_tokens() == model().kv_capacity_tokens()  # graph memory: not priced


def test_the_kv_block_count_of_llama3_8b_on_an_h100_as_vllm_032_sizes_it():
    """Llama-3-8B, one H100, `vllm serve` defaults (8,192 tokens, 1,024 sequences), utilization 0.9,
    every term written out from its source (memory.py [VLLM-V1], [VLLM-SAMPLER]): the sampler's
    dummy run, not the forward pass, sets the profile peak, and the pool is 27,888 blocks, of which
    the scheduler has 27,887 (the first is BlockPool's null block)."""
    vocab, hidden, rows, tokens, sms = 128256, 4096, 1024, 8192, 132  # config.json; [ARGS]; [SMS]
    sampler = ((tokens + 2 * rows) * hidden * 2  # hidden states held: the forward's output, the rows and their copy
               + rows * vocab * (2 + 4 + 4 + 4)  # bf16 logits, fp32 copy, softmax, exponential noise
               + sms * vocab * 4)  # the Triton top-k/top-p buffer
    weights = 8_030_261_248 * 2  # Llama-3-8B's parameters in bf16 (embedding and LM head untied)
    kv_block = 2 * 8 * 128 * 2 * 32 * 16  # K and V, 8 KV heads of 128, bf16, 32 layers, 16 tokens
    m = model()
    inputs = memory.inputs(m.deployment, m.rules)
    assert inputs.sampler_bytes == sampler > inputs.activation_bytes and inputs.stage_weight_bytes == (weights,)
    blocks = math.floor((H100.visible_bytes * 0.9 - sampler - weights) / kv_block)
    assert blocks == 27_888 and m.kv_capacity_tokens(0.9, 16) == (blocks - 1) * 16 == 446_192


def test_the_sampler_peak_is_charged_when_it_outweighs_the_activations():
    d = model().deployment
    rules = StepRules(graph_sizes=(), overlap_cpu=True, profile_tokens=1, profile_seqs=1024)
    m = memory.inputs(d, rules)
    sampler = memory.sampler_peak_bytes(d.model, d.gpu.sm_count, 1, 1024)
    assert m.sampler_bytes == sampler > m.activation_bytes
    kv_token = 2 * d.model.kv_heads_per_gpu(1) * d.model.head_dim * 2 * d.model.num_layers
    want = (math.floor((d.gpu.visible_bytes * 0.9 - sampler - m.stage_weight_bytes[0]) / (kv_token * 16)) - 1) * 16
    assert memory.kv_capacity_tokens("vllm-v1", m, 0.9, 16) == want


def test_the_release_stacks_are_opt_in():
    assert get_stack(None).release is None and model("sarathi-serve-2024").rules is None
    assert step_rules(None, H100.name, H100.visible_bytes, 1, True) is None
