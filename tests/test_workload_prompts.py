"""Prompt token ids: seeded, inside the vocabulary, no special tokens, different per request."""
import numpy as np
import pytest

from common.errors import HarnessError
from harness.workload import arrival_offsets, load_workload, make_requests, prompt_token_ids, with_prompt_token_ids


def test_prompt_ids_seeded_in_vocab_without_specials():
    special = [0, 1, 2, 31999]
    a = prompt_token_ids(5000, 32000, (0, 7), special)
    assert len(a) == 5000 and a == prompt_token_ids(5000, 32000, (0, 7), special)
    arr = np.array(a)
    assert arr.min() >= 0 and arr.max() < 32000 and not np.isin(arr, special).any()
    assert len(set(a)) > 4000  # random, not one repeated id
    assert a != prompt_token_ids(5000, 32000, (0, 8), special)
    assert prompt_token_ids(3, 32000, 5) == prompt_token_ids(3, 32000, [5])


def test_tiny_vocab_and_errors():
    assert set(prompt_token_ids(100, 4, 0, [0, 1])) == {2, 3}
    with pytest.raises(HarnessError, match="every id"):
        prompt_token_ids(3, 2, 0, [0, 1])
    with pytest.raises(HarnessError, match="vocab_size"):
        prompt_token_ids(3, 0, 0)
    with pytest.raises(HarnessError, match="n_tokens"):
        prompt_token_ids(-1, 10, 0)


def test_requests_get_distinct_prompts():
    w = load_workload({"name": "openchat_sharegpt4", "max_total_tokens": 8192}, 256, 0)
    reqs = with_prompt_token_ids(make_requests(w, arrival_offsets({"name": "poisson"}, 1.0, 256, 0)), 32000, 0, [0, 1, 2])
    assert all(len(r.prompt_token_ids) == r.prompt_len for r in reqs)
    assert len({r.prompt_token_ids[0] for r in reqs}) == 256  # no two share a first block
    again = with_prompt_token_ids(make_requests(w, np.arange(1, 257.0)), 32000, 0, [0, 1, 2])
    assert [r.prompt_token_ids for r in again] == [r.prompt_token_ids for r in reqs]
