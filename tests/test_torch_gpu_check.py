"""scripts/gpu_check.sh's Python part runs end to end on CPU with a tiny model (--tiny), so the
GPU run only differs in sizes and device."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("engines.perf")

CHECK = Path(__file__).resolve().parent.parent / "scripts" / "gpu_check" / "check.py"


def test_gpu_check_tiny_on_cpu(tmp_path):
    spec = importlib.util.spec_from_file_location("gpu_check", CHECK)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rc = mod.main(["--tiny", "--requests", "8", "--qps", "40", "--out", str(tmp_path), "--budget-s", "120"])
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert rc == 0, report
    assert report["correctness"]["passed"]
    sources = {(r["policy"], r["source"]) for r in report["serving"]}
    assert sources == {("sarathi", "torch"), ("sarathi", "perf-model"), ("vllm", "torch"), ("vllm", "perf-model")}
    assert all(r["completed"] == 8 for r in report["serving"])
    assert all("predicted_s" in r for r in report["iterations"])
    assert (tmp_path / "serving.csv").exists() and (tmp_path / "iterations.csv").exists()


def test_gpu_names_map_to_the_catalog():
    spec = importlib.util.spec_from_file_location("gpu_check", CHECK)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.gpu_catalog_key("NVIDIA H200") == "h200-141g"
    assert mod.gpu_catalog_key("NVIDIA A100-SXM4-80GB") == "a100-80g-sxm"
    assert mod.gpu_catalog_key("NVIDIA A40") == "a40-48g"
    assert mod.gpu_catalog_key("Tesla T4") is None
