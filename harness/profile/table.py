"""The profile tables the profiler writes. Torch-free.

1. The operator profile, `<out>.csv`, in the performance model's long format (version 1,
   engines/perf/profile_format.md is the authority; `perf=profile` reads it): one row per
   measurement, columns `op, num_tokens, context_len, batch_size, tp, time_s` (median seconds,
   one layer, one GPU = one TP rank's shard, no collectives), cells a given op does not use left
   empty, and provenance columns the reader ignores: `time_s_min, repeats, model, device, dtype`.
   What each op times: profile_format.md.

2. Whole iterations, `<out>.iterations.csv` (for checking the model's end-to-end predictions):
   `op` (always `iteration`), `phase`, `num_tokens`, `context_len`, `batch_size`, `tp`, `time_s`
   (median seconds of one executor step: input preparation, every layer of the model, TP/PP
   communication, LM head, sampling), `time_s_min`, `repeats`, `num_layers`, `model`, `device`,
   `dtype`. Phases: `prefill` (one chunk of num_tokens over context_len), `decode` (batch_size
   decodes at context_len each), `mixed` (one chunk plus batch_size - 1 decodes, all at
   context_len; num_tokens counts them all: Sarathi-Serve's hybrid batch).
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

OP_COLUMNS = ("op", "num_tokens", "context_len", "batch_size", "tp", "time_s", "time_s_min", "repeats", "model",
              "device", "dtype")
OPS = ("linear", "elementwise", "attention_prefill", "attention_decode")
ITERATION_COLUMNS = ("op", "phase", "num_tokens", "context_len", "batch_size", "tp", "time_s", "time_s_min",
                     "repeats", "num_layers", "model", "device", "dtype")
# Coordinates each op uses; the others stay empty.
_COORDS = ("num_tokens", "context_len", "batch_size")
_USES = {"linear": ("num_tokens",), "elementwise": ("num_tokens",),
         "attention_prefill": ("num_tokens", "context_len"), "attention_decode": ("batch_size", "context_len")}


@dataclass(frozen=True)
class Measurement:
    op: str  # an OPS name, or "iteration"
    num_tokens: int
    context_len: int
    batch_size: int
    tp: int
    time_s: float
    time_s_min: float
    repeats: int
    model: str
    device: str
    dtype: str
    phase: str = ""  # iterations only
    num_layers: int = 0  # iterations only


def write_tables(rows: list[Measurement], out: str | Path) -> tuple[Path, Path | None]:
    """Operator rows to `out`, iteration rows (if any) to `<out stem>.iterations.csv` beside it."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    ops = [r for r in rows if r.op != "iteration"]
    its = [r for r in rows if r.op == "iteration"]
    _write(out, OP_COLUMNS, [{c: "" if c in _COORDS and c not in _USES[r.op] else getattr(r, c) for c in OP_COLUMNS}
                             for r in ops])
    it_path = out.with_name(out.stem + ".iterations.csv") if its else None
    if its:
        _write(it_path, ITERATION_COLUMNS, [{c: getattr(r, c) for c in ITERATION_COLUMNS} for r in its])
    return out, it_path


def _write(path: Path, columns: tuple[str, ...], rows: list[dict]) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)

