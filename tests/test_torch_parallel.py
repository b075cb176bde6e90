"""Tensor and pipeline parallelism over gloo in spawned processes: the same logical weights
(random ones are defined per full tensor, then sharded) give the same greedy tokens as one
process. TP splits heads, MLP and vocabulary (a single KV head is replicated); PP splits layers
and keeps two micro-batches in flight."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

from engines.executors.torch import TorchExecutor  # noqa: E402
from tests.test_torch_executor import _requests, _run  # noqa: E402
from tests.test_torch_helpers import tiny_llama  # noqa: E402

FALCON = tiny_llama().with_changes(family="falcon", num_kv_heads=1, falcon_qkv_layout="mqa", parallel_attn=True,
                                   tie_word_embeddings=True, num_layers=3, name="tiny-falcon-test")


def _outputs(config, policies=("sarathi",), **parallel):
    """Greedy outputs per policy, and the executor's pipeline depth."""
    with TorchExecutor(config, dtype="float32", device="cpu", kv_capacity_tokens=4096, **parallel) as ex:
        return [_run(ex, p, _requests())[0].outputs for p in policies], ex.pipeline_depth


@pytest.fixture(scope="module")
def llama_single():
    return _outputs(tiny_llama(), ("sarathi", "vllm"))[0]


def test_tp2_equals_tp1(llama_single):
    outputs, _ = _outputs(tiny_llama(), tp=2)
    assert outputs[0] == llama_single[0]


def test_pp2_equals_pp1_with_micro_batches_in_flight(llama_single):
    outputs, depth = _outputs(tiny_llama(), ("sarathi", "vllm"), pp=2)
    assert depth == 2
    assert outputs == llama_single


def test_falcon_tp2_pp2_equals_single_process():
    want, _ = _outputs(FALCON)
    got, _ = _outputs(FALCON, tp=2, pp=2)  # 3 layers: stages of 2 and 1; tied LM head on stage 1
    assert got == want
