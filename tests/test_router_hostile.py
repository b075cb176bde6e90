"""The server's hostile storm (tests/hostile.py) against the in-repo router in front of real
servers on loopback: a disaggregated pair, one replica, two replicas. The router answers every
request the server would refuse with the server's own OpenAI-shaped 4xx (it checks a request
with the server's code before forwarding it), never a 5xx, and logs no traceback for a client's
fault; a slow sender gets 408; afterwards the router still serves."""
from __future__ import annotations

import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

from harness.backends.live.lifecycle import LaunchSpec, ServerProcess, free_port
from tests.hostile import MODEL, assert_quiet, slow_sender_and_early_leavers, storm

pytestmark = pytest.mark.live  # starts a real server (pyproject.toml markers)

ROOT = Path(__file__).resolve().parent.parent
LIMITS = ["--body-timeout-s", "1", "--max-body-bytes", "65536", "--log-level", "INFO"]
LAYOUTS = {"disaggregated": [("prefill", "--prefill"), ("decode", "--decode")],
           "one replica": [("both", "--replica")],
           "two replicas": [("both", "--replica"), ("both", "--replica")]}


def _process(module: str, flags: list[str], log: Path, warm: bool) -> tuple[ServerProcess, int]:
    port = free_port()
    cmd = [sys.executable, "-m", module, "--port", str(port), *flags, *LIMITS]
    return ServerProcess(LaunchSpec(cmd, f"http://127.0.0.1:{port}", model=MODEL if warm else None,
                                    env={"PYTHONPATH": str(ROOT)}, cwd=str(ROOT), log_path=str(log),
                                    warmup_max_tokens=3)), port


@pytest.fixture(scope="module", params=list(LAYOUTS))
def router(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("router-hostile")
    flags = []
    with ExitStack() as stack:
        for i, (role, flag) in enumerate(LAYOUTS[request.param]):
            server, _ = _process("engines.server", ["--model", MODEL, "--executor", "null", "--max-model-len", "512",
                                                    "--role", role], tmp / f"server{i}.log", warm=False)
            flags += [flag, stack.enter_context(server).base_url]
        router, port = _process("engines.server.router", flags, tmp / "router.log", warm=True)
        with router:
            yield port, tmp


def test_the_router_answers_hostile_requests_as_the_server_does(router):
    port, logs = router
    storm(port, rounds=3)
    for log in sorted(logs.glob("*.log")):
        assert_quiet(log)


def test_a_slow_sender_through_the_router_times_out(router):
    port, logs = router
    slow_sender_and_early_leavers(port)
    assert_quiet(logs / "router.log")
