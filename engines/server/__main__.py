"""`python -m engines.server`: serve the in-repo engine over an OpenAI-compatible HTTP API.

    python -m engines.server --policy sarathi --token-budget 512 --model tiny --executor realtime --port 8000

Disaggregated prefill/decode: `--role prefill` and `--role decode --kv-link eth100g` servers behind
`python -m engines.server.router` (engines/server/handoff.py).

Binds 127.0.0.1 unless --host says otherwise. Prints one line `serving MODEL on http://HOST:PORT`
when ready. SIGTERM or Ctrl-C: stop accepting requests (503), let running ones finish for up to
--shutdown-grace-s, abort the rest, exit 0.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import ipaddress
import logging
import os
import sys

from common.errors import HarnessError
from engines.server.app import SERVER_KEY, make_app
from engines.server.build import ExecutorUnavailable, build_parts
from engines.server.config import API_KEY_ENV, ServerConfig, add_flags, from_flags
from engines.server.listen import listen, until_signalled


def parse_args(argv: list[str] | None = None) -> ServerConfig:
    p = argparse.ArgumentParser(prog="python -m engines.server", description=__doc__.split("\n\n")[0])
    add_flags(p)
    p.add_argument("--log-level", default="WARNING")
    a = p.parse_args(argv)
    logging.basicConfig(level=a.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = from_flags(a)
    except ValueError as e:
        p.error(str(e))
    if cfg.api_key is None and os.environ.get(API_KEY_ENV):
        cfg = dataclasses.replace(cfg, api_key=os.environ[API_KEY_ENV])
    return cfg


async def serve(cfg: ServerConfig, ready=None) -> None:
    """Run until SIGTERM/SIGINT; `ready(port)` is called once the socket listens."""
    parts = build_parts(cfg)
    app = make_app(cfg, parts)
    server = app[SERVER_KEY]
    runner, port = await listen(app, cfg.host, cfg.port, cfg.shutdown_grace_s)
    paths = getattr(parts.executor, "speed_paths", None)  # the torch executor's: what a live run selected
    print(f"serving {cfg.name} on http://{cfg.host}:{port} (policy {cfg.policy}, executor {cfg.executor}"
          f"{f'; {paths}' if paths else ''})", flush=True)
    if cfg.api_key is None and not _loopback(cfg.host):
        print(f"WARNING: serving on {cfg.host} without an API key: anyone who can reach it may use it "
              f"(--api-key or ${API_KEY_ENV})", file=sys.stderr, flush=True)
    if ready is not None:
        ready(port)
    loop = asyncio.get_running_loop()
    try:
        await until_signalled()
        server.draining = True  # /health and new requests: 503
        deadline = loop.time() + cfg.shutdown_grace_s
        while server.loop.num_requests and loop.time() < deadline:
            await asyncio.sleep(0.05)
    finally:
        await runner.cleanup()


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    try:
        asyncio.run(serve(cfg))
    except (ExecutorUnavailable, HarnessError) as e:  # a model or executor that cannot be had: one line
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # port in use, address not available
        print(f"error: cannot listen on {cfg.host}:{cfg.port}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
