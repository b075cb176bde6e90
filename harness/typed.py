"""Typed values from config nodes: a node merged onto its dataclass (an OmegaConf structured
config), so an unknown key or a wrong type is an error naming the key, and every field the node
leaves out takes the dataclass's default (also for results saved before the field existed)."""
from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import fields
from typing import TypeVar

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from common.errors import HarnessError

T = TypeVar("T")


def typed(cls: type[T], node: Mapping | None, where: str) -> T:
    """`node` (a config group, e.g. cfg.search) as an instance of `cls`; `where` names the group."""
    if isinstance(node, cls):
        return node
    data = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else dict(node or {})
    for key in getattr(cls, "RETIRED_KEYS", ()):  # keys that configs saved by older versions still carry
        data.pop(key, None)
    try:
        return OmegaConf.to_object(OmegaConf.merge(writable(OmegaConf.structured(cls)), data))
    except ConfigKeyError as e:
        key = getattr(e, "key", None) or ""
        raise HarnessError(f"{where}: unknown key {key!r}{did_you_mean(str(key), [f.name for f in fields(cls)])}") from None
    except OmegaConfBaseException as e:
        full = getattr(e, "full_key", None)
        msg = str(e).strip().splitlines()[0]
        raise HarnessError(f"{where}.{full}: {msg}" if full else f"{where}: {msg}") from None
    except ValueError as e:  # the dataclass's own checks
        raise HarnessError(f"{where}: {e}") from None


def did_you_mean(word: str, known) -> str:
    close = difflib.get_close_matches(word, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def writable(node: DictConfig) -> DictConfig:
    """OmegaConf makes frozen dataclasses read-only nodes: open every level so the config can fill
    them in (the values built from them are frozen again)."""
    OmegaConf.set_readonly(node, False)
    for key in node:
        child = node._get_node(key)
        if isinstance(child, DictConfig):
            writable(child)
    return node
