"""Send deadlines kept on one monotonic clock by a dedicated timer thread.

Why a thread: asyncio's own timers wake through epoll, whose timeout CPython rounds up to whole
milliseconds, so `asyncio.sleep` is late by 0-1 ms, uniformly: a P99 dispatch lag near 1 ms by
construction. A thread sleeping in clock_nanosleep wakes within tens of microseconds and hands
the due requests to the event loop with `call_soon_threadsafe`. Deadlines are absolute
(`start + offset`), never a chain of relative sleeps, so lateness never accumulates.
"""
from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Sequence


class Pacer:
    def __init__(self, loop: asyncio.AbstractEventLoop, deadlines: Sequence[float],
                 fire: Callable[[list], None], clock=time.monotonic, realtime: bool = False,
                 direct: Callable[[int], object] | None = None) -> None:
        """`deadlines`: absolute times on `clock`, nondecreasing; `fire(indices)` runs on `loop`.
        With `direct`, it is called on this thread for each due index first (the load generator
        writes the request itself when it can: http.py's send_direct), and `fire` gets
        (index, what `direct` returned) pairs."""
        self._loop = loop
        self._deadlines = deadlines
        self._fire = fire
        self._direct = direct
        self._clock = clock
        self._realtime = realtime
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loadgen-pacer", daemon=True)
        # When each deadline was handed to the loop (NaN: never): separates lateness of the
        # thread's wake-up (the OS, the GIL) from lateness of the event loop picking it up.
        self.handed_off = [float("nan")] * len(deadlines)

    def wake_lag(self, quantile: float) -> float:
        """The `quantile` of how late this thread handed its deadlines to the loop (NaN if none):
        lateness the OS and the GIL caused, before the event loop had any part in it."""
        late = sorted(h - d for h, d in zip(self.handed_off, self._deadlines) if h == h)
        if not late:
            return float("nan")
        return late[min(len(late) - 1, int(quantile * (len(late) - 1) + 0.5))]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        if self._realtime:
            set_realtime_priority(PACER_PRIORITY)
        deadlines, clock = self._deadlines, self._clock
        i, n = 0, len(deadlines)
        while i < n and not self._stop.is_set():
            remaining = deadlines[i] - clock()
            if remaining > 0:
                # Sleep in short slices so stop() is honoured promptly on long gaps.
                time.sleep(min(remaining, 0.1))
                continue
            due = [i]
            i += 1
            now = clock()
            while i < n and deadlines[i] <= now:  # everything already due goes in one hand-off
                due.append(i)
                i += 1
            for k in due:
                self.handed_off[k] = now
            items = due if self._direct is None else [(k, self._direct(k)) for k in due]
            try:
                self._loop.call_soon_threadsafe(self._fire, items)
            except RuntimeError:  # the loop closed under us: the run is over
                return


PACER_PRIORITY, LOOP_PRIORITY = 2, 1  # SCHED_FIFO: a due send preempts the loop reading a burst


def realtime_permitted() -> bool:
    """May this process put its threads under SCHED_FIFO (root, or CAP_SYS_NICE)? Tried on the
    calling thread and undone at once."""
    old = set_realtime_priority()
    restore_priority(old)
    return old is not None


def set_realtime_priority(priority: int = LOOP_PRIORITY) -> object | None:
    """Put the calling thread under SCHED_FIFO (not inherited by children); returns the previous
    (policy, priority) to restore, or None if not permitted here. The pacer thread runs one
    above the event loop's: at equal FIFO priority it would wait for the loop to block, which
    during a burst of reads is a millisecond or more."""
    try:
        old = (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority)
        os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(priority))
        return old
    except (AttributeError, PermissionError, OSError):
        return None


def restore_priority(old) -> None:
    if old is not None:
        try:
            os.sched_setscheduler(0, old[0], os.sched_param(old[1]))
        except OSError:
            pass
