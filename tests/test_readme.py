"""The README's commands, as written: every `python -m` line in its code blocks either runs here
(the fast ones) or, where it would take minutes or names a placeholder (PATH, HOST, NAME...), is
composed and planned exactly as `python -m harness` would before running anything."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from itertools import product
from pathlib import Path

import pytest

import examples.policies.shortest_prompt_first  # noqa: F401  (the README runs the example policy)
from harness.config import compose

ROOT = Path(__file__).resolve().parent.parent
PLACEHOLDER = re.compile(r"\b(PATH|HOST|PORT|NAME|KEY|PROFILE|DIR|RATE)\b")


def readme_commands() -> list[str]:
    """Each `python -m ...` command of the README's bash blocks, continuations joined, comments cut."""
    text = (ROOT / "README.md").read_text()
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            for part in line.split("&&"):
                part = part.strip()
                if part.startswith("python -m") and "pytest" not in part:
                    out.append(" ".join(part.split()))
    return out


COMMANDS = readme_commands()


def test_the_readme_has_its_commands():
    assert COMMANDS[0] == "python -m harness experiment=yi34b_tp2_strict"  # the main job comes first
    assert len(COMMANDS) >= 12


def _multirun_overrides(words: list[str]) -> list[list[str]]:
    """`-m a=x,y b=z` -> [[a=x, b=z], [a=y, b=z]] (Hydra's basic sweeper, lists in [] kept whole)."""
    axes = []
    for w in words:
        key, _, value = w.partition("=")
        values = [value] if value.startswith("[") else value.split(",")
        axes.append([f"{key}={v}" for v in values])
    return [list(c) for c in product(*axes)]


def _planned(overrides: list[str]) -> None:
    from harness.search.plan import plan_experiment

    cfg = compose(overrides)
    if not PLACEHOLDER.search(" ".join(overrides)):
        plan_experiment(cfg)  # every check a run makes before it starts (traces, schedulers, lengths)


@pytest.mark.parametrize("command", COMMANDS)
def test_readme_command(command, tmp_path):
    words = shlex.split(command)
    module, args = words[2], words[3:]
    if module == "engines.perf" or args in (["--help"], ["-h"]):
        p = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert p.returncode == 0, p.stderr
        return
    assert module == "harness", command
    if args[:2] == ["profile", "fetch"]:
        # needs the internet: run as written but from the shared local copy of the same files
        vidur = ROOT.parent / "shared" / "profiles" / "vidur"
        if not vidur.is_dir():
            pytest.skip("profile fetch needs the internet or ../shared/profiles/vidur")
        words = [a for a in args if not a.startswith("out=")] + [f"src={vidur}", f"out={tmp_path}"]
        p = subprocess.run([sys.executable, "-m", "harness", *words], capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert p.returncode == 0 and list(tmp_path.glob("*_tp*.csv")), p.stderr
        return
    if args[:1] == ["plan"]:
        # Minutes of simulation: planned as the command plans before its search (tests/test_plan*.py run plans)
        from harness.plan.search import check_slo_reachable
        from harness.plan.settings import plan_settings, split_words
        from harness.plan.space import enumerate_space

        mine, rest = split_words(args[1:])
        space = enumerate_space(compose(rest), plan_settings(mine))
        check_slo_reachable(space)
        assert space.candidates
        return
    if args[:1] == ["nightly"] or (any(a.startswith("figure=") for a in args) and "run_missing=false" not in args):
        # Minutes of simulation: the figure and nightly commands run end to end in test_commands.
        pytest.skip("runs the paper's matrix; checked by tests/test_commands.py")
    if any(a.startswith("figure=") for a in args):
        p = subprocess.run([sys.executable, "-m", "harness", *args, f"figures_dir={tmp_path}"],
                           capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert p.returncode == 0, p.stderr
        return
    for overrides in (_multirun_overrides(args[1:]) if args[:1] == ["-m"] else [args]):
        _planned(overrides)


def test_every_preset_the_readme_names_exists():
    """`mistral7b_{strict,relaxed}`, `fig12_yi34b_tp2`...: each name in backticks that looks like a
    preset is a file under experiments/experiment/."""
    known = {p.stem for p in (ROOT / "experiments" / "experiment").glob("*.yaml")}
    named = set()
    for token in re.findall(r"`([a-z0-9_{},]+)`", (ROOT / "README.md").read_text()):
        m = re.fullmatch(r"([a-z0-9_]*)\{([a-z0-9_,]+)\}([a-z0-9_]*)", token)
        names = [m.group(1) + v + m.group(3) for v in m.group(2).split(",")] if m else [token]
        named |= {n for n in names if re.match(r"(mistral7b|yi34b|llama2_70b|falcon180b|fig\d+|table\d+)_", n)}
    assert len(named) >= 10
    assert named <= known, f"the README names presets that do not exist: {sorted(named - known)}"
