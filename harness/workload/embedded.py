"""Embedded default length distributions, by dataset name (used when `trace_file` is null).

Each entry is derived from real data or published statistics by scripts/derive_length_tables.py
and documented in its dataset card under data/cards/.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.errors import HarnessError

from .fitted import load_fit, sample_fit
from .joint_table import load_joint_table, sample_joint
from .paths import DATA_DIR


@dataclass(frozen=True)
class Embedded:
    kind: str  # "joint_table" (derived from a real trace) or "lognormal_fit" (fitted, approximate)
    file: str  # relative to data/
    origin: str  # one line for Workload.source


EMBEDDED: dict[str, Embedded] = {
    "openchat_sharegpt4": Embedded("joint_table", "lengths/openchat_sharegpt4_joint.csv", "joint length histogram "
                                   "derived from sharegpt_8k_filtered_stats_llama2_tokenizer.csv (sarathi-serve trace)"),
    "arxiv_summarization": Embedded("lognormal_fit", "lengths/arxiv_summarization_fit.yaml", "lognormal fit to the "
                                    "published 16K statistics (approximation; no real trace embedded)"),
}


def sample_embedded(name: str, n: int, rng: np.random.Generator, max_total_tokens: int | None):
    entry = EMBEDDED.get(name)
    if entry is None:
        raise HarnessError(f"dataset {name!r} has no embedded default; set dataset.trace_file "
                           f"(embedded: {', '.join(sorted(EMBEDDED))})")
    path = DATA_DIR / entry.file
    if not path.is_file():
        raise HarnessError(f"embedded length table for {name!r} is missing: data/{entry.file}")
    if entry.kind == "joint_table":
        p, o = sample_joint(load_joint_table(path), n, rng, max_total_tokens)
    else:
        p, o = sample_fit(load_fit(path), n, rng, max_total_tokens)
    return p, o, f"embedded data/{entry.file}: {entry.origin}"
