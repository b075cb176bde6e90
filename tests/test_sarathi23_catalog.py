"""The first Sarathi paper's catalog entries (arXiv 2308.16369): the RTX A6000 (the A40's GA102 at
its own clocks, bandwidth and memory, with the A40's measured kernel fractions), GPT-3 175B, the
`sarathi-2023` engine stack and its memory rule B = (M_G - M_S) / (L x m_kv)."""
from __future__ import annotations

import pytest

from engines.perf import Deployment, PerfModel, get_gpu, get_model
from engines.perf.kernels import get_stack, kernels_for
from harness.config import compose
from harness.config import plan_experiment


def test_a6000_is_ga102_at_its_own_clocks():
    a6000, a40 = get_gpu("RTX_A6000"), get_gpu("a40")
    assert a6000.name == "rtx-a6000-48g" and a6000.sm_count == a40.sm_count == 84
    # [GA102-WP]: the peak scales with the boost clock, 1,800 over the A40's 1,740 MHz
    assert a6000.peak_flops == pytest.approx(a40.peak_flops * 1800 / 1740, rel=1e-3)
    assert a6000.hbm_bandwidth == 768e9 and a6000.hbm_bytes == 48 * 1024**3


def test_a6000_takes_the_a40_kernel_fractions():
    stack = get_stack("sarathi-2023")
    a6000 = kernels_for(stack, "rtx-a6000-48g", get_gpu("a6000").matmul_efficiency)
    a40 = kernels_for(stack, "a40-48g", get_gpu("a40").matmul_efficiency)
    a100 = kernels_for(stack, "a100-80g-pcie", get_gpu("a100-pcie").matmul_efficiency)
    assert a6000 == a40 != a100


def test_a6000_decode_streams_weights_at_its_own_bandwidth():
    """A decode batch streams the weights: the A6000 is faster than the A40 by about their
    bandwidth ratio (768 / 696), with the same kernels (GPU time: the hosts' CPU costs differ)."""
    def decode(gpu):
        d = Deployment.create(model="llama-13b", gpu=gpu, cpu_overhead_s=0.0, cpu_overhead_per_seq_s=0.0)
        return PerfModel(d).iteration_time([1] * 4, [1024] * 4)
    assert 1.0 < decode("a40") / decode("a6000") < 768 / 696 + 0.01


def test_gpt3_175b_shapes():
    m = get_model("gpt-3")
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.head_dim) == (96, 12288, 96, 128)
    assert m.intermediate_size == 4 * 12288 and not m.gated_mlp and m.tie_word_embeddings
    assert 174e9 < m.num_params < 175e9  # "175B" less the position table and out/MLP biases left out
    assert m.kv_bytes_per_token == 96 * 2 * 12288 * 2


def test_sarathi_2023_memory_rule_is_the_papers_formula():
    """B = floor((M_G - M_S) / (L m_kv)) with M_G the device memory (utilization 1.0)."""
    d = Deployment.create(model="llama-13b", gpu="a6000", stack="sarathi-2023")
    m = d.model
    tokens = PerfModel(d).kv_capacity_tokens(1.0, 16)
    assert tokens == (48 * 1024**3 - m.weight_bytes) // m.kv_bytes_per_token
    assert tokens // 1024 == 30  # the largest B at 1K tokens a sequence


def test_the_presets_compose_and_plan():
    cfg = compose(["model=llama-13b", "hardware=rtx_a6000", "perf.stack=sarathi-2023", "name=x",
                   "scheduler=[sarathi]", "search.num_requests=8", "slo.tbt_s=1"])
    plan = plan_experiment(cfg)
    assert plan.deployment.gpu == "rtx-a6000" and "llama-13b" in plan.deployment.description


def test_the_causal_what_if_differs_from_the_stand_in_only_by_its_masked_tiles():
    """`sarathi-2024-causal` (perf.attention_kernel=) switches off one stated cause of the chunk-size
    misses: the stand-in pays an unchunked prefill's whole query x key rectangle. It is the stand-in
    with masked tiles skipped and nothing else, and no stack's default. An unchunked 1K prefill then
    pays the causal pairs, 1024 x 1025 / 2 of 1024 x 1024, beside the same per-call cost (40 layers x
    21.5 us), while 64-token chunks, whose rectangles are nearly unmasked, cost what they cost before."""
    from dataclasses import replace

    from engines.perf.kernels import STACKS, get_attention_kernel
    from engines.perf.queries import chunked_attention_time

    stand_in, what_if = get_attention_kernel("sarathi-2024"), get_attention_kernel("sarathi-2024-causal")
    assert not stand_in.causal_flops and what_if == replace(stand_in, name=what_if.name, causal_flops=True)
    assert all(s.attention != what_if.name and s.attention_hopper != what_if.name for s in STACKS.values())
    assert STACKS["sarathi-2023"].attention != stand_in.name  # the 2023 engine's stand-in is now a what-if

    def attention(kernel, chunk):
        d = Deployment.create(model="llama-13b", gpu="a6000", stack="sarathi-2023", attention_kernel=kernel)
        return chunked_attention_time(PerfModel(d), 1024, chunk)

    unchunked, causal = attention("sarathi-2024", 1024), attention("sarathi-2024-causal", 1024)
    calls = 40 * stand_in.prefill_fixed_s
    assert (causal - calls) / (unchunked - calls) == pytest.approx(1025 / 2048, rel=1e-6)
    assert attention("sarathi-2024-causal", 64) == pytest.approx(attention("sarathi-2024", 64), rel=0.01)
    assert attention("sarathi-2024-causal", 64) / causal > 3.0 > 1.7 > attention("sarathi-2024", 64) / unchunked


def test_the_claims_price_a_model_claim_with_the_what_if_only_when_asked():
    """benchmarks/sarathi23_masked_tiles.py reads the claims under a what-if: the chunk-64 attention
    claim moves from the stand-in's rectangle to the causal pairs, and nothing moves by default (the
    stack's own kernel, `xformers-2023`)."""
    from harness.analysis.sarathi23.claims import load_claims, model_value

    claim = next(c for c in load_claims() if c.id == "chunk64_attention")
    own = model_value(claim.params)
    stand_in, what_if = model_value(claim.params, "sarathi-2024"), model_value(claim.params, "sarathi-2024-causal")
    assert model_value(claim.params, "xformers-2023") == own != stand_in and not claim.within(stand_in)
    assert what_if / stand_in == pytest.approx(2.0, rel=0.1) and claim.within(what_if)


def test_a_layernorm_block_sends_its_hidden_state_alone():
    """Between pipeline stages a Llama-style block sends hidden state and residual (vLLM llama.py),
    GPT-3's LayerNorm block its hidden state alone, the residual inside it (vLLM gpt2.py; nanoGPT's
    Block), as Falcon's parallel block does: half the bytes at the same width."""
    def send(model: str, width: int) -> float:
        d = Deployment.create(model=model, gpu="a100-80g-sxm", tp=8, pp=2, topology="dgx-a100")
        return PerfModel(d).coeffs.send_bytes_per_token / (width * 2)
    assert send("gpt3-175b", 12288) == send("falcon-180b", 14848) == 1
    assert send("llama2-70b", 8192) == 2
