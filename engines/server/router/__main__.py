"""`python -m engines.server.router`: one OpenAI-compatible address in front of in-repo servers.

    python -m engines.server.router --prefill http://127.0.0.1:8001 --decode http://127.0.0.1:8002 --port 8000
    python -m engines.server.router --replica http://127.0.0.1:8001 --replica http://127.0.0.1:8002

Binds 127.0.0.1 unless --host says otherwise. Prints one line `routing on http://HOST:PORT ...`
when ready. SIGTERM or Ctrl-C: stop accepting requests (503), let running ones finish for up to
--shutdown-grace-s, then exit 0. Bad flags: one line, exit 2.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys

from engines.routers import ROUTERS
from engines.server.listen import listen, until_signalled
from engines.server.router.app import ROUTER_KEY, RouterConfig, make_router_app


def parse_args(argv: list[str] | None = None) -> RouterConfig:
    p = argparse.ArgumentParser(prog="python -m engines.server.router", description=__doc__.split("\n\n")[0])
    p.add_argument("--prefill", action="append", default=[], metavar="URL", help="a prefill server (role prefill); repeat")
    p.add_argument("--decode", action="append", default=[], metavar="URL", help="a decode server (role decode); repeat")
    p.add_argument("--replica", action="append", default=[], metavar="URL", help="a whole-request server; repeat")
    p.add_argument("--router", default=RouterConfig.router, choices=sorted(ROUTERS),
                   help="engines.routers policy for prefill servers (or replicas)")
    p.add_argument("--decode-router", default=None, choices=sorted(ROUTERS), help="for decode servers (default: --router)")
    p.add_argument("--router-option", action="append", default=[], metavar="KNOB=VALUE",
                   help="a knob of --router (engines.routers; VALUE read as JSON, else a string); repeat")
    p.add_argument("--block-size", type=int, default=RouterConfig.block_size,
                   help="tokens a KV block: prompts are hashed as the servers' prefix caches hash them")
    p.add_argument("--host", default=RouterConfig.host)
    p.add_argument("--port", type=int, default=RouterConfig.port, help="0 picks a free port")
    p.add_argument("--connect-timeout-s", type=float, default=RouterConfig.connect_timeout_s)
    p.add_argument("--shutdown-grace-s", type=float, default=RouterConfig.shutdown_grace_s)
    p.add_argument("--max-body-bytes", type=int, default=RouterConfig.max_body_bytes, help="larger bodies: 413")
    p.add_argument("--body-timeout-s", type=float, default=RouterConfig.body_timeout_s,
                   help="a request body not received by then: 408 (slow senders)")
    p.add_argument("--log-level", default="WARNING")
    a = p.parse_args(argv)
    logging.basicConfig(level=a.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return RouterConfig(prefill=tuple(a.prefill), decode=tuple(a.decode), replicas=tuple(a.replica),
                            router_options=tuple(_knob(o) for o in a.router_option), block_size=a.block_size,
                            router=a.router, decode_router=a.decode_router, host=a.host, port=a.port,
                            connect_timeout_s=a.connect_timeout_s, shutdown_grace_s=a.shutdown_grace_s,
                            max_body_bytes=a.max_body_bytes, body_timeout_s=a.body_timeout_s)
    except ValueError as e:
        p.error(str(e))


def _knob(option: str) -> tuple[str, object]:
    name, eq, value = option.partition("=")
    if not eq or not name:
        raise ValueError(f"--router-option wants KNOB=VALUE, got {option!r}")
    try:
        return name, json.loads(value)
    except ValueError:
        return name, value


async def serve(cfg: RouterConfig) -> None:
    app = make_router_app(cfg)
    router = app[ROUTER_KEY]
    runner, port = await listen(app, cfg.host, cfg.port, cfg.shutdown_grace_s)
    what = (f"{len(cfg.prefill)} prefill + {len(cfg.decode)} decode servers" if cfg.prefill
            else f"{len(cfg.replicas)} replicas")
    print(f"routing on http://{cfg.host}:{port} to {what} ({cfg.router})", flush=True)
    try:
        await until_signalled()
        router.draining = True
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    try:
        asyncio.run(serve(cfg))
    except OSError as e:
        print(f"error: cannot listen on {cfg.host}:{cfg.port}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
