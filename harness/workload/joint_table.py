"""The embedded joint (prompt, output) length histogram and its sampler.

File format (written by scripts/derive_length_tables.py): `# key: value` provenance lines, then
CSV `prompt_lo,prompt_hi,output_lo,output_hi,count`, one row per nonzero cell, each cell the
half-open integer box [prompt_lo, prompt_hi) x [output_lo, output_hi).

Sampling picks a cell with probability proportional to its count, then a point uniformly inside
the cell. Keeping cells (not two marginals) keeps the dependence between prompt and output.

The total-length filter. The source trace was already filtered at `source_max_total_tokens`
(8192 for sharegpt), so the true mass of every cell lies below that line: a cell that straddles it
keeps its full count and draws only its admissible points (prompt + output <= limit). A tighter
`max_total_tokens` (say 4096) is applied the same way, with each straddling cell's count scaled by
the share of its points that stay admissible, i.e. the table's distribution conditioned on the
filter, as dropping rows from the trace would do. A looser limit cannot add mass the source never
had, so limits above the source's act as the source's.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from common.errors import HarnessError

COLUMNS = ["prompt_lo", "prompt_hi", "output_lo", "output_hi", "count"]


@dataclass(frozen=True, eq=False)
class JointTable:
    path: Path
    provenance: dict[str, str]
    source_max_total: int | None
    prompt_lo: np.ndarray
    prompt_hi: np.ndarray
    output_lo: np.ndarray
    output_hi: np.ndarray
    count: np.ndarray


@functools.lru_cache(maxsize=8)
def load_joint_table(path: Path) -> JointTable:
    provenance: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("#"):
                break
            key, sep, value = line[1:].strip().partition(":")
            if sep:
                provenance[key.strip()] = value.strip()
    df = pd.read_csv(path, comment="#")
    if list(df.columns) != COLUMNS:
        raise HarnessError(f"{path}: expected columns {','.join(COLUMNS)}, got {','.join(df.columns)}")
    a = {c: df[c].to_numpy(np.int64) for c in COLUMNS}
    if (a["prompt_lo"] < 1).any() or (a["output_lo"] < 1).any() or (a["prompt_hi"] <= a["prompt_lo"]).any() \
            or (a["output_hi"] <= a["output_lo"]).any() or (a["count"] <= 0).any():
        raise HarnessError(f"{path}: malformed cells (need 1 <= lo < hi and count > 0)")
    smt = provenance.get("source_max_total_tokens")
    return JointTable(path=path, provenance=provenance, source_max_total=int(smt) if smt else None, **a)


def _outputs_allowed(t: JointTable, k: int, limit: int) -> np.ndarray:
    """For cell k: how many output values each prompt value in the cell may take under `limit`."""
    p = np.arange(t.prompt_lo[k], t.prompt_hi[k])
    return np.clip(limit - p - t.output_lo[k] + 1, 0, t.output_hi[k] - t.output_lo[k])


def _admissible_points(t: JointTable, limit: int | None) -> np.ndarray:
    """Number of integer points of each cell with prompt + output <= limit."""
    full = (t.prompt_hi - t.prompt_lo) * (t.output_hi - t.output_lo)
    if limit is None:
        return full.astype(np.float64)
    pts = np.where(t.prompt_hi - 1 + t.output_hi - 1 <= limit, full, 0).astype(np.float64)
    for k in np.nonzero((t.prompt_lo + t.output_lo <= limit) & (pts == 0))[0]:  # straddling cells
        pts[k] = _outputs_allowed(t, k, limit).sum()
    return pts


def sample_joint(table: JointTable, n: int, rng: np.random.Generator, max_total_tokens: int | None):
    """n (prompt, output) draws from `table`, conditioned on prompt + output <= max_total_tokens."""
    limits = [x for x in (max_total_tokens, table.source_max_total) if x is not None]
    limit = min(limits) if limits else None  # a looser limit than the source's acts as the source's
    kept = _admissible_points(table, limit)
    base = _admissible_points(table, table.source_max_total)
    weights = np.where(base > 0, table.count * kept / np.where(base > 0, base, 1), 0.0)
    if weights.sum() == 0:
        raise HarnessError(f"max_total_tokens={max_total_tokens} excludes every cell of {table.path.name}")
    cell = rng.choice(weights.size, size=n, p=weights / weights.sum())
    u_p, u_o = rng.random(n), rng.random(n)

    p_lo, p_w = table.prompt_lo[cell], table.prompt_hi[cell] - table.prompt_lo[cell]
    o_lo, o_w = table.output_lo[cell], table.output_hi[cell] - table.output_lo[cell]
    prompt = p_lo + np.floor(u_p * p_w).astype(np.int64)
    output = o_lo + np.floor(u_o * o_w).astype(np.int64)
    if limit is not None:
        # Straddling cells: draw the prompt with weight = its admissible outputs, then the output
        # uniformly among those, which is uniform over the cell's admissible points.
        full = table.prompt_hi - 1 + table.output_hi - 1 <= limit
        for k in np.unique(cell[~full[cell]]):
            at = np.nonzero(cell == k)[0]
            allowed = _outputs_allowed(table, k, limit)
            cdf = np.cumsum(allowed) / allowed.sum()
            j = np.minimum(np.searchsorted(cdf, u_p[at], side="right"), allowed.size - 1)
            prompt[at] = table.prompt_lo[k] + j
            output[at] = table.output_lo[k] + np.floor(u_o[at] * allowed[j]).astype(np.int64)
    return prompt, output
