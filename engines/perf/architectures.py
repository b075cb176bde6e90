"""Model architecture catalog: decoder-only transformers, dense or mixture-of-experts, with exact
size arithmetic.

Every catalog entry is transcribed from the model's public Hugging Face config.json (repo id in
the comment), and `ModelArch.from_hf_config` reads such a file directly, so a new decoder of a
known family needs no code. An MoE model here has every layer an MoE layer of `num_experts`
routed experts (each a gated MLP `intermediate_size` wide), `experts_per_token` of them per token,
chosen by a linear router (hidden x experts); no shared experts, no dense layers among them
(configs that have those are refused by the reader).
"""
from __future__ import annotations

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
    intermediate_size: int  # the MLP's width; an MoE model's: one expert's
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
    num_experts: int = 0  # routed experts of every layer (0: a dense model)
    experts_per_token: int = 0  # the router's top-k
    qk_norm: bool = False  # Qwen3: an RMSNorm (head_dim weights) over each query and key head

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
        if not (0 < self.experts_per_token <= self.num_experts or self.experts_per_token == self.num_experts == 0):
            raise HarnessError(f"model {self.name}: experts_per_token {self.experts_per_token} must be in "
                               f"[1, num_experts={self.num_experts}] (both 0 for a dense model)")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

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

    def expert_params(self) -> int:
        """One MLP: the dense model's, or one expert of an MoE model."""
        return self.hidden_size * self.mlp_in_width + self.intermediate_size * self.hidden_size

    @property
    def router_params(self) -> int:
        return self.hidden_size * self.num_experts  # 0 for a dense model

    def mlp_params_per_layer(self) -> int:
        """The MLP, or the MoE block: router + every expert."""
        return self.router_params + max(1, self.num_experts) * self.expert_params()

    def norm_params(self) -> int:
        return (2 if self.layer_norm else 1) * self.hidden_size

    def layer_norm_params(self) -> int:
        """Every norm weight of a layer (with Qwen3's query and key norms)."""
        return self.norms_per_layer * self.norm_params() + (2 * self.head_dim if self.qk_norm else 0)

    def params_per_layer(self) -> int:
        return self.attention_params_per_layer() + self.mlp_params_per_layer() + self.layer_norm_params()

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def num_params(self) -> int:
        """Exact parameter count (embeddings counted once when tied)."""
        lm_head = 0 if self.tie_word_embeddings else self.embedding_params
        return self.num_layers * self.params_per_layer() + self.embedding_params + lm_head + self.norm_params()

    @property
    def active_params(self) -> int:
        """Parameters one token uses: every expert it is not routed to left out."""
        return self.num_params - self.num_layers * (self.num_experts - self.experts_per_token) * self.expert_params()

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
        if self.is_moe and self.intermediate_size % tp:  # every rank holds a 1/tp slice of every expert
            raise HarnessError(f"model {self.name}: tp={tp} must divide the experts' intermediate_size "
                               f"{self.intermediate_size}")

    def kv_bytes_per_token_per_gpu(self, tp: int = 1, pp: int = 1) -> int:
        """KV bytes one token costs on the GPU of the stage holding the most layers."""
        layers = max(self.layers_per_stage(pp))
        return layers * 2 * self.kv_heads_per_gpu(tp) * self.head_dim * self.bytes_per_param

    def stage_weight_params_per_gpu(self, tp: int, pp: int) -> list[int]:
        """Parameters one GPU of each stage holds. Linear layers and embeddings are split over TP
        (vocab-parallel embedding/LM head; every expert's matrices, as vLLM's FusedMoE shards them);
        norms and an MoE router are replicated; replicated KV heads count fully. The first stage
        holds the embedding, the last the LM head (a copy when tied and pp > 1)."""
        return [linear + other for linear, other in self._stage_params_per_gpu(tp, pp)]

    def stage_weight_bytes_per_gpu(self, tp: int, pp: int, linear_bytes: int | None = None,
                                   expert_shards: int | None = None) -> list[int]:
        """Weight bytes one GPU of each stage holds, the linear layers' parameters (QKV, attention
        output, MLP or experts) at `linear_bytes` each (FP8: 1; default: bytes_per_param), the rest
        (embeddings, LM head, norms, router, biases) at bytes_per_param. `expert_shards`: the GPUs
        the experts are spread over (expert parallelism: dp x tp, each GPU whole experts); None: tp."""
        lb = self.bytes_per_param if linear_bytes is None else linear_bytes
        return [linear * lb + other * self.bytes_per_param
                for linear, other in self._stage_params_per_gpu(tp, pp, expert_shards)]

    def _stage_params_per_gpu(self, tp: int, pp: int, expert_shards: int | None = None) -> list[tuple[int, int]]:
        """(linear-layer parameters, the rest) one GPU of each stage holds."""
        h = self.hidden_size
        kvh = self.kv_heads_per_gpu(tp) * self.head_dim
        qkv_out = self.q_size // tp + 2 * kvh
        linear = h * qkv_out + (self.q_size // tp) * h
        linear += max(1, self.num_experts) * self.expert_params() // (expert_shards or tp)
        other = (qkv_out if self.qkv_bias else 0) + self.router_params + self.layer_norm_params()
        emb = math.ceil(self.vocab_size / tp) * h
        stages = []
        for s, n_layers in enumerate(self.layers_per_stage(pp)):
            rest = n_layers * other
            if s == 0:
                rest += emb
            if s == pp - 1:
                rest += self.norm_params()
                if not (self.tie_word_embeddings and pp == 1):
                    rest += emb
            stages.append((n_layers * linear, rest))
        return stages

    def weight_bytes_per_gpu(self, tp: int = 1, pp: int = 1) -> int:
        """Weight bytes on the most loaded GPU."""
        return max(self.stage_weight_params_per_gpu(tp, pp)) * self.bytes_per_param

    # ------------------------------------------------------------ loading
    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any] | str | Path, name: str | None = None) -> ModelArch:
        """Build from a Hugging Face config.json (a dict, a file, or a directory holding one).

        Understands the Llama/Mistral/Yi/Qwen2/Qwen3 spellings, Mixtral's and Qwen3-MoE's experts,
        and Falcon's (n_head, n_layer, n_head_kv / num_kv_heads, multi_query,
        new_decoder_architecture, parallel_attn): engines/perf/hf_config.py.
        """
        from .hf_config import read_hf_config

        return read_hf_config(config, name)


