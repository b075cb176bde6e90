"""A storm of hostile requests against a real in-repo server: every answer is an OpenAI-shaped
4xx (never a 5xx), slow senders time out with 408, clients that leave early are not logged as
errors, and the server is healthy and serving afterwards."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.backends.live.lifecycle import LaunchSpec, ServerProcess, free_port
from tests.hostile import assert_quiet, rss_mb, slow_sender_and_early_leavers, storm

pytestmark = pytest.mark.live  # starts a real server (pyproject.toml markers)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("hostile") / "server.log"
    cmd = [sys.executable, "-m", "engines.server", "--model", "tiny", "--port", str(port), "--executor", "null",
           "--max-model-len", "512", "--body-timeout-s", "1", "--max-body-bytes", "65536", "--log-level", "INFO"]
    proc = ServerProcess(LaunchSpec(cmd, f"http://127.0.0.1:{port}", model=None, env={"PYTHONPATH": str(ROOT)},
                                    cwd=str(ROOT), log_path=str(log)))
    with proc:
        yield port, log, proc.proc.pid


def test_hostile_requests_get_4xx_never_5xx(server):
    port, log, pid = server
    rss = []
    # After the first rounds warmed every code path, and at the end.
    storm(port, rounds=12, between=lambda round_: rss.append(rss_mb(pid)) if round_ in (2, 11) else None)
    assert_quiet(log)
    # Memory stays flat: nine more rounds of the storm (over 200 requests, 100k-deep JSON among
    # them) leave the server's resident memory where the first rounds put it.
    assert rss[1] - rss[0] < 16, f"server RSS grew from {rss[0]:.0f} to {rss[1]:.0f} MB under the storm"


def test_a_slow_sender_times_out_and_early_leavers_are_quiet(server):
    port, log, _ = server
    slow_sender_and_early_leavers(port)
    assert_quiet(log)
