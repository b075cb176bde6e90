"""`python -m engines.server`: serve the in-repo engine over an OpenAI-compatible HTTP API.

    python -m engines.server --policy sarathi --token-budget 512 --model tiny --executor realtime --port 8000

Binds 127.0.0.1 unless --host says otherwise. Prints one line `serving MODEL on http://HOST:PORT`
when ready. SIGTERM or Ctrl-C: stop accepting requests (503), let running ones finish for up to
--shutdown-grace-s, abort the rest, exit 0.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from aiohttp import web

from engines.schedulers import POLICIES
from engines.server.app import SERVER_KEY, make_app
from engines.server.build import ExecutorUnavailable, build_parts
from engines.server.config import EXECUTORS, ServerConfig


def parse_args(argv: list[str] | None = None) -> ServerConfig:
    d = ServerConfig()
    p = argparse.ArgumentParser(prog="python -m engines.server", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=d.model, help="engines.perf model name (realtime/null) or model path (torch)")
    p.add_argument("--served-model-name", default=None, help="name clients send as 'model' (default: --model)")
    p.add_argument("--host", default=d.host)
    p.add_argument("--port", type=int, default=d.port, help="0 picks a free port")
    p.add_argument("--policy", choices=POLICIES, default=d.policy)
    p.add_argument("--token-budget", type=int, default=d.token_budget, help="sarathi/chunked_only/hybrid_only")
    p.add_argument("--max-num-seqs", type=int, default=d.max_num_seqs)
    p.add_argument("--max-num-batched-tokens", type=int, default=None, help="vllm policy (default: max model len)")
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--executor", choices=EXECUTORS, default=d.executor)
    p.add_argument("--gpu", default=d.gpu, help="performance model's GPU (realtime)")
    p.add_argument("--tp", type=int, default=d.tp)
    p.add_argument("--gpu-memory-utilization", type=float, default=d.gpu_memory_utilization)
    p.add_argument("--kv-capacity-tokens", type=int, default=None)
    p.add_argument("--block-size", type=int, default=d.block_size)
    p.add_argument("--time-scale", type=float, default=d.time_scale, help="realtime: stretch predicted times")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--max-body-bytes", type=int, default=d.max_body_bytes)
    p.add_argument("--shutdown-grace-s", type=float, default=d.shutdown_grace_s)
    p.add_argument("--log-level", default="WARNING")
    a = p.parse_args(argv)
    logging.basicConfig(level=a.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    fields = {k: v for k, v in vars(a).items() if k != "log_level"}
    try:
        return ServerConfig(**fields)
    except ValueError as e:
        p.error(str(e))


async def serve(cfg: ServerConfig, ready=None) -> None:
    """Run until SIGTERM/SIGINT; `ready(port)` is called once the socket listens."""
    parts = build_parts(cfg)
    app = make_app(cfg, parts)
    server = app[SERVER_KEY]
    # handler_cancellation: a client that disconnects cancels its handler, which aborts the request.
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=cfg.shutdown_grace_s)
    await runner.setup()
    # A large backlog: a load generator opens hundreds of connections within milliseconds, and a
    # dropped SYN costs a one-second retransmit that would show up as latency.
    site = web.TCPSite(runner, cfg.host, cfg.port, backlog=4096, reuse_address=True)
    await site.start()
    port = runner.addresses[0][1]
    print(f"serving {cfg.name} on http://{cfg.host}:{port} (policy {cfg.policy}, executor {cfg.executor})", flush=True)
    if ready is not None:
        ready(port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
        server.draining = True  # /health and new requests: 503
        deadline = loop.time() + cfg.shutdown_grace_s
        while server.loop.num_requests and loop.time() < deadline:
            await asyncio.sleep(0.05)
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    try:
        asyncio.run(serve(cfg))
    except ExecutorUnavailable as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # port in use, address not available
        print(f"error: cannot listen on {cfg.host}:{cfg.port}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
