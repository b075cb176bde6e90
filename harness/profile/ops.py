"""Per-operator timings of one decoder layer, as the torch executor runs it (same modules, same
attention backend, same dtype), on one TP shard and without communication (the performance
model prices collectives from link bandwidths)."""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from engines.executors.torch.attention import AttentionMetadata, select_backend
from engines.executors.torch.kv_cache import PagedKVCache
from engines.models import ModelConfig, build_model
from engines.models.parallel import ParallelState, get_parallel, set_parallel


def measure(fn: Callable[[], object], device: torch.device, warmup: int = 2, repeats: int = 5) -> tuple[float, float]:
    """(median, min) seconds of fn(), synchronizing the device around each run."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda *_: None)
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times), min(times)


class LayerOps:
    """One layer of `config` at tensor-parallel degree `tp` (rank 0's shard)."""

    def __init__(self, config: ModelConfig, tp: int, dtype: torch.dtype, device: torch.device,
                 attention_backend: str = "auto") -> None:
        saved = get_parallel()
        set_parallel(ParallelState(tp_rank=0, tp_size=tp))  # shard shapes only; no collective is called
        try:
            self.model = build_model(config.with_changes(num_layers=1), dtype=dtype, device=device)
        finally:
            set_parallel(saved)
        self.config, self.tp, self.dtype, self.device = config, tp, dtype, device
        layer = self.model.layers[0]
        if config.family == "llama":
            attn, mlp = layer.self_attn, layer.mlp
            self.gemms = {"linear.qkv": attn.qkv_proj, "linear.attn_out": attn.o_proj,
                          "linear.mlp_up": mlp.gate_up_proj, "linear.mlp_down": mlp.down_proj}
            self.norms = [layer.input_layernorm, layer.post_attention_layernorm]
        else:
            attn, mlp = layer.self_attention, layer.mlp
            self.gemms = {"linear.qkv": attn.query_key_value, "linear.attn_out": attn.dense,
                          "linear.mlp_up": mlp.dense_h_to_4h, "linear.mlp_down": mlp.dense_4h_to_h}
            self.norms = [m for m in layer.children() if type(m).__name__ == "LayerNorm"]
        self.rotary, self.act = attn.rotary, mlp.act
        self.kv_heads = max(1, config.num_kv_heads // tp)
        self.q_heads = config.num_heads // tp
        self.backend = select_backend(attention_backend, device, dtype, self.q_heads, self.kv_heads,
                                      config.head_dim, config.sliding_window)
        self.block_size = 16
        self.cache: PagedKVCache | None = None

    def _rand(self, *shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=self.device, dtype=self.dtype)

    def linear(self, num_tokens: int) -> Callable[[], object]:
        """All four GEMMs of the layer, each on an input of its own width."""
        pairs = [(self._rand(num_tokens, m.weight.shape[1]), m.weight) for m in self.gemms.values()]

        def run():
            for x, w in pairs:
                F.linear(x, w)
        return run

    def elementwise(self, num_tokens: int) -> Callable[[], object]:
        """Norms (with the residual add feeding each), rotary on q and k, the MLP activation, and
        the KV-cache write of the new tokens."""
        c = self.config
        x = self._rand(num_tokens, c.hidden_size)
        q = self._rand(num_tokens, self.q_heads, c.head_dim)
        k = self._rand(num_tokens, self.kv_heads, c.head_dim)
        pos = torch.arange(num_tokens, device=self.device)
        act_in = self._rand(num_tokens, self.gemms["linear.mlp_up"].weight.shape[0])
        blocks = -(-num_tokens // self.block_size)
        cache = PagedKVCache(1, blocks, self.block_size, self.kv_heads, c.head_dim, self.dtype, self.device)
        slots = torch.randperm(blocks * self.block_size, device=self.device)[:num_tokens]

        def run():
            for norm in self.norms:
                norm(x + x)
            self.rotary(pos, q, k)
            self.act(act_in)
            cache.write(0, slots, k, k)
        return run

    def attention(self, batch_size: int, tokens_per_seq: int, context_len: int) -> Callable[[], object]:
        """batch_size sequences, each tokens_per_seq new tokens over context_len cached ones."""
        bs = self.block_size
        per_seq = -(-(context_len + tokens_per_seq) // bs)
        need = per_seq * batch_size
        if self.cache is None or self.cache.num_blocks < need:
            self.cache = PagedKVCache(1, need, bs, self.kv_heads, self.config.head_dim, self.dtype, self.device)
        tables = [list(range(i * per_seq, (i + 1) * per_seq)) for i in range(batch_size)]
        meta = AttentionMetadata.build([tokens_per_seq] * batch_size, [context_len] * batch_size, tables, bs,
                                       self.config.sliding_window, self.config.head_dim ** -0.5, self.device)
        t = tokens_per_seq * batch_size
        q = self._rand(t, self.q_heads, self.config.head_dim)
        kc, vc = self.cache.layer(0)

        def run():  # the KV-cache write is timed with elementwise
            meta.scratch.clear()  # per-iteration planning is part of the attention cost
            self.backend.forward(q, kc, vc, meta)
        return run
