"""Shared helpers for the torch tests (no tests here; named test_torch_* to stay inside the torch
test files, and skipped as a module when torch is absent)."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from engines.executors.base import SamplingParams  # noqa: E402
from engines.executors.torch.model_runner import ModelRunner  # noqa: E402
from engines.executors.torch.plan import StepItem, StepPlan  # noqa: E402
from engines.models import ModelConfig  # noqa: E402

BLOCK = 16

# Tiny models on a small, shared CPU: one thread avoids OpenMP spin-waiting against other
# processes (30x slower iterations under load, measured on a 2-core machine).
torch.set_num_threads(1)


def tiny_llama(**changes) -> ModelConfig:
    cfg = ModelConfig(family="llama", vocab_size=256, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                      head_dim=16, intermediate_size=128, max_position_embeddings=1024, name="tiny-llama-test")
    return cfg.with_changes(**changes)


def randomize_(model: torch.nn.Module, seed: int = 0) -> None:
    """Weights with unit-scale activations (HF's default init gives near-tied logits) and
    non-trivial norms, so a misrouted tensor cannot hide."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                base = 1.0 if "norm" in name or "ln" in name and name.endswith("weight") else 0.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=gen))
            elif "embed" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))


def prefill_logits(runner: ModelRunner, prompt: list[int], chunk: int, first_block: int = 0) -> torch.Tensor:
    """Logits at every prompt position, computing the prompt in chunks of `chunk` tokens through
    the paged cache (blocks first_block, first_block + 1, ...)."""
    table = tuple(range(first_block, first_block + -(-len(prompt) // BLOCK)))
    rows = []
    for start in range(0, len(prompt), chunk):
        ids = tuple(prompt[start:start + chunk])
        item = StepItem(0, ids, start, table, sample=False, sampling=SamplingParams())
        inputs = runner.prepare(StepPlan(0, (item,)))
        with torch.inference_mode():
            rows.append(runner.model.compute_logits(runner.forward(inputs)))
    return torch.cat(rows)
