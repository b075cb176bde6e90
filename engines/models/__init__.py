"""Torch model code for the in-repo engine: Llama-family and Falcon decoders with tensor- and
pipeline-parallel shards. `ModelConfig` (config.py) is torch-free; everything else needs torch.

    from engines.models import build_model
    model = build_model(config, dtype=torch.float16, device="cuda", weights_dir=None, seed=0)
"""
from __future__ import annotations

from engines.models.config import ModelConfig, resolve_model_config

__all__ = ["ModelConfig", "build_model", "resolve_model_config"]


def build_model(config: ModelConfig, dtype=None, device="cpu", weights_dir=None, seed: int = 0):
    """This rank's stage of the model (see engines.models.parallel), weights loaded."""
    import torch

    from engines.models.falcon import FalconForCausalLM
    from engines.models.llama import LlamaForCausalLM
    from engines.models.loader import load_model_weights

    cls = {"llama": LlamaForCausalLM, "falcon": FalconForCausalLM}[config.family]
    dtype = dtype or torch.float32
    # Build directly on the target device and dtype: a 7B model never materializes in host fp32.
    with torch.device(device):
        default = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            model = cls(config)
        finally:
            torch.set_default_dtype(default)
    load_model_weights(model, weights_dir, seed)
    return model.eval()
