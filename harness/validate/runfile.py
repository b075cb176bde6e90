"""Reading a measured run (the input of `validate` and `calibrate`) into the record contract.

Three formats, told apart by the path:

* a harness run directory (or its `requests.parquet`): a `live` or `endpoint` run, with its
  `config.yaml` (the deployment it ran) and `token_times.parquet` (every token's time, if kept);
* `*.json`: `vllm bench serve --save-result --save-detailed` (keys `start_times`, `ttfts`,
  `itls`, `latencies`, `input_lens`, `output_lens`, `errors`; vllm/benchmarks/serve.py);
* `*.jsonl` / `*.ndjson` / `*.csv`: one request a line (docs/validate.md "Run files"): required
  `prompt_tokens`, `output_tokens`, `arrival_s`, and either `first_token_s` and `last_token_s`
  (absolute, on the arrival's clock) or `ttft_s` and `e2e_s` (relative to the request's own
  arrival: a client whose latencies are timed per request needs no common clock); optional
  `request_id`, `first_scheduled_s`, `token_times_s` (a list in JSON, space-separated in CSV,
  absolute) and `error` (a request with one is dropped, counted). `scripts/gpu_check` writes this.

Clocks: every run is shifted so its first arrival is 0. Times that cannot be aligned (a first token
before its arrival, a last token before the first, token times out of order or not one per output
token) are errors naming the file, the row and the column, never silently dropped.
"""
from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from common.errors import HarnessError
from harness.workload.trace_file import jsonl_objects, read_csv
from harness.records import RequestRecord

REQUIRED = ("prompt_tokens", "output_tokens", "arrival_s")
ABSOLUTE, RELATIVE = ("first_token_s", "last_token_s"), ("ttft_s", "e2e_s")
OPTIONAL = ("request_id", "first_scheduled_s", "token_times_s", "error")
# Any other column is refused: a misspelt optional one would be ignored in silence (`eror`: failed
# requests compared as if they had finished; `token_time_s`: no ITL, no word why).
KNOWN = (*REQUIRED, *ABSOLUTE, *RELATIVE, *OPTIONAL)
_EPS = 1e-6  # rounding of times written with 6 decimals


@dataclass(frozen=True, eq=False)
class MeasuredRun:
    path: Path
    kind: str  # harness | vllm-bench | jsonl | csv
    records: tuple[RequestRecord, ...]  # the requests compared: finished without error, first arrival at 0
    dropped: int  # requests of the file not compared (an error, no output)
    per_token: bool  # every compared record has one time per output token (ITL can be compared)
    config: object | None = None  # a harness run's saved config (OmegaConf), None otherwise
    scheduler: str | None = None  # a harness run's probe: its scheduler

    def describe(self) -> str:
        return (f"{self.path} ({self.kind}: {len(self.records)} requests compared, {self.dropped} dropped"
                f"{'' if self.per_token else ', no per-token times'})")


def read_run(path: str | Path, probe: tuple[str | None, float | None] = (None, None)) -> MeasuredRun:
    p = Path(path)
    if p.is_dir() or p.name == "requests.parquet":
        return _read_harness(p if p.is_dir() else p.parent, probe)
    if not p.is_file():
        raise HarnessError(f"run file not found: {path}")
    if p.suffix == ".json":
        return _read_vllm(p)
    if p.suffix in (".jsonl", ".ndjson"):
        return _from_rows(p, "jsonl", [obj | {"_where": f"line {n}"} for n, obj in jsonl_objects(p)])
    if p.suffix == ".csv":
        return _from_rows(p, "csv", _csv_rows(p))
    raise HarnessError(f"{p}: unknown run format (a harness run directory, vllm bench serve's .json, .jsonl or .csv)")


def _finish(p: Path, kind: str, records: list[RequestRecord], dropped: int, **extra) -> MeasuredRun:
    if not records:
        raise HarnessError(f"{p}: no request finished without an error ({dropped} dropped): nothing to compare")
    t0 = min(r.arrival_s for r in records)
    shifted = tuple(RequestRecord(r.request_id, r.arrival_s - t0, r.prompt_len, r.output_len, r.first_scheduled_s - t0,
                                  r.first_token_s - t0, r.finished_s - t0, r.token_times_s - t0)
                    for r in sorted(records, key=lambda r: (r.arrival_s, r.request_id)))
    per_token = all(len(r.token_times_s) == r.output_len for r in shifted)
    return MeasuredRun(p, kind, shifted, dropped, per_token, **extra)


