"""Attention backends over the paged KV cache, and the choice among them.

Every backend computes the same function (metadata.py states it) and has
`forward(q, k_cache, v_cache, meta) -> out`. `select_backend("auto", ...)` takes the first
available of FlashInfer, FlashAttention, SDPA on a GPU and SDPA on a CPU, after checking it
against the reference backend on a small mixed batch (a broken install falls through to the next
one instead of producing wrong tokens). A backend named explicitly passes the same check before it
serves, or selection fails with the difference found.
"""
from __future__ import annotations

import logging

import torch

from engines.executors.torch.attention.flash_attn import FlashAttnAttention
from engines.executors.torch.attention.flashinfer import FlashInferAttention
from engines.executors.torch.attention.flex import FlexAttention
from engines.executors.torch.attention.metadata import AttentionMetadata
from engines.executors.torch.attention.reference import ReferenceAttention
from engines.executors.torch.attention.sdpa import SdpaAttention

log = logging.getLogger(__name__)

BACKENDS = {b.name: b for b in (FlashInferAttention, FlashAttnAttention, FlexAttention, SdpaAttention, ReferenceAttention)}
_AUTO_ORDER = ("flashinfer", "flash_attn", "sdpa")

__all__ = ["AttentionMetadata", "BACKENDS", "self_check", "select_backend"]


def select_backend(name: str, device: torch.device | str, dtype: torch.dtype, num_heads: int = 4,
                   num_kv_heads: int = 2, head_dim: int = 64, window: int | None = None):
    device = torch.device(device)
    if name != "auto":
        if name not in BACKENDS:
            raise ValueError(f"unknown attention backend {name!r}; known: auto, {', '.join(BACKENDS)}")
        if not BACKENDS[name].available(device, dtype):
            raise ValueError(f"attention backend {name!r} is not available on {device} for {dtype}")
        backend = BACKENDS[name]()
        if name != "reference":
            err = self_check(backend, device, dtype, num_heads, num_kv_heads, head_dim, window)
            if not err <= _tolerance(dtype):
                raise ValueError(f"attention backend {name!r} differs from the reference by {err:.3g} on {device}")
        return backend
    for candidate in _AUTO_ORDER:
        cls = BACKENDS[candidate]
        if not cls.available(device, dtype):
            continue
        backend = cls()
        try:
            err = self_check(backend, device, dtype, num_heads, num_kv_heads, head_dim, window)
        except Exception as exc:  # an installed kernel that fails here would fail in serving
            log.warning("attention backend %s failed its self-check: %s", candidate, exc)
            continue
        if err <= _tolerance(dtype):
            return backend
        log.warning("attention backend %s differs from the reference by %.3g; skipping it", candidate, err)
    return ReferenceAttention()


def _tolerance(dtype: torch.dtype) -> float:
    return 1e-4 if dtype == torch.float32 else 2e-2


def self_check(backend, device, dtype, num_heads=4, num_kv_heads=2, head_dim=64, window=None, seed=0) -> float:
    """Max abs difference from the reference on a mixed batch: a long chunk over context, a
    first chunk, and decodes over contexts crossing block boundaries."""
    gen = torch.Generator().manual_seed(seed)
    block, blocks = 16, 64
    query_lens, context_lens = [37, 16, 1, 1, 1], [50, 0, 17, 1, 200]
    tables, free = [], list(torch.randperm(blocks, generator=gen).tolist())
    for n, c in zip(query_lens, context_lens):
        need = -(-(n + c) // block)
        tables.append([free.pop() for _ in range(need)])
    meta = AttentionMetadata.build(query_lens, context_lens, tables, block, window, head_dim ** -0.5, device)
    k_cache = torch.randn(blocks, block, num_kv_heads, head_dim, generator=gen).to(device, dtype)
    v_cache = torch.randn(blocks, block, num_kv_heads, head_dim, generator=gen).to(device, dtype)
    q = torch.randn(sum(query_lens), num_heads, head_dim, generator=gen).to(device, dtype)
    ref_meta = AttentionMetadata.build(query_lens, context_lens, tables, block, window, head_dim ** -0.5, device)
    ref = ReferenceAttention().forward(q, k_cache, v_cache, ref_meta)
    out = backend.forward(q, k_cache, v_cache, meta)
    return float((out.float() - ref.float()).abs().max())
