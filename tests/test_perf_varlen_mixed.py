"""A decode that shares vLLM's FlashAttention-2 varlen call with a prefill chunk (kernels.py [FA2-VARLEN]).

FA2's mha_varlen_fwd packs query groups and splits the KV only when max_seqlen_q == 1; in a mixed
step each decode is a 64-row query tile per query head over all its keys. The rule is priced for the
FA2 backend of the vLLM stacks only: FA3 packs groups in every step, FlashInfer runs decodes in their
own wrapper, Sarathi-Serve issues a separate decode call.
"""
from __future__ import annotations

import pytest

from engines.perf import Deployment, PerfModel
from engines.perf.kernels import get_stack, kernels_for
from engines.perf.operators import TIME_QUANTUM_S
from engines.perf.split_kv import SPLIT_KERNEL_ROWS

DECODES, CONTEXT, CHUNK = 16, 4096, 512


def model(gpu: str, stack: str = "vllm-0.32", **kw) -> PerfModel:
    return PerfModel(Deployment.create(model="llama3-8b", gpu=gpu, stack=stack, **kw))


def steps(p: PerfModel) -> tuple[float, float, float]:
    """Attention seconds of a decode-only step, a chunk-only step and the two in one step."""
    dec, ctx = [1] * DECODES, [CONTEXT] * DECODES
    att = lambda n, c: p.breakdown(n, c)["attention"]  # noqa: E731
    return att(dec, ctx), att([CHUNK], [0]), att(dec + [CHUNK], ctx + [0])


def test_the_vllm_fa2_stack_pads_decodes_in_a_mixed_step():
    p = model("rtx-4090")  # sm89: vLLM's FLASH_ATTN backend runs FA2 (its decode as measured on AD102)
    assert p.kernels.attention.name == "fa2-vllm-measured"
    assert p.kernels.attention.mixed_decode_rows == SPLIT_KERNEL_ROWS == 64
    decode, chunk, mixed = steps(p)
    # the decodes cost more in the mixed step than alone: the padded tile's FLOPs, not their KV stream
    assert mixed - chunk > 2.0 * decode
    a = p.coeffs.attention
    tile = DECODES * 64 * (CONTEXT + 1) * a.flops_per_pair / a.flops
    own = (a.decode_fixed_units + DECODES * a.decode_seq_units) * TIME_QUANTUM_S  # the decodes' call and CTAs
    assert mixed - chunk == pytest.approx((tile + own) * sum(p.stage_layers), rel=1e-3)


def test_a_decode_only_or_chunk_only_step_is_unchanged():
    """The same kernel constants without the varlen rule (flashinfer-2025 is fa2-ideal's figures under
    another name, and its decodes run in their own wrapper): only the mixed step differs."""
    # an A100 (sm80, FA2): no measured decode of vLLM's on it, fa2-ideal's constants under both names
    rule, plain = model("a100-80g-pcie"), model("a100-80g-pcie", attention_kernel="flashinfer-2025")
    assert plain.kernels.attention.mixed_decode_rows == 0
    (d1, c1, m1), (d2, c2, m2) = steps(rule), steps(plain)
    assert (d1, c1) == (d2, c2)
    assert m2 == pytest.approx(d2 + c2, rel=1e-9)  # separate kernels: the decodes' stream, unchanged
    assert m1 > m2
    dec, ctx = [1] * DECODES, [CONTEXT] * DECODES
    assert rule.iteration_time(dec, ctx) == plain.iteration_time(dec, ctx)


@pytest.mark.parametrize("gpu,stack,kernel", [
    ("h200", "vllm-0.32", "fa3-2024"),  # FA3 packs query groups in every step: no rule
    ("b200", "vllm-0.32", "flashinfer-2025"),  # decodes in BatchDecodeWithPagedKVCacheWrapper
    ("rtx-4090", "sarathi-serve-2024", "sarathi-2024"),  # a separate batched decode call
    ("rtx-4090", "ideal", "fa2-ideal"),  # the datasheet stack names no engine's calls
])
def test_other_backends_and_stacks_price_no_padded_tile(gpu, stack, kernel):
    p = model(gpu, stack)
    assert p.kernels.attention.name == kernel
    assert p.kernels.attention.mixed_decode_rows == 0


def test_a_row_of_decodes_and_padding_is_not_mixed():
    p = model("rtx-4090")
    dec, ctx = [1] * DECODES, [CONTEXT] * DECODES
    assert p.breakdown(dec + [0], ctx + [0])["attention"] == p.breakdown(dec, ctx)["attention"]


def test_the_cpu_device_runs_no_flashattention():
    """vLLM's CPU build has its own attention backend: the FA2 tile is a GPU kernel's."""
    att = kernels_for(get_stack("vllm-0.32"), "cpu", 1.0).attention
    assert att.name == "fa2-ideal" and att.mixed_decode_rows == 0
