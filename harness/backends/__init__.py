"""Backends turn a probe's `RequestSpec`s into `RequestRecord`s (contract: `base.Backend`):
`sim` (discrete-event simulation on a virtual clock), `live` (servers the harness starts, driven
over HTTP) and `endpoint` (a server already running, anywhere). Chosen by `backend.name` (harness.settings.backends names them)."""
from __future__ import annotations

from importlib import import_module


def backend_class(name: str):
    """The class implementing harness.backends.base.Backend for `backend.name` (one of
    harness.settings.backends.BACKEND_SETTINGS, which the door checked): `harness.backends.NAME.Backend`."""
    return import_module(f"harness.backends.{name}").Backend


def open_backend(job):
    """The backend for a `harness.backends.base.BackendJob` (chosen by its settings' name), ready
    for `with open_backend(job) as backend: backend.run(requests)`."""
    return backend_class(job.settings.name)(job)


def fit_config(config) -> tuple[dict[str, object], list[str]]:
    """Before planning, the chosen backend may fit the experiment's config (an ExperimentConfig) to
    what it finds (backend=endpoint: the server's model and max_model_len): the keys it changes,
    dotted (the door applies them to the config it saves and types it again), and its notes."""
    fit = getattr(backend_class(config.backend.name), "fit_config", None)
    return fit(config) if fit is not None else ({}, [])
