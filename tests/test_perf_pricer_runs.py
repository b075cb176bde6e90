"""Short decode runs, the simulator's common case, priced bit for bit as the vectorized model does.

Most runs a fleet simulates are a few dozen iterations whose longest sequence stays within one
K/V block of the split-KV kernel, so every row has the same splits: BatchPricer prices those
with one gather of its stacked tables and scalar split-KV terms (`_one_split_run_units`), the rest
row by row (`_run_units`). Both must give the vectorized path's doubles, and `decode_run_times`
(a one-stage model's stage times as they are, a pipeline's slowest stage) its maximum.
"""
import numpy as np
import pytest

from test_perf_pricer import MODELS, reference_stages


def short_runs(rng, count: int):
    """(base, lo, hi) as the fleet makes them: 1-12 sequences, 1-60 iterations, contexts 0..9000
    (past Mistral's 4,096-token window), some ending just before or just after a block edge."""
    for _ in range(count):
        b = int(rng.integers(1, 13))
        base = rng.integers(0, 9000, size=b)
        if rng.random() < 0.3:  # the longest sequence just below a 128-key block edge
            base[0] = 128 * int(rng.integers(1, 70)) - int(rng.integers(1, 4)) - 1
        lo = int(rng.integers(0, 3))
        yield base, lo, lo + int(rng.integers(1, 60))


@pytest.mark.parametrize("name", list(MODELS))
def test_short_decode_runs_bit_for_bit(name):
    p = MODELS[name]
    pricer = p._pricer
    one_split = 0
    for base, lo, hi in short_runs(np.random.default_rng(7), 400):
        ctx = base[None, :] + np.arange(lo, hi)[:, None]
        want = reference_stages(p, np.ones_like(ctx), ctx)
        got = p.decode_run_stage_times(base, lo, hi)
        assert got.tobytes() == want.tobytes(), (base.tolist(), lo, hi)
        assert p.decode_run_times(base, lo, hi) == want.max(axis=-1).tolist()
        longest = int(base.max())
        one_split += pricer.call is not None and pricer._blocks[longest + lo] == pricer._blocks[longest + hi - 1]
    if pricer.call is not None:  # both ways were taken
        assert 0 < one_split < 400


@pytest.mark.parametrize("name", list(MODELS))
def test_compiled_decode_runs_bit_for_bit(name, monkeypatch):
    """A one-stage model's one-split runs priced in one compiled call (run_kernel.py, numba without
    fastmath) give the vectorized path's doubles, every row (an operation swapped or fused fails)."""
    import numba  # noqa: F401  (a dependency: the kernel must be what this tests)
    from engines.perf import decode_runs

    p = MODELS[name]
    pricer = p._pricer
    monkeypatch.setattr(decode_runs, "_numpy_runs_left", 0)
    monkeypatch.setattr(pricer, "_kernel", False)
    rng = np.random.default_rng(13)
    for base, lo, hi in short_runs(rng, 600):
        if rng.random() < 0.2:  # fleets' larger batches too
            base = np.concatenate([base, rng.integers(0, 9000, size=int(rng.integers(1, 30)))])
        ctx = base[None, :] + np.arange(lo, hi)[:, None]
        want = reference_stages(p, np.ones_like(ctx), ctx).max(axis=-1)
        assert pricer.decode_run_times(base, lo, hi).tolist() == want.tolist(), (base.tolist(), lo, hi)
    compiled = len(pricer.layers) == 1 and pricer.call is not None
    assert (pricer._kernel is not None) == compiled


def test_without_numba_decode_runs_are_numpys(monkeypatch):
    """Where numba is not installed the pricer keeps numpy's path: the same doubles."""
    from engines.perf import decode_runs, run_kernel

    p = MODELS["mistral-window"]
    pricer = p._pricer
    monkeypatch.setattr(run_kernel, "kernel", lambda: None)
    monkeypatch.setattr(decode_runs, "_numpy_runs_left", 0)
    monkeypatch.setattr(pricer, "_kernel", False)
    for base, lo, hi in short_runs(np.random.default_rng(17), 100):
        ctx = base[None, :] + np.arange(lo, hi)[:, None]
        assert pricer.decode_run_times(base, lo, hi).tolist() == reference_stages(p, np.ones_like(ctx), ctx).max(axis=-1).tolist()
    assert pricer._kernel is None


@pytest.mark.parametrize("name", list(MODELS))
def test_a_decode_runs_first_row_is_its_first_iteration_and_the_floor_is_below_both(name):
    """What the simulator's decode run relies on (stepping._decode_run): the run's first row is the
    first iteration's own time, and decode_time_floor(b) never exceeds a decode batch of b."""
    p = MODELS[name]
    for base, lo, hi in short_runs(np.random.default_rng(11), 200):
        b = len(base)
        first = p.iteration_time([1] * b, base.tolist())
        assert p.decode_run_times(base, 0, hi)[0] == first
        floor = p.decode_time_floor(b)
        assert floor is not None and 0 < floor <= first
        assert all(floor <= t for t in p.decode_run_times(base, lo, hi))


