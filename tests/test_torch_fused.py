"""compile_elementwise: the norm (with the residual add), rotary and SiLU-gate functions swapped
for torch.compile'd versions give the eager model's logits within 1e-5 (fp32; the compiled
reductions may sum in another order) and the same greedy tokens. Skipped where torch.compile
cannot build kernels (no C++ compiler on a CPU host)."""
from __future__ import annotations

import shutil

import pytest

torch = pytest.importorskip("torch")

from engines.models.layers.fused import compile_elementwise  # noqa: E402
from engines.models.layers.norm import RMSNorm  # noqa: E402
from tests.test_torch_helpers import prefill_logits, randomize_, tiny_llama  # noqa: E402

torch.set_num_threads(1)
pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="torch.compile on CPU needs a C++ compiler")


def test_add_and_norm_is_the_sum_and_its_norm():
    norm = RMSNorm(8, 1e-6)
    x, d = torch.randn(3, 8), torch.randn(3, 8)
    s, n = norm.add_and_norm(x, d)
    assert torch.equal(s, x + d) and torch.equal(n, norm(x + d))


def test_compiled_elementwise_matches_eager():
    from engines.executors.torch.model_runner import ModelRunner

    runner = ModelRunner(tiny_llama(), dtype=torch.float32, device=torch.device("cpu"), block_size=16,
                         attention_backend="sdpa")
    randomize_(runner.model, seed=4)
    runner.allocate_kv(64)
    prompt = torch.randint(3, 256, (40,), generator=torch.Generator().manual_seed(2)).tolist()
    eager = prefill_logits(runner, prompt, chunk=13)
    swapped = compile_elementwise(runner.model)
    assert swapped == 2 * (2 * 2 + 1 + 1) + 2  # a layer: 2 norms x (norm, add+norm), rotary, act; final norm
    fused = prefill_logits(runner, prompt, chunk=13, first_block=20)
    torch.testing.assert_close(fused, eager, rtol=1e-5, atol=1e-5)
    assert torch.equal(fused.argmax(-1), eager.argmax(-1))
    assert compile_elementwise(runner.model) == 0  # already compiled: nothing swapped twice
