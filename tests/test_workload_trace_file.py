"""Trace files (CSV/JSONL): validation errors name file and row; filtering; sampling modes."""
import json

import numpy as np
import pytest

from common.errors import HarnessError
from harness.workload import load_workload


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def ds(path, **kw):
    return {"name": "t", "trace_file": str(path), "max_total_tokens": 8192, **kw}


GOOD = "num_prefill_tokens,num_decode_tokens\n" + "".join(f"{10 + i},{1 + i}\n" for i in range(50))


def test_missing_file(tmp_path):
    with pytest.raises(HarnessError, match="not found.*nope.csv"):
        load_workload(ds(tmp_path / "nope.csv"), 5, 0)


def test_empty_file(tmp_path):
    p = write(tmp_path, "empty.csv", "")
    with pytest.raises(HarnessError, match=r"empty\.csv: empty file"):
        load_workload(ds(p), 5, 0)


def test_header_only(tmp_path):
    p = write(tmp_path, "h.csv", "num_prefill_tokens,num_decode_tokens\n")
    with pytest.raises(HarnessError, match=r"h\.csv: no data rows"):
        load_workload(ds(p), 5, 0)


def test_missing_column(tmp_path):
    p = write(tmp_path, "m.csv", "num_prefill_tokens,foo\n1,2\n")
    with pytest.raises(HarnessError, match=r"m\.csv: missing column\(s\) num_decode_tokens"):
        load_workload(ds(p), 5, 0)


@pytest.mark.parametrize("bad", ["-3", "2.5", "abc", ""])
def test_bad_value_names_file_row_column_value(tmp_path, bad):
    p = write(tmp_path, "b.csv", f"num_prefill_tokens,num_decode_tokens\n5,6\n7,8\n9,{bad}\n")
    with pytest.raises(HarnessError) as e:
        load_workload(ds(p), 2, 0)
    msg = str(e.value)
    assert "b.csv" in msg and "row 3 (line 4)" in msg and "num_decode_tokens" in msg and repr(bad) in msg


def test_integral_floats_accepted(tmp_path):
    p = write(tmp_path, "f.csv", "num_prefill_tokens,num_decode_tokens\n5.0,6\n")
    w = load_workload(ds(p), 1, 0)
    assert w.prompt_lens.tolist() == [5]


def test_filter_and_zero_output_dropped_with_counts(tmp_path):
    p = write(tmp_path, "z.csv", "num_prefill_tokens,num_decode_tokens\n5,0\n8000,500\n10,20\n0,4\n")
    w = load_workload(ds(p), 3, 0)
    assert set(w.prompt_lens.tolist()) == {10}
    assert "1 over max_total_tokens dropped" in w.source and "2 with 0 prompt or output tokens dropped" in w.source


def test_all_rows_dropped(tmp_path):
    p = write(tmp_path, "a.csv", "num_prefill_tokens,num_decode_tokens\n9000,5\n")
    with pytest.raises(HarnessError, match="all 1 rows dropped"):
        load_workload(ds(p), 1, 0)


def test_shuffle_is_seeded_permutation_with_passes(tmp_path):
    p = write(tmp_path, "g.csv", GOOD)
    a = load_workload(ds(p), 50, 3)
    assert sorted(a.prompt_lens.tolist()) == list(range(10, 60))  # each row once per pass
    assert np.array_equal(a.prompt_lens, load_workload(ds(p), 50, 3).prompt_lens)
    b = load_workload(ds(p), 120, 3)
    assert np.bincount(b.prompt_lens - 10).max() == 3 and b.prompt_lens.size == 120
    # the output length stays paired with its prompt
    assert np.array_equal(b.output_lens, b.prompt_lens - 9)


def test_sequential(tmp_path):
    p = write(tmp_path, "g.csv", GOOD)
    w = load_workload(ds(p, sampling="sequential"), 5, 0)
    assert w.prompt_lens.tolist() == [10, 11, 12, 13, 14]
    with pytest.raises(HarnessError, match="only 50 rows"):
        load_workload(ds(p, sampling="sequential"), 51, 0)


def test_jsonl(tmp_path):
    lines = [json.dumps({"num_prefill_tokens": 3, "num_decode_tokens": 4}), "", json.dumps({"num_prefill_tokens": 5, "num_decode_tokens": 6})]
    p = write(tmp_path, "t.jsonl", "\n".join(lines) + "\n")
    w = load_workload(ds(p, sampling="sequential"), 2, 0)
    assert w.prompt_lens.tolist() == [3, 5] and w.output_lens.tolist() == [4, 6]


def test_jsonl_bad_record(tmp_path):
    p = write(tmp_path, "t.jsonl", '{"num_prefill_tokens": 3, "num_decode_tokens": 4}\n{"num_prefill_tokens": 3, "num_decode_tokens": -1}\n')
    with pytest.raises(HarnessError, match=r"t\.jsonl: record 2: num_decode_tokens = '-1'"):
        load_workload(ds(p), 2, 0)


def test_jsonl_bad_json(tmp_path):
    p = write(tmp_path, "t.jsonl", '{"num_prefill_tokens": 3\n')
    with pytest.raises(HarnessError, match=r"t\.jsonl: line 1: invalid JSON"):
        load_workload(ds(p), 2, 0)


def test_bad_max_total(tmp_path):
    p = write(tmp_path, "g.csv", GOOD)
    with pytest.raises(HarnessError, match="max_total_tokens"):
        load_workload(ds(p, max_total_tokens="big"), 2, 0)


def test_relative_path_falls_back_to_repo_root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # e.g. a Hydra run directory
    w = load_workload(ds("tests/fixtures/workload/trace_with_arrivals.csv", sampling="sequential"), 2, 0)
    assert w.prompt_lens.tolist() == [100, 200]
    assert "tests/fixtures/workload/trace_with_arrivals.csv" in w.source
