"""Filling a model's parameters: from a Hugging Face directory's safetensors files, or with
seeded random weights.

Random weights are defined per full (unsharded) checkpoint tensor, seeded by the tensor's name,
and go through the same sharding loaders as a checkpoint. So every TP/PP layout of the same
(config, seed) holds slices of the same logical model, which is what lets TP=2 be compared
with TP=1.
"""
from __future__ import annotations

import json
import math
import zlib
from collections.abc import Iterator
from pathlib import Path

import torch

from engines.models.base import DecoderModel


def safetensors_weights(directory: str | Path, names: set[str] | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) pairs of a model directory, reading only `names` when given."""
    from safetensors import safe_open  # optional dependency: only checkpoints need it

    directory = Path(directory)
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {directory}")
    index = directory / "model.safetensors.index.json"
    if index.exists():  # sharded checkpoint: open only the files holding wanted tensors
        mapping = json.loads(index.read_text())["weight_map"]
        wanted = {f for n, f in mapping.items() if names is None or n in names}
        files = [directory / f for f in sorted(wanted)]
    for path in files:
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                if names is None or name in names:
                    yield name, f.get_tensor(name)


def random_weights(model: DecoderModel, seed: int, device: torch.device | str = "cpu",
                   dtype: torch.dtype = torch.float32) -> Iterator[tuple[str, torch.Tensor]]:
    """Full tensors for this stage's checkpoint names, each from a generator seeded by
    (seed, name). Matrices ~ N(0, 1/fan_in) so activations keep unit scale through depth;
    the embedding ~ N(0, 1) gives logits of order one (clear argmax, no near-ties); norms are
    ones, biases small."""
    shapes = model.hf_shapes()
    for name in model.stage_tensor_names():
        shape = shapes[name]
        gen = torch.Generator(device=device)
        gen.manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) % (2**63))
        if name.endswith("norm.weight") or name.endswith("ln_f.weight") or ".ln_" in name and name.endswith(".weight"):
            t = torch.ones(shape, device=device, dtype=dtype)
        elif len(shape) == 1:
            t = 0.02 * torch.randn(shape, generator=gen, device=device, dtype=dtype)
        elif "embed" in name and not name.startswith("lm_head"):
            t = torch.randn(shape, generator=gen, device=device, dtype=dtype)
        else:
            t = torch.randn(shape, generator=gen, device=device, dtype=dtype) / math.sqrt(shape[1])
        yield name, t


def load_model_weights(model: DecoderModel, directory: str | Path | None, seed: int = 0) -> None:
    """Checkpoint tensors from `directory`, or random ones when it is None; checks that every
    parameter was set."""
    p = next(model.parameters())
    if directory is None:
        # Generate on the model's device (fast on a GPU), in fp32 when the model is fp32 and in
        # the model dtype otherwise (a 70B model would not fit twice).
        weights = random_weights(model, seed, device=p.device, dtype=p.dtype)
    else:
        weights = safetensors_weights(directory, set(model.stage_tensor_names()))
    model.check_loaded(model.load_weights(weights))
