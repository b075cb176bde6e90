"""The vLLM scheduler plugin's iteration trace as a table (the run directory's iterations.parquet).

One row per engine step of the server (the warm-up request and every probe of the scheduler's
search, in the order scheduled), the columns of engines/external/vllm_scheduler/trace.py (per-step
lists kept as lists) and `scheduler`. Which class scheduled the server's steps: `scheduler_class`.
"""
from __future__ import annotations

import pandas as pd

from engines.external.vllm_scheduler import SCHEDULER_CLS
from engines.external.vllm_scheduler.trace import COLUMNS, read_trace

NATIVE_CLS = "vllm.v1.core.sched.async_scheduler.AsyncScheduler"  # vLLM's own, when --scheduler-cls is not given


def iteration_frame(path: str, scheduler: str) -> pd.DataFrame:
    _, steps = read_trace(path)
    frame = pd.DataFrame([{c: s.get(c) for c in COLUMNS} for s in steps], columns=list(COLUMNS))
    frame.insert(0, "scheduler", scheduler)
    return frame


def scheduler_class(server: str, vllm_scheduler: str) -> str | None:
    """The vLLM scheduler class a live run's server runs (None: not a vLLM server)."""
    if server != "vllm":
        return None
    return SCHEDULER_CLS if vllm_scheduler == "plugin" else NATIVE_CLS
