"""CUDA-graph bookkeeping, on CPU: vLLM's capture sizes, the padded size a step runs at, which
graph a step takes (decode-only, or mixed with up to 4 prefill chunks of any length), the static
buffers' in-place copies and padding (decode rows and chunk slots), and the engine's greedy tokens
through the padded static-buffer path (what a graph replays) equal to the reference's, with each
step's choice in the executor's step log."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.nn.attention.flex_attention")

from engines.executors.torch import TorchExecutor  # noqa: E402
from engines.executors.torch.buckets import capture_sizes, padded_size, power_of_two_at_least  # noqa: E402
from engines.executors.torch.graphs import StaticStepBuffers, choose  # noqa: E402
from engines.executors.torch.loop import run_to_completion  # noqa: E402
from engines.schedulers import EngineConfig, SchedulerConfig, make_engine  # noqa: E402
from tests.test_torch_executor import _requests  # noqa: E402
from tests.test_torch_helpers import tiny_llama  # noqa: E402

torch.set_num_threads(1)


def test_capture_sizes_follow_vllm():
    # vllm/config/vllm.py, VllmConfig._set_cudagraph_sizes: 1, 2, 4, 8..248 by 8, 256.. by 16,
    # up to min(2 * max_num_seqs, 512).
    assert capture_sizes(128) == (1, 2, 4) + tuple(range(8, 256, 8)) + (256,)
    assert capture_sizes(256)[-3:] == (480, 496, 512) and capture_sizes(1024)[-1] == 512
    assert capture_sizes(256)[capture_sizes(256).index(256) + 1] == 272
    assert capture_sizes(4) == (1, 2, 4, 8)
    assert 100 in capture_sizes(128, max_num_batched_tokens=100)
    assert 2048 not in capture_sizes(128, max_num_batched_tokens=2048)
    with pytest.raises(ValueError):
        capture_sizes(0)


def test_padded_size_and_buckets():
    sizes = capture_sizes(128)
    assert [padded_size(n, sizes) for n in (1, 3, 5, 9, 32, 33, 255, 256)] == [1, 4, 8, 16, 32, 40, 256, 256]
    assert padded_size(257, sizes) is None
    assert [power_of_two_at_least(n, 16) for n in (1, 16, 17, 300)] == [16, 16, 32, 512]


def test_choose_pads_decode_and_mixed_steps_and_runs_the_rest_eagerly():
    sizes = capture_sizes(8)  # ... 16
    c = choose([1] * 3, sizes, True, {("decode", 4)})
    assert (c.mode, c.tokens, c.padded_tokens, c.reason, c.graph) == ("graph", 3, 4, "decode-only", "decode")
    assert choose([1] * 5, sizes, True, {("decode", 4)}).mode == "static"  # size 8 has no graph (no CUDA)
    c = choose([1] * 5, sizes, True, {("decode", 4), ("mixed", 8)})  # no decode graph at 8: the mixed one
    assert (c.mode, c.padded_tokens, c.reason, c.graph) == ("graph", 8, "decode-only", "mixed")
    assert choose([1] * 17, sizes, True, set()).mode == "eager"
    c = choose([7, 1, 1], sizes, True, {("mixed", 16)})
    assert (c.mode, c.padded_tokens, c.reason, c.chunks, c.graph) == ("graph", 16, "mixed", 1, "mixed")
    assert choose([7, 1, 1], sizes, True, {("decode", 16)}).mode == "static"  # a mixed step takes mixed graphs only
    # Chunks longer than 16 tokens take mixed graphs (vLLM's capture sizes count every token).
    c = choose([200, 40, 1, 1], capture_sizes(128), True, {("mixed", 248)})
    assert (c.mode, c.tokens, c.padded_tokens, c.chunks) == ("graph", 242, 248, 2)
    c = choose([3, 3, 3, 3, 3, 1], sizes, True, {("mixed", 16)})
    assert (c.mode, c.reason) == ("eager", "5 prefill chunks over the graphs' 4")
    assert choose([3, 3, 1], sizes, True, {("mixed", 8)}, max_chunks=1).mode == "eager"
    assert choose([1], sizes, False, {("decode", 1)}).mode == "eager"


def test_graphs_captured_follow_vllms_keys():
    """Mixed graphs at every capture size past 1, decode graphs up to max_num_seqs (vLLM 0.32,
    CudagraphDispatcher.initialize_cudagraph_keys); StepGraphs.keys is what warm() captures."""
    from engines.executors.torch.attention.flex import FlexAttention
    from engines.executors.torch.graphs import StepGraphs

    def keys(**kw):
        return StepGraphs(None, None, FlexAttention(), (1, 2, 4, 8, 16), num_blocks=4, block_size=16, window=None,
                          scale=1.0, max_len=64, device=torch.device("cpu"), **kw).keys
    assert keys(max_decode=5) == [("mixed", 16), ("mixed", 8), ("mixed", 4), ("decode", 4), ("mixed", 2),
                                  ("decode", 2), ("decode", 1)]
    assert len(keys()) == 9 and keys(max_chunks=0) == [("decode", s) for s in (16, 8, 4, 2, 1)]


def test_static_buffers_copy_in_place_and_pad():
    buf = StaticStepBuffers(size=8, pages=16, num_blocks=40, device=torch.device("cpu"))
    ptrs = [t.data_ptr() for t in (buf.tokens, buf.slots, buf.q_len, *buf.mask.values())]
    tables = torch.tensor([[3, 7, 9], [5, 0, 0], [11, 12, 0]])
    t = lambda *x: torch.tensor(x)  # noqa: E731
    buf.fill(t(10, 11, 12), t(40, 5, 20), t(9 * 16 + 8, 5 * 16 + 5, 12 * 16 + 4), tables, 16, None, 640)
    assert buf.tokens.tolist() == [10, 11, 12, 0, 0, 0, 0, 0]
    assert buf.slots.tolist()[3:] == [640] * 5  # padding writes the scratch block
    assert buf.q_len.tolist() == [1, 1, 1, 0, 0, 0, 0, 0] and buf.q_start.tolist()[:3] == [40, 5, 20]
    n = buf.mask["kv_num_blocks"][:, 0, 0]
    assert n.tolist() == [3, 1, 2, 0, 0, 0, 0, 0]  # pages seen: ctx 40 -> 3 pages; padding sees none
    assert buf.mask["logical"][0, [3, 7, 9]].tolist() == [0, 1, 2] and buf.mask["logical"][0, 5] == -1
    buf.fill(t(1), t(2), t(3), tables[1:2], 16, None, 640)  # a smaller step clears the old rows
    assert buf.q_len.tolist() == [1] + [0] * 7 and int(buf.mask["kv_num_blocks"][1:].sum()) == 0
    assert buf.mask["logical"][0, 3] == -1 and buf.mask["logical"][0, 5] == 0
    assert ptrs == [t.data_ptr() for t in (buf.tokens, buf.slots, buf.q_len, *buf.mask.values())]
    with pytest.raises(ValueError, match="do not fit"):
        buf.fill(t(*range(9)), t(*range(9)), t(*range(9)), tables.repeat(3, 1), 16, None, 640)


def test_mixed_buffers_put_chunks_in_slots_and_decodes_in_rows():
    buf = StaticStepBuffers(size=32, pages=16, num_blocks=40, device=torch.device("cpu"), chunks=2)
    assert buf.queries == 32 and buf.chunk_src.shape == (64,)
    ptrs = [t.data_ptr() for t in (buf.chunk_src, buf.row_chunk_pos, *buf.chunk_mask.values())]
    t = lambda *x: torch.tensor(x)  # noqa: E731
    # a decode of a sequence at position 40 (pages 3, 7, 9), then a 20-token chunk at positions
    # 16..35 (pages 5, 6, 8), then another decode at position 3 (page 11)
    tables = torch.tensor([[3, 7, 9]] + [[5, 6, 8]] * 20 + [[11, 0, 0]])
    positions = torch.cat([t(40), torch.arange(16, 36), t(3)])
    slots = torch.cat([t(9 * 16 + 8), 6 * 16 + torch.arange(0, 16), 8 * 16 + torch.arange(0, 4), t(11 * 16 + 3)])
    buf.fill(torch.arange(22), positions, slots, tables, 16, None, 640, chunk_rows=[(1, 20)])
    assert buf.q_len.tolist() == [1] + [0] * 20 + [1] + [0] * 10  # decode rows only; chunk rows are the slot's
    assert buf.mask["kv_num_blocks"][:, 0, 0].tolist()[:22] == [3] + [0] * 20 + [1]
    assert buf.chunk_start.tolist() == [16, 0] and buf.chunk_len.tolist() == [20, 0]  # slot 1 unused
    assert buf.chunk_src[:20].tolist() == list(range(1, 21))
    assert buf.row_from_chunk.tolist() == [False] + [True] * 20 + [False] * 11
    assert buf.row_chunk_pos[1:21].tolist() == list(range(20))
    pages = lambda name: buf.chunk_mask[f"{name}_num_blocks"][:, 0, 0].tolist()  # noqa: E731
    assert pages("kv") == [2, 0] and pages("full_kv") == [1, 0]  # page 5 whole; 6 and 8 cut by causality
    assert buf.chunk_mask["logical"][0, [5, 6, 8]].tolist() == [0, 1, 2]
    buf.fill(t(1, 2), t(7, 8), t(3, 4), torch.tensor([[2], [2]]), 16, None, 640)  # a decode step clears the slots
    assert buf.chunk_len.tolist() == [0, 0] and not buf.row_from_chunk.any() and pages("kv") == [0, 0]
    assert ptrs == [t.data_ptr() for t in (buf.chunk_src, buf.row_chunk_pos, *buf.chunk_mask.values())]
    with pytest.raises(ValueError, match="3 prefill chunks"):
        buf.fill(t(1, 2, 3), t(7, 8, 9), t(3, 4, 5), torch.tensor([[2]] * 3), 16, None, 640, [(0, 1), (1, 1), (2, 1)])


def _run(**kw):
    ex = TorchExecutor(tiny_llama(sliding_window=40), dtype="float32", device="cpu", kv_capacity_tokens=1024, **kw)
    engine = make_engine(EngineConfig(SchedulerConfig.shared("sarathi", max_num_seqs=5, token_budget=24),
                                      ex.kv_capacity_tokens, 256))
    return run_to_completion(engine, ex, _requests(n=5, output_len=8)).outputs, list(ex.step_log), ex.metrics()


def test_engine_tokens_through_static_decode_and_mixed_buffers_equal_the_reference():
    ref, _, _ = _run(attention_backend="reference")
    out, log, m = _run(attention_backend="flex", cuda_graphs=True, graph_sizes=(1, 4, 8, 32))
    assert out == ref
    # No CUDA: the padded path runs without capture. Steps of 21-24 tokens with one chunk (at most
    # 4 decodes beside it) carry a chunk of over 16 tokens through the mixed graph's chunk slot.
    assert any(r.mode == "static" and r.reason == "mixed" and r.chunks == 1 and r.tokens > 20 for r in log)
    assert any(r.mode == "static" and r.reason == "mixed" and r.chunks == 2 for r in log)
    assert any(r.mode == "static" and r.reason == "decode-only" and r.padded_tokens > r.tokens for r in log)
    assert all(r.mode == "static" and r.padded_tokens == min(s for s in (1, 4, 8, 32) if s >= r.tokens)
               for r in log)
    # the server's /metrics counters (executor.metrics()): the step log summed
    assert m["torch_steps_static_mixed_total"] == sum(r.graph == "mixed" for r in log) > 0
    assert m["torch_steps_static_decode_total"] == sum(r.graph == "decode" for r in log) > 0
    assert m["torch_step_padding_tokens_total"] == sum(r.padded_tokens - r.tokens for r in log) > 0
    assert m["torch_step_tokens_total"] == sum(r.tokens for r in log)


def test_graphs_need_flex_and_one_process():
    with pytest.raises(ValueError, match="flex"):
        TorchExecutor(tiny_llama(), dtype="float32", device="cpu", kv_capacity_tokens=256, attention_backend="sdpa",
                      cuda_graphs=True)
    with pytest.raises(ValueError, match="one process"):
        TorchExecutor(tiny_llama(), dtype="float32", device="cpu", kv_capacity_tokens=256, tp=2, cuda_graphs=True)


def test_server_flags_reach_the_torch_executors_speed_paths():
    """--attention-backend / --cuda-graphs / --compile-elementwise of `python -m engines.server`
    build the executor with them (CPU: graphs run their static buffers without capture)."""
    import argparse

    from engines.server.build import _torch_executor
    from engines.server.config import add_flags, from_flags, server_flags

    parser = argparse.ArgumentParser()
    add_flags(parser)
    cfg = from_flags(parser.parse_args(["--executor", "torch", "--model", "tiny-llama", "--kv-capacity-tokens", "1024",
                                        "--attention-backend", "flex", "--cuda-graphs", "true"]))
    assert (cfg.attention_backend, cfg.cuda_graphs, cfg.compile_elementwise) == ("flex", True, False)
    assert from_flags(parser.parse_args(server_flags(cfg))) == cfg
    ex = _torch_executor(cfg)
    try:
        assert ex.attention_backend == "flex" and ex._runner.graphs is not None
    finally:
        ex.close()
