"""The experiment config: Hydra composes experiments/ (presets plus command-line overrides) into
one resolved config; bad input becomes one line naming the problem."""
from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from common.errors import HarnessError
from harness.paths import CONFIG_DIR


def compose(overrides: list[str]) -> DictConfig:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
            cfg = hydra_compose("config", overrides=overrides)
        OmegaConf.resolve(cfg)
        return cfg
    except MissingConfigException as e:
        raise HarnessError(_missing_config_line(e)) from None
    except (HydraException, OmegaConfBaseException) as e:
        raise HarnessError(str(e).strip().splitlines()[0]) from None


def _missing_config_line(e) -> str:
    first = str(e).strip().splitlines()[0].removeprefix("In 'config': ")
    options = getattr(e, "options", None)
    if options:
        return f"{first}; known: {', '.join(options)}"
    group = (getattr(e, "missing_cfg_file", "") or "").rpartition("/")[0]
    known = sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml")) if group else []
    return f"{first}; known: {', '.join(known)}" if known else first
