"""tests/conftest.py under pytest-xdist: a test marked `alone` runs with the other worker idle,
the other tests side by side."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("xdist")
pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py")
LOGGED = '''
import os, time, pytest

def run(tag, seconds):
    start = time.monotonic()
    time.sleep(seconds)
    with open(os.environ["LOG"], "a") as f:
        f.write(f"{tag} {os.environ['PYTEST_XDIST_WORKER']} {start} {time.monotonic()}\\n")
'''


def others(n: int, seconds: float) -> str:
    return f"\n@pytest.mark.parametrize('i', range({n}))\ndef test_other(i):\n    run('other', {seconds})\n"


def test_alone_runs_with_the_other_worker_idle(pytester, tmp_path, monkeypatch):
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(
        # --dist loadfile: a (1.5 s) to one worker, c (6 s) to the other, b (conftest: last, as it
        # holds an alone test) to the worker done with a, while c still runs there
        test_a=LOGGED + others(6, 0.25),
        test_b=LOGGED + "\n@pytest.mark.alone\ndef test_alone():\n    run('alone', 1.0)\n" + others(2, 0.1),
        test_c=LOGGED + others(12, 0.5),
    )
    log = tmp_path / "log"
    monkeypatch.setenv("LOG", str(log))
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadfile", "--no-loadscope-reorder", "-p", "no:cacheprovider",
                                           "-W", "ignore::pytest.PytestUnknownMarkWarning")
    result.assert_outcomes(passed=21)
    rows = [line.split() for line in log.read_text().splitlines()]
    (alone,) = [(float(a), float(b)) for tag, _, a, b in rows if tag == "alone"]
    beside = [(w, float(a), float(b)) for tag, w, a, b in rows if tag == "other"]
    assert len({w for w, _, _ in beside}) == 2  # both workers ran tests
    assert not [o for o in beside if o[1] < alone[1] and o[2] > alone[0]], (alone, beside)  # none beside it
