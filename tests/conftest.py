import contextlib
import fcntl
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The longest modules (pytest --durations, most first): pytest-xdist deals out whole files
# (`--dist loadfile`, pyproject.toml) in collection order, so these start first and no worker is
# left running one of them alone at the end. Only the order changes; a stale entry costs nothing.
LONGEST_FIRST = ("test_vllm_live.py", "test_readme.py", "test_reference_drift.py", "test_endpoint_faults.py",
                 "test_cluster_ray.py", "test_live_smoke.py", "test_endpoint_backend.py", "test_commands.py",
                 "test_vllm_sessions.py", "test_live_sessions.py", "test_live_disagg.py", "test_cli.py",
                 "test_plan_published.py")
# Of the modules with `alone` tests or blocks (run last), the longest outside their blocks first
# (test_cluster_ray.py: its submitit multiruns, about 20 s at -n 0, before its Ray tests).
ALONE_LONGEST_FIRST = ("test_cluster_ray.py", "test_live_cache_routing.py", "test_live_loopback.py")
# A module whose timed runs are short blocks (alone_block) inside a long chain of untimed, CPU-bound
# work (test_validate_loop.py: two torch servers' starts, calibrate, validate, a search; about 120 s
# of its 175 s at -n 0, load 9-11) runs halfway through the ordinary modules (by tests): there that
# chain runs beside them and its blocks wait only on short tests. At the end it ran with the other
# workers idle, and its long steps held up the other alone modules' blocks.
MIDWAY = ("test_validate_loop.py",)


def pytest_collection_modifyitems(config, items):
    """The longest modules first, the modules holding `alone` tests or blocks last (they idle the
    other workers, which by then have little else left to do) except MIDWAY ones; otherwise
    collection order."""
    alone = {item.path.name for item in items if item.get_closest_marker("alone") or "alone_block" in item.fixturenames}
    ordinary = [item.path.name for item in items
                if item.path.name not in LONGEST_FIRST and item.path.name not in alone and item.path.name not in MIDWAY]
    second_half = set(ordinary[len(ordinary) // 2:]) - set(ordinary[:len(ordinary) // 2])  # whole modules only

    def rank(item) -> tuple[int, int]:
        name = item.path.name
        if name in MIDWAY:
            return 2, MIDWAY.index(name)
        if name in alone:
            return 4, ALONE_LONGEST_FIRST.index(name) if name in ALONE_LONGEST_FIRST else len(ALONE_LONGEST_FIRST)
        if name in LONGEST_FIRST:
            return 0, LONGEST_FIRST.index(name)
        return (3 if name in second_half else 1), 0

    items.sort(key=rank)  # stable: collection order within a rank


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A test marked `alone` (its subject is the load generator's own timing against a live
    server) runs with the other xdist workers idle, as in a serial run: from its setup to its
    teardown it holds an exclusive lock, every other test a shared one (flock on files in the
    run's common temp directory; the turnstile keeps a stream of shared holders from starving it)."""
    basetemp = item.config.option.basetemp  # an xdist worker's: <the run's>/popen-gwK
    if not os.environ.get("PYTEST_XDIST_WORKER") or not basetemp:
        yield
        return
    with _hold(Path(basetemp).parent, exclusive=item.get_closest_marker("alone") is not None):
        yield


# This worker's lock files while one of its tests runs, and whether it holds them exclusively.
_HELD: dict = {}


@contextlib.contextmanager
def _hold(directory: Path, exclusive: bool):
    with open(directory / "alone.turnstile", "a") as turnstile, open(directory / "alone.lock", "a") as lock:
        _take(turnstile, lock, exclusive)
        _HELD.update(files=(turnstile, lock), exclusive=exclusive)
        try:
            yield
        finally:
            _HELD.clear()
            fcntl.flock(lock, fcntl.LOCK_UN)


def _take(turnstile, lock, exclusive: bool) -> None:
    fcntl.flock(turnstile, fcntl.LOCK_EX)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
    finally:
        fcntl.flock(turnstile, fcntl.LOCK_UN)


@contextlib.contextmanager
def _alone_block():
    if not _HELD or _HELD["exclusive"]:
        yield  # not under xdist, or the whole test runs alone already
        return
    turnstile, lock = _HELD["files"]
    # The shared hold is let go before queueing at the turnstile: a worker queued there for its own
    # block while holding its share would wait for this one, which waits for that share (deadlock).
    fcntl.flock(lock, fcntl.LOCK_UN)
    _take(turnstile, lock, exclusive=True)
    _HELD["exclusive"] = True  # a block inside it is part of it
    try:
        yield
    finally:
        _HELD["exclusive"] = False
        fcntl.flock(lock, fcntl.LOCK_UN)
        _take(turnstile, lock, exclusive=False)


# Each xdist worker's modules in the order it ran them: [module, first start, last stop, busy seconds]
# (the controller's copy of the workers' reports), for the timeline printed at the end of the run.
_TIMELINE: dict[str, list[list]] = {}
TIMELINE_LAST = 4  # modules shown a worker, its last ones: the end of the run is where a worker idles


def pytest_runtest_logreport(report):
    node = getattr(report, "node", None)  # set on the xdist controller's copy of a worker's report
    if node is None:
        return
    modules = _TIMELINE.setdefault(node.gateway.id, [])
    module = report.nodeid.split("::")[0].rsplit("/", 1)[-1]
    if not modules or modules[-1][0] != module:
        modules.append([module, report.start, report.stop, 0.0])
    modules[-1][2] = report.stop
    modules[-1][3] += report.duration


def pytest_terminal_summary(terminalreporter):
    """Under xdist, when each worker ran its last modules and how long it was in tests: a worker
    that ends long before the others (or is busy far less than its span) shows where the run's
    wall time goes (tests/conftest.py orders the modules; `alone` tests idle the others)."""
    if not _TIMELINE:
        return
    t0 = min(modules[0][1] for modules in _TIMELINE.values())
    terminalreporter.write_sep("-", "xdist timeline (s from the first test's start; busy: in a test's phases)")
    for worker, modules in sorted(_TIMELINE.items()):
        last = ", ".join(f"{m} {a - t0:.0f}-{b - t0:.0f}" for m, a, b, _ in modules[-TIMELINE_LAST:])
        busy = sum(m[3] for m in modules)
        terminalreporter.write_line(f"{worker}: ended {modules[-1][2] - t0:.0f}, busy {busy:.0f}, "
                                    f"{len(modules)} modules; last: {last}")


@pytest.fixture(scope="session")
def alone_block():
    """`with alone_block():` runs its block as an `alone` test runs, with the other xdist workers
    idle: for the part of a test (or of a module's fixture) that times the load generator or a
    real-time server, while the rest of it (starting servers, simulating, judging) runs beside the
    other workers' tests. The module is ordered last, as a module with `alone` tests is."""
    return _alone_block
