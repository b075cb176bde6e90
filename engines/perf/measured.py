"""Measured operator profiles: ProfilePerfModel(deployment, path), PerfModel with measured GPU times.
(The factory that picks analytical or measured from the config is engines.perf.factory.)

For users with a GPU: the per-layer `linear`, `attention` and `elementwise` costs come from a CSV
of measured operator times, interpolated; everything else stays analytical (PerfModel's
formulas): the TP all-reduces, the embedding and LM head, the logits all-gather, the pipeline
sends, the engine's CPU overhead, and the KV capacity. The batch structure is the analytical
model's: per pipeline stage, layers x (linear + attention + elementwise + TP communication)
+ the stage's extras (see model.py).

Two layouts are read (profile_format.md has the details):

* our long format, one CSV: `op, num_tokens, context_len, batch_size, tp, time_s` (median seconds
  per layer per GPU) with ops `linear`, `elementwise`, `attention_prefill`, `attention_decode`;
  written by `python -m harness.profile`.
* Vidur's public layout (microsoft/vidur data/profiling/compute/<gpu>/<model>/): a directory with
  `mlp.csv` (per-op medians in ms vs num_tokens) and `attention.csv` (prefill and decode attention
  medians in ms vs batch_size, prefill_chunk_size, kv_cache_size).

How a batch (items with n new tokens over c cached tokens) is priced, per layer:

* linear(T), elementwise(T): T = the batch's token count; piecewise-linear in T between the
  measured points. Tile-quantization steps are reproduced where the profile samples both sides
  of them (m x 128 and m x 128 + 1 tokens, or every token count).
* attention: items with n >= 2 are prefill chunks: n x p(n, c), where p is the measured prefill
  time per query token (time_s / num_tokens), interpolated in n and c. Items with n == 1 are
  decodes: D(b, c_i) / b each, where D(b, c) is the measured time of b decodes at context c and
  b is the number of decodes in the batch (so a batch of b decodes at one context costs exactly
  the measured D; mixed contexts cost the mean of the per-context times, which equals D at the
  mean context where D is linear in c). Per-token and per-batch times are the quantities that
  are (nearly) linear in both axes on a GPU, so bilinear interpolation is accurate between
  coarse grid points.
* Two-axis interpolation: each measured first-axis value (num_tokens for prefill, batch_size for
  decode) is a piecewise-linear curve in context_len; a query evaluates the two neighbouring
  curves at its context and interpolates linearly between them. Grids need not be complete
  (Vidur's prefill grid is a triangle, chunk + context <= max_model_len).
* Outside the measured range a curve is extended linearly along its outermost segment (on either
  axis); results are clamped at 0. Profile the range you simulate: extrapolation is a fallback.
* Per-item attention times are rounded down to whole units of 0.1 ps before they are summed
  (as in operators.attention_units), so a (k, B) call and k single-row calls agree bit for bit.
"""
from __future__ import annotations

import csv
import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from common.errors import HarnessError

from . import operators as ops
from .analytical import LINEAR_PARTS, PerfModel
from .architectures import ModelArch
from .curves import Curve, CurveFamily
from .deployment import Deployment

LONG_COLUMNS = ("op", "num_tokens", "context_len", "batch_size", "tp", "time_s")
LONG_OPS = ("linear", "elementwise", "attention_prefill", "attention_decode")

# Vidur mlp.csv: time_stats.<op>.median (milliseconds) for these ops.
VIDUR_LINEAR_OPS = {  # our LINEAR_PARTS name -> Vidur op
    "linear.qkv": "attn_pre_proj",
    "linear.attn_out": "attn_post_proj",
    "linear.mlp_up": "mlp_up_proj",
    "linear.mlp_down": "mlp_down_proj",
}
VIDUR_ELEMENTWISE_REQUIRED = ("attn_rope", "mlp_act")
VIDUR_ELEMENTWISE_OPTIONAL = ("input_layernorm", "post_attention_layernorm", "add")  # missing/empty -> 0 (as Vidur)
VIDUR_MLP_KEYS = ("num_tokens", "num_tensor_parallel_workers")
VIDUR_ATTENTION_KEYS = ("batch_size", "kv_cache_size", "prefill_chunk_size", "is_prefill", "num_tensor_parallel_workers")
# Vidur's model directories (data/profiling/compute/<gpu>/<org>/<name>) -> this catalog's names.
VIDUR_MODELS = {"meta-llama/Llama-2-7b-hf": "llama2-7b", "meta-llama/Llama-2-70b-hf": "llama2-70b",
                "meta-llama/Meta-Llama-3-8B": "llama3-8b", "meta-llama/Meta-Llama-3-70B": "llama3-70b",
                "codellama/CodeLlama-34b-Instruct-hf": "codellama-34b"}
