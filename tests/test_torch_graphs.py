"""CUDA-graph bookkeeping, on CPU: vLLM's capture sizes, the padded size a step runs at, which
steps take the graph path (decodes and short chunks), the static buffers' in-place copies and
padding, and the engine's greedy tokens through the padded static-buffer path (what a graph
replays) equal to the reference's, with each step's choice in the executor's step log."""
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


def test_choose_pads_decodes_and_short_chunks_and_runs_the_rest_eagerly():
    sizes = capture_sizes(8)  # ... 16
    c = choose([1] * 3, sizes, True, {4})
    assert (c.mode, c.tokens, c.padded_tokens, c.reason) == ("graph", 3, 4, "decode-only")
    assert choose([1] * 5, sizes, True, {4}).mode == "static"  # size 8 has no graph (no CUDA)
    assert choose([1] * 17, sizes, True, set()).mode == "eager"
    c = choose([7, 1, 1], sizes, True, {16})
    assert (c.mode, c.padded_tokens, c.reason) == ("graph", 16, "mixed")
    assert choose([9, 8, 1], sizes, True, {16}).reason == "17 prefill tokens over the graphs' 16"
    assert choose([9, 8, 1], capture_sizes(128), True, {32}, max_chunk_tokens=17).padded_tokens == 24
    assert choose([1], sizes, False, {1}).mode == "eager"


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


def _run(**kw):
    ex = TorchExecutor(tiny_llama(sliding_window=40), dtype="float32", device="cpu", kv_capacity_tokens=1024, **kw)
    engine = make_engine(EngineConfig(SchedulerConfig.shared("sarathi", max_num_seqs=5, token_budget=20),
                                      ex.kv_capacity_tokens, 256))
    return run_to_completion(engine, ex, _requests(n=5, output_len=8)).outputs, list(ex.step_log)


def test_engine_tokens_through_static_decode_buffers_equal_the_reference():
    ref, _ = _run(attention_backend="reference")
    out, log = _run(attention_backend="flex", cuda_graphs=True, graph_sizes=(1, 2, 4, 8, 16, 32))
    assert out == ref
    modes = {(r.mode, r.reason) for r in log}
    # No CUDA: the padded path runs without capture; long chunks run eagerly.
    assert {("static", "decode-only"), ("static", "mixed")} <= modes
    assert any(r.mode == "static" and r.padded_tokens > r.tokens for r in log)  # e.g. 3 decodes ran as 4
    assert all("prefill tokens over" in r.reason for r in log if r.mode == "eager")


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
