"""The paged FlexAttention backend reads the cache in place and computes the reference's function:
prefill, decode, a chunk with decodes, many blocks, grouped-query heads, a sliding window; its
block mask lists every (query tile, page) the mask allows and marks `full` only pages the mask
allows whole; the engine's greedy tokens are the same with it as with the reference."""
from __future__ import annotations

import shutil

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.nn.attention.flex_attention")

from engines.executors.torch import TorchExecutor  # noqa: E402
from engines.executors.torch.attention import BACKENDS, AttentionMetadata, select_backend  # noqa: E402
from engines.executors.torch.attention.flex import FlexAttention, paged_mask_mod, paged_mask_tensors  # noqa: E402
from engines.executors.torch.loop import run_to_completion  # noqa: E402
from engines.schedulers import EngineConfig, SchedulerConfig, make_engine  # noqa: E402
from tests.test_torch_executor import _requests  # noqa: E402
from tests.test_torch_helpers import tiny_llama  # noqa: E402

torch.set_num_threads(1)
BLOCK, BLOCKS = 16, 96


def _attend(backend, query_lens, context_lens, heads=4, kv_heads=2, dim=32, window=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    free = torch.randperm(BLOCKS, generator=gen).tolist()  # scattered pages, as a busy cache has
    tables = [[free.pop() for _ in range(-(-(n + c) // BLOCK))] for n, c in zip(query_lens, context_lens)]
    k = torch.randn(BLOCKS, BLOCK, kv_heads, dim, generator=gen)
    v = torch.randn(BLOCKS, BLOCK, kv_heads, dim, generator=gen)
    q = torch.randn(sum(query_lens), heads, dim, generator=gen)
    meta = lambda: AttentionMetadata.build(query_lens, context_lens, tables, BLOCK, window, dim ** -0.5, "cpu")  # noqa: E731
    return backend.forward(q, k, v, meta()), BACKENDS["reference"]().forward(q, k, v, meta())


@pytest.mark.parametrize("window", [None, 24])
@pytest.mark.parametrize("case", [
    ("prefill", [40], [0]),
    ("decode", [1, 1, 1], [0, 15, 16]),
    ("chunk over context + decodes", [37, 1, 1, 1], [50, 17, 1, 200]),
    ("many blocks", [1, 130], [700, 300]),
])
def test_flex_paged_equals_the_reference(case, window):
    _, query_lens, context_lens = case
    out, ref = _attend(BACKENDS["flex"](), query_lens, context_lens, window=window)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("heads,kv_heads", [(8, 1), (8, 8), (6, 2)])
def test_flex_paged_grouped_query_heads(heads, kv_heads):
    out, ref = _attend(BACKENDS["flex"](), [20, 1, 1], [9, 33, 64], heads=heads, kv_heads=kv_heads)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("window", [None, 10])
def test_block_mask_covers_the_mask_and_full_pages_are_whole(window):
    """On CPU flex runs eagerly from mask_mod alone, so the sparse lists the compiled GPU kernel
    reads are checked here: every allowed (query, slot) lies in a listed page of its query tile,
    and a page listed `full` is allowed for every real query of the tile."""
    bs, blocks, q_block, queries = 4, 40, 8, 32
    gen = torch.Generator().manual_seed(3)
    q_len = torch.tensor([32, 1, 9, 0])  # a padding row last
    q_start = torch.tensor([5, 30, 13, 0])
    num_pages = torch.tensor([-(-(int(s) + int(n)) // bs) for s, n in zip(q_start, q_len)])
    width = 16
    tables = torch.stack([torch.randperm(blocks, generator=gen)[:width] for _ in range(4)])
    t = paged_mask_tensors(tables, num_pages, q_start, q_len, queries, bs, window, blocks, q_block=q_block)
    mod = paged_mask_mod(t["logical"], q_start, q_len, bs, window)
    b, qi, ki = torch.meshgrid(torch.arange(4), torch.arange(queries), torch.arange(blocks * bs), indexing="ij")
    dense = mod(b, None, qi, ki)  # [S, Q, slots]
    assert dense.sum() > 0
    for row in range(4):
        for tile in range(queries // q_block):
            rows = dense[row, tile * q_block:(tile + 1) * q_block]
            nk, nf = int(t["kv_num_blocks"][row, 0, tile]), int(t["full_kv_num_blocks"][row, 0, tile])
            partial = set(t["kv_indices"][row, 0, tile, :nk].tolist())
            full = set(t["full_kv_indices"][row, 0, tile, :nf].tolist())
            assert not partial & full
            seen = set((rows.nonzero()[:, 1] // bs).tolist())
            assert seen <= partial | full, (row, tile, seen - partial - full)
            real = rows[:max(0, min(q_block, int(q_len[row]) - tile * q_block))]
            for page in full:
                assert bool(real[:, page * bs:(page + 1) * bs].all()), (row, tile, page)


def test_decode_rows_list_every_visible_page_partial():
    """One query a row: no full lists, so the flex decoding kernel splits the KV by the listed
    pages (with full lists it splits the whole cache length)."""
    tables = torch.tensor([[7, 3, 9, 1], [2, 0, 0, 0]])
    t = paged_mask_tensors(tables, torch.tensor([4, 1]), torch.tensor([60, 5]), torch.tensor([1, 1]), 1, 16, None, 12)
    assert "full_kv_num_blocks" not in t and "full_kv_indices" not in t
    assert t["kv_num_blocks"].flatten().tolist() == [4, 1]
    assert t["kv_indices"][0, 0, 0].tolist() == [7, 3, 9, 1] and t["kv_indices"][1, 0, 0, 0] == 2


def test_explicit_backend_must_pass_the_self_check(monkeypatch):
    assert select_backend("flex", "cpu", torch.float32).name == "flex"
    monkeypatch.setattr(BACKENDS["flex"], "forward", lambda self, q, k, v, meta: q * 0)
    with pytest.raises(ValueError, match="differs from the reference"):
        select_backend("flex", "cpu", torch.float32)


def _greedy(backend: str) -> dict:
    ex = TorchExecutor(tiny_llama(), dtype="float32", device="cpu", kv_capacity_tokens=1024,
                       attention_backend=backend)
    engine = make_engine(EngineConfig(SchedulerConfig.shared("sarathi", max_num_seqs=4, token_budget=32),
                                      ex.kv_capacity_tokens, 256))
    return run_to_completion(engine, ex, _requests(n=5, output_len=6)).outputs


def test_engine_greedy_tokens_same_with_flex_as_reference():
    assert _greedy("flex") == _greedy("reference")


def test_warm_up_covers_the_buckets_a_run_meets():
    """Compilation at warm-up, not per step: every (sequences, queries, pages) bucket the engine's
    steps use was run by warm_up first (on CUDA each bucket is one compilation)."""
    ex = TorchExecutor(tiny_llama(), dtype="float32", device="cpu", kv_capacity_tokens=1024, attention_backend="flex")
    flex = ex._runner.backend
    flex.shapes_seen.clear()  # the self-check's own small shapes
    assert ex.warm_up(max_num_seqs=4, max_chunk=32) == 3 + 3 * 2
    warmed = set(flex.shapes_seen)
    assert {w for _, _, w in warmed} == {64}  # the page lists: 1,024 positions / 16, for every step
    engine = make_engine(EngineConfig(SchedulerConfig.shared("sarathi", max_num_seqs=4, token_budget=32),
                                      ex.kv_capacity_tokens, 256))
    run_to_completion(engine, ex, _requests(n=5, output_len=6))
    assert flex.shapes_seen == warmed
    assert TorchExecutor(tiny_llama(), dtype="float32", device="cpu", kv_capacity_tokens=256).warm_up() == 0  # sdpa


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="torch.compile on CPU needs a C++ compiler")
def test_compiled_flex_reads_the_page_lists_right():
    """Eager flex reads only mask_mod; the compiled kernels skip pages the lists leave out and
    skip the mask on pages listed `full`. Inductor's CPU template does both, so the lists meet a
    real block-sparse kernel here (it fails when a window-cut page is listed full)."""
    flex = FlexAttention(compiled=True)
    for query_lens, context_lens, window, heads in (([37, 1, 1, 1], [50, 17, 1, 200], 24, 4),
                                                    ([1, 130], [700, 300], None, 8)):
        out, ref = _attend(flex, query_lens, context_lens, heads=heads, window=window)
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_warm_up_leaves_decodes_to_the_graphs_and_stops_at_its_deadline():
    import time

    ex = TorchExecutor(tiny_llama(), dtype="float32", device="cpu", kv_capacity_tokens=1024, attention_backend="flex",
                       cuda_graphs=True, graph_sizes=(1, 2, 4, 8), graph_max_seqs=4)
    flex = ex._runner.backend
    flex.shapes_seen.clear()
    assert ex.warm_up(max_num_seqs=8, max_chunk=32) == 1 + 3 * 2  # decodes of 8 only: 1, 2, 4 are graphs'
    assert {(s, q) for s, q, _ in flex.shapes_seen} == {(8, 1)} | {(s, q) for s in (1, 2, 4) for q in (16, 32)}
    assert ex.attention_shapes == 7
    assert ex.warm_up(max_num_seqs=8, max_chunk=32, deadline=time.monotonic() - 1) == 0
