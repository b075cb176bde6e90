"""The profile table: measured operator and iteration times of the torch executor on one device.
Torch-free, so the performance model (`perf=profile`) can read it anywhere.

CSV, one row per (op, phase, num_tokens, context_len, batch_size, tp), columns:

| column | meaning |
| --- | --- |
| op | `linear.qkv`, `linear.attn_out`, `linear.mlp_up`, `linear.mlp_down` (one layer's GEMM on one TP shard, no communication), `attention` (one layer: KV-cache write + paged attention), `elementwise` (one layer: norms, rotary, MLP activation, residual adds), `embedding` (token lookup, one shard), `lm_head` (final norm + LM head for `batch_size` rows, one shard), `iteration` (a whole executor step: input preparation, every layer, TP/PP communication, sampling) |
| phase | `prefill` (batch_size sequences, each a chunk of num_tokens / batch_size new tokens over context_len cached ones), `decode` (batch_size sequences, one new token each over context_len cached ones), `mixed` (one prefill chunk of num_tokens - batch_size + 1 ... see below), `any` for ops that only depend on the token count |
| num_tokens | new tokens in the batch (the GEMM M dimension) |
| context_len | tokens already in each sequence's KV cache before the step |
| batch_size | sequences in the batch |
| tp | tensor-parallel degree the shard shapes (and, for `iteration`, the run) belong to |
| time_s | median seconds over `repeats` timed runs (after warm-up) |
| time_s_min | fastest run |
| repeats | timed runs |
| layers | layers the time covers: 1 for per-layer ops, the model's layer count for `iteration` |
| model, device, dtype | what was measured |

A `mixed` iteration holds one prefill chunk over `context_len` cached tokens plus
`batch_size - 1` decodes at the same context length; `num_tokens` counts the chunk and the
decodes together (Sarathi-Serve's hybrid batch).
"""
from __future__ import annotations

import csv
from dataclasses import asdict, dataclass, fields
from pathlib import Path

COLUMNS = ("op", "phase", "num_tokens", "context_len", "batch_size", "tp", "time_s", "time_s_min", "repeats",
           "layers", "model", "device", "dtype")
OPS = ("linear.qkv", "linear.attn_out", "linear.mlp_up", "linear.mlp_down", "attention", "elementwise",
       "embedding", "lm_head", "iteration")
PHASES = ("prefill", "decode", "mixed", "any")


@dataclass(frozen=True)
class ProfileRow:
    op: str
    phase: str
    num_tokens: int
    context_len: int
    batch_size: int
    tp: int
    time_s: float
    time_s_min: float
    repeats: int
    layers: int
    model: str
    device: str
    dtype: str


def write_table(rows: list[ProfileRow], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow(asdict(r))
    return path


def read_table(path: str | Path) -> list[ProfileRow]:
    types = {f.name: f.type for f in fields(ProfileRow)}
    conv = {"int": int, "float": float, "str": str}
    with Path(path).open(newline="") as f:
        reader = csv.DictReader(f)
        missing = set(COLUMNS) - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path}: profile table lacks columns {sorted(missing)}")
        return [ProfileRow(**{k: conv[types[k]](row[k]) for k in COLUMNS}) for row in reader]
