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
    # the timeline at the end names each worker's modules in the order it ran them (b after a)
    for line in (r"gw\d: ended \d+, busy \d+, 2 modules; last: test_a.py \d+-\d+, test_b.py \d+-\d+$",
                 r"gw\d: ended \d+, busy \d+, 1 modules; last: test_c.py \d+-\d+$"):
        result.stdout.re_match_lines([line])
    rows = [line.split() for line in log.read_text().splitlines()]
    (alone,) = [(float(a), float(b)) for tag, _, a, b in rows if tag == "alone"]
    beside = [(w, float(a), float(b)) for tag, w, a, b in rows if tag == "other"]
    assert len({w for w, _, _ in beside}) == 2  # both workers ran tests
    assert not [o for o in beside if o[1] < alone[1] and o[2] > alone[0]], (alone, beside)  # none beside it


BLOCK = '''
@pytest.fixture(scope="module")
def measured(alone_block):
    run('{tag}-beside', 1.0)  # a server's start: beside the other worker's tests
    with alone_block():
        run('{tag}', 1.0)  # the timed run: with the other worker idle
    return True


def test_block(measured):
    run('{tag}-after', 0.2)
'''


def test_an_alone_block_runs_with_the_other_workers_idle_and_the_rest_beside_them(pytester, tmp_path, monkeypatch):
    """`alone_block` (tests/conftest.py): only the block is alone. Two modules' blocks queue one after
    the other (neither waits on the other's shared hold: no deadlock), and the rest runs beside."""
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(
        # one module to each worker: both start beside each other, then both queue for their blocks
        test_b=LOGGED + BLOCK.format(tag="alone") + others(2, 0.1),
        test_d=LOGGED + BLOCK.format(tag="alone2") + others(2, 0.1),
    )
    log = tmp_path / "log"
    monkeypatch.setenv("LOG", str(log))
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadfile", "--no-loadscope-reorder", "-p", "no:cacheprovider",
                                           timeout=120)
    result.assert_outcomes(passed=6)
    rows = [(tag, w, float(a), float(b)) for tag, w, a, b in (line.split() for line in log.read_text().splitlines())]
    blocks = [(a, b) for tag, _, a, b in rows if tag in ("alone", "alone2")]
    assert len(blocks) == 2
    for start, end in blocks:
        beside = [r for r in rows if r[2] < end and r[3] > start and (r[2], r[3]) != (start, end)]
        assert not beside, ((start, end), beside)  # nothing else, the other block included, ran beside a block
    # what is outside the blocks ran beside the other worker's tests
    outside = [r for r in rows if r[0].endswith("-beside")]
    assert any(o[1] != r[1] and o[2] < r[3] and o[3] > r[2] for o in outside for r in rows), rows
