"""Falcon decoder (7B/40B/180B generations): LayerNorm, rotary attention behind one fused
query_key_value projection, GELU MLP, attention and MLP computed in parallel from the same
input and summed (one TP all-reduce for both, as their partial sums can be added first)."""
from __future__ import annotations

import torch
from torch import nn

from engines.models.base import AttentionContext, DecoderModel
from engines.models.config import ModelConfig
from engines.models.layers.activation import Gelu
from engines.models.layers.linear import ColumnParallelLinear, QKVParallelLinear, RowParallelLinear
from engines.models.layers.norm import LayerNorm
from engines.models.layers.rotary import RotaryEmbedding
from engines.models.parallel import tp_all_reduce


class FalconAttention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.head_dim = cfg.head_dim
        self.query_key_value = QKVParallelLinear(cfg.hidden_size, cfg.head_dim, cfg.num_heads, cfg.num_kv_heads,
                                                 bias=cfg.attention_bias)
        self.dense = RowParallelLinear(cfg.q_size, cfg.hidden_size, bias=cfg.attention_bias)
        self.rotary = RotaryEmbedding(cfg.head_dim, cfg.rope_theta)

    def forward(self, x, positions, attn: AttentionContext, layer: int, reduce: bool = True) -> torch.Tensor:
        q, k, v = self.query_key_value.split(self.query_key_value(x))
        t, d = x.shape[0], self.head_dim
        q, k = self.rotary(positions, q.view(t, -1, d), k.view(t, -1, d))
        out = attn.attend(layer, q, k, v.view(t, -1, d))
        return self.dense(out.reshape(t, -1), reduce=reduce)


class FalconMLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.dense_h_to_4h = ColumnParallelLinear(cfg.hidden_size, cfg.intermediate_size, bias=cfg.attention_bias)
        self.act = Gelu()
        self.dense_4h_to_h = RowParallelLinear(cfg.intermediate_size, cfg.hidden_size, bias=cfg.attention_bias)

    def forward(self, x: torch.Tensor, reduce: bool = True) -> torch.Tensor:
        return self.dense_4h_to_h(self.act(self.dense_h_to_4h(x)), reduce=reduce)


class FalconDecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.parallel = cfg.parallel_attn
        self.two_norms = cfg.parallel_attn and cfg.num_ln_in_parallel_attn == 2
        if self.two_norms:
            self.ln_attn = LayerNorm(cfg.hidden_size, cfg.norm_eps)
            self.ln_mlp = LayerNorm(cfg.hidden_size, cfg.norm_eps)
        else:
            self.input_layernorm = LayerNorm(cfg.hidden_size, cfg.norm_eps)
            if not self.parallel:
                self.post_attention_layernorm = LayerNorm(cfg.hidden_size, cfg.norm_eps)
        self.self_attention = FalconAttention(cfg)
        self.mlp = FalconMLP(cfg)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, attn: AttentionContext, layer: int) -> torch.Tensor:
        if not self.parallel:
            x = x + self.self_attention(self.input_layernorm(x), positions, attn, layer)
            return x + self.mlp(self.post_attention_layernorm(x))
        if self.two_norms:
            attn_in, mlp_in = self.ln_attn(x), self.ln_mlp(x)
        else:
            attn_in = mlp_in = self.input_layernorm(x)
        # Partial sums of both row-parallel outputs add up before the single all-reduce.
        partial = self.mlp(mlp_in, reduce=False) + self.self_attention(attn_in, positions, attn, layer, reduce=False)
        return x + tp_all_reduce(partial)


class FalconForCausalLM(DecoderModel):
    def _make_layer(self, index: int) -> nn.Module:
        return FalconDecoderLayer(self.config)

    def _make_final_norm(self) -> nn.Module:
        return LayerNorm(self.config.hidden_size, self.config.norm_eps)

    def _route(self, hf_name, tensor):
        common = self._common_route(hf_name, "transformer.word_embeddings", "transformer.ln_f")
        if common is not None:
            return common
        idx = self.local_layer(hf_name)
        if idx is None or idx < 0:
            return []
        rest = hf_name.split(".", 3)[3]  # transformer.h.{i}.<rest>
        if rest.startswith("self_attention.query_key_value."):
            kind = rest.rsplit(".", 1)[1]
            target = f"layers.{idx}.self_attention.query_key_value.{kind}"
            return [(target, part, lambda t, part=part: self._split_qkv(t)[part]) for part in ("q", "k", "v")]
        return [(f"layers.{idx}.{rest}", None, None)]

    def _split_qkv(self, fused: torch.Tensor) -> dict[str, torch.Tensor]:
        """Full q, k, v rows of Falcon's fused projection (weight [rows, hidden] or bias [rows])."""
        c = self.config
        d, rest = c.head_dim, fused.shape[1:]
        if c.falcon_qkv_layout == "grouped":  # per KV head: its query heads, then k, then v
            g = fused.reshape(c.num_kv_heads, c.num_heads // c.num_kv_heads + 2, d, *rest)
            q, k, v = g[:, :-2], g[:, -2], g[:, -1]
        elif c.falcon_qkv_layout == "mqa":  # all query heads, then the one k, then the one v
            g = fused.reshape(c.num_heads + 2, d, *rest)
            q, k, v = g[:-2], g[-2], g[-1]
        else:  # interleaved: per head q, k, v
            g = fused.reshape(c.num_heads, 3, d, *rest)
            q, k, v = g[:, 0], g[:, 1], g[:, 2]
        return {"q": q.reshape(-1, *rest), "k": k.reshape(-1, *rest), "v": v.reshape(-1, *rest)}

    def hf_shapes(self) -> dict[str, tuple[int, ...]]:
        c = self.config
        h, i = c.hidden_size, c.intermediate_size
        shapes: dict[str, tuple[int, ...]] = {"transformer.word_embeddings.weight": (c.vocab_size, h)}
        qkv_rows = c.q_size + 2 * c.kv_size
        for n in range(c.num_layers):
            p = f"transformer.h.{n}."
            linears = {"self_attention.query_key_value": (qkv_rows, h), "self_attention.dense": (h, c.q_size),
                       "mlp.dense_h_to_4h": (i, h), "mlp.dense_4h_to_h": (h, i)}
            for name, shape in linears.items():
                shapes[p + name + ".weight"] = shape
                if c.attention_bias:
                    shapes[p + name + ".bias"] = (shape[0],)
            if c.parallel_attn and c.num_ln_in_parallel_attn == 2:
                norms = ["ln_attn", "ln_mlp"]
            else:
                norms = ["input_layernorm"] + ([] if c.parallel_attn else ["post_attention_layernorm"])
            for norm in norms:
                shapes[p + norm + ".weight"] = (h,)
                shapes[p + norm + ".bias"] = (h,)
        shapes["transformer.ln_f.weight"] = (h,)
        shapes["transformer.ln_f.bias"] = (h,)
        if not c.tie_word_embeddings:
            shapes["lm_head.weight"] = (c.vocab_size, h)
        return shapes
