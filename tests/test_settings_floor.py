"""Every `*Settings` class of the harness lives on the settings floor (harness/settings/, one module
a section), so that building or reading an `ExperimentConfig` needs no backend, search or planner
code (tests/test_import_layers_runtime.py checks what the door loads)."""
from __future__ import annotations

import ast

from harness.paths import ROOT

# Settings that are no section of ExperimentConfig: the planner command's own (`plan.*` words, not
# an experiment key) and a dataset option's shape (`dataset.sessions`, read by the workload).
ELSEWHERE = {"PlanSettings": "harness/planner/settings.py", "SessionSettings": "harness/workload/sessions.py"}


def settings_classes() -> dict[str, str]:
    found = {}
    for path in sorted((ROOT / "harness").rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and node.name.endswith("Settings"):
                found[node.name] = path.relative_to(ROOT).as_posix()
    return found


def test_every_settings_class_is_on_the_settings_floor() -> None:
    found = settings_classes()
    assert {"SimSettings", "LiveSettings", "EndpointSettings", "ClientSettings"} <= set(found)  # the walk sees them
    stray = {name: where for name, where in found.items()
             if not where.startswith("harness/settings/") and ELSEWHERE.get(name) != where}
    assert not stray, f"*Settings outside harness/settings/: {stray}"