# ---------------------------------------------------------------- one request a line
def _csv_rows(p: Path) -> list[dict]:
    # utf-8-sig: a byte-order mark (Excel's CSV export writes one) is not part of the first column's name
    frame = read_csv(p, ", ".join(REQUIRED), encoding="utf-8-sig")
    with open(p, encoding="utf-8-sig", newline="") as f:  # pandas renames a repeated column (x.1): read the header itself
        header = [c.strip() for c in next(csv.reader(f), [])]
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:
        raise HarnessError(f"{p}: line 1: column(s) {', '.join(twice)} given twice")
    rows = frame.to_dict("records")
    for i, row in enumerate(rows):
        row["_where"] = f"row {i + 1} (line {i + 2})"
        if row.get("token_times_s", "") != "":
            row["token_times_s"] = row["token_times_s"].split()
    return rows


def _from_rows(p: Path, kind: str, rows: list[dict]) -> MeasuredRun:
    if not rows:
        raise HarnessError(f"{p}: no requests (expected one a line with {', '.join(REQUIRED)})")
    cols = set().union(*(r.keys() for r in rows))
    missing = [c for c in REQUIRED if c not in cols]
    times = ABSOLUTE if all(c in cols for c in ABSOLUTE) else RELATIVE if all(c in cols for c in RELATIVE) else None
    if missing or times is None:
        need = missing + ([] if times else [f"{' and '.join(ABSOLUTE)} (or {' and '.join(RELATIVE)})"])
        raise HarnessError(f"{p}: missing column(s) {', '.join(need)} (has: {', '.join(sorted(c for c in cols if c != '_where'))})")
    records, dropped, seen = [], 0, {}
    for i, row in enumerate(rows):
        where = f"{p}: {row['_where']}"
        rid = _request_id(where, row.get("request_id"), i)
        if rid in seen:
            raise HarnessError(f"{where}, column request_id: {rid} again (first at {seen[rid]})")
        seen[rid] = row["_where"]
        failed = bool(str(row.get("error") or "").strip())  # its times may be missing: not read
        rec = None if failed else _row_record(where, row, rid, times)
        # After the row's own values: a misspelt required column is named by what is missing
        unknown = sorted(c for c in row if c not in KNOWN and c != "_where")
        if unknown:
            raise HarnessError(f"{where}: unknown column(s) {', '.join(unknown)} (known: {', '.join(KNOWN)})")
        if rec is None:
            dropped += 1
        else:
            records.append(rec)
    return _finish(p, kind, records, dropped)


def _request_id(where: str, raw, default: int) -> int:
    if raw is None or raw == "":
        return default
    if isinstance(raw, int) and not isinstance(raw, bool):  # JSON true is not request 1
        return raw
    if isinstance(raw, str) and raw.strip().lstrip("+-").isdigit():  # exact, however long
        return int(raw)
    try:
        v = float(raw) if isinstance(raw, (float, str)) else math.nan
    except ValueError:  # a word, not a number
        v = math.nan
    if math.isfinite(v) and v == int(v):  # 7.0 is request 7; 2.5 is no request's id
        return int(v)
    raise HarnessError(f"{where}, column request_id: not a whole number: {raw!r}")


def _num(where: str, row: dict, col: str, *, integer: bool = False, required: bool = True) -> float:
    raw = row.get(col)
    if raw is None or raw == "":
        if required:
            raise HarnessError(f"{where}, column {col}: missing value")
        return math.nan
    try:
        if isinstance(raw, bool):  # JSON true would read as 1 in silence
            raise TypeError
        v = float(raw)
    except (TypeError, ValueError):
        raise HarnessError(f"{where}, column {col}: not a number: {raw!r}") from None
    if not math.isfinite(v) or v < 0 or (integer and v != int(v)):
        raise HarnessError(f"{where}, column {col}: {'not a whole number >= 0' if integer else 'not a time >= 0'}: {raw!r}")
    return v