@pytest.mark.parametrize("name", list(MODELS))
def test_a_lone_decode_is_priced_from_its_context_table_as_alone_and_in_a_run(name):
    """alone_decode_times (stepping._decode_run slices a lone sequence's run from it): entry c is the
    iteration of one decode at context c priced alone, and row c - lo of any run of it from lo."""
    p = MODELS[name]
    table = p.alone_decode_times(9000)
    assert len(table) > 9000
    rng = np.random.default_rng(5)
    for c in rng.integers(0, 9000, size=300).tolist() + [0, 4095, 4096, 4097, 8191, 8192]:
        assert table[c] == p.iteration_time([1], [c]), c
    for base, lo, hi in short_runs(rng, 200):
        c = int(base[0])
        assert p.decode_run_times(base[:1], lo, hi) == table[c + lo:c + hi], (c, lo, hi)


class _NoFloor:
    """A PerfModel whose decode runs are bounded by their first iteration priced alone (no floor)."""

    def __init__(self, model):
        self.model = model

    def __getattr__(self, name):
        return getattr(self.model, name)

    def decode_time_floor(self, batch_size):
        return None

    def alone_decode_times(self, top):
        return None


class _Counting:
    """A wrapper with the four fast methods and none of the optional ones, as benchmarks/bench_sim.py's was."""

    def __init__(self, model):
        self.model = model

    def __getattr__(self, name):
        if name in ("decode_time_floor", "alone_decode_times"):
            raise AttributeError(name)
        return getattr(self.model, name)


def test_a_timer_without_the_floor_keeps_its_fast_path():
    """The floor is optional: a timer with the four fast methods is used as it is, not wrapped in
    the array adapter (which once made bench_sim's counting wrapper 2x slower)."""
    from engines.perf import PerfModel
    from engines.perf.deployment import Deployment
    from harness.backends.sim.timer import fast_timer

    timer = _Counting(PerfModel(Deployment.create(model="mistral-7b", gpu="a100-80g-sxm", tp=1)))
    assert fast_timer(timer) is timer


@pytest.mark.parametrize("rate", [2.0, 40.0])
def test_a_simulation_is_the_same_with_and_without_the_floor(rate):
    """Decode runs cut by arrivals (stepping._decode_run): priced up to the floor's bound and cut (a
    lone sequence's sliced from its context table), or bounded by their first iteration priced
    alone first, the records are the same bit for bit (a run's rows priced from anywhere but its
    first iteration, or a lone run's slice off by a context, fail this)."""
    from engines.perf import PerfModel
    from engines.perf.deployment import Deployment
    from engines.schedulers import EngineConfig, SchedulerConfig, make_engine
    from harness.backends.sim import simulate
    from harness.workload import load_workload, requests_at_rate

    model = PerfModel(Deployment.create(model="mistral-7b", gpu="a100-80g-sxm", tp=1))
    work = load_workload({"name": "openchat_sharegpt4", "max_total_tokens": 4096}, 400, 3)
    reqs = requests_at_rate(work, {"name": "poisson"}, rate, 3)

    def run(timer):
        engine = make_engine(EngineConfig(SchedulerConfig.shared("sarathi", max_num_seqs=32, token_budget=512,
                                                                 max_num_batched_tokens=4096), 200_000, 4096))
        return simulate(reqs, engine, timer)
    floored, plain = run(model), run(_NoFloor(model))
    assert model.decode_time_floor(1) and len(floored) == 400
    for a, b in zip(floored, plain):
        np.testing.assert_array_equal(a.token_times_s, b.token_times_s)
        assert (a.first_scheduled_s, a.finished_s) == (b.first_scheduled_s, b.finished_s)


def test_numba_is_imported_only_once_a_process_priced_enough_runs():
    """A short simulation (a test, a probe) never pays numba's import: the kernel is looked up only
    after KERNEL_AFTER runs priced in the process (in a fresh one, as a probe's worker is)."""
    import subprocess
    import sys

    code = """
import sys
import numpy as np
from engines.perf import PerfModel, decode_runs
from engines.perf.deployment import Deployment
p = PerfModel(Deployment.create(model="mistral-7b", gpu="a100-80g-sxm", tp=1))
for c in range(200):
    p._pricer.decode_run_times(np.array([c, 2 * c + 5]), 0, 20)
print("numba" in sys.modules, end=" ")
decode_runs._numpy_runs_left = 1
for c in range(2):
    p._pricer.decode_run_times(np.array([c, 2 * c + 5]), 0, 20)
print("numba" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_a_kernel_numba_cannot_compile_leaves_numpys_path_and_says_so(monkeypatch, capsys):
    """A compiler failure (any exception, with or without the on-disk cache) is one line on stderr
    and no kernel: the pricer then prices with numpy, the same doubles."""
    import numba

    from engines.perf import run_kernel

    def broken(*args, **kwargs):
        raise RuntimeError("no compiler here")
    monkeypatch.setattr(numba, "njit", broken)
    run_kernel.kernel.cache_clear()
    try:
        assert run_kernel.kernel() is None
    finally:
        run_kernel.kernel.cache_clear()  # the next test compiles (or loads) the real one
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "could not compile" in err[0] and "no compiler here" in err[0]
