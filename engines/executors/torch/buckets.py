"""Padded shape buckets: the batch sizes CUDA graphs are captured for, and the sizes compiled
attention kernels are specialised to, so that a run meets a small fixed set of shapes (paid for
at warm-up) instead of a new one every step. Pure functions, no torch.

The capture-size rule is vLLM's (0.32.0, vllm/config/vllm.py, VllmConfig._set_cudagraph_sizes,
and the matching CompilationConfig.max_cudagraph_capture_size docstring in
vllm/config/compilation.py): sizes 1, 2, 4, then multiples of 8 below 256, then multiples of 16
up to max_cudagraph_capture_size = min(2 * max_num_seqs * decode_query_len, 512) (1024 on data
centre Blackwell), plus max_num_batched_tokens when it fits under that ceiling; sizes are counted
in tokens and a step of n tokens runs the smallest captured size >= n, eagerly when n exceeds the
largest.
"""
from __future__ import annotations

from bisect import bisect_left

DEFAULT_MAX_CAPTURE = 512  # vLLM's default ceiling off data-centre Blackwell (1024 there)


def capture_sizes(max_num_seqs: int, max_num_batched_tokens: int | None = None, decode_query_len: int = 1,
                  default_max: int = DEFAULT_MAX_CAPTURE) -> tuple[int, ...]:
    """vLLM's default CUDA-graph capture sizes (in tokens), ascending."""
    if max_num_seqs < 1:
        raise ValueError(f"max_num_seqs must be >= 1, got {max_num_seqs}")
    ceiling = min(max_num_seqs * decode_query_len * 2, default_max)
    sizes = {1, 2, 4} | set(range(8, 256, 8)) | set(range(256, ceiling + 1, 16))
    if max_num_batched_tokens is not None and max_num_batched_tokens <= ceiling:
        sizes.add(max_num_batched_tokens)
    return tuple(sorted(s for s in sizes if s <= ceiling))


def padded_size(n: int, sizes: tuple[int, ...]) -> int | None:
    """The smallest size >= n (what a step of n tokens is padded to); None when n exceeds them all."""
    if n < 1:
        raise ValueError(f"a step has at least one token, got {n}")
    i = bisect_left(sizes, n)
    return sizes[i] if i < len(sizes) else None


def power_of_two_at_least(n: int, minimum: int = 1) -> int:
    """The bucket of a compiled kernel's dimension: the next power of two, at least `minimum`."""
    n = max(n, minimum, 1)
    return 1 << (n - 1).bit_length()


def powers_of_two(lo: int, hi: int) -> list[int]:
    """Every bucket of power_of_two_at_least(n, lo) for n <= hi: lo (a power of two) .. the bucket of hi."""
    out, b = [], power_of_two_at_least(lo)
    while b <= power_of_two_at_least(hi, lo):
        out.append(b)
        b *= 2
    return out
