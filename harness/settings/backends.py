"""The `backend` section's options: each backend's settings class by name (`backend.name`), the
schema of experiments/backend/<name>.yaml; harness.backends maps the same names to the code."""
from __future__ import annotations

from harness.settings.backend import BackendSettings
from harness.settings.endpoint import EndpointSettings
from harness.settings.live import LiveSettings
from harness.settings.sim import SimSettings

BACKEND_SETTINGS: dict[str, type[BackendSettings]] = {
    "sim": SimSettings, "live": LiveSettings, "endpoint": EndpointSettings}
