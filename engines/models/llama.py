"""Llama-family decoder (Llama-2, Mistral with sliding window, Yi, CodeLlama): pre-norm RMSNorm
blocks, rotary attention with grouped-query heads, SwiGLU MLP."""
from __future__ import annotations

import torch
from torch import nn

from engines.models.base import AttentionContext, DecoderModel
from engines.models.config import ModelConfig
from engines.models.layers.activation import SiluAndMul
from engines.models.layers.linear import MergedColumnParallelLinear, QKVParallelLinear, RowParallelLinear
from engines.models.layers.norm import RMSNorm
from engines.models.layers.rotary import RotaryEmbedding


class LlamaAttention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.head_dim = cfg.head_dim
        self.qkv_proj = QKVParallelLinear(cfg.hidden_size, cfg.head_dim, cfg.num_heads, cfg.num_kv_heads,
                                          bias=cfg.attention_bias)
        self.o_proj = RowParallelLinear(cfg.q_size, cfg.hidden_size, bias=cfg.attention_bias)
        self.rotary = RotaryEmbedding(cfg.head_dim, cfg.rope_theta)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, attn: AttentionContext, layer: int) -> torch.Tensor:
        q, k, v = self.qkv_proj.split(self.qkv_proj(x))
        t, d = x.shape[0], self.head_dim
        q, k = self.rotary(positions, q.view(t, -1, d), k.view(t, -1, d))
        out = attn.attend(layer, q, k, v.view(t, -1, d))
        return self.o_proj(out.reshape(t, -1))


class LlamaMLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(cfg.hidden_size, [cfg.intermediate_size] * 2)
        self.act = SiluAndMul()
        self.down_proj = RowParallelLinear(cfg.intermediate_size, cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_up_proj(x)))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.norm_eps)
        self.self_attn = LlamaAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.norm_eps)
        self.mlp = LlamaMLP(cfg)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, attn: AttentionContext, layer: int) -> torch.Tensor:
        h = self.self_attn(self.input_layernorm(x), positions, attn, layer)
        x, normed = self.post_attention_layernorm.add_and_norm(x, h)  # one kernel when compiled
        return x + self.mlp(normed)


_PROJ = {"q_proj": ("qkv_proj", "q"), "k_proj": ("qkv_proj", "k"), "v_proj": ("qkv_proj", "v"),
         "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1)}


class LlamaForCausalLM(DecoderModel):
    def _make_layer(self, index: int) -> nn.Module:
        return LlamaDecoderLayer(self.config)

    def _make_final_norm(self) -> nn.Module:
        return RMSNorm(self.config.hidden_size, self.config.norm_eps)

    def _route(self, hf_name, tensor):
        common = self._common_route(hf_name, "model.embed_tokens", "model.norm")
        if common is not None:
            return common
        idx = self.local_layer(hf_name)
        if idx is None or idx < 0:
            return []
        # model.layers.{i}.self_attn.q_proj.weight -> layers.{local}.self_attn.qkv_proj.weight ("q")
        parts = hf_name.split(".", 3)[3].split(".")  # [module, proj, kind] or [norm, kind]
        if len(parts) == 3 and parts[1] in _PROJ:
            target, shard = _PROJ[parts[1]]
            return [(f"layers.{idx}.{parts[0]}.{target}.{parts[2]}", shard, None)]
        return [(f"layers.{idx}." + ".".join(parts), None, None)]

    def hf_shapes(self) -> dict[str, tuple[int, ...]]:
        c = self.config
        h, i = c.hidden_size, c.intermediate_size
        shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (c.vocab_size, h)}
        for n in range(c.num_layers):
            p = f"model.layers.{n}."
            shapes[p + "self_attn.q_proj.weight"] = (c.q_size, h)
            shapes[p + "self_attn.k_proj.weight"] = (c.kv_size, h)
            shapes[p + "self_attn.v_proj.weight"] = (c.kv_size, h)
            shapes[p + "self_attn.o_proj.weight"] = (h, c.q_size)
            if c.attention_bias:
                for proj, size in (("q_proj", c.q_size), ("k_proj", c.kv_size), ("v_proj", c.kv_size), ("o_proj", h)):
                    shapes[p + f"self_attn.{proj}.bias"] = (size,)
            shapes[p + "mlp.gate_proj.weight"] = (i, h)
            shapes[p + "mlp.up_proj.weight"] = (i, h)
            shapes[p + "mlp.down_proj.weight"] = (h, i)
            shapes[p + "input_layernorm.weight"] = (h,)
            shapes[p + "post_attention_layernorm.weight"] = (h,)
        shapes["model.norm.weight"] = (h,)
        if not c.tie_word_embeddings:
            shapes["lm_head.weight"] = (c.vocab_size, h)
        return shapes
