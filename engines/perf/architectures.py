"""Model architecture catalog: dense decoder-only transformers, with exact size arithmetic.

Every catalog entry is transcribed from the model's public Hugging Face config.json (repo id in
the comment), and `ModelArch.from_hf_config` reads such a file directly, so a new dense decoder
needs no code.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from common.errors import HarnessError


@dataclass(frozen=True)
class ModelArch:
    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    gated_mlp: bool = True  # SwiGLU (gate, up, down) vs plain 2-matrix MLP (Falcon: GELU)
    sliding_window: int | None = None  # attention looks back at most this many tokens
    parallel_attn_mlp: bool = False  # Falcon: attention and MLP read the same input, summed once
    bytes_per_param: int = 2  # fp16/bf16 weights and KV cache
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False  # LM head shares the embedding matrix
    layer_norm: bool = False  # LayerNorm (weight + bias) instead of RMSNorm (weight only)
    norms_per_layer: int = 2
    qkv_bias: bool = False

    def __post_init__(self) -> None:
        for field in ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim",
                      "intermediate_size", "vocab_size", "bytes_per_param"):
            if int(getattr(self, field)) < 1:
                raise HarnessError(f"model {self.name}: {field} must be >= 1, got {getattr(self, field)}")
        if self.num_attention_heads % self.num_kv_heads:
            raise HarnessError(
                f"model {self.name}: num_attention_heads {self.num_attention_heads} is not a multiple "
                f"of num_kv_heads {self.num_kv_heads}"
            )
        if self.sliding_window is not None and self.sliding_window < 1:
            raise HarnessError(f"model {self.name}: sliding_window must be >= 1 or None")

    # ------------------------------------------------------------ shapes
    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def mlp_in_width(self) -> int:
        """Output width of the MLP's first GEMM (gate and up fused for gated MLPs)."""
        return (2 if self.gated_mlp else 1) * self.intermediate_size

    # ------------------------------------------------------------ parameter counts
    def attention_params_per_layer(self) -> int:
        h = self.hidden_size
        qkv = h * (self.q_size + 2 * self.kv_size) + (self.q_size + 2 * self.kv_size if self.qkv_bias else 0)
        return qkv + self.q_size * h

    def mlp_params_per_layer(self) -> int:
        return self.hidden_size * self.mlp_in_width + self.intermediate_size * self.hidden_size

    def norm_params(self) -> int:
        return (2 if self.layer_norm else 1) * self.hidden_size

    def params_per_layer(self) -> int:
        return self.attention_params_per_layer() + self.mlp_params_per_layer() + self.norms_per_layer * self.norm_params()

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def num_params(self) -> int:
        """Exact parameter count (embeddings counted once when tied)."""
        lm_head = 0 if self.tie_word_embeddings else self.embedding_params
        return self.num_layers * self.params_per_layer() + self.embedding_params + lm_head + self.norm_params()

    @property
    def weight_bytes(self) -> int:
        return self.num_params * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of one token over all layers."""
        return self.num_layers * 2 * self.kv_size * self.bytes_per_param

    # ------------------------------------------------------------ sharding
    def layers_per_stage(self, pp: int) -> list[int]:
        """Layers of each pipeline stage: as even as possible, earlier stages take the remainder."""
        if pp < 1 or pp > self.num_layers:
            raise HarnessError(f"model {self.name}: pp={pp} must be in [1, {self.num_layers}]")
        base, extra = divmod(self.num_layers, pp)
        return [base + (1 if s < extra else 0) for s in range(pp)]

    def kv_heads_per_gpu(self, tp: int) -> int:
        """KV heads a GPU holds: split across TP ranks, replicated once tp exceeds them."""
        self.check_tp(tp)
        return max(1, self.num_kv_heads // tp)

    def q_heads_per_gpu(self, tp: int) -> int:
        self.check_tp(tp)
        return self.num_attention_heads // tp

    def check_tp(self, tp: int) -> None:
        if tp < 1 or self.num_attention_heads % tp:
            raise HarnessError(
                f"model {self.name}: tp={tp} must divide num_attention_heads={self.num_attention_heads}"
            )
        if self.num_kv_heads % tp and tp % self.num_kv_heads:
            raise HarnessError(
                f"model {self.name}: tp={tp} and num_kv_heads={self.num_kv_heads} must divide one another"
            )

    def kv_bytes_per_token_per_gpu(self, tp: int = 1, pp: int = 1) -> int:
        """KV bytes one token costs on the GPU of the stage holding the most layers."""
        layers = max(self.layers_per_stage(pp))
        return layers * 2 * self.kv_heads_per_gpu(tp) * self.head_dim * self.bytes_per_param

    def stage_weight_params_per_gpu(self, tp: int, pp: int) -> list[int]:
        """Parameters one GPU of each stage holds. Linear layers and embeddings are split over TP
        (vocab-parallel embedding/LM head); norms are replicated; replicated KV heads count fully.
        The first stage holds the embedding, the last the LM head (a copy when tied and pp > 1)."""
        h = self.hidden_size
        kvh = self.kv_heads_per_gpu(tp) * self.head_dim
        qkv_out = self.q_size // tp + 2 * kvh
        attn = h * qkv_out + (qkv_out if self.qkv_bias else 0) + (self.q_size // tp) * h
        mlp = self.mlp_params_per_layer() // tp
        layer = attn + mlp + self.norms_per_layer * self.norm_params()
        emb = math.ceil(self.vocab_size / tp) * h
        stages = []
        for s, n_layers in enumerate(self.layers_per_stage(pp)):
            params = n_layers * layer
            if s == 0:
                params += emb
            if s == pp - 1:
                params += self.norm_params()
                if not (self.tie_word_embeddings and pp == 1):
                    params += emb
            stages.append(params)
        return stages

    def weight_bytes_per_gpu(self, tp: int = 1, pp: int = 1) -> int:
        """Weight bytes on the most loaded GPU."""
        return max(self.stage_weight_params_per_gpu(tp, pp)) * self.bytes_per_param

    # ------------------------------------------------------------ loading
    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any] | str | Path, name: str | None = None) -> ModelArch:
        """Build from a Hugging Face config.json (a dict, a file, or a directory holding one).

        Understands the Llama/Mistral/Yi/Qwen2 spellings and Falcon's (n_head, n_layer,
        n_head_kv / num_kv_heads, multi_query, new_decoder_architecture, parallel_attn).
        """
        source = "config"
        if not isinstance(config, Mapping):
            path = Path(config)
            if path.is_dir():
                path = path / "config.json"
            source = str(path)
            try:
                config = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError) as exc:
                raise HarnessError(f"cannot read Hugging Face config {path}: {exc}") from exc
        return _arch_from_config(dict(config), name, source)


def _first(cfg: dict, keys: tuple[str, ...], source: str, default: Any = ...) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    if default is ...:
        raise HarnessError(f"{source}: none of the keys {', '.join(keys)} is present")
    return default


# Families whose MLP is gated (SwiGLU/GeGLU) whatever `hidden_act` says.
_GATED_FAMILIES = {"llama", "mistral", "mixtral", "yi", "qwen2", "gemma", "gemma2", "internlm2", "baichuan"}
FALCON_MODEL_TYPES = {"falcon", "refinedweb", "refinedwebmodel"}  # HF model_type spellings of Falcon
_UNTIED_BY_DEFAULT = {"llama", "mistral", "mixtral", "yi", "qwen2", "internlm2", "baichuan"}


def _arch_from_config(cfg: dict, name: str | None, source: str) -> ModelArch:
    model_type = str(cfg.get("model_type", "")).lower()
    falcon = model_type in FALCON_MODEL_TYPES
    hidden = int(_first(cfg, ("hidden_size", "n_embd", "d_model"), source))
    layers = int(_first(cfg, ("num_hidden_layers", "n_layer", "num_layers"), source))
    heads = int(_first(cfg, ("num_attention_heads", "n_head", "num_heads"), source))
    if falcon:
        if cfg.get("new_decoder_architecture"):
            kv_heads = int(_first(cfg, ("num_kv_heads", "n_head_kv", "num_key_value_heads"), source))
        elif cfg.get("multi_query", True):  # Falcon-7B style multi-query attention (HF default True)
            kv_heads = 1
        else:
            kv_heads = heads
    else:
        kv_heads = int(_first(cfg, ("num_key_value_heads", "num_kv_heads", "n_head_kv"), source, heads))
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    if falcon:
        intermediate = int(cfg.get("ffn_hidden_size") or 4 * hidden)  # Falcon MLP is 4h wide
        gated = False
        parallel = bool(cfg.get("parallel_attn", True) or cfg.get("new_decoder_architecture"))
    else:
        intermediate = int(_first(cfg, ("intermediate_size", "ffn_hidden_size", "n_inner"), source, 4 * hidden))
        act = str(cfg.get("hidden_act", cfg.get("activation_function", ""))).lower()
        gated = model_type in _GATED_FAMILIES or act in ("silu", "swish", "swiglu")
        parallel = bool(cfg.get("parallel_attn") or cfg.get("use_parallel_residual"))
    window = cfg.get("sliding_window")
    if cfg.get("use_sliding_window") is False or window in (None, 0):
        window = None
    max_pos = int(_first(cfg, ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"),
                         source, 2048))
    # transformers' defaults: PretrainedConfig ties (Falcon, Gemma, GPT-2 keep that), the Llama-style
    # configs (LlamaConfig, MistralConfig, Qwen2Config, ...) do not.
    tied = bool(cfg.get("tie_word_embeddings", model_type not in _UNTIED_BY_DEFAULT))
    layer_norm = "rms_norm_eps" not in cfg and (falcon or "layer_norm_epsilon" in cfg or "layer_norm_eps" in cfg)
    qkv_bias = bool(cfg.get("attention_bias") or cfg.get("qkv_bias") or model_type == "qwen2"
                    or (falcon and cfg.get("bias", False)))
    # Falcon-7B/40B-style parallel blocks with one shared input LayerNorm; the new decoder
    # architecture (40B/180B) has two (ln_attn, ln_mlp); everything else two.
    norms = 1 if (falcon and parallel and not cfg.get("new_decoder_architecture")) else 2
    arch_name = name or str(cfg.get("_name_or_path") or cfg.get("name") or model_type or "hf-model")
    return ModelArch(
        name=arch_name,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=intermediate,
        vocab_size=int(_first(cfg, ("vocab_size",), source)),
        gated_mlp=gated,
        sliding_window=int(window) if window is not None else None,
        parallel_attn_mlp=parallel,
        max_position_embeddings=max_pos,
        tie_word_embeddings=tied,
        layer_norm=layer_norm,
        norms_per_layer=norms,
        qkv_bias=qkv_bias,
    )


# ---------------------------------------------------------------- catalog
def _llama(name: str, layers: int, hidden: int, heads: int, kv: int, inter: int, vocab: int, max_pos: int,
           window: int | None = None) -> ModelArch:
    return ModelArch(name=name, num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                     num_kv_heads=kv, head_dim=hidden // heads, intermediate_size=inter, vocab_size=vocab,
                     gated_mlp=True, sliding_window=window, max_position_embeddings=max_pos,
                     tie_word_embeddings=False)


_MODELS: dict[str, ModelArch] = {
    # mistralai/Mistral-7B-v0.1 config.json: hidden 4096, 32 layers, 32 heads, 8 KV heads,
    # intermediate 14336, vocab 32000, max_position_embeddings 32768, sliding_window 4096, untied.
    "mistral-7b": _llama("mistral-7b", 32, 4096, 32, 8, 14336, 32000, 32768, window=4096),
    # 01-ai/Yi-34B config.json: hidden 7168, 60 layers, 56 heads, 8 KV heads, intermediate 20480,
    # vocab 64000, max_position_embeddings 4096, untied.
    "yi-34b": _llama("yi-34b", 60, 7168, 56, 8, 20480, 64000, 4096),
    # meta-llama/Llama-2-7b-hf: hidden 4096, 32 layers, 32 heads (MHA), intermediate 11008, vocab 32000, 4096.
    "llama2-7b": _llama("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096),
    # meta-llama/Llama-2-70b-hf: hidden 8192, 80 layers, 64 heads, 8 KV heads, intermediate 28672, vocab 32000, 4096.
    "llama2-70b": _llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096),
    # codellama/CodeLlama-34b-hf: hidden 8192, 48 layers, 64 heads, 8 KV heads, intermediate 22016,
    # vocab 32000, max_position_embeddings 16384.
    "codellama-34b": _llama("codellama-34b", 48, 8192, 64, 8, 22016, 32000, 16384),
    # meta-llama/Meta-Llama-3-8B: hidden 4096, 32 layers, 32 heads, 8 KV heads, intermediate 14336,
    # vocab 128256, max_position_embeddings 8192.
    "llama3-8b": _llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192),
    # meta-llama/Meta-Llama-3-70B: hidden 8192, 80 layers, 64 heads, 8 KV heads, intermediate 28672,
    # vocab 128256, max_position_embeddings 8192.
    "llama3-70b": _llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192),
    # tiiuae/falcon-180B config.json: hidden_size 14848, num_attention_heads 232, num_hidden_layers 80,
    # num_kv_heads 8, new_decoder_architecture true, parallel_attn true, bias false, vocab 65024,
    # alibi false (rotary). Head dim 14848 / 232 = 64; MLP dense_h_to_4h is 4 x hidden, GELU, not
    # gated; two LayerNorms per layer (ln_attn, ln_mlp); embeddings tied (transformers default);
    # max_position_embeddings absent -> FalconConfig default 2048.
    "falcon-180b": ModelArch(name="falcon-180b", num_layers=80, hidden_size=14848, num_attention_heads=232,
                             num_kv_heads=8, head_dim=64, intermediate_size=4 * 14848, vocab_size=65024,
                             gated_mlp=False, parallel_attn_mlp=True, max_position_embeddings=2048,
                             tie_word_embeddings=True, layer_norm=True),
    # A tiny Llama-shaped model for tests (not a real checkpoint): 2 layers, hidden 128, GQA 4/2.
    "tiny-llama": ModelArch(name="tiny-llama", num_layers=2, hidden_size=128, num_attention_heads=4,
                            num_kv_heads=2, head_dim=32, intermediate_size=256, vocab_size=32000,
                            gated_mlp=True, max_position_embeddings=4096, tie_word_embeddings=False),
}

_MODEL_ALIASES = {
    "mistral": "mistral-7b", "mistral-7b-v0.1": "mistral-7b", "mistralai/mistral-7b-v0.1": "mistral-7b",
    "yi": "yi-34b", "01-ai/yi-34b": "yi-34b",
    "llama-2-7b": "llama2-7b", "meta-llama/llama-2-7b-hf": "llama2-7b",
    "llama-2-70b": "llama2-70b", "meta-llama/llama-2-70b-hf": "llama2-70b",
    "codellama/codellama-34b-hf": "codellama-34b",
    "llama-3-8b": "llama3-8b", "meta-llama/meta-llama-3-8b": "llama3-8b",
    "llama-3-70b": "llama3-70b", "meta-llama/meta-llama-3-70b": "llama3-70b",
    "falcon": "falcon-180b", "tiiuae/falcon-180b": "falcon-180b",
    "tiny": "tiny-llama", "tiny-test": "tiny-llama",
}


def known_models() -> list[str]:
    return sorted(_MODELS)


def get_model(name: str | ModelArch) -> ModelArch:
    """A catalog model by name or alias ('yi-34b', 'Yi_34B', '01-ai/Yi-34B', ...)."""
    if isinstance(name, ModelArch):
        return name
    key = str(name).strip().lower().replace("_", "-")
    key = _MODEL_ALIASES.get(key, key)
    if key not in _MODELS:
        raise HarnessError(
            f"unknown model {name!r}; known: {', '.join(known_models())} "
            "(or build one with ModelArch.from_hf_config)"
        )
    return _MODELS[key]


def with_overrides(model: ModelArch, **changes: Any) -> ModelArch:
    """A copy with some fields changed (e.g. a longer max_position_embeddings)."""
    return replace(model, **changes)
