"""What every decoder model shares: one pipeline stage's slice of the layers, the embedding on
the first stage, the final norm and LM head on the last, and checkpoint loading by Hugging Face
tensor names.

A model is called on a flat batch: `tokens` is [T] token ids (first stage) or [T, hidden]
activations (later stages), `positions` [T], and `attn` an attention context (the executor's)
with `attend(layer, q, k, v)`, which writes the new K/V into the paged cache and attends each
token to its sequence's context. Sequences are concatenated; no padding.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Protocol

import torch
from torch import nn

from engines.models.config import ModelConfig
from engines.models.layers.embedding import ParallelLMHead, VocabParallelEmbedding
from engines.models.parallel import get_parallel

_LAYER = re.compile(r"\.(\d+)\.")


class AttentionContext(Protocol):
    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q [T, Hq, D], k and v [T, Hk, D] (this rank's heads) -> [T, Hq, D]."""
        ...


class DecoderModel(nn.Module):
    """Subclasses set `self.embed`, `self.layers`, `self.norm`, `self.lm_head` through `_build`
    and define `_route(hf_name) -> [(param_name, shard_id, tensor_fn)]` and `hf_shapes()`."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        st = get_parallel()
        config.check_parallel(st.tp_size, st.pp_size)
        self.config = config
        self.first_stage, self.last_stage = st.is_first_stage, st.is_last_stage
        self.layer_start, self.layer_end = config.layer_range(st.pp_rank, st.pp_size)
        self.embed = VocabParallelEmbedding(config.vocab_size, config.hidden_size) if self.first_stage else None
        self.layers = nn.ModuleList(self._make_layer(i) for i in range(self.layer_start, self.layer_end))
        self.norm = self._make_final_norm() if self.last_stage else None
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size) if self.last_stage else None
        if self.lm_head is not None and self.embed is not None and config.tie_word_embeddings:
            self.lm_head.weight = self.embed.weight  # one tensor, as the checkpoint has

    def _make_layer(self, index: int) -> nn.Module:
        raise NotImplementedError

    def _make_final_norm(self) -> nn.Module:
        raise NotImplementedError

    @property
    def num_local_layers(self) -> int:
        return self.layer_end - self.layer_start

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attn: AttentionContext) -> torch.Tensor:
        x = self.embed(tokens) if self.first_stage else tokens
        for i, layer in enumerate(self.layers):
            x = layer(x, positions, attn, i)
        return self.norm(x) if self.last_stage else x

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Full-vocabulary logits for the given (already normalized) rows, on every TP rank."""
        return self.lm_head(hidden)

    # ------------------------------------------------------------------ weights
    def local_layer(self, hf_name: str) -> int | None:
        """The stage-local index of the layer a checkpoint tensor belongs to; None when the tensor
        is per-layer but the layer is on another stage; -1 for non-layer tensors."""
        m = _LAYER.search(hf_name)
        if m is None:
            return -1
        i = int(m.group(1))
        return i - self.layer_start if self.layer_start <= i < self.layer_end else None

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Copy this rank's slices of full checkpoint tensors (Hugging Face names); returns the
        names of the parameters that were set."""
        params = dict(self.named_parameters(remove_duplicate=False))
        loaded: set[str] = set()
        for hf_name, tensor in weights:
            for name, shard_id, fn in self._route(hf_name, tensor):
                if name not in params:
                    continue
                p = params[name]
                full = fn(tensor) if fn is not None else tensor
                full = full.to(device=p.device, dtype=p.dtype)
                loader = getattr(p, "weight_loader", None)
                if loader is None:
                    p.data.copy_(full)
                else:
                    loader(p, full, shard_id)
                loaded.add(name)
        return loaded

    def stage_tensor_names(self) -> list[str]:
        """Checkpoint tensors this stage reads: its layers' and the non-layer ones."""
        return [n for n in self.hf_shapes() if self.local_layer(n) is not None]

    def check_loaded(self, loaded: set[str]) -> None:
        missing = sorted(n for n, _ in self.named_parameters() if n not in loaded)
        if missing:
            raise ValueError(f"checkpoint lacks tensors for {len(missing)} parameters, e.g. {missing[:5]}")

    def _route(self, hf_name: str, tensor: torch.Tensor | None) -> list[tuple[str, object, object]]:
        raise NotImplementedError

    def hf_shapes(self) -> dict[str, tuple[int, ...]]:
        raise NotImplementedError

    def _common_route(self, hf_name: str, embed: str, final_norm: str) -> list[tuple[str, object, object]] | None:
        """Routes for the embedding, final norm and LM head; None when `hf_name` is none of them."""
        if hf_name == f"{embed}.weight":
            routes = [("embed.weight", None, None)]
            if self.config.tie_word_embeddings:
                routes.append(("lm_head.weight", None, None))  # a later stage's copy of the tied matrix
            return routes
        if hf_name == "lm_head.weight":
            # A tied checkpoint may keep only this name for the shared matrix.
            tied = [("embed.weight", None, None)] if self.config.tie_word_embeddings else []
            return [("lm_head.weight", None, None)] + tied
        if hf_name.startswith(final_norm + "."):
            return [("norm." + hf_name.rsplit(".", 1)[1], None, None)]
        return None