FALCON_MODEL_TYPES = {"falcon", "refinedweb", "refinedwebmodel"}  # HF model_type spellings of Falcon


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
    # LLaMA-1 (Touvron et al., "LLaMA: Open and Efficient Foundation Language Models", arXiv 2302.13971,
    # Table 2: dimension, heads, layers; vocabulary 32000 and context 2048 in Sec. 2), the first
    # Sarathi paper's models. MLP widths from the released configs (huggyllama/llama-13b and
    # huggyllama/llama-30b config.json: intermediate_size 13824 and 17920, i.e. 2/3 x 4d rounded up
    # to a multiple of 256, Sec. 2.4 of the LLaMA paper), MHA, RMSNorm, untied embeddings.
    # 13,015,864,320 and 32,528,943,616 parameters ("13B" and "33B" in Table 2).
    "llama-13b": _llama("llama-13b", 40, 5120, 40, 40, 13824, 32000, 2048),
    "llama-33b": _llama("llama-33b", 60, 6656, 52, 52, 17920, 32000, 2048),
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
    # facebook/opt-13b config.json: hidden_size 5120, num_hidden_layers 40, num_attention_heads 40 (MHA,
    # head dim 128), ffn_dim 20480, activation relu (not gated), vocab_size 50272, max_position_embeddings
    # 2048, do_layer_norm_before true (two LayerNorms per layer), enable_bias true, embeddings tied
    # (OPTForCausalLM ties lm_head). DistServe's (OSDI'24) chatbot model. Not modelled: the learned
    # position table (2050 x 5120) and the out/MLP biases, 10.6M of 12.85B parameters (0.08 %).
    "opt-13b": ModelArch(name="opt-13b", num_layers=40, hidden_size=5120, num_attention_heads=40, num_kv_heads=40,
                         head_dim=128, intermediate_size=20480, vocab_size=50272, gated_mlp=False,
                         max_position_embeddings=2048, tie_word_embeddings=True, layer_norm=True, qkv_bias=True),
    # GPT-3 175B (Brown et al., "Language Models are Few-Shot Learners", arXiv 2005.14165, Table 2.1:
    # n_layers 96, d_model 12288, n_heads 96, d_head 128, context 2048; Sec. 2.1: GPT-2's architecture,
    # d_ff = 4 d_model, the GPT-2 BPE vocabulary of 50257 tokens): GELU MLP (not gated), LayerNorm,
    # biases, tied embeddings. The first Sarathi paper's pipeline-parallel study (Sec. 5.4). Not
    # modelled, as for OPT-13B: the learned position table (2048 x 12288) and the out/MLP biases
    # (0.3 % of the 174.6B parameters priced).
    "gpt3-175b": ModelArch(name="gpt3-175b", num_layers=96, hidden_size=12288, num_attention_heads=96, num_kv_heads=96,
                           head_dim=128, intermediate_size=4 * 12288, vocab_size=50257, gated_mlp=False,
                           max_position_embeddings=2048, tie_word_embeddings=True, layer_norm=True, qkv_bias=True),
    # mistralai/Mixtral-8x7B-v0.1 config.json: hidden_size 4096, 32 layers, 32 heads, 8 KV heads,
    # intermediate_size 14336 (each expert's), num_local_experts 8, num_experts_per_tok 2, vocab 32000,
    # max_position_embeddings 32768, no sliding window (MixtralConfig default None), untied.
    # 46,702,792,704 parameters ("46.7B total, 12.9B active", the model card / Mixtral paper).
    "mixtral-8x7b": replace(_llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 32768),
                            num_experts=8, experts_per_token=2),
    # Qwen/Qwen3-32B config.json: hidden_size 5120, 64 layers, 64 heads, 8 KV heads, head_dim 128,
    # intermediate_size 25600, vocab 151936, max_position_embeddings 40960, tie_word_embeddings false,
    # attention_bias false; q_norm/k_norm (Qwen3). 32,762,123,264 parameters (model card: 32.8B,
    # 31.2B non-embedding). AIConfigurator's QWEN3_32B (data/paper/aiconfigurator_2025.yaml).
    "qwen3-32b": ModelArch(name="qwen3-32b", num_layers=64, hidden_size=5120, num_attention_heads=64,
                           num_kv_heads=8, head_dim=128, intermediate_size=25600, vocab_size=151936,
                           max_position_embeddings=40960, qk_norm=True),
    # Qwen/Qwen3-30B-A3B config.json: hidden_size 2048, 48 layers, 32 heads, 4 KV heads, head_dim 128,
    # moe_intermediate_size 768, num_experts 128, num_experts_per_tok 8, decoder_sparse_step 1,
    # mlp_only_layers [] (every layer MoE, no shared expert), vocab 151936, max_position_embeddings 40960,
    # tie_word_embeddings false; q_norm/k_norm (Qwen3). 30,532,122,624 parameters (model card: 30.5B, 3.3B active).
    "qwen3-30b-a3b": ModelArch(name="qwen3-30b-a3b", num_layers=48, hidden_size=2048, num_attention_heads=32,
                               num_kv_heads=4, head_dim=128, intermediate_size=768, vocab_size=151936,
                               max_position_embeddings=40960, num_experts=128, experts_per_token=8, qk_norm=True),
    # Qwen/Qwen3-235B-A22B config.json: hidden_size 4096, 94 layers, 64 heads, 4 KV heads, head_dim 128,
    # moe_intermediate_size 1536, num_experts 128, num_experts_per_tok 8, decoder_sparse_step 1,
    # mlp_only_layers [], vocab 151936, max_position_embeddings 40960, untied; q_norm/k_norm.
    # 235,093,634,560 parameters (model card: 235B, 22B active).
    "qwen3-235b-a22b": ModelArch(name="qwen3-235b-a22b", num_layers=94, hidden_size=4096, num_attention_heads=64,
                                 num_kv_heads=4, head_dim=128, intermediate_size=1536, vocab_size=151936,
                                 max_position_embeddings=40960, num_experts=128, experts_per_token=8, qk_norm=True),
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
    "llama-1-13b": "llama-13b", "huggyllama/llama-13b": "llama-13b",
    "llama-30b": "llama-33b", "llama-1-33b": "llama-33b", "huggyllama/llama-30b": "llama-33b",
    "gpt3": "gpt3-175b", "gpt-3": "gpt3-175b", "gpt-3-175b": "gpt3-175b",
    "codellama/codellama-34b-hf": "codellama-34b",
    "llama-3-8b": "llama3-8b", "meta-llama/meta-llama-3-8b": "llama3-8b",
    "llama-3-70b": "llama3-70b", "meta-llama/meta-llama-3-70b": "llama3-70b",
    "falcon": "falcon-180b", "tiiuae/falcon-180b": "falcon-180b",
    "opt": "opt-13b", "facebook/opt-13b": "opt-13b",
    "mixtral": "mixtral-8x7b", "mistralai/mixtral-8x7b-v0.1": "mixtral-8x7b",
    "qwen/qwen3-32b": "qwen3-32b",
    "qwen/qwen3-30b-a3b": "qwen3-30b-a3b", "qwen/qwen3-235b-a22b": "qwen3-235b-a22b",
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