VIDUR_PREFILL = "time_stats.attn_prefill.median"
VIDUR_DECODE = "time_stats.attn_decode.median"
VIDUR_KV_SAVE = "time_stats.attn_kv_cache_save.median"  # optional: KV-cache write, part of elementwise
_MS = 1e-3

@dataclass(frozen=True)
class OperatorProfile:
    """Measured per-layer operator times of one model on one GPU kind at one TP degree (seconds)."""

    source: str  # the file or directory read
    layout: str  # "long" or "vidur"
    tp: int
    linear: Curve  # all linear layers of one layer vs the batch's token count
    elementwise: tuple[Curve, ...]  # summed; vs the batch's token count
    prefill_per_token: CurveFamily  # prefill attention per query token vs (chunk tokens, context)
    decode_batch: CurveFamily  # attention of b decodes vs (b, context of each)
    linear_parts: Mapping[str, Curve] | None = None  # per-GEMM curves (Vidur), keyed by LINEAR_PARTS
    digest: str = field(default="", compare=False)  # sha256 of the file(s) read, for cache keys


def load_profile(path: str | Path, tp: int, model: ModelArch | None = None) -> OperatorProfile:
    """Read a profile: a directory in Vidur's layout (mlp.csv + attention.csv) or one CSV in the
    long format (profile_format.md). Rows for other TP degrees are ignored; Vidur rows for other
    model shapes too (when `model` is given and the file has the shape columns)."""
    p = Path(path).expanduser()
    if p.is_dir():
        mlp, attn = p / "mlp.csv", p / "attention.csv"
        for f in (mlp, attn):
            if not f.is_file():
                raise HarnessError(f"profile {p}: missing file {f.name} (a Vidur-layout profile directory "
                                   "holds mlp.csv and attention.csv)")
        return _read_vidur(p, mlp, attn, tp, model)
    if not p.is_file():
        raise HarnessError(f"profile {p}: no such file or directory")
    return _read_long(p, tp)


def _read_rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            header = [h.strip() for h in (reader.fieldnames or [])]
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise HarnessError(f"profile {path}: cannot read: {e}") from None
    if not header:
        raise HarnessError(f"profile {path}: empty file (no header)")
    rows = [{(k or "").strip(): (v or "").strip() if isinstance(v, str) else "" for k, v in r.items()} for r in rows]
    return header, rows


def _require_columns(path: Path, header: list[str], needed) -> None:
    missing = [c for c in needed if c not in header]
    if missing:
        raise HarnessError(f"profile {path}: missing column{'s' if len(missing) > 1 else ''} "
                           f"{', '.join(repr(c) for c in missing)} (has: {', '.join(header)})")


def _number(path: Path, line: int, row: Mapping[str, str], column: str, *, minimum: float | None = None,
            positive: bool = False, optional: bool = False) -> float:
    """A numeric cell; HarnessError naming the file, line and column when it is bad."""
    text = row.get(column, "")
    if text == "":
        if optional:
            return math.nan
        raise HarnessError(f"profile {path} line {line}: column {column!r} is empty")
    try:
        value = float(text)
    except ValueError:
        raise HarnessError(f"profile {path} line {line}: column {column!r} is not a number: {text!r}") from None
    if not math.isfinite(value):
        raise HarnessError(f"profile {path} line {line}: column {column!r} is not finite: {text!r}")
    if positive and value <= 0:
        raise HarnessError(f"profile {path} line {line}: column {column!r} must be > 0, got {text}")
    if minimum is not None and value < minimum:
        raise HarnessError(f"profile {path} line {line}: column {column!r} must be >= {minimum:g}, got {text}")
    return value


