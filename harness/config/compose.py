"""The experiment config: Hydra composes experiments/ (presets plus command-line overrides) into
one resolved config; bad input becomes one line naming the problem."""
from __future__ import annotations

from collections.abc import Callable, Sequence

from omegaconf import DictConfig, OmegaConf

from common.errors import HarnessError
from harness.config.schedulers import register_schedulers
from harness.paths import CONFIG_DIR
from harness.typed import did_you_mean


def compose(overrides: list[str]) -> DictConfig:
    register_schedulers()  # policies registered since the import (a decorator in the caller's module) too
    return _composed(overrides)


def _composed(words: list[str], finish: Callable | None = None, **kwargs):
    """`finish` of experiments/config composed with `words` (None: the config, resolved); Hydra's
    and OmegaConf's errors (there or in `finish`) as one line naming the problem."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
            cfg = hydra_compose("config", overrides=words, **kwargs)
        if finish is None:
            OmegaConf.resolve(cfg)
            return cfg
        return finish(cfg)
    except MissingConfigException as e:
        raise HarnessError(_missing_config_line(e)) from None
    except (HydraException, OmegaConfBaseException) as e:
        raise HarnessError(_schema_line(e, words)) from None


# The groups a saved run's config cannot change by name (a group option would not merge onto it).
GROUPS = ("model", "hardware", "parallel", "perf", "scheduler", "backend", "dataset", "arrival", "slo", "search")


def config_for(run, overrides: Sequence[str]) -> DictConfig:
    """A measured run's saved config (`run.config`, a harness run's; None otherwise) changed key by
    key, or the experiment config composed from the overrides."""
    if run.config is None:
        return compose(list(overrides))
    groups = [o for o in overrides if o.partition("=")[0].lstrip("+~") in GROUPS]
    if groups:
        raise HarnessError(f"{run.path}: a saved run's deployment changes key by key (e.g. hardware.gpu=h100), "
                           f"not by group: {groups[0]}")
    try:
        return OmegaConf.merge(run.config, OmegaConf.from_dotlist(list(overrides)))
    except Exception as e:  # omegaconf's own errors
        raise HarnessError(f"{run.path}: overrides: {e}") from None


def _schema_line(e: Exception, overrides: list[str]) -> str:
    """One line naming the key: a wrong type says which key and value, an unknown key suggests
    the closest known one at the same place."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

    cause = e.__cause__ or e
    key = getattr(cause, "full_key", None)
    if isinstance(cause, ValidationError) and key:
        return f"{key}: {str(cause).strip().splitlines()[0]}"
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and key:
        holder = next((o for o in overrides if "." not in key and f"{key}:" in o.partition("=")[2]), None)
        if holder is not None:  # a key inside a list of dicts (cluster.replicas=[{cnt: 2}]): OmegaConf loses its path
            where, _, value = holder.lstrip("+~").partition("=")
            return f"{where}: unknown key {key!r} in {value}"
        parent, _, leaf = key.rpartition(".")
        # Compose again without the override that set the key (or a list or dict holding it, as
        # `cluster.replicas=[{cnt: 2}]` sets `cluster.replicas[0].cnt`) to read the keys known there.
        rest = [o for o in overrides if not _sets(o.lstrip("+~").partition("=")[0], key)]
        known = _known_keys(parent.partition("[")[0], rest) if len(rest) < len(overrides) else []
        hint = did_you_mean(leaf, known) if known else ""
        return f"{key}: unknown key{hint}" + ("" if hint else f"; known: {', '.join(known)}" if known else "")
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    if len(lines) > 1 and "raised while composing" in lines[0]:  # a preset's own typo: the key is below
        return f"{lines[0].removesuffix(':')}: {lines[1]}"
    return lines[0] if lines else type(e).__name__


def _sets(override_key: str, key: str) -> bool:
    """Does an override of `override_key` set `key` (itself, or a node above it)?"""
    return key == override_key or (key.startswith(override_key) and key[len(override_key)] in ".[")


def _known_keys(parent: str, overrides: list[str]) -> list[str]:
    try:
        cfg = compose(overrides)
        node = OmegaConf.select(cfg, parent) if parent else cfg
        return sorted(str(k) for k in node.keys()) if OmegaConf.is_dict(node) else []
    except HarnessError:
        return []


def _missing_config_line(e) -> str:
    first = str(e).strip().splitlines()[0].removeprefix("In 'config': ")
    options = getattr(e, "options", None)
    if options:
        return f"{first}; known: {', '.join(options)}"
    group = (getattr(e, "missing_cfg_file", "") or "").rpartition("/")[0]
    known = group_options(group) if group else []
    line = f"{first}; known: {', '.join(known)}" if known else first
    if group == "scheduler":  # a policy plugin that did not load says why
        from engines.schedulers.registry import plugin_errors

        line += "".join(f"; {err}" for err in plugin_errors())
    return line


def group_options(group: str) -> list[str]:
    """The options of a config group: its YAML presets and the ones stored from code (a
    registered policy without a YAML is `scheduler=NAME` all the same); schemas left out."""
    from hydra.core.config_store import ConfigStore

    files = {p.stem for p in (CONFIG_DIR / group).glob("*.yaml")}
    try:
        stored = {n.removesuffix(".yaml") for n in ConfigStore.instance().list(group)}
    except OSError:  # no such group in the store
        stored = set()
    return sorted(n for n in files | stored if not n.endswith("_schema"))


def compose_launcher(name: str, overrides: list[str] = ()) -> dict:
    """The launcher `hydra/launcher=NAME` names (experiments/hydra/launcher, harness.launch.config),
    with `hydra.launcher.KEY=VALUE` overrides, resolved: how `figure=all` and `nightly` run their
    configs with `launcher=NAME`."""
    return _composed([f"hydra/launcher={name}", *overrides],
                     lambda cfg: OmegaConf.to_container(cfg.hydra.launcher, resolve=True), return_hydra_config=True)
