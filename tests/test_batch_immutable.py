"""Batch and StepOutput are frozen dataclasses to their callers, though their constructors are
written out (compiled: engines/core/batch.py): assignment refuses, equality and replace() are
the dataclass's, by field."""
from __future__ import annotations

import dataclasses

import pytest

from engines.core import Batch, Sequence, StepOutput


def test_a_batch_is_a_frozen_dataclass():
    seq = Sequence(0, 8, 2)
    batch = Batch.mixed([], [seq], [8])
    assert batch == Batch(seqs=(seq,), new_tokens=(8,), context_lens=(0,), is_prefill=(True,))
    assert hash(batch) == hash(Batch((seq,), (8,), (0,), (True,)))
    assert [f.name for f in dataclasses.fields(batch)] == ["seqs", "new_tokens", "context_lens", "is_prefill"]
    assert dataclasses.replace(batch, new_tokens=(4,)).new_tokens == (4,)
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch.new_tokens = (1,)  # type: ignore[misc]
    assert batch.new_tokens == (8,)


def test_a_step_output_is_a_frozen_dataclass():
    seq = Sequence(0, 8, 2)
    out = StepOutput((seq,), ())
    assert out == StepOutput(produced=(seq,), finished=())
    with pytest.raises(dataclasses.FrozenInstanceError):
        out.finished = (seq,)  # type: ignore[misc]
    assert out.finished == ()