def _row_record(where: str, row: dict, rid: int, times: tuple[str, str]) -> RequestRecord | None:
    prompt = int(_num(where, row, "prompt_tokens", integer=True))
    output = int(_num(where, row, "output_tokens", integer=True))
    arrival = _num(where, row, "arrival_s")
    if prompt < 1 or output < 1:
        return None  # nothing was generated: not a request the simulator can replay
    a, b = (_num(where, row, c) for c in times)
    first, last = (arrival + a, arrival + b) if times == RELATIVE else (a, b)
    if first < arrival - _EPS:
        raise HarnessError(f"{where}, column {times[0]}: first token at {first:g} s before the arrival at {arrival:g} s "
                           "(the clocks cannot be aligned: give both on one clock, or ttft_s relative to the arrival)")
    if last < first - _EPS:
        raise HarnessError(f"{where}, column {times[1]}: last token at {last:g} s before the first at {first:g} s")
    sched = _num(where, row, "first_scheduled_s", required=False)
    if not (arrival - _EPS <= sched <= first + _EPS or math.isnan(sched)):
        raise HarnessError(f"{where}, column first_scheduled_s: {sched:g} s is not between the arrival at {arrival:g} s "
                           f"and the first token at {first:g} s")
    tokens = np.array([], float)
    if row.get("token_times_s") not in (None, "", []):
        raw = row["token_times_s"]
        try:
            tokens = np.asarray([float(t) for t in raw], float)
        except (TypeError, ValueError):
            raise HarnessError(f"{where}, column token_times_s: not a list of times") from None
        if len(tokens) != output:
            raise HarnessError(f"{where}, column token_times_s: {len(tokens)} times for {output} output tokens")
        if np.any(np.diff(tokens) < -_EPS) or tokens[0] < arrival - _EPS or not np.all(np.isfinite(tokens)):
            raise HarnessError(f"{where}, column token_times_s: times out of order or before the arrival")
        # The first and last of them are first_token_s and last_token_s (each rounded, and with ttft_s/e2e_s
        # added to the arrival, also rounded: 2 eps); otherwise ITL and TPOT would be of two different runs.
        if abs(tokens[0] - first) > 2 * _EPS or abs(tokens[-1] - last) > 2 * _EPS:
            raise HarnessError(f"{where}, column token_times_s: from {tokens[0]:g} to {tokens[-1]:g} s, but the first "
                               f"token is at {first:g} s and the last at {last:g} s")
    return RequestRecord(rid, arrival, prompt, output, sched, first, last, tokens)


# ---------------------------------------------------------------- vllm bench serve
_VLLM_KEYS = ("start_times", "ttfts", "latencies", "input_lens", "output_lens", "errors")


def _read_vllm(p: Path) -> MeasuredRun:
    try:
        obj = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise HarnessError(f"{p}: not JSON ({e})") from None
    if not isinstance(obj, dict):
        raise HarnessError(f"{p}: expected vllm bench serve's result object")
    missing = [k for k in _VLLM_KEYS if k not in obj]
    if missing:
        raise HarnessError(f"{p}: missing key(s) {', '.join(missing)} (run vllm bench serve with --save-result --save-detailed)")
    for k in (*_VLLM_KEYS, "itls"):  # start_times first: every other list is as long
        if k in obj and not isinstance(obj[k], list):
            raise HarnessError(f"{p}: key {k}: expected a list (one entry a request), got {type(obj[k]).__name__}")
        if k in obj and len(obj[k]) != len(obj["start_times"]):
            raise HarnessError(f"{p}: key {k} has {len(obj[k])} entries, start_times {len(obj['start_times'])}")
    n = len(obj["start_times"])
    records, dropped = [], 0
    for i in range(n):
        where = f"{p}: request {i + 1}"
        if obj["errors"][i] or not obj["output_lens"][i]:
            dropped += 1
            continue
        row = {"prompt_tokens": obj["input_lens"][i], "output_tokens": obj["output_lens"][i],
               "arrival_s": obj["start_times"][i], "ttft_s": obj["ttfts"][i], "e2e_s": obj["latencies"][i]}
        rec = _row_record(where, row, i, RELATIVE)
        if rec is None:
            dropped += 1
            continue
        itls = _itls(where, obj.get("itls", [None] * n)[i])
        # vLLM times each streamed chunk: one gap per token only when no chunk held two tokens.
        if itls is not None and len(itls) == rec.output_len - 1:
            tokens = rec.first_token_s + np.concatenate([[0.0], np.cumsum(itls)])
            rec = replace(rec, token_times_s=tokens)
        records.append(rec)
    return _finish(p, "vllm-bench", records, dropped)


