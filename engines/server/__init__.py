"""An OpenAI-compatible aiohttp server around the engine core (see app.py; run with
`python -m engines.server`). No policy logic lives here: the engine's policies decide batches.

The package imports nothing itself: the harness reads `engines.server.config` to plan servers and
should not pay for aiohttp then; `make_app`, `build_parts` and `ServerConfig` load on first use."""
from importlib import import_module

_EXPORTS = {"make_app": "engines.server.app", "build_parts": "engines.server.build", "ServerConfig": "engines.server.config"}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'engines.server' has no attribute {name!r}")
