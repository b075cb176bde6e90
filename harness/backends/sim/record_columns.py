"""Records packed as columns, for a process boundary (partition.py: a worker's share coming back).

Pickling a list of `RequestRecord`s costs about 36 us a record (its dataclass and its token-time
array each pickled as objects), as much as simulating a few of them: a fleet's day returns
millions. Packed, a share's records are five arrays and a dict of the few errors, pickled at
memory speed (Ray ships arrays without a copy; a local pool's token times go through shared
memory, shared_array.py), and rebuilt on the other side with each record's token times a view of
one array. Every field comes back as it went: the same Python ints, floats
and strings, the same float64 token times (tests/test_sim_partition.py compares the records).

The columns are also a sequence of their records, each built as it is read, and give a field's
column whole (`field_column`): a record sink that reduces a fleet's day by a few fields reads
them at numpy speed instead of building 5.5 million records (some 17 CPU s in the routing
process, beside the workers on the same cores), and one that reads records gets them.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import accumulate, chain
from operator import attrgetter

import numpy as np

from harness.backends.sim.shared_array import SharedArray
from harness.records import RequestRecord

INT_FIELDS = ("request_id", "prompt_len", "output_len", "num_preemptions", "cached_tokens")
FLOAT_FIELDS = ("arrival_s", "first_scheduled_s", "first_token_s", "finished_s", "dispatched_s")


@dataclass(frozen=True)
class RecordColumns:
    ints: np.ndarray  # (n, 5) int64: the INT_FIELDS
    floats: np.ndarray  # (n, 5) float64: the FLOAT_FIELDS
    times: np.ndarray | SharedArray  # every record's token times, one after another
    ends: list[int]  # where each record's token times end in `times`
    errors: dict[int, str]  # record index -> its error (most have none)

    @staticmethod
    def pack(records: list[RequestRecord]) -> RecordColumns | None:
        """The records as columns; None if a field is not what a column gives back (an int where a
        float belongs, a numpy scalar: its repr would change), for the caller to send them as they are."""
        if any(r.token_times_s.dtype != np.float64 for r in records):
            return None
        return RecordColumns.build(
            list(map(attrgetter(*INT_FIELDS), records)), list(map(attrgetter(*FLOAT_FIELDS), records)),
            np.concatenate([r.token_times_s for r in records]) if records else np.empty(0),
            [len(r.token_times_s) for r in records], {i: r.error for i, r in enumerate(records) if r.error is not None})

    @staticmethod
    def build(ints: list[tuple], floats: list[tuple], times: np.ndarray, lengths: list[int],
              errors: dict[int, str]) -> RecordColumns | None:
        """Columns of the records whose fields are `ints` (request_id, prompt_len, output_len,
        num_preemptions, cached_tokens) and `floats` (arrival_s, first_scheduled_s, first_token_s,
        finished_s, dispatched_s), their token times one after another in `times` (`lengths` each);
        None if a field is not what a column gives back."""
        if set(map(type, chain.from_iterable(ints))) - {int} or set(map(type, chain.from_iterable(floats))) - {float}:
            return None
        return RecordColumns(np.array(ints, dtype=np.int64).reshape(len(ints), 5),
                             np.array(floats, dtype=np.float64).reshape(len(floats), 5), times,
                             list(accumulate(lengths)), errors)

    def shared(self, directory: str | None) -> RecordColumns:
        """These columns with their token times in a file of `directory` (shared_array.py), where it
        can take them: `taken` in another process maps them rather than receiving them through a pipe."""
        return replace(self, times=SharedArray.put(self.times, directory))  # type: ignore[arg-type]

    def taken(self) -> RecordColumns:
        """These columns with their token times in this process (a shared file mapped: once)."""
        return replace(self, times=self.times.take()) if isinstance(self.times, SharedArray) else self

    def __len__(self) -> int:
        return len(self.ends)

    @property
    def _times(self) -> np.ndarray:
        if isinstance(self.times, SharedArray):
            raise RuntimeError("these columns' token times are still in their shared file: read them from taken()")
        return self.times

    def __iter__(self) -> Iterator[RequestRecord]:
        times, errors = self._times, self.errors
        start = 0
        for i, ((rid, prompt, output, preempted, cached), (arrival, scheduled, first, finished, dispatched), end) in \
                enumerate(zip(self.ints.tolist(), self.floats.tolist(), self.ends)):
            yield RequestRecord(rid, arrival, prompt, output, scheduled, first, finished, times[start:end],
                                dispatched, preempted, errors.get(i), cached)
            start = end

    def __getitem__(self, i: int) -> RequestRecord:  # type: ignore[override]
        i = range(len(self))[i]  # (a negative index counts from the end; out of range raises IndexError)
        (rid, prompt, output, preempted, cached), (arrival, scheduled, first, finished, dispatched) = \
            self.ints[i].tolist(), self.floats[i].tolist()
        return RequestRecord(rid, arrival, prompt, output, scheduled, first, finished,
                             self._times[self.ends[i - 1] if i else 0:self.ends[i]],
                             dispatched, preempted, self.errors.get(i), cached)


def field_column(records: Sequence[RequestRecord], name: str) -> np.ndarray:
    """One int or float field of every record, in order: read from the columns where `records` are
    RecordColumns, from each record otherwise."""
    if isinstance(records, RecordColumns):
        if name in INT_FIELDS:
            return records.ints[:, INT_FIELDS.index(name)]
        return records.floats[:, FLOAT_FIELDS.index(name)]
    return np.array([getattr(r, name) for r in records], dtype=np.int64 if name in INT_FIELDS else np.float64)
