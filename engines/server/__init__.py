"""An OpenAI-compatible aiohttp server around the engine core (see app.py; run with
`python -m engines.server`). No policy logic lives here: the engine's policies decide batches."""
from engines.server.app import make_app
from engines.server.build import build_parts
from engines.server.config import ServerConfig

__all__ = ["ServerConfig", "build_parts", "make_app"]
