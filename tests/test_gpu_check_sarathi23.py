"""scripts/gpu_check's phase for the first Sarathi paper's three basic batches: the shapes are the
paper's, the arithmetic from four times to a decode speedup, the model it picks for a device, and
the phase end to end on CPU with the tiny model (on a GPU it differs in sizes and device)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from scripts.gpu_check.sarathi_batches import derived, pick_model, shapes

CHECK = Path(__file__).resolve().parent.parent / "scripts" / "gpu_check" / "check.py"
GiB = 1024**3


def test_the_papers_batches():
    (p, prefill), (d, decode), (h, hybrid), (_, alone) = shapes(1024)
    assert prefill == [(0, 1024)] and decode == [(1024, 1)] * 4
    assert hybrid == [(0, 1021)] + [(1024, 1)] * 3 and sum(n for _, n in hybrid) == 1024 and alone == [(0, 1021)]


def test_decode_speedup_arithmetic():
    # decode-only: 40 ms for 4 tokens (10 ms each); hybrid 103 ms, the prefill alone 100 ms: 1 ms a riding decode
    out = derived([0.101, 0.040, 0.103, 0.100])
    assert out["decode_s_per_token"] == pytest.approx(0.010) and out["riding_decode_s"] == pytest.approx(0.001)
    assert out["decode_speedup"] == pytest.approx(10.0) and out["hybrid_over_prefill"] == pytest.approx(0.103 / 0.101)
    assert derived([0.1, 0.04, 0.099, 0.1])["decode_speedup"] is None  # below the timing noise: not a number


def test_the_largest_shape_that_fits():
    assert pick_model(141 * GiB) == "llama-13b" and pick_model(48 * GiB) == "llama-13b"
    assert pick_model(24 * GiB) == "llama2-7b" and pick_model(8 * GiB) is None


def test_the_phase_runs_on_cpu(tmp_path):
    spec = importlib.util.spec_from_file_location("gpu_check", CHECK)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.gpu_catalog_key("NVIDIA RTX A6000") == "rtx-a6000-48g"
    rc = mod.main(["--tiny", "--phases", "sarathi23", "--out", str(tmp_path), "--budget-s", "120"])
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert rc == 0, report
    s = report["sarathi23_batches"]
    assert s["model"] == "tiny-llama" and [b["batch"] for b in s["batches"]] == [n for n, _ in shapes(64)]
    assert all(b["measured_s"] > 0 for b in s["batches"]) and "decode_speedup" in s["measured"]
