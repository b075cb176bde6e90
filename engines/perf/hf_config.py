"""Reading a Hugging Face config.json into a ModelArch (engines.perf.architectures): the one reader
of the spellings of every family the catalog knows (Llama, Mistral, Mixtral, Yi, Qwen2, Qwen3 and
Qwen3-MoE, Falcon/RefinedWeb), used by the performance model and the torch engine alike."""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from common.errors import HarnessError

from .architectures import FALCON_MODEL_TYPES, ModelArch


def _first(cfg: dict, keys: tuple[str, ...], source: str, default: Any = ...) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    if default is ...:
        raise HarnessError(f"{source}: none of the keys {', '.join(keys)} is present")
    return default


# Families whose MLP is gated (SwiGLU/GeGLU) whatever `hidden_act` says.
_GATED_FAMILIES = {"llama", "mistral", "mixtral", "yi", "qwen2", "qwen3", "qwen3_moe", "gemma", "gemma2", "internlm2",
                   "baichuan"}
_UNTIED_BY_DEFAULT = {"llama", "mistral", "mixtral", "yi", "qwen2", "qwen3", "qwen3_moe", "internlm2", "baichuan"}
# Qwen3 (transformers' modeling_qwen3.py, modeling_qwen3_moe.py): an RMSNorm over every query and
# key head (q_norm, k_norm) before rotary; its config.json has no flag for it.
_QK_NORM_FAMILIES = {"qwen3", "qwen3_moe"}
# MoE spellings: routed experts (Mixtral num_local_experts, Qwen num_experts, DeepSeek n_routed_experts),
# the router's top-k (num_experts_per_tok), one expert's width (Qwen moe_intermediate_size; Mixtral's
# intermediate_size is the expert's).
_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")


def read_hf_config(config: Mapping[str, Any] | str | Path, name: str | None = None) -> ModelArch:
    """ModelArch.from_hf_config: a dict, a config.json, or a directory holding one."""
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
        if cfg.get("kv_lora_rank"):
            raise HarnessError(f"{source}: multi-head latent attention (kv_lora_rank, DeepSeek-V2/V3) is not modelled")
        kv_heads = int(_first(cfg, ("num_key_value_heads", "num_kv_heads", "n_head_kv"), source, heads))
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    experts = top_k = 0
    if falcon:
        intermediate = int(cfg.get("ffn_hidden_size") or 4 * hidden)  # Falcon MLP is 4h wide
        gated = False
        parallel = bool(cfg.get("parallel_attn", True) or cfg.get("new_decoder_architecture"))
    else:
        intermediate = int(_first(cfg, ("intermediate_size", "ffn_hidden_size", "n_inner"), source, 4 * hidden))
        experts, top_k = _experts(cfg, source)
        if experts:
            intermediate = int(cfg.get("moe_intermediate_size") or intermediate)
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
        num_experts=experts,
        experts_per_token=top_k,
        qk_norm=model_type in _QK_NORM_FAMILIES,
    )


def _experts(cfg: dict, source: str) -> tuple[int, int]:
    """(routed experts, top-k) of an MoE config, (0, 0) for a dense one. Every layer must be an MoE
    layer of routed experts: dense layers among them and shared experts are refused, not guessed."""
    experts = int(_first(cfg, _EXPERT_KEYS, source, 0))
    if not experts:
        return 0, 0
    dense = [key for key in ("first_k_dense_replace", "mlp_only_layers") if cfg.get(key)]
    if int(cfg.get("decoder_sparse_step") or 1) != 1:
        dense.append("decoder_sparse_step")
    if dense:
        raise HarnessError(f"{source}: dense layers among the MoE layers ({', '.join(dense)}) are not modelled")
    if cfg.get("n_shared_experts") or cfg.get("shared_expert_intermediate_size"):
        raise HarnessError(f"{source}: shared experts (n_shared_experts, shared_expert_intermediate_size) are not modelled")
    return experts, int(_first(cfg, ("num_experts_per_tok", "moe_topk", "top_k"), source))
