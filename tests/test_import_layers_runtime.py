"""The layering rules hold at run time, not only by name: each layer's modules, imported in a fresh
interpreter, leave no module of a layer it must not use in `sys.modules`.

`lint-imports` (tests/test_architecture.py) reads import statements; it cannot see that importing one
allowed module drags in forbidden ones through a package's `__init__` (the analysis once loaded 37
modules of backends and search through `harness.config`'s, which registers the whole schema, for its
config differ: that lives with the saved results now, `harness.results.config_diff`). This test
imports every module of the layer (pkgutil's walk) and looks at what is loaded."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.paths import ROOT

WALK = """
import importlib, json, pkgutil, sys
for pkg in sys.argv[1:]:
    top = importlib.import_module(pkg)
    for info in pkgutil.walk_packages(getattr(top, "__path__", []), pkg + "."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
print(json.dumps(sorted(sys.modules)))
"""

ENGINE_CORE_FORBIDDEN = ("harness", "torch", "aiohttp", "hydra", "omegaconf", "numpy", "engines.perf",
                         "engines.executors", "engines.server", "engines.external", "engines.models")

# layer (the packages walked) -> what none of its modules may load (ARCHITECTURE.md's table)
RULES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "common": (("common",), ("engines", "harness")),
    "engines core and policies": (("engines.core", "engines.schedulers", "engines.routers"), ENGINE_CORE_FORBIDDEN),
    "performance model": (("engines.perf",), ("harness", "engines.core", "engines.schedulers", "engines.executors",
                                              "engines.server", "engines.external", "torch")),
    "engines (server, executors, models)": (("engines.server", "engines.executors", "engines.models"), ("harness",)),
    "analysis": (("harness.analysis",), ("harness.backends", "harness.search", "harness.commands",
                                         "harness.loadgen", "harness.planner")),
    "search": (("harness.search",), ("harness.backends.sim", "harness.backends.live", "harness.commands",
                                     "harness.analysis")),
    "planner": (("harness.planner",), ("harness.backends.sim", "harness.backends.live", "harness.commands",
                                       "harness.loadgen")),
    "validate": (("harness.validate",), ("harness.backends.live", "harness.loadgen", "harness.commands",
                                         "harness.analysis")),
    "load generator": (("harness.loadgen",), ("engines", "harness.backends", "harness.search", "harness.results",
                                              "harness.commands")),
    "experiment plan": (("harness.experiment",), ("harness.search", "harness.planner", "harness.launch",
                                                  "harness.validate", "harness.results", "harness.commands",
                                                  "harness.config", "harness.analysis", "harness.backends.sim",
                                                  "harness.backends.live")),
    "experiment config": (("harness.settings",), ("harness.backends", "harness.search", "harness.planner",
                                                   "harness.launch", "harness.validate", "harness.analysis",
                                                   "harness.results", "harness.commands", "harness.config",
                                                   "harness.loadgen", "harness.workload", "hydra", "omegaconf")),
    "launch": (("harness.launch",), ("harness.search", "harness.backends", "harness.results", "harness.commands",
                                     "harness.analysis")),
    "workload, records, metrics": (("harness.workload", "harness.records", "harness.metrics", "harness.starvation",
                                    "harness.throughput"),
                                   ("harness.backends", "harness.search", "harness.results", "harness.commands",
                                    "harness.analysis", "harness.loadgen")),
}


def loaded_by(packages: tuple[str, ...]) -> list[str]:
    out = subprocess.run([sys.executable, "-c", WALK, *packages], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


@pytest.mark.parametrize("layer", sorted(RULES))
def test_a_layer_loads_no_module_it_must_not_use(layer: str) -> None:
    packages, forbidden = RULES[layer]
    loaded = loaded_by(packages)
    assert any(under(m, packages[0]) for m in loaded)  # the walk imported the layer itself
    bad = sorted(m for m in loaded if any(under(m, f) for f in forbidden))
    assert not bad, f"{layer}: importing {', '.join(packages)} loads {bad[:12]}{' ...' if len(bad) > 12 else ''}"



DOOR = """
import json, sys
from harness.config import compose, experiment_config
for words in ([], ["backend=live"], ["backend=endpoint", "backend.base_url=http://127.0.0.1:1/v1"]):
    experiment_config(compose(words))
print(json.dumps(sorted(sys.modules)))
"""

# What building an experiment's config may load besides the config floor: none of a backend's code
# (each backend's settings live in harness.settings), only the in-repo server's flag defaults
# (engines.server.config: the live settings' torch paths default to the server's).
DOOR_FORBIDDEN = ("harness.backends", "harness.loadgen", "harness.workload", "harness.search", "harness.planner",
                  "harness.experiment", "harness.results", "harness.analysis", "engines.executors",
                  "engines.server.app", "engines.server.router", "aiohttp", "torch")


def test_building_an_experiment_config_loads_no_backend() -> None:
    out = subprocess.run([sys.executable, "-c", DOOR], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert "harness.settings.live" in loaded and "harness.settings.endpoint" in loaded  # the walk typed them
    bad = sorted(m for m in loaded if any(under(m, f) for f in DOOR_FORBIDDEN))
    assert not bad, f"harness.config with an ExperimentConfig built loads {bad[:12]}"
