"""scripts/gpu_check without a GPU: bad arguments and a missing CUDA device are refused in one line
with exit 2 (nothing written); the phases share the budget; --tiny runs the pipeline on CPU (greedy
tokens of every configuration against the reference backend, every shape timed beside the
performance model's vllm-0.32 price, both policies served and saved as run files validate reads,
one table) and exits 0; a configuration that cannot start is reported while the rest still run."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("engines.perf")
pytest.importorskip("torch.nn.attention.flex_attention")

CHECK = Path(__file__).resolve().parent.parent / "scripts" / "gpu_check" / "check.py"


@pytest.fixture(scope="module")
def mod():
    spec = importlib.util.spec_from_file_location("gpu_check", CHECK)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


@pytest.mark.parametrize("argv,message", [
    (["--tiny", "--configs", "eager,fast"], "unknown ['fast']"),
    (["--tiny", "--configs", ","], "unknown empty"),
    (["--tiny", "--phases", "speed"], "--phases: unknown ['speed']"),
    (["--tiny", "--policies", "sarathi,fifo"], "--policies: unknown ['fifo']"),
    (["--tiny", "--qps", "6,x"], "--qps"),
    (["--tiny", "--qps", "0"], "--qps must be > 0"),
    (["--tiny", "--repeats", "0"], "--repeats"),
    (["--tiny", "--budget-s", "x"], "invalid float"),
    (["--tiny", "--serve-with", "fast"], "invalid choice"),
    (["--no-such-flag"], "unrecognized arguments"),
])
def test_bad_arguments_exit_2_in_one_line(mod, capsys, argv, message):
    assert mod.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu_check: ") and message in err and err.count("\n") == 1


def test_refuses_without_cuda(mod, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert mod.main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu_check: needs a CUDA device") and err.count("\n") == 1
    assert not list(tmp_path.iterdir())  # nothing written


def test_phases_share_the_time_left(mod):
    assert mod.share_deadline(100.0, 200.0, [1, 3]) == pytest.approx(125.0)
    assert mod.share_deadline(100.0, 200.0, [2]) == pytest.approx(200.0)  # the last phase gets all that is left
    assert mod.share_deadline(250.0, 200.0, [1, 1]) == pytest.approx(250.0)  # late: nothing
    assert sum(mod.PHASES.values()) <= 450  # the default budget holds every phase's planned share


def test_shapes_hold_the_papers_three_batches_the_grid_and_mixed_steps():
    from scripts.gpu_check.speed import GRAPH_SIZES, executor_options, shapes
    from engines.executors.torch.buckets import capture_sizes

    names = [n for n, _ in shapes(tiny=False)]
    assert names[:3] == ["paper: prefill 1024", "paper: decode 4 x ctx 1024", "paper: prefill 1021 + 3 decodes"]
    assert {"decode 32 x ctx 4096", "decode 1 x ctx 1024", "prefill 2048", "mixed 480 + 32 decodes ctx 1024"} <= set(names)
    assert set(GRAPH_SIZES) <= set(capture_sizes(128, 512))  # a subset of vLLM's sizes for the served policy
    assert executor_options("graphs", tiny=False) == {
        "attention_backend": "flex", "cuda_graphs": True, "compile_elementwise": True, "graph_sizes": GRAPH_SIZES,
        "graph_max_seqs": 128}


def test_tiny_pipeline_on_cpu(mod, tmp_path, capsys):
    from harness.validate.runfile import read_run

    rc = mod.main(["--tiny", "--configs", "eager,graphs", "--phases", "tokens,iterations,serving", "--requests", "4",
                   "--repeats", "1", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert rc == 0 and report["passed"], report["errors"]
    assert {c: t["same"] for c, t in report["tokens"].items()} == {"eager": True, "graphs": True}
    assert report["tokens"]["graphs"]["paths"] == ["eager", "static/decode", "static/mixed"]
    shapes = [n for n, _ in report["table_shapes"]]
    for config in ("eager", "graphs"):
        assert all("s" in report["results"][config][n] for n in shapes)
    graphs = report["results"]["graphs"]
    assert (graphs["decode 4 x ctx 32"]["mode"], graphs["decode 4 x ctx 32"]["graph"]) == ("static", "decode")
    assert (graphs["mixed 28 + 4 decodes ctx 32"]["graph"], graphs["mixed 28 + 4 decodes ctx 32"]["padded"]) == ("mixed", 32)
    assert set(report["prices_s"]) == set(shapes) and report["stack"] == "vllm-0.32"
    runs = {(r["policy"], r["source"]) for r in report["serving"]}
    assert runs == {("sarathi", "torch"), ("sarathi", "model"), ("vllm", "torch"), ("vllm", "model")}
    assert report["serving_config"] == "graphs" and all(r["completed"] == 4 for r in report["serving"])
    for policy in ("sarathi", "vllm"):
        assert len(read_run(tmp_path / f"requests_{policy}_qps40.jsonl").records) == 4
    out = capsys.readouterr().out
    table = (tmp_path / "gpu_check.txt").read_text()
    assert table in out and "vllm-0.32 model" in table and "graphs/model" in table and "TBT p99 ms" in table
    assert table.rstrip().endswith("PASSED")


def test_a_configuration_that_fails_is_reported_and_the_rest_still_run(mod, monkeypatch, tmp_path, capsys):
    from scripts.gpu_check import speed

    real = speed.executor_options

    def broken(config, *args, **kw):
        return {"attention_backend": "flash_attn"} if config == "flex" else real(config, *args, **kw)  # no CUDA here

    monkeypatch.setattr(speed, "executor_options", broken)
    assert mod.main(["--tiny", "--configs", "eager,flex", "--phases", "iterations", "--repeats", "1",
                     "--out", str(tmp_path)]) == 1
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert "not available" in report["errors"]["flex"] and not report["passed"]
    assert all("s" in r for r in report["results"]["eager"].values())
    assert "FAILED: flex: " in (tmp_path / "gpu_check.txt").read_text()
