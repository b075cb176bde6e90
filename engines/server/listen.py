"""What every in-repo HTTP process (the engine server, the router) does around its app: listen,
wait for SIGTERM/SIGINT, and clean up."""
from __future__ import annotations

import asyncio
import signal

from aiohttp import web


async def listen(app: web.Application, host: str, port: int, shutdown_grace_s: float) -> tuple[web.AppRunner, int]:
    """Serve `app` on host:port (0: a free port); returns the runner (clean it up) and the port."""
    # handler_cancellation: a client that disconnects cancels its handler, which aborts the request.
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=shutdown_grace_s)
    await runner.setup()
    # A large backlog: a load generator opens hundreds of connections within milliseconds, and a
    # dropped SYN costs a one-second retransmit that would show up as latency.
    site = web.TCPSite(runner, host, port, backlog=4096, reuse_address=True)
    await site.start()
    return runner, runner.addresses[0][1]


async def until_signalled() -> None:
    """Return at the first SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
