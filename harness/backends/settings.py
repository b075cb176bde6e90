"""A backend's settings from its config node, checked against the backend's settings dataclass
(an OmegaConf structured config): an unknown key or a wrong type is an error naming the key."""
from __future__ import annotations

from collections.abc import Mapping

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from common.errors import HarnessError
from harness.backends import backend_class
from harness.backends.base import BackendSettings


def backend_settings(node: Mapping) -> BackendSettings:
    """`cfg.backend` -> the chosen backend's settings (its `name` picks the backend)."""
    name = str(node.get("name", "sim"))
    schema = backend_class(name).settings
    data = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else dict(node)
    try:
        return OmegaConf.to_object(OmegaConf.merge(_writable(OmegaConf.structured(schema)), data))
    except OmegaConfBaseException as e:
        raise HarnessError(f"backend: {str(e).strip().splitlines()[0]}") from None
    except ValueError as e:
        raise HarnessError(f"backend: {e}") from None


def _writable(node: DictConfig) -> DictConfig:
    """OmegaConf makes frozen dataclasses read-only nodes: open every level so the config can fill
    them in (the settings built from them are frozen again)."""
    OmegaConf.set_readonly(node, False)
    for key in node:
        child = node._get_node(key)
        if isinstance(child, DictConfig):
            _writable(child)
    return node
