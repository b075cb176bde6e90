"""The table-driven BatchPricer prices every batch exactly as the vectorized model does, bit for bit.

The simulator prices its stepped iterations with `iteration_time` / `iteration_stage_times` and its
decode runs with `decode_run_stage_times` (engines/perf/batch_pricer.py: tables by context and a
cache by (tokens, sequences)); the vectorized path `_stage_times(_components(...))` is the
reference. Every stack, sliding windows, MoE, FP8, launches and CUDA graphs, pipeline stages.
"""
import dataclasses

import numpy as np
import pytest

from common.errors import HarnessError
from engines.perf import Deployment, PerfModel
from engines.perf.batch_pricer import BatchPricer
from engines.perf.factory import build_perf_model
from engines.perf.scratch import prepare


def perf(model, gpu, tp=1, pp=1, **kw):
    return PerfModel(Deployment.create(model=model, gpu=gpu, tp=tp, pp=pp, **kw))


MODELS = {
    "yi-tp2": perf("yi-34b", "a100-80g-pcie", tp=2),
    "mistral-window": perf("mistral-7b", "a100-80g-pcie"),
    "llama70-tp4pp2-a40": perf("llama2-70b", "a40", tp=4, pp=2, topology="paper_a40"),
    "falcon-tp4pp2": perf("falcon-180b", "a100-80g-pcie", tp=4, pp=2, topology="paper_a100", gpus_per_node=4),
    "mistral-ideal": perf("mistral-7b", "a100-80g-pcie", stack="ideal"),
    "llama70-ideal-window-off": perf("llama2-70b", "a100-80g-pcie", tp=2, attention_kernel="fa2-ideal"),
    "mixtral-fp8-v1": perf("mixtral-8x7b", "h100-80g-sxm", tp=2, stack="vllm-v1-2025", weight_dtype="fp8", kv_dtype="fp8"),
    "qwen3-v1-eager-pp2": perf("qwen3-32b", "h200", tp=2, pp=2, stack="vllm-v1-2025", cuda_graphs=False),
    "qwen3-v1-graphs": perf("qwen3-32b", "h200", tp=4, stack="vllm-v1-2025"),
    # FlashAttention-2's varlen call: decodes in a step with a prefill chunk pay a padded tile
    "llama3-vllm-fa2": perf("llama3-8b", "rtx-4090", stack="vllm-0.32"),
    "mistral-vllm-fa2-window": perf("mistral-7b", "a100-80g-pcie", stack="vllm-0.19"),
}


def reference_stages(p: PerfModel, new, ctx) -> np.ndarray:
    """(rows, pp) stage seconds by the vectorized path."""
    n, c, _ = prepare(np.asarray(new), np.asarray(ctx))
    return p._stage_times(p._components(n, c)).T


def random_batches(rng, rows: int) -> tuple[list[list[int]], list[list[int]]]:
    """Batches as the schedulers make them: decodes over long contexts, a few prefill chunks (tile
    edges included), padding, empty and single-item batches, sizes 0..160."""
    news, ctxs = [], []
    for _ in range(rows):
        b = int(rng.choice([0, 1, 2, 5, 17, 40, 64, 100, 160]))
        kinds = rng.random(b)
        new = np.where(kinds < 0.8, 1, rng.choice([0, 2, 3, 16, 127, 128, 129, 255, 256, 257, 511, 2048, 4096], size=b))
        ctx = rng.integers(0, rng.choice([16, 300, 5000, 20000]), size=b)
        if rng.random() < 0.3:  # decodes first, then chunks, as Batch.mixed orders them
            new = np.sort(new)[::-1] if rng.random() < 0.5 else np.concatenate([new[new == 1], new[new != 1]])
        news.append(new.tolist())
        ctxs.append(ctx.tolist())
    return news, ctxs


@pytest.mark.parametrize("name", list(MODELS))
def test_thousands_of_random_batches_bit_for_bit(name):
    p = MODELS[name]
    rng = np.random.default_rng(len(name))
    news, ctxs = random_batches(rng, 1500)
    for new, ctx in zip(news, ctxs):
        got = p.iteration_stage_times(tuple(new), tuple(ctx))
        want = reference_stages(p, [new], [ctx])[0].tolist() if new else [0.0] * p.pp
        assert got == want, (new, ctx)
        assert p.iteration_time(new, ctx) == max(want)
        assert p.iteration_time(tuple(new), tuple(ctx)) == max(want)  # a Batch's tuples: the loops' path


@pytest.mark.parametrize("name", list(MODELS))
def test_decode_runs_bit_for_bit(name):
    p = MODELS[name]
    rng = np.random.default_rng(3)
    for b in (1, 3, 20, 55, 128):
        base = rng.integers(0, 6000, size=b)
        lo, hi = int(rng.integers(0, 50)), int(rng.integers(60, 400))
        ctx = base[None, :] + np.arange(lo, hi)[:, None]
        got = p.decode_run_stage_times(base, lo, hi)
        assert np.array_equal(got, reference_stages(p, np.ones_like(ctx), ctx)), b
        # and each row as the stepped loop prices it
        assert got[5].tolist() == p.iteration_stage_times((1,) * b, tuple(ctx[5].tolist()))


def test_the_pricer_needs_only_the_coefficients_and_the_expert_layers():
    """BatchPricer reads a model's frozen Coefficients and, from an MoE model, only its expert GEMMs:
    the expert-parallel model's own (the shared EP layer in the gate/up slot) reach the one-batch
    path, bit for bit its vectorized path."""
    ep = build_perf_model(Deployment.create("qwen3-30b-a3b", "h100-80g-sxm", dp=2, ep=True))
    assert type(ep).__name__ == "ExpertParallelModel"
    with pytest.raises(dataclasses.FrozenInstanceError):
        ep.coeffs.tile = 1
    alone = BatchPricer(ep.coeffs, ep._expert_gemms_one)
    news, ctxs = random_batches(np.random.default_rng(7), 300)
    for new, ctx in zip(news, ctxs):
        want = reference_stages(ep, [new], [ctx])[0].tolist() if new else [0.0] * ep.pp
        assert ep.iteration_stage_times(tuple(new), tuple(ctx)) == want, (new, ctx)
        assert alone.stage_times(new, ctx) == want, (new, ctx)


def test_contexts_past_the_tables_grow_them():
    p = perf("yi-34b", "a100-80g-pcie", tp=2)
    for top in (10, 5000, 70000, 300000):
        new, ctx = [1, 1, 700], [top, 3, top // 2]
        assert p.iteration_stage_times(new, ctx) == reference_stages(p, [new], [ctx])[0].tolist()


def test_arrays_and_floats_take_the_same_price():
    p = MODELS["yi-tp2"]
    new, ctx = [1, 1, 1, 300, 0], [4000, 17, 2500, 0, 9]
    want = p.iteration_time(new, ctx)
    assert float(p.batch_times(np.array(new), np.array(ctx))) == want
    assert float(p.batch_times(np.array(new, dtype=float), np.array(ctx, dtype=float))) == want
    assert p.iteration_time([float(x) for x in new], [float(x) for x in ctx]) == want


def test_bad_batches_are_refused():
    p = MODELS["yi-tp2"]
    with pytest.raises(HarnessError, match="shape"):
        p.iteration_time((1, 1), (5,))
    with pytest.raises(HarnessError, match=">= 0"):
        p.iteration_time((1, -1), (5, 5))
    with pytest.raises(HarnessError, match=">= 0"):
        p.iteration_time((1, 1), (5, -5))
