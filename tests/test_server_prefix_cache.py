"""The in-repo server with `--prefix-caching true`: a repeated prefix is found in the cache, the
response says how many prompt tokens were (usage.prompt_tokens_details.cached_tokens, as vLLM),
and /metrics counts queries and hits under vLLM's names; `false` (the default) reports none."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.backends.live.lifecycle import LaunchSpec, ServerProcess, free_port
from tests.test_server_api import _metrics, _post

pytestmark = pytest.mark.live  # starts a real server (pyproject.toml markers)

ROOT = Path(__file__).resolve().parent.parent


def _server(caching: str):
    port = free_port()
    cmd = [sys.executable, "-m", "engines.server", "--model", "tiny", "--executor", "null", "--port", str(port),
           "--max-model-len", "1024", "--policy", "sarathi", "--token-budget", "256", "--kv-capacity-tokens", "16384",
           "--prefix-caching", caching]
    return ServerProcess(LaunchSpec(cmd, f"http://127.0.0.1:{port}", model="tiny", cwd=str(ROOT), ready_timeout_s=60,
                                    env={"PYTHONPATH": str(ROOT)}))


HEAD = [5 + i % 200 for i in range(300)]


def _ask(srv, prompt, n=4):
    status, body = _post(srv, {"model": "tiny", "prompt": prompt, "max_tokens": n, "ignore_eos": True})
    assert status == 200, body
    return body


def test_a_repeated_prefix_is_reported_cached():
    with _server("true") as srv:
        before = _metrics(srv)  # the launcher's readiness probe was a request too
        first = _ask(srv, HEAD + [7] * 20)
        second = _ask(srv, HEAD + [9] * 50)
        assert first["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
        assert second["usage"]["prompt_tokens_details"] == {"cached_tokens": 288}  # 18 full blocks of the 300
        after = _metrics(srv)
        delta = {k: after[k] - before[k] for k in ("prefix_cache_queries_total", "prefix_cache_hits_total")}
        assert delta == {"prefix_cache_queries_total": 320 + 350, "prefix_cache_hits_total": 288}


@pytest.mark.parametrize("flag", ["false", "0"])
def test_without_the_flag_nothing_is_cached(flag):
    with _server(flag) as srv:
        _ask(srv, HEAD)
        body = _ask(srv, HEAD)
        assert "prompt_tokens_details" not in body["usage"]
        assert "prefix_cache_hits_total" not in _metrics(srv)
