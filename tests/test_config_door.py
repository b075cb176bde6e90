"""The experiment's configuration is typed once, at the door (`harness.config.experiment_config`,
called by the commands): nothing that plans or runs an experiment below `harness/commands` reads
the Hydra mapping of the whole experiment. Checked on the source (what a refactor would bring back):
no omegaconf there except where Hydra's own API hands a launcher its jobs; no parameter typed
`DictConfig` or named `cfg` (the raw mapping's name); no config section typed (`typed(...)`) past
the door; and every section of `ExperimentConfig` a frozen dataclass."""
from __future__ import annotations

import ast
import dataclasses
import typing

import pytest

from harness.paths import ROOT
from harness.settings.experiment import ExperimentConfig

BELOW = ("backends", "experiment", "search", "planner", "launch", "validate", "settings")
# module -> why it may import omegaconf
OMEGACONF = {
    "harness/launch/hydra_jobs.py": "Hydra's launcher API hands it the jobs' configs: to the door's `typed` and Hydra's job body",
    "harness/launch/config.py": "the launchers' own schemas",
    "harness/planner/settings.py": "the planner's own `plan.*` words, not the experiment's",
    "harness/planner/export.py": "writes the winner's preset as YAML",
    "harness/validate/runfile.py": "loads a saved run's config.yaml, data the door types",
}


def sources() -> list[tuple[str, ast.Module]]:
    out = []
    for package in BELOW:
        for path in sorted((ROOT / "harness" / package).rglob("*.py")):
            out.append((str(path.relative_to(ROOT)), ast.parse(path.read_text())))
    return out


SOURCES = sources()


def test_the_check_reads_every_layer_below_the_door():
    assert {p.split("/")[1] for p, _ in SOURCES} == set(BELOW)


@pytest.mark.parametrize("path, tree", SOURCES, ids=[p for p, _ in SOURCES])
def test_nothing_below_the_door_reads_the_hydra_mapping(path: str, tree: ast.Module):
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and path not in OMEGACONF:
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            bad += [f"line {node.lineno}: imports {n}" for n in names if n.split(".")[0] == "omegaconf"]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and path not in OMEGACONF:
            for arg in [*node.args.args, *node.args.kwonlyargs]:
                if arg.arg == "cfg" or (arg.annotation is not None and "DictConfig" in ast.unparse(arg.annotation)):
                    bad.append(f"line {node.lineno}: {node.name}({arg.arg}: {ast.unparse(arg.annotation) if arg.annotation else ''})")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "typed" and node.args:
            kind = ast.unparse(node.args[0])
            if kind in SECTIONS:
                bad.append(f"line {node.lineno}: typed({kind}, ...): a section of ExperimentConfig typed past the door")
    assert not bad, f"{path}: " + "; ".join(bad)


SECTIONS = {t.__name__ for t in typing.get_type_hints(ExperimentConfig).values() if dataclasses.is_dataclass(t)}


def test_every_section_is_a_frozen_dataclass():
    hints = typing.get_type_hints(ExperimentConfig)
    assert ExperimentConfig.__dataclass_params__.frozen
    assert {"SearchSettings", "SloSettings", "ClusterSettings", "PerfSettings", "BackendSettings"} <= SECTIONS
    for name in SECTIONS:
        kind = next(t for t in hints.values() if getattr(t, "__name__", None) == name)
        assert kind.__dataclass_params__.frozen, name
