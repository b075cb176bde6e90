"""The live load generator: asyncio and its own HTTP/1.1 client (http.py) against any OpenAI-compatible server.

    run_load(requests, LoadOptions(base_url=..., model=...)) -> LoadResult (records, dispatch lag, verdict)

See run.py for the timing model (absolute deadlines, per-event timestamps, where
first_scheduled_s comes from) and tokens.py for how tokens are counted.
"""
from harness.loadgen.collect import NOT_SENT, UNFINISHED, LoadResult
from harness.loadgen.options import LoadOptions
from harness.loadgen.run import run_load
from harness.loadgen.validity import ClientLoad

__all__ = ["NOT_SENT", "UNFINISHED", "ClientLoad", "LoadOptions", "LoadResult", "run_load"]
