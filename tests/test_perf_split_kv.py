"""FlashAttention-2's split-KV decode (engines/perf/split_kv.py): the heuristic as written in
flash_api.cpp, worked by hand, and the shapes Vidur's A100 decode profile shows."""
import numpy as np
import pytest

from engines.perf import Deployment, PerfModel
from engines.perf.split_kv import block_keys, num_splits

LLAMA70_TP2 = PerfModel(Deployment.create(model="llama2-70b", gpu="a100-80g-pcie", tp=2))


@pytest.mark.parametrize("ctas,slots,n_blocks,splits", [
    # 128 CTAs < 0.8 x 216: efficiency 128s/216 per wave: s=1 0.59, 2 0.59, 3 0.89, 4 0.79, 5 0.99;
    # the fewest within 85 % of the best (0.84) is 3
    (128, 216, 33, 3),
    # one sequence x 4 KV heads over 29 blocks: 4s/216 grows to s = 29 (0.54); 25-28 leave 2 blocks a
    # split as 24 does (not eligible), so 29
    (4, 216, 29, 29),
    (173, 216, 33, 1),  # 173 >= 0.8 x 216: the CTAs nearly fill the GPU, no split
    (4, 216, 1, 1),  # one block cannot split
    (16, 216, 5, 5),  # 16s/216 grows to the 5 blocks there are
])
def test_num_splits_follows_the_heuristic(ctas, slots, n_blocks, splits):
    assert num_splits(ctas, slots, n_blocks) == splits


def test_block_keys_by_head_dim():
    assert [block_keys(d) for d in (64, 80, 128, 256)] == [256, 128, 128, 64]


def _attention(p: PerfModel, batch: int, context: int) -> float:
    return float(p._components(np.ones((1, batch)), np.full((1, batch), float(context)))["attention"][0])


def test_one_sequence_is_flat_in_context_as_measured():
    # Vidur's profile: b = 1 takes 17-18 us from 160 to 3,648 cached tokens (the splits grow with the
    # context, each CTA keeps one block); the KV stream alone would grow 20x over that range
    flat = [_attention(LLAMA70_TP2, 1, c) for c in (160, 800, 2000, 3648)]
    assert max(flat) == pytest.approx(min(flat), rel=1e-9)
    assert flat[0] == pytest.approx(17.5e-6, rel=0.15)  # the model: 19.6 us (fixed 6.45 + combine 6.70 + a block)
    # no split below one block: the combine kernel is not paid (measured 15 us at c = 32)
    assert _attention(LLAMA70_TP2, 1, 32) < flat[0] - 5e-6


def test_large_batches_are_the_kv_stream():
    # b = 128 at 3,648 cached tokens: measured 599 us; the call's fixed cost + 128 x 3,649 KV tokens
    # (4 heads x 128 x 2 x 2 B) at 0.83 of HBM, within 5 %
    att = LLAMA70_TP2.kernels.attention
    stream = att.decode_fixed_s + 128 * 3649 * 2048 / (att.decode_efficiency * LLAMA70_TP2.gpu.hbm_bandwidth)
    assert _attention(LLAMA70_TP2, 128, 3648) == pytest.approx(stream, rel=0.05)
    assert _attention(LLAMA70_TP2, 128, 3648) == pytest.approx(599e-6, rel=0.10)


def test_mixed_batches_split_by_the_longest_sequence():
    # the heuristic sees the batch's longest sequence (max_seqlen_k); short ones ride along
    call = LLAMA70_TP2.coeffs.attention.decode_call
    n = np.ones((1, 4))
    _, keys, splits, _ = call.layout(n, np.array([[100.0, 100.0, 100.0, 3000.0]]))
    _, _, splits_long, _ = call.layout(n, np.full((1, 4), 3000.0))
    assert splits == splits_long and keys[0] == 3 * 101 + 3001
    # rows without decodes (prefill chunks only, or padding) get nothing from the decode call
    assert call.units(np.array([[512.0, 0.0]]), np.array([[0.0, 0.0]]))[0] == 0.0


def test_stacks_without_the_split_model_keep_their_decode_law():
    ideal = PerfModel(Deployment.create(model="llama2-70b", gpu="a100-80g-pcie", tp=2, stack="ideal"))
    assert ideal.coeffs.attention.decode_call is None and ideal.kernels.attention.decode_split is None


def test_a_long_sequence_among_short_ones_costs_its_own_blocks_not_a_wave_each():
    # 55 decodes x 4 KV heads = 220 CTAs: one split, two waves of 2 x 108. One sequence of 8,000
    # tokens (63 blocks of 128) among 54 of 200 (2 blocks): the long CTAs stream their 63 blocks
    # once, while the second wave's few CTAs run beside them (not 2 x 63)
    c = np.array([[8000.0] + [200.0] * 54])
    _, _, splits, critical = LLAMA70_TP2.coeffs.attention.decode_call.layout(np.ones_like(c), c)
    assert splits[0] == 1 and critical[0] == 63
    # equal lengths keep the profile's wave quantization: 2 waves x 63 blocks
    _, _, _, critical = LLAMA70_TP2.coeffs.attention.decode_call.layout(np.ones_like(c), np.full_like(c, 8000.0))
    assert critical[0] == 126
