"""The live load generator: asyncio + aiohttp against any OpenAI-compatible completions server.

    run_load(requests, LoadOptions(base_url=..., model=...)) -> LoadResult (records, dispatch lag, verdict)

See run.py for the timing model (absolute deadlines, per-event timestamps, where
first_scheduled_s comes from) and tokens.py for how tokens are counted.
"""
from harness.loadgen.options import LoadOptions
from harness.loadgen.run import ABORTED, NOT_SENT, UNFINISHED, LoadResult, ServerTiming, run_load, run_load_async
from harness.loadgen.validity import DispatchVerdict, LagPolicy, judge_dispatch

__all__ = [
    "ABORTED", "DispatchVerdict", "LagPolicy", "LoadOptions", "LoadResult", "NOT_SENT", "ServerTiming", "UNFINISHED",
    "judge_dispatch", "run_load", "run_load_async",
]
