"""Attention backends against the reference on a mixed batch (a chunk over cached context, a
first chunk, decodes across block boundaries), with and without a sliding window; the sampler's
top-p set."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from engines.executors.base import SamplingParams  # noqa: E402
from engines.executors.torch.attention import BACKENDS, select_backend, self_check  # noqa: E402
from engines.executors.torch.sampler import Sampler  # noqa: E402

torch.set_num_threads(1)


@pytest.mark.parametrize("window", [None, 20])
@pytest.mark.parametrize("backend", ["sdpa", "flex"])
def test_backend_matches_reference_on_a_mixed_batch(backend, window):
    cls = BACKENDS[backend]
    if not cls.available(torch.device("cpu"), torch.float32):
        pytest.skip(f"{backend} unavailable")
    assert self_check(cls(), "cpu", torch.float32, num_heads=4, num_kv_heads=2, head_dim=32, window=window) < 1e-5


def test_auto_selection_on_cpu_and_errors():
    assert select_backend("auto", "cpu", torch.float32).name == "sdpa"
    assert select_backend("reference", "cpu", torch.float32).name == "reference"
    with pytest.raises(ValueError, match="unknown attention backend"):
        select_backend("nope", "cpu", torch.float32)
    with pytest.raises(ValueError, match="not available"):
        select_backend("flash_attn", "cpu", torch.float32)


def test_top_p_keeps_the_smallest_set_reaching_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    sampler = Sampler(seed=0)
    seen = {sampler(logits, [i], [SamplingParams(temperature=1.0, top_p=0.6, seed=i)])[0] for i in range(200)}
    assert seen == {0, 1}
    seen = {sampler(logits, [1000 + i], [SamplingParams(temperature=1.0, top_p=1.0, seed=i)])[0] for i in range(200)}
    assert seen == {0, 1, 2}


def test_seeded_generator_is_per_request():
    logits = torch.zeros(2, 50)
    a = Sampler(0)
    first = [a(logits, [1, 2], [SamplingParams(temperature=1.0, seed=5)] * 2) for _ in range(5)]
    b = Sampler(123)  # another executor seed does not matter for seeded requests
    second = [b(logits[:1], [1], [SamplingParams(temperature=1.0, seed=5)]) for _ in range(5)]
    assert [f[0] for f in first] == [s[0] for s in second]
    assert [f[0] for f in first] == [f[1] for f in first]  # same seed, own generators: same stream
