"""A fitted parametric length distribution (used where no real trace is available).

File format (YAML, written by scripts/derive_length_tables.py): `kind: lognormal_independent`,
`prompt: {mu, sigma}`, `output: {mu, sigma}` of the natural-log lengths. Lengths are rounded to
integers (minimum 1) and whole draws over max_total_tokens are rejected, which is how the fit was
computed, so the filtered medians/P90s match the published ones.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from common.errors import HarnessError


@dataclass(frozen=True)
class LognormalFit:
    path: Path
    prompt_mu: float
    prompt_sigma: float
    output_mu: float
    output_sigma: float


@functools.lru_cache(maxsize=8)
def load_fit(path: Path) -> LognormalFit:
    with open(path, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    if not isinstance(doc, dict) or doc.get("kind") != "lognormal_independent":
        raise HarnessError(f"{path}: expected kind: lognormal_independent")
    try:
        vals = [float(doc[a][b]) for a in ("prompt", "output") for b in ("mu", "sigma")]
    except (KeyError, TypeError, ValueError):
        raise HarnessError(f"{path}: needs prompt.mu, prompt.sigma, output.mu, output.sigma") from None
    if not all(math.isfinite(v) for v in vals) or vals[1] <= 0 or vals[3] <= 0:
        raise HarnessError(f"{path}: parameters must be finite with sigma > 0, got {vals}")
    return LognormalFit(path, *vals)


def sample_fit(fit: LognormalFit, n: int, rng: np.random.Generator, max_total_tokens: int | None):
    prompts, outputs, have = [], [], 0
    for _ in range(1000):
        m = max(64, int((n - have) * 1.2))
        p = np.maximum(1, np.round(np.exp(fit.prompt_mu + fit.prompt_sigma * rng.standard_normal(m)))).astype(np.int64)
        o = np.maximum(1, np.round(np.exp(fit.output_mu + fit.output_sigma * rng.standard_normal(m)))).astype(np.int64)
        if max_total_tokens is not None:
            ok = p + o <= max_total_tokens
            p, o = p[ok], o[ok]
        prompts.append(p)
        outputs.append(o)
        have += p.size
        if have >= n:
            return np.concatenate(prompts)[:n], np.concatenate(outputs)[:n]
    raise HarnessError(f"max_total_tokens={max_total_tokens} admits too few draws from {fit.path.name}")