def _itls(where: str, raw) -> np.ndarray | None:
    if raw is None:
        return None
    try:
        if not isinstance(raw, list) or any(isinstance(x, bool) for x in raw):
            raise TypeError
        gaps = np.asarray(raw, float)
    except (TypeError, ValueError):
        raise HarnessError(f"{where}, key itls: not a list of gaps in seconds") from None
    if not np.all(np.isfinite(gaps)) or np.any(gaps < 0):
        raise HarnessError(f"{where}, key itls: a gap that is not a time >= 0")
    return gaps


# ---------------------------------------------------------------- the harness's own run
def _read_harness(d: Path, probe: tuple[str | None, float | None]) -> MeasuredRun:
    from omegaconf import OmegaConf

    req, cfg_path = d / "requests.parquet", d / "config.yaml"
    for f in (req, cfg_path):
        if not f.is_file():
            raise HarnessError(f"{d}: not a harness run directory (no {f.name})")
    frame = pd.read_parquet(req)
    need = ("scheduler", "qps", "request_id", "arrival_s", "prompt_len", "output_len", "first_token_s", "finished_s", "error")
    missing = [c for c in need if c not in frame.columns]
    if missing:
        raise HarnessError(f"{req}: missing column(s) {', '.join(missing)}")
    scheduler, qps = probe
    if scheduler is not None:
        frame = frame[frame["scheduler"] == scheduler]
    if qps is not None:
        frame = frame[np.isclose(frame["qps"].astype(float), qps)]
    probes = sorted({(str(s), float(q)) for s, q in zip(frame["scheduler"], frame["qps"])})
    if len(probes) != 1:
        listed = ", ".join(f"{s}@{q:g}" for s, q in probes) or "none"
        raise HarnessError(f"{req}: {len(probes)} probes match ({listed}): choose one with --probe SCHEDULER@QPS")
    tokens = {}
    if (d / "token_times.parquet").is_file():
        tf = pd.read_parquet(d / "token_times.parquet")
        tf = tf[(tf["scheduler"] == probes[0][0]) & np.isclose(tf["qps"].astype(float), probes[0][1])]
        tokens = {int(r): np.asarray(t, float) for r, t in zip(tf["request_id"], tf["token_times_s"])}
    records, dropped = [], 0
    for i, row in enumerate(frame.to_dict("records")):
        if row["error"] is not None or not (row["first_token_s"] >= row["arrival_s"]):
            dropped += 1
            continue
        rid = int(row["request_id"])
        records.append(RequestRecord(rid, float(row["arrival_s"]), int(row["prompt_len"]), int(row["output_len"]),
                                     float(row.get("first_scheduled_s", math.nan)), float(row["first_token_s"]),
                                     float(row["finished_s"]), tokens.get(rid, np.array([], float))))
    return _finish(d, "harness", records, dropped, config=OmegaConf.load(cfg_path), scheduler=probes[0][0])


def write_jsonl(path: str | Path, records) -> None:
    """Measured records as a run file (the JSONL columns above, absolute times on the run's clock):
    what scripts/gpu_check writes, for a run measured by the harness's own backends."""
    def num(x: float) -> float | None:
        return None if math.isnan(x) else round(float(x), 6)

    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps({
                "request_id": r.request_id, "prompt_tokens": r.prompt_len, "output_tokens": r.output_len,
                "arrival_s": num(r.arrival_s), "first_scheduled_s": num(r.first_scheduled_s),
                "first_token_s": num(r.first_token_s), "last_token_s": num(r.finished_s),
                "token_times_s": [round(float(t), 6) for t in r.token_times_s], "error": r.error}) + "\n")
