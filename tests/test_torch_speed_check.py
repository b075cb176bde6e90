"""scripts/gpu_speed_check.py without a GPU: bad arguments and a missing CUDA device are refused
in one line with exit 2; --tiny runs the whole pipeline on CPU (greedy-token agreement, every
shape timed, the table with the performance model's vllm-0.32 price) and exits 0."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("engines.perf")
pytest.importorskip("torch.nn.attention.flex_attention")

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gpu_speed_check.py"


@pytest.fixture(scope="module")
def mod():
    spec = importlib.util.spec_from_file_location("gpu_speed_check", SCRIPT)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


@pytest.mark.parametrize("argv,message", [
    (["--tiny", "--configs", "eager,fast"], "unknown ['fast']"),
    (["--tiny", "--configs", ","], "unknown empty"),
    (["--tiny", "--repeats", "0"], "--repeats"),
    (["--tiny", "--budget-s", "x"], "invalid float"),
    (["--no-such-flag"], "unrecognized arguments"),
])
def test_bad_arguments_exit_2_in_one_line(mod, capsys, argv, message):
    assert mod.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_refuses_without_cuda(mod, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert mod.main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu_speed_check: needs a CUDA device") and err.count("\n") == 1
    assert not list(tmp_path.iterdir())  # nothing written


def test_shapes_hold_the_papers_three_batches_and_the_grid(mod):
    names = [n for n, _ in mod.shapes(tiny=False)]
    assert names[:3] == ["paper: prefill 1024", "paper: decode 4 x ctx 1024", "paper: prefill 1021 + 3 decodes"]
    assert "decode 32 x ctx 4096" in names and "prefill 2048" in names
    assert mod.executor_options("graphs", (1, 4), tiny=False) == {
        "attention_backend": "flex", "cuda_graphs": True, "graph_sizes": (1, 4), "compile_elementwise": True}


def test_tiny_pipeline_on_cpu(mod, tmp_path, capsys):
    assert mod.main(["--tiny", "--configs", "eager,graphs", "--repeats", "1", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "speed_check.json").read_text())
    assert report["passed"] and report["tokens"] == {"eager": "same as eager", "graphs": "same as eager"}
    shapes = [n for n, _ in mod.shapes(tiny=True)]
    for config in ("eager", "graphs"):
        assert all("s" in report["results"][config][n] for n in shapes)
    modes = {n: r["mode"] for n, r in report["results"]["graphs"].items()}
    assert modes["decode 4 x ctx 32"] == "static" and modes["prefill 16"] == "eager"
    assert set(report["prices_s"]) == set(shapes) and report["stack"] == "vllm-0.32"
    out = capsys.readouterr().out
    assert "vllm-0.32 model" in out and "graphs/model" in out


def test_a_configuration_that_fails_is_reported_and_the_rest_still_run(mod, monkeypatch, tmp_path, capsys):
    real = mod.executor_options

    def broken(config, sizes, tiny):
        return {"attention_backend": "flash_attn"} if config == "flex" else real(config, sizes, tiny)  # no CUDA here

    monkeypatch.setattr(mod, "executor_options", broken)
    assert mod.main(["--tiny", "--configs", "eager,flex", "--repeats", "1", "--out", str(tmp_path)]) == 1
    report = json.loads((tmp_path / "speed_check.json").read_text())
    assert "not available" in report["errors"]["flex"] and not report["passed"]
    assert all("s" in r for r in report["results"]["eager"].values())
    assert "FAILED" in capsys.readouterr().out
