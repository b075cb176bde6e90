"""`python -m harness.profile` writes the documented profile table on CPU."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from harness.profile import COLUMNS, OPS, read_table  # noqa: E402
from harness.profile.cli import main  # noqa: E402


def test_profile_table_on_cpu(tmp_path):
    out = tmp_path / "profile.csv"
    rc = main(["--model", "tiny-llama", "--device", "cpu", "--threads", "1", "--num-tokens", "1,16",
               "--context-lens", "0,32", "--batch-sizes", "1,4", "--repeats", "2", "--warmup", "0",
               "--out", str(out)])
    assert rc == 0
    assert out.read_text().splitlines()[0].split(",") == list(COLUMNS)
    rows = read_table(out)
    assert {r.op for r in rows} == set(OPS)
    assert all(r.time_s > 0 and r.time_s_min <= r.time_s and r.tp == 1 for r in rows)
    it = [r for r in rows if r.op == "iteration"]
    assert {r.phase for r in it} == {"prefill", "decode", "mixed"}
    assert all(r.layers == 2 for r in it)
    decode = {(r.batch_size, r.context_len) for r in rows if r.op == "attention" and r.phase == "decode"}
    assert decode == {(1, 1), (1, 32), (4, 1), (4, 32)}


def test_profile_rejects_bad_grid(capsys):
    with pytest.raises(SystemExit):
        main(["--num-tokens", "a,b"])
