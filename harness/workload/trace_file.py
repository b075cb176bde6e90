"""Reading request traces: CSV or JSONL with `num_prefill_tokens, num_decode_tokens[, arrived_at]`.

Every defect names the file, the data row (1-based, header excluded, plus the file line), the
column and the value, because a trace with one bad row out of 30k is otherwise unfindable.

Filtering (documented in the dataset cards):
  * rows with prompt + output > max_total_tokens are dropped and counted (the paper's filter);
  * rows with 0 prompt or 0 output tokens are dropped and counted: a request must produce at
    least one token (the first output token counts), and an empty prompt cannot be prefilled;
  * negative, fractional or non-numeric lengths are errors, never silently dropped.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from common.errors import HarnessError

from .paths import display_path, resolve_path

PROMPT, OUTPUT, ARRIVED = "num_prefill_tokens", "num_decode_tokens", "arrived_at"


@dataclass(frozen=True, eq=False)
class TraceRows:
    path: Path
    prompt_lens: np.ndarray  # int64, after filtering
    output_lens: np.ndarray  # int64, after filtering
    arrived_at: np.ndarray | None  # float64 seconds, aligned with the kept rows
    rows_read: int
    dropped_over_max: int
    dropped_empty: int

    def describe(self) -> str:
        return (f"trace {display_path(self.path)} ({self.rows_read} rows; {self.dropped_over_max} over max_total_tokens "
                f"dropped; {self.dropped_empty} with 0 prompt or output tokens dropped)")


def read_trace(path: str | Path, max_total_tokens: int | None, need_arrivals: bool = False) -> TraceRows:
    p = resolve_path(path)
    if not p.is_file():
        raise HarnessError(f"trace file not found: {path}")
    frame = read_frame(p)
    missing = [c for c in (PROMPT, OUTPUT) + ((ARRIVED,) if need_arrivals else ()) if c not in frame.columns]
    if missing:
        raise HarnessError(f"{p}: missing column(s) {', '.join(missing)} (has: {', '.join(map(str, frame.columns))})")
    if len(frame) == 0:
        raise HarnessError(f"{p}: no data rows")
    prompt = _int_column(p, frame, PROMPT)
    output = _int_column(p, frame, OUTPUT)
    arrived = _time_column(p, frame) if ARRIVED in frame.columns else None

    nonempty = (prompt >= 1) & (output >= 1)
    within = np.ones(len(prompt), bool) if max_total_tokens is None else prompt + output <= max_total_tokens
    keep = nonempty & within
    if not keep.any():
        raise HarnessError(f"{p}: all {len(prompt)} rows dropped ({int((~within).sum())} over max_total_tokens="
                           f"{max_total_tokens}, {int((~nonempty).sum())} with 0 prompt or output tokens)")
    return TraceRows(path=p, prompt_lens=prompt[keep], output_lens=output[keep],
                     arrived_at=None if arrived is None else arrived[keep], rows_read=len(prompt),
                     dropped_over_max=int((nonempty & ~within).sum()), dropped_empty=int((~nonempty).sum()))


def read_frame(p: Path) -> pd.DataFrame:
    """The trace file as a frame of strings (numbers are parsed by the caller, so that a bad cell
    is reported with its row: `where`)."""
    return _read_jsonl(p) if p.suffix in (".jsonl", ".ndjson") else read_csv(p, f"{PROMPT},{OUTPUT}")


def read_csv(p: Path, header: str, encoding: str = "utf-8") -> pd.DataFrame:
    """A CSV file as strings (traces and run files alike); empty or unreadable is one HarnessError
    naming the file (`header`: the columns it should have begun with)."""
    try:
        # Strings first: numeric parsing is ours, so a bad cell is reported with its row.
        return pd.read_csv(p, dtype=str, keep_default_na=False, skipinitialspace=True, encoding=encoding)
    except pd.errors.EmptyDataError:
        raise HarnessError(f"{p}: empty file (expected a header with {header})") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise HarnessError(f"{p}: not a readable CSV: {' '.join(str(e).split())}") from None


def jsonl_objects(p: Path):
    """(line number, object) of each non-blank line of a JSONL file; a line that is not a JSON
    object is one HarnessError naming the file and the line (traces and run files alike)."""
    with open(p, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise HarnessError(f"{p}: line {line_no}: invalid JSON ({e.msg})") from None
            if not isinstance(obj, dict):
                raise HarnessError(f"{p}: line {line_no}: expected a JSON object, got {type(obj).__name__}")
            yield line_no, obj


def _read_jsonl(p: Path) -> pd.DataFrame:
    records = [{k: ("" if v is None else str(v)) for k, v in obj.items()} for _, obj in jsonl_objects(p)]
    if not records:
        raise HarnessError(f"{p}: empty file (expected JSON objects with {PROMPT}, {OUTPUT})")
    frame = pd.DataFrame.from_records(records).fillna("")
    frame.attrs["jsonl"] = True
    return frame


def where(p: Path, frame: pd.DataFrame, i: int) -> str:
    """Data row i (0-based) of a frame read_frame gave, as an error names it."""
    # CSV: data row i+1 sits on line i+2, after the header.
    if frame.attrs.get("jsonl"):
        return f"{p}: record {i + 1}"
    return f"{p}: row {i + 1} (line {i + 2})"


def _int_column(p: Path, frame: pd.DataFrame, col: str) -> np.ndarray:
    raw = frame[col]
    num = pd.to_numeric(raw, errors="coerce").to_numpy(np.float64)
    bad = ~np.isfinite(num) | (num < 0) | (num != np.floor(num))
    if bad.any():
        i = int(np.argmax(bad))
        raise HarnessError(f"{where(p, frame, i)}: {col} = {raw.iloc[i]!r} is not a non-negative integer")
    return num.astype(np.int64)


def _time_column(p: Path, frame: pd.DataFrame) -> np.ndarray:
    raw = frame[ARRIVED]
    t = pd.to_numeric(raw, errors="coerce").to_numpy(np.float64)
    bad = ~np.isfinite(t) | (t < 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise HarnessError(f"{where(p, frame, i)}: {ARRIVED} = {raw.iloc[i]!r} is not a non-negative number of seconds")
    back = np.diff(t) < 0
    if back.any():
        i = int(np.argmax(back)) + 1
        raise HarnessError(f"{where(p, frame, i)}: {ARRIVED} = {raw.iloc[i]!r} goes back in time (previous {raw.iloc[i - 1]!r})")
    return t
