"""One probe against a live server: the load generator sends the requests, and the run is judged
for how far the client kept its schedule (dispatch lag)."""
from __future__ import annotations

import dataclasses
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import fields

from common.errors import RunBroken
from harness.backends.base import BackendJob, BackendRun
from harness.backends.live.prometheus import measured, scrape
from harness.backends.live.server import Endpoint, LiveServerSpec, serve
from harness.backends.live.twin_clock import disturbance, disturbed_note, during, parse_twin
from harness.loadgen import LoadOptions, LoadResult, run_load
from harness.loadgen.run import auth_headers
from harness.records import RequestSpec
from harness.settings.client import ClientSettings
from harness.workload import with_prompt_token_ids
from harness.workload.session_prompts import SessionPrompts


def describe_client(settings: ClientSettings) -> str:
    """The load generator's settings that shape its measurements, for a run's header."""
    from harness.loadgen.pacer import realtime_permitted

    if settings.client_realtime_priority is False:
        priority = "normal priority (backend.client_realtime_priority=false)"
    elif realtime_permitted():
        priority = "realtime priority (SCHED_FIFO) for its timer and event loop"
    else:
        priority = ("normal priority: realtime (SCHED_FIFO) is not permitted to this process (run as root or "
                    "with CAP_SYS_NICE for steadier dispatch on a busy host)")
    return (f"client: {priority}; a probe with P{settings.lag.quantile * 100:g} dispatch lag over "
            f"{settings.lag.invalid_s * 1e3:g} ms " + ("breaks the run" if settings.strict else "is kept with a warning"))


def warn(message: str) -> None:
    """A warning of the harness's own: one line on stderr (no Python warning, no source line)."""
    print(f"WARNING: {message}", file=sys.stderr, flush=True)


def run_live_result(requests: Sequence[RequestSpec], server: Endpoint | LiveServerSpec,
                    options: LoadOptions = LoadOptions()) -> LoadResult:
    """One probe: `requests` against a running `Endpoint`, or against a server started for it."""
    if isinstance(server, LiveServerSpec):
        with serve(server) as endpoint:
            return run_live_result(requests, endpoint, options)
    prompts = None
    if any(r.prompt_segments is not None for r in requests):  # shared prefixes: ids by segment, turns built as released
        prompts = SessionPrompts(requests, server.vocab_size, options.seed, server.special_ids)
        requests = [dataclasses.replace(r, prompt_token_ids=prompts.first(r)) if r.after is None else r for r in requests]
    elif any(r.prompt_token_ids is None and r.prompt_text is None for r in requests):
        requests = with_prompt_token_ids(requests, server.vocab_size, options.seed, server.special_ids)
    headers = auth_headers(server.api_key)
    twin_before = scrape(server.base_url, headers, parse_twin)  # None: not a real-time twin
    result = run_load(requests, dataclasses.replace(
        options, base_url=server.base_url, model=server.model, api_key=server.api_key, api=server.api,
        session_prompt=prompts.next if prompts is not None else None,
        extra_body=(("return_token_ids", True),) if prompts is not None else ()))  # vLLM names generated ids on request
    if prompts is not None and prompts.fallbacks:
        warnings.warn(f"live run: the server did not name the ids it generated for {prompts.fallbacks} answers; those "
                      "turns carried the dataset's answer instead, which no prefix cache holds", stacklevel=2)
    twin_after = scrape(server.base_url, headers, parse_twin) if twin_before is not None else None
    if note := disturbance(during(twin_before, twin_after)):
        result = dataclasses.replace(result, notes=(*result.notes, note))  # warned below, saved with the probe
    verdict = result.verdict
    probe = "" if options.progress_desc == LoadOptions.progress_desc else f"{options.progress_desc}: "
    if verdict.status == "invalid" and options.strict:
        raise RunBroken(f"{probe}live run invalid, the client did not keep its schedule: {verdict.message}")
    if verdict.status != "ok":
        warn(f"{probe}{verdict.message}")
    for note in result.notes:
        warn(f"{probe}{note}")
    return result


def measure(requests: Sequence[RequestSpec], endpoint: Endpoint, job: BackendJob, label: str,
            gone: Callable[[], str | None], broken: Callable[[str], RunBroken]) -> BackendRun:
    """One probe of a live backend (managed or endpoint): refused if the server is already gone,
    stopped as soon as `gone()` names a reason, and never returned as records if it did."""
    if reason := gone():
        raise broken(reason)
    # The server's own count of what its prefix cache held, beside the usage's (None: it keeps no such counters)
    before = scrape(endpoint.base_url, auth_headers(endpoint.api_key))
    # The job's and the settings' fields of the options' names (seed, time_limit_s, drain_s, concurrency,
    # max_error_fraction, progress; request_timeout_s, stall_timeout_s, lag, strict, max_connections;
    # an endpoint's base_url, api and api_key, which run_live_result takes from the server it runs against).
    same = {f.name: getattr(s, f.name) for s in (job, job.settings) for f in fields(LoadOptions) if hasattr(s, f.name)}
    options = LoadOptions(**same, progress_desc=label or "requests", abort_check=gone,
                          realtime_priority=job.settings.client_realtime_priority)
    result = run_live_result(requests, endpoint, options)
    if reason := result.aborted or gone():  # a probe against a dead or silent server measures nothing
        raise broken(reason)
    stats = {"dispatch": dataclasses.asdict(result.verdict), "notes": result.notes, "stopped": result.stopped,
             "disturbed": disturbed_note(result.notes)}
    counted = measured(before, scrape(endpoint.base_url, auth_headers(endpoint.api_key)))
    if counted is not None:
        stats["prefix_cache"] = counted
    return BackendRun(result.records, stats)