def _median_by_key(points: dict[tuple, list[float]]) -> tuple[np.ndarray, np.ndarray]:
    keys = sorted(points)
    return (np.array(keys, dtype=np.float64).reshape(len(keys), -1),
            np.array([float(np.median(points[k])) for k in keys]))


def _tp_rows(path: Path, rows: list[dict[str, str]], column: str, tp: int) -> list[tuple[int, dict[str, str]]]:
    """(line number, row) of the rows for TP degree `tp`; line 1 is the header."""
    out, seen = [], set()
    for i, r in enumerate(rows):
        t = _number(path, i + 2, r, column, positive=True)
        seen.add(t)
        if t == tp:
            out.append((i + 2, r))
    if not out:
        have = ", ".join(f"{t:g}" for t in sorted(seen)) or "none"
        raise HarnessError(f"profile {path}: no rows for tp={tp} (column {column!r} has: {have})")
    return out


def _digest(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def _read_long(path: Path, tp: int) -> OperatorProfile:
    header, rows = _read_rows(path)
    _require_columns(path, header, LONG_COLUMNS)
    pts: dict[str, dict[tuple, list[float]]] = {op: {} for op in LONG_OPS}
    for line, r in _tp_rows(path, rows, "tp", tp):
        op = r.get("op", "")
        if op not in pts:
            raise HarnessError(f"profile {path} line {line}: column 'op' is {op!r}; known: {', '.join(LONG_OPS)}")
        t = _number(path, line, r, "time_s", positive=True)
        if op in ("linear", "elementwise"):
            key = (_number(path, line, r, "num_tokens", minimum=1),)
        elif op == "attention_prefill":
            n = _number(path, line, r, "num_tokens", minimum=1)
            key = (n, _number(path, line, r, "context_len", minimum=0))
            t = t / n  # per query token
        else:
            key = (_number(path, line, r, "batch_size", minimum=1), _number(path, line, r, "context_len", minimum=0))
        pts[op].setdefault(key, []).append(t)
    for op in LONG_OPS:
        if not pts[op]:
            raise HarnessError(f"profile {path}: no {op!r} rows for tp={tp} (column 'op')")
    for op in ("linear", "elementwise"):
        if len(pts[op]) < 2:
            raise HarnessError(f"profile {path}: {op!r} needs at least 2 distinct num_tokens for tp={tp}")
    lin_k, lin_t = _median_by_key(pts["linear"])
    ew_k, ew_t = _median_by_key(pts["elementwise"])
    pf_k, pf_t = _median_by_key(pts["attention_prefill"])
    dc_k, dc_t = _median_by_key(pts["attention_decode"])
    return OperatorProfile(
        source=str(path), layout="long", tp=tp,
        linear=Curve(lin_k[:, 0], lin_t),
        elementwise=(Curve(ew_k[:, 0], ew_t),),
        prefill_per_token=CurveFamily(pf_k[:, 0], pf_k[:, 1], pf_t),
        decode_batch=CurveFamily(dc_k[:, 0], dc_k[:, 1], dc_t),
        digest=_digest(path),
    )


def _shape_filter(path: Path, rows: list[tuple[int, dict[str, str]]], header: list[str], model: ModelArch | None,
                  shape: Mapping[str, int]) -> list[tuple[int, dict[str, str]]]:
    """Vidur files may hold several models: keep the rows whose shape columns match `model`."""
    cols = [c for c in shape if c in header]
    if model is None or not cols:
        return rows

    def matches(r: Mapping[str, str]) -> bool:
        for c in cols:
            try:
                if float(r.get(c, "nan")) != shape[c]:
                    return False
            except ValueError:
                return False
        return True

    kept = [(line, r) for line, r in rows if matches(r)]
    if not kept:
        found = sorted({tuple(r.get(c, "") for c in cols) for _, r in rows})
        want = ", ".join(f"{c}={shape[c]}" for c in cols)
        have = "; ".join(", ".join(f"{c}={v}" for c, v in zip(cols, f)) for f in found[:5])
        raise HarnessError(f"profile {path}: no rows for {model.name}'s shape ({want}); the file has: {have}")
    return kept


def _is_true(path: Path, line: int, text: str) -> bool:
    t = text.strip().lower()
    if t in ("true", "1", "1.0", "yes"):
        return True
    if t in ("false", "0", "0.0", "no"):
        return False
    raise HarnessError(f"profile {path} line {line}: column 'is_prefill' is not a boolean: {text!r}")


def _read_vidur(directory: Path, mlp: Path, attn: Path, tp: int, model: ModelArch | None) -> OperatorProfile:
    # ---- mlp.csv: linear layers and elementwise ops vs num_tokens (ms)
    header, rows = _read_rows(mlp)
    med = {op: f"time_stats.{op}.median" for op in
           (*VIDUR_LINEAR_OPS.values(), *VIDUR_ELEMENTWISE_REQUIRED, *VIDUR_ELEMENTWISE_OPTIONAL)}
    _require_columns(mlp, header, (*VIDUR_MLP_KEYS, *(med[o] for o in (*VIDUR_LINEAR_OPS.values(), *VIDUR_ELEMENTWISE_REQUIRED))))
    selected = _tp_rows(mlp, rows, "num_tensor_parallel_workers", tp)
    if model is not None:
        selected = _shape_filter(mlp, selected, header, model, {
            "n_embd": model.hidden_size, "n_head": model.num_attention_heads, "n_kv_head": model.num_kv_heads,
            "n_expanded_embd": model.intermediate_size})
    parts: dict[str, dict[tuple, list[float]]] = {name: {} for name in VIDUR_LINEAR_OPS}
    ew: dict[tuple, list[float]] = {}
    for line, r in selected:
        key = (_number(mlp, line, r, "num_tokens", minimum=1),)
        for name, op in VIDUR_LINEAR_OPS.items():
            parts[name].setdefault(key, []).append(_number(mlp, line, r, med[op], positive=True) * _MS)
        t = sum(_number(mlp, line, r, med[op], positive=True) for op in VIDUR_ELEMENTWISE_REQUIRED)
        for op in VIDUR_ELEMENTWISE_OPTIONAL:
            if med[op] in header:
                v = _number(mlp, line, r, med[op], minimum=0, optional=True)
                t += 0.0 if math.isnan(v) else v
        ew.setdefault(key, []).append(t * _MS)
    if len(ew) < 2:
        raise HarnessError(f"profile {mlp}: needs at least 2 distinct num_tokens for tp={tp}")
    part_curves = {}
    for name in LINEAR_PARTS:
        k, t = _median_by_key(parts[name])
        part_curves[name] = Curve(k[:, 0], t)
    tokens = part_curves[LINEAR_PARTS[0]].x
    linear = Curve(tokens, sum(part_curves[name].y for name in LINEAR_PARTS))
    ew_k, ew_t = _median_by_key(ew)
    elementwise = [Curve(ew_k[:, 0], ew_t)]

    # ---- attention.csv: prefill (per query token) and decode (per batch) attention (ms)
    header, rows = _read_rows(attn)
    _require_columns(attn, header, VIDUR_ATTENTION_KEYS)
    selected = _tp_rows(attn, rows, "num_tensor_parallel_workers", tp)
    if model is not None:
        selected = _shape_filter(attn, selected, header, model, {
            "n_embd": model.hidden_size, "n_q_head": model.num_attention_heads, "n_kv_head": model.num_kv_heads})
    prefill: dict[tuple, list[float]] = {}
    decode: dict[tuple, list[float]] = {}
    kv_save: dict[tuple, list[float]] = {}
    has_kv_save = VIDUR_KV_SAVE in header
    for line, r in selected:
        b = _number(attn, line, r, "batch_size", minimum=1)
        c = _number(attn, line, r, "kv_cache_size", minimum=0)
        if _is_true(attn, line, r.get("is_prefill", "")):
            _require_columns(attn, header, (VIDUR_PREFILL,))
            n = _number(attn, line, r, "prefill_chunk_size", minimum=1)
            t = _number(attn, line, r, VIDUR_PREFILL, positive=True) * _MS
            prefill.setdefault((n, c), []).append(t / (n * b))
            tokens_saved = n * b
        else:
            _require_columns(attn, header, (VIDUR_DECODE,))
            t = _number(attn, line, r, VIDUR_DECODE, positive=True) * _MS
            decode.setdefault((b, c), []).append(t)
            tokens_saved = b
        if has_kv_save:
            v = _number(attn, line, r, VIDUR_KV_SAVE, minimum=0, optional=True)
            if not math.isnan(v):
                kv_save.setdefault((tokens_saved,), []).append(v * _MS)
    if not prefill:
        raise HarnessError(f"profile {attn}: no prefill rows (is_prefill True) for tp={tp}")
    if not decode:
        raise HarnessError(f"profile {attn}: no decode rows (is_prefill False) for tp={tp}")
    if len(kv_save) >= 2:
        k, t = _median_by_key(kv_save)
        elementwise.append(Curve(k[:, 0], t))
    pf_k, pf_t = _median_by_key(prefill)
    dc_k, dc_t = _median_by_key(decode)
    return OperatorProfile(
        source=str(directory), layout="vidur", tp=tp, linear=linear, elementwise=tuple(elementwise),
        prefill_per_token=CurveFamily(pf_k[:, 0], pf_k[:, 1], pf_t),
        decode_batch=CurveFamily(dc_k[:, 0], dc_k[:, 1], dc_t),
        linear_parts=part_curves, digest=_digest(mlp, attn),
    )


# ------------------------------------------------------------------ the model
class ProfilePerfModel(PerfModel):
    """PerfModel whose per-layer linear, attention and elementwise costs come from a measured
    profile (see the module docstring); communication, embedding, LM head, CPU overhead, sends
    and KV capacity stay analytical. Stateless after construction; thread-safe."""

    def __init__(self, deployment: Deployment, profile: str | Path | OperatorProfile) -> None:
        super().__init__(deployment)
        if not isinstance(profile, OperatorProfile):
            profile = load_profile(profile, deployment.tp, deployment.model)
        elif profile.tp != deployment.tp:
            raise HarnessError(f"profile {profile.source}: measured at tp={profile.tp}, deployment has tp={deployment.tp}")
        self.profile = profile

    def describe(self) -> str:
        return f"profile {self.profile.source} ({self.profile.layout}, tp={self.profile.tp})"

    def _components(self, n: np.ndarray, c: np.ndarray) -> dict[str, np.ndarray]:
        comp = super()._components(n, c)  # analytical; linear/attention/elementwise replaced below
        prof = self.profile
        tokens = comp["tokens"]
        has = tokens > 0
        linear = np.maximum(prof.linear(tokens), 0.0) * has
        if prof.linear_parts is not None:
            for name in LINEAR_PARTS:
                comp[name] = np.maximum(prof.linear_parts[name](tokens), 0.0) * has
            linear = comp[LINEAR_PARTS[0]] + comp[LINEAR_PARTS[1]] + comp[LINEAR_PARTS[2]] + comp[LINEAR_PARTS[3]]
        else:  # split the measured total in the analytical proportions (for breakdown)
            scale = np.divide(linear, comp["linear"], out=np.zeros_like(linear), where=comp["linear"] > 0)
            for name in LINEAR_PARTS:
                comp[name] = comp[name] * scale
        elementwise = np.zeros_like(tokens)
        for curve in prof.elementwise:
            elementwise += np.maximum(curve(tokens), 0.0)
        elementwise *= has
        attention = self._attention(n, c)
        comp["linear"] = linear
        comp["attention"] = attention
        comp["elementwise"] = elementwise
        comp["layer"] = linear + attention + elementwise + comp["tp_comm"]
        return comp

    def _attention(self, n: np.ndarray, c: np.ndarray) -> np.ndarray:
        """Per-row attention of one layer: prefill chunks (n >= 2) n * p(n, c); decodes (n == 1)
        D(b, c) / b with b the row's decode count; summed in whole TIME_QUANTUM_S units."""
        units = np.zeros(n.shape)
        prefill = n > 1
        decode = n == 1
        if prefill.any():
            pn, pc = n[prefill], c[prefill]
            t = np.maximum(self.profile.prefill_per_token(pn, pc), 0.0) * pn
            units[prefill] = np.floor(t / ops.TIME_QUANTUM_S)
        if decode.any():
            b = np.count_nonzero(decode, axis=-1).astype(np.float64)
            bd = np.broadcast_to(b[:, None], n.shape)[decode]
            t = np.maximum(self.profile.decode_batch(bd, c[decode]), 0.0) / bd
            units[decode] = np.floor(t / ops.TIME_QUANTUM_S)
        return units.sum(axis=-1) * ops.TIME_QUANTUM_S
