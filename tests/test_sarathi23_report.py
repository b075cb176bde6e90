"""The first Sarathi paper's section of the report (harness/analysis/sarathi23): the published
numbers' file, claims computed from runs and from the model (a missing run says so, never passes),
runs judged against their cells (others left out, with why), the figures, the markdown, and the
nightly drift check of offline runs."""
from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from omegaconf import OmegaConf

from harness.analysis.drift import Tolerances, compare
from harness.analysis.offline_runs import load_offline
from harness.analysis.sarathi23 import STUDY, report
from harness.analysis.sarathi23.claims import CLAIMS_FILE, claim_table, load_claims, model_value
from harness.analysis.sarathi23.matrix import sarathi23_cells
from harness.config import compose
from tests.cli import ROOT

CELL = "sarathi23_gain_llama13b_1k"


def test_the_claims_file_is_complete():
    claims = load_claims()
    assert len({c.id for c in claims}) == len(claims) >= 20
    assert all(c.source and c.claim for c in claims)
    names = {c.name for c in sarathi23_cells()}
    for c in claims:  # every run a claim reads is a cell of the matrix
        for side in (c.params, c.params.get("numerator") or {}, c.params.get("denominator") or {}):
            if "experiment" in side:
                assert side["experiment"] in names, c.id
        if "prefix" in c.params:
            assert any(n.startswith(c.params["prefix"]) for n in names), c.id


@pytest.mark.parametrize("field", ["kind", "role"])  # role: check | input | shown
def test_a_bad_claim_is_named(tmp_path, field):
    raw = yaml.safe_load(CLAIMS_FILE.read_text())
    raw["claims"][3][field] = "guess"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match=f"claim {raw['claims'][3]['id']}: {field} 'guess'"):
        load_claims(bad)


def test_every_tolerance_is_relative_with_its_reason(tmp_path):
    claims = load_claims()
    assert all(c.tolerance.rel is not None and c.tolerance_reason for c in claims)
    raw = yaml.safe_load(CLAIMS_FILE.read_text())
    for change, error in (({"tolerance": {"abs": 0.1}}, "must be relative"), ({"tolerance_reason": " "}, "one-line reason")):
        bad = tmp_path / "bad.yaml"
        bad.write_text(yaml.safe_dump({"claims": [{**raw["claims"][0], **change}]}))
        with pytest.raises(ValueError, match=error):
            load_claims(bad)
    bound = next(c for c in claims if c.sense == "at_least")  # "over 2x": within from 2 x (1 - rel) up
    assert bound.within(bound.value * 10) and not bound.within(bound.value * (1 - bound.tolerance.rel) * 0.99)


def test_model_claims_are_the_models_arithmetic():
    base = {"model": "llama-13b", "gpu": "rtx-a6000", "stack": "sarathi-2023"}
    step = model_value({**base, "metric": "tile_step", "tokens": [256, 257]})
    assert 0.2 < step < 0.5  # a tile boundary: 257 tokens pay for 384 rows of the GEMMs
    loss = model_value({**base, "metric": "prefill_loss", "prompt": 1024, "chunk": 256})
    assert loss == pytest.approx(model_value({**base, "metric": "prefill_ratio", "prompt": 1024, "chunk": 256}) - 1)
    grid = {**base, "chunk": 256, "tile": 128, "batches": [4, 18], "contexts": [1024, 3072]}
    hi, lo = model_value({**grid, "metric": "decode_speedup_max"}), model_value({**grid, "metric": "decode_speedup_min"})
    assert hi > lo > 1  # B 18 at 3K does not fit the A6000: left out of the grid, so lo is B 18 at 1K
    assert lo == pytest.approx(model_value({**grid, "contexts": [1024], "metric": "decode_speedup_min"}))


def test_missing_runs_are_said_never_passed():
    table = claim_table(load_claims(), pd.DataFrame(columns=["experiment", "scheduler", "pd_ratio"]))
    runs = table[table["kind"] != "model"]
    assert runs["within"].isna().all() and runs["reproduced"].isna().all()
    assert runs["note"].str.startswith("not computed: no run of").all()
    model = table[table["kind"] == "model"]
    assert model[model["role"] == "check"]["within"].notna().all() and model[model["role"] == "input"]["within"].isna().all()


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """Two offline runs of the 1K LLaMA-13B cell: one at the cell's settings (but 24 requests, so
    the cell's config is given with 24), one with another P:D (left out)."""
    root = tmp_path_factory.mktemp("s23")
    results = root / "results"
    base = ["experiment=sarathi23_gain", f"name={CELL}", "search.num_requests=24", f"results_dir={results}", "progress=false"]
    for extra in ([], ["dataset.synthetic.pd_ratio=20"]):
        p = subprocess.run([sys.executable, "-m", "harness", *base, *extra], capture_output=True, text=True, cwd=ROOT,
                           timeout=300)
        assert p.returncode == 0, p.stderr
    cell = OmegaConf.to_container(compose(base), resolve=True)
    return results, {CELL: cell}


def test_the_section_reads_the_run_at_its_cells_settings(study, tmp_path):
    results, cells = study
    drawn, s = report.load_study(results, None, cells)
    assert list(drawn.runs["experiment"].unique()) == [CELL] and len(drawn.runs) == 2
    assert drawn.left_out["settings"].str.contains("dataset.synthetic.pd_ratio=20").all()
    outcomes = STUDY.draw_figures(s, tmp_path)
    built = {o.name: o for o in outcomes}
    assert built["sarathi23_tile_quantization"].path is not None and built["sarathi23_decode_speedup"].path is not None
    assert "no offline runs of sarathi23_pd_c256_b18_pd" in built["sarathi23_pd_sweep"].skipped
    text = "\n".join(report.section(drawn, s, outcomes, tmp_path, results))
    assert "# Sarathi (2023)" in text and "1 run(s) left out" in text
    gain = claim_table(s.claims, drawn.runs).set_index("id").loc["gain_llama13b_1k"]
    dm = drawn.runs[drawn.runs["scheduler"] == "decode_maximal"].iloc[0]
    assert gain["reproduced"] == pytest.approx(dm["gain"]) and not math.isnan(gain["reproduced"])
    row = next(line for line in text.splitlines() if line.startswith("| LLaMA-13B / A6000, 1K, B 6, P:D 50: throughput gain"))
    assert ("within" in row) == bool(gain["within"])
    assert "not reproduced (missing results)" in text  # the pipeline rows, whose runs were not made


def test_the_nightly_check_compares_offline_throughput(study, tmp_path):
    results, _ = study
    ref = tmp_path / "ref"
    shutil.copytree(results, ref)
    ok = compare(results, ref, Tolerances(capacity_rel=0.0))
    offline = [r for r in ok.rows if r.cell[10] == "offline"]
    assert ok.passed and len(offline) == 2  # the newest run of the cell, both schedulers
    summary = sorted(ref.glob(f"{CELL}/*/summary.json"))[-1]  # the newest: the one compared
    s = json.loads(summary.read_text())
    s["offline"]["decode_maximal"]["token_throughput"] *= 1.01
    summary.write_text(json.dumps(s))
    drifted = compare(results, ref, Tolerances(capacity_rel=0.005))
    assert not drifted.passed and [r.cell[-1] for r in drifted.failures] == ["decode_maximal"]
    assert len(load_offline(ref)) == 4
