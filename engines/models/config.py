"""What the torch model code needs to know about an architecture. Pure Python (no torch), so a
server can read a model directory's config.json before deciding to load torch at all.

Two families cover the paper's models:

* ``llama``: Llama-2, Mistral (sliding window), Yi, CodeLlama: RMSNorm, rotary, SwiGLU MLP,
  grouped-query attention, separate q/k/v/o projections.
* ``falcon``: LayerNorm, rotary, GELU MLP, a fused ``query_key_value`` projection whose layout
  depends on the generation (see ``falcon_qkv_layout``), attention and MLP in parallel.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from common.errors import HarnessError
from engines.perf.architectures import FALCON_MODEL_TYPES, ModelArch, get_model

FAMILIES = ("llama", "falcon")
_LLAMA_TYPES = {"llama", "mistral", "yi", "codellama"}


@dataclass(frozen=True)
class ModelConfig:
    family: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    max_position_embeddings: int = 4096
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    sliding_window: int | None = None  # a token sees itself and the window - 1 tokens before it
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # llama: q/k/v (and o) biases; falcon: every linear (config.bias)
    # Falcon only.
    parallel_attn: bool = False  # attention and MLP read the same normalized input, outputs summed
    num_ln_in_parallel_attn: int = 1  # 2: separate ln_attn / ln_mlp (40B/180B)
    falcon_qkv_layout: str = "grouped"  # grouped (new decoder arch) | mqa (7B) | interleaved (MHA)
    bos_token_id: int | None = 1
    eos_token_ids: tuple[int, ...] = (2,)
    name: str = "model"
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise HarnessError(f"model {self.name}: family {self.family!r} not in {FAMILIES}")
        if self.num_heads % self.num_kv_heads:
            raise HarnessError(f"model {self.name}: {self.num_heads} heads not a multiple of {self.num_kv_heads} KV heads")
        if self.family == "falcon" and self.falcon_qkv_layout not in ("grouped", "mqa", "interleaved"):
            raise HarnessError(f"model {self.name}: unknown falcon_qkv_layout {self.falcon_qkv_layout!r}")

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    def check_parallel(self, tp: int, pp: int) -> None:
        if tp < 1 or self.num_heads % tp:
            raise HarnessError(f"model {self.name}: tp={tp} must divide {self.num_heads} attention heads")
        if self.num_kv_heads % tp and tp % self.num_kv_heads:
            raise HarnessError(f"model {self.name}: tp={tp} and {self.num_kv_heads} KV heads must divide one another")
        if self.intermediate_size % tp:
            raise HarnessError(f"model {self.name}: tp={tp} must divide intermediate size {self.intermediate_size}")
        if pp < 1 or pp > self.num_layers:
            raise HarnessError(f"model {self.name}: pp={pp} must be in [1, {self.num_layers}]")

    def layer_range(self, pp_rank: int, pp: int) -> tuple[int, int]:
        """Layers [start, end) of one pipeline stage; earlier stages take the remainder (as the
        performance model's ModelArch.layers_per_stage does)."""
        base, extra = divmod(self.num_layers, pp)
        start = pp_rank * base + min(pp_rank, extra)
        return start, start + base + (1 if pp_rank < extra else 0)

    def with_changes(self, **changes: Any) -> ModelConfig:
        return replace(self, **changes)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_pretrained(cls, path: str | Path) -> ModelConfig:
        """From a Hugging Face model directory (or its config.json)."""
        p = Path(path)
        if p.is_dir():
            p = p / "config.json"
        try:
            cfg = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise HarnessError(f"cannot read model config {p}: {exc}") from exc
        return cls.from_hf_dict(cfg, name=str(p.parent))

    @classmethod
    def from_hf_dict(cls, cfg: Mapping[str, Any], name: str | None = None) -> ModelConfig:
        """Shapes come from the performance model's parser (engines.perf.architectures: the one reader
        of Hugging Face spellings); this adds what only the torch code needs (rotary base, norm
        epsilon, Falcon's fused-QKV layout, special tokens) and refuses what it cannot run."""
        cfg = dict(cfg)
        mtype = str(cfg.get("model_type", "")).lower()
        name = name or str(cfg.get("_name_or_path") or mtype or "model")
        rope = cfg.get("rope_parameters") or {}
        scaling = cfg.get("rope_scaling") or {}
        rope_type = rope.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
        if rope_type != "default":
            raise HarnessError(f"model {name}: rope type {rope_type!r} is not supported (only plain rotary)")
        eos = cfg.get("eos_token_id", 2)
        torch_only: dict[str, Any] = dict(
            rope_theta=float(cfg.get("rope_theta") or rope.get("rope_theta") or 10000.0),
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=tuple(int(e) for e in (eos if isinstance(eos, list) else [eos])) if eos is not None else (),
            name=name,
            extra=cfg,
        )
        if mtype in FALCON_MODEL_TYPES:
            if cfg.get("alibi"):
                raise HarnessError(f"model {name}: Falcon with ALiBi (falcon-rw) is not supported")
            new_arch = bool(cfg.get("new_decoder_architecture"))
            layout = "grouped" if new_arch else "mqa" if cfg.get("multi_query", True) else "interleaved"
            torch_only.update(
                falcon_qkv_layout=layout,
                num_ln_in_parallel_attn=int(cfg.get("num_ln_in_parallel_attn") or (2 if new_arch else 1)),
                norm_eps=float(cfg.get("layer_norm_epsilon", 1e-5)),
                max_position_embeddings=int(cfg.get("max_position_embeddings") or 2048),
            )
        else:
            if mtype not in _LLAMA_TYPES and mtype:
                raise HarnessError(f"model {name}: model_type {mtype!r} not supported (llama, mistral, yi, falcon)")
            if cfg.get("hidden_act", "silu") != "silu" or cfg.get("mlp_bias"):
                raise HarnessError(f"model {name}: only SiLU-gated MLPs without bias are supported")
            torch_only.update(norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
                              max_position_embeddings=int(cfg.get("max_position_embeddings", 4096)))
        return cls.from_arch(ModelArch.from_hf_config(cfg, name=name)).with_changes(**torch_only)

    @classmethod
    def from_arch(cls, arch: ModelArch) -> ModelConfig:
        """From the performance model's catalog entry (engines.perf.architectures.ModelArch): the same
        shapes, so a random-weight model costs on a GPU what the real one would."""
        if arch.is_moe:
            raise HarnessError(f"model {arch.name}: mixture-of-experts models are priced by the performance "
                               "model only; the torch engine runs dense decoders")
        falcon = not arch.gated_mlp
        return cls(
            family="falcon" if falcon else "llama",
            vocab_size=arch.vocab_size,
            hidden_size=arch.hidden_size,
            num_layers=arch.num_layers,
            num_heads=arch.num_attention_heads,
            num_kv_heads=arch.num_kv_heads,
            head_dim=arch.head_dim,
            intermediate_size=arch.intermediate_size,
            max_position_embeddings=arch.max_position_embeddings,
            sliding_window=arch.sliding_window,
            tie_word_embeddings=arch.tie_word_embeddings,
            attention_bias=arch.qkv_bias,
            parallel_attn=arch.parallel_attn_mlp,
            num_ln_in_parallel_attn=arch.norms_per_layer if falcon else 1,
            falcon_qkv_layout="grouped",
            norm_eps=1e-5,
            name=arch.name,
        )


def resolve_model_config(model: str | Path | ModelConfig) -> tuple[ModelConfig, Path | None]:
    """A ModelConfig and, when `model` is a directory holding safetensors, that directory.

    Accepts a ModelConfig, a Hugging Face model directory, or a name from the performance
    model's catalog (``mistral-7b``, ``yi-34b``, ``llama2-70b``, ``falcon-180b``, ``tiny-llama``),
    which gives random weights of that shape.
    """
    if isinstance(model, ModelConfig):
        return model, None
    path = Path(model)
    if path.is_dir() or path.name == "config.json":
        cfg = ModelConfig.from_pretrained(path)
        directory = path if path.is_dir() else path.parent
        has_weights = any(directory.glob("*.safetensors"))
        return cfg, directory if has_weights else None
    return ModelConfig.from_arch(get_model(str(model))), None
