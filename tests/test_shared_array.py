"""Arrays from pool workers through shared memory (harness/backends/sim/shared_array.py): the same
bytes come back, mapped rather than copied, their files gone once taken, the pool's directory gone
after it, a killed pool's directory removed by the next; where there is no room, the array itself."""
from __future__ import annotations

import mmap
import multiprocessing
import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest

from harness.backends.sim import shared_array
from harness.backends.sim.shared_array import SHM, SharedArray, remove_dir, shared_dir

pytestmark = pytest.mark.skipif(not os.path.isdir(SHM), reason="no /dev/shm here (the pipe carries the arrays)")


def _put_in(directory: str, seed: int):
    return SharedArray.put(np.random.default_rng(seed).random(1000), directory)


def _mapped(a: np.ndarray) -> bool:
    while isinstance(a, np.ndarray):
        a = a.base
    return isinstance(a, memoryview) and isinstance(a.obj, mmap.mmap)


def test_an_array_put_by_a_worker_is_taken_by_its_parent_the_same_and_its_file_goes():
    directory = shared_dir()
    try:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            handle = pool.submit(_put_in, directory, 7).result()
        assert isinstance(handle, SharedArray) and os.path.exists(handle.path)
        got = handle.take()
        assert not os.path.exists(handle.path)  # unlinked as it was mapped: the mapping holds it
        want = np.random.default_rng(7).random(1000)
        assert got.dtype == np.float64 and got.tobytes() == want.tobytes() and _mapped(got)
        got[:3] = 0.0  # copy-on-write: writable, and the change is this process's
        assert got[3] == want[3]
    finally:
        remove_dir(directory)
    assert not os.path.exists(directory)


def test_without_a_directory_or_room_the_array_itself_goes(monkeypatch, tmp_path):
    a = np.arange(10.0)
    assert SharedArray.put(a, None) is a
    assert SharedArray.put(np.empty(0), str(tmp_path)) is not None  # nothing to map: sent as it is
    assert isinstance(SharedArray.put(a, str(tmp_path)), SharedArray)
    real = os.statvfs

    class Full:
        def __init__(self, st):
            self.f_frsize, self.f_bavail = st.f_frsize, 0
    monkeypatch.setattr(shared_array.os, "statvfs", lambda d: Full(real(d)))
    assert SharedArray.put(a, str(tmp_path)) is a


def test_a_killed_pools_directory_is_removed_by_the_next_pool():
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = os.path.join(SHM, f"sarathi-sim-{int(gone.stdout)}-x")
    os.makedirs(dead, exist_ok=True)
    mine = shared_dir()
    try:
        assert not os.path.exists(dead) and os.path.isdir(mine)
        again = shared_dir()  # a live process's directory stays
        assert os.path.isdir(mine) and os.path.isdir(again)
        remove_dir(again)
    finally:
        remove_dir(mine)
        remove_dir(dead)


def test_columns_with_their_times_in_a_shared_file_are_read_once_taken(tmp_path):
    from harness.backends.sim.record_columns import RecordColumns
    from harness.records import RequestRecord

    records = [RequestRecord(i, 0.5 * i, 8, 2, 0.5 * i, 0.5 * i + 0.1, 0.5 * i + 0.2,
                             np.array([0.5 * i + 0.1, 0.5 * i + 0.2])) for i in range(4)]
    shared = RecordColumns.pack(records).shared(str(tmp_path))
    assert isinstance(shared.times, SharedArray)
    with pytest.raises(RuntimeError, match="taken"):  # not read through a handle: said so
        list(shared)
    back = shared.taken()
    assert [r.token_times_s.tobytes() for r in back] == [r.token_times_s.tobytes() for r in records]
    assert [r.request_id for r in back] == [0, 1, 2, 3] and _mapped(back[2].token_times_s)
