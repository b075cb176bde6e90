"""`python -m harness.profile` on CPU writes an operator profile that the performance model's
profile reader (perf=profile) accepts, plus whole-iteration times."""
from __future__ import annotations

import csv

import pytest

torch = pytest.importorskip("torch")

from harness.profile.table import OP_COLUMNS, OPS  # noqa: E402
from harness.profile.cli import linear_grid, main  # noqa: E402


def test_profile_tables_on_cpu(tmp_path):
    out = tmp_path / "profile.csv"
    rc = main(["model=tiny-llama", "device=cpu", "threads=1", "num_tokens=1,16,128,129", "chunk_sizes=2,16",
               "context_lens=0,32", "batch_sizes=1,4", "repeats=2", "warmup=0", f"out={out}"])
    assert rc == 0
    lines = out.read_text().splitlines()
    assert lines[0].split(",") == list(OP_COLUMNS)
    ops = {line.split(",")[0] for line in lines[1:]}
    assert ops == set(OPS)
    decode = [line.split(",") for line in lines[1:] if line.startswith("attention_decode")]
    assert all(row[1] == "" and row[3] in ("1", "4") for row in decode)  # num_tokens unused -> empty
    with (tmp_path / "profile.iterations.csv").open(newline="") as f:
        its = list(csv.DictReader(f))
    assert {r["phase"] for r in its} == {"prefill", "decode", "mixed"}
    assert all(r["op"] == "iteration" and float(r["time_s"]) > 0 and r["num_layers"] == "2" for r in its)


def test_perf_model_reads_the_profile(tmp_path):
    profile = pytest.importorskip("engines.perf.measured")
    from engines.perf import Deployment

    out = tmp_path / "p.csv"
    assert main(["model=tiny-llama", "device=cpu", "threads=1", "quick=true", "no_iterations=true", f"out={out}"]) == 0
    model = profile.ProfilePerfModel(Deployment.create(model="tiny-llama", gpu="h200-141g"), out)
    assert model.iteration_time([64, 1, 1], [0, 100, 200]) > 0


def test_linear_grid_samples_both_sides_of_tiles():
    assert linear_grid(300) == [1, 2, 4, 8, 16, 32, 64, 96, 128, 129, 256, 257]


def test_profile_rejects_bad_grid():
    with pytest.raises(SystemExit):
        main(["num_tokens=a,b"])
    with pytest.raises(SystemExit):
        main(["--num-tokens", "a,b"])  # the old spelling is read the same way


def test_profile_unknown_key_is_one_line(capsys):
    assert main(["max_token=64"]) == 2
    assert "did you mean 'max_tokens'" in capsys.readouterr().err
