"""Dataset configs for the data CLI: `dataset=NAME` plus Hydra-style `dataset.KEY=VALUE` overrides.

NAME is a file of experiments/dataset/ (the same group the experiments compose), or a path to a
YAML file. Values are parsed as YAML, so `dataset.trace_file=null` and `dataset.max_total_tokens=4096`
mean what they say.
"""
from __future__ import annotations

import yaml

from common.errors import HarnessError
from harness.paths import CONFIG_DIR, ROOT
from harness.workload.paths import resolve_path

DATASET_DIR = CONFIG_DIR / "dataset"  # the group the experiments compose
CARD_DIR = ROOT / "data" / "cards"


def load_dataset_config(args: dict[str, str]) -> dict:
    name = args.get("dataset")
    known = ", ".join(sorted(p.stem for p in DATASET_DIR.glob("*.yaml")))
    if not name:
        raise HarnessError(f"dataset=NAME is required (one of: {known})")
    path = DATASET_DIR / f"{name}.yaml"
    if not path.is_file():
        path = resolve_path(name)
    if not path.is_file():
        raise HarnessError(f"unknown dataset {name!r}: no experiments/dataset/{name}.yaml (known: {known})")
    try:
        cfg = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise HarnessError(f"{path}: invalid YAML ({' '.join(str(e).split())})") from None
    if not isinstance(cfg, dict):
        raise HarnessError(f"{path}: expected a mapping")
    for key, value in args.items():
        if key.startswith("dataset."):
            try:
                cfg[key.removeprefix("dataset.")] = yaml.safe_load(value) if value != "" else None
            except yaml.YAMLError:  # not YAML: the word as written
                cfg[key.removeprefix("dataset.")] = value
    return cfg


def int_arg(args: dict[str, str], key: str, default: int, minimum: int = 0) -> int:
    raw = args.get(key)
    if raw is None:
        return default
    try:
        v = int(raw)
    except ValueError:
        raise HarnessError(f"{key} must be an integer, got {raw!r}") from None
    if v < minimum:
        raise HarnessError(f"{key} must be >= {minimum}, got {v}")
    return v
