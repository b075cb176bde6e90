"""The live load generator: asyncio and its own HTTP/1.1 client (http.py) against any OpenAI-compatible server.

    run_load(requests, LoadOptions(base_url=..., model=...)) -> LoadResult (records, dispatch lag, verdict)

See run.py for the timing model (absolute deadlines, per-event timestamps, where
first_scheduled_s comes from) and tokens.py for how tokens are counted.
"""
from harness.loadgen.collect import ABORTED, NOT_SENT, UNFINISHED, LoadResult, ServerTiming
from harness.loadgen.options import LoadOptions
from harness.loadgen.run import run_load, run_load_async
from harness.loadgen.validity import ClientLoad, DispatchVerdict, LagPolicy, judge_dispatch

__all__ = ["ABORTED", "NOT_SENT", "UNFINISHED", "ClientLoad", "DispatchVerdict", "LagPolicy", "LoadOptions",
           "LoadResult", "ServerTiming", "judge_dispatch", "run_load", "run_load_async"]
