"""Operator fidelity (issue 14 item 1): the committed sample of Vidur's measured operators loads and
prices, the model meets its MAPE bounds on it under the default stack (and the `ideal` stack does
not: the stack is applied), the benchmark and the report's figure price through the same code, the
figure is drawn, and the sample is what `validate_operators.py --write-sample` regenerates."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PathCollection

from engines.perf import operators as ops
from engines.perf.hardware import get_topology
from engines.perf.kernels import DEFAULT_STACK
from harness.analysis.perf_model import operator_fidelity as of
from harness.analysis import style
from harness.analysis.perf_model import vidur_points as vp
from harness.analysis.perf_model.fidelity_figure import PANELS, fig_operator_fidelity

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks" / "validate_operators.py"
# The default stack's MAPE (%) on the sample, per family and GPU, must stay under these (the model
# today: 5-10 % for GEMMs, elementwise and embedding, 9.0 prefill and 8.3 decode attention (the
# split-KV kernel, engines/perf/split_kv.py); the collectives on their measured link curves
# 2.8-8.6 %, the 10 % goal, as decode attention). The elementwise pieces (ew.*) are looser:
# regression guards.
BOUND = {**{f: 12.0 for f in [*of.GEMM_OPS, "elementwise", "embedding", *of.ATTENTION]},
         **{f: 20.0 for f in of.ELEMENTWISE}, "attn_decode": 10.0, "all_reduce": 10.0, "send_recv": 10.0}
# Families the measured kernels fixed: the `ideal` stack is at least this many times worse.
IDEAL_WORSE = {"elementwise": 2.0, "embedding": 2.0, "attn_prefill": 2.0, "attn_decode": 2.0}


@pytest.fixture(scope="module")
def sample() -> pd.DataFrame:
    return vp.load_sample()


@pytest.fixture(scope="module")
def priced(sample) -> dict[str, pd.DataFrame]:
    return {stack: of.price(sample, stack) for stack in (DEFAULT_STACK, "ideal")}


def _bench():
    spec = importlib.util.spec_from_file_location("validate_operators", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_sample_is_small_derived_and_says_where_it_came_from(sample):
    text = vp.SAMPLE_FILE.read_text()
    assert len(text.encode()) < 300_000
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    for must in ("microsoft/vidur", "7d47513", "MIT", "--write-sample", "no predictions"):
        assert must in header, must
    assert list(sample.columns) == vp.POINT_COLUMNS  # shapes and measurements, nothing priced
    assert not {"predicted_s", "signed_err_pct"} & set(pd.read_csv(vp.SAMPLE_FILE, comment="#").columns)
    assert 1000 < len(sample) < 5000
    assert set(sample["family"]) == set(of.FAMILY_ORDER)
    assert (sample["measured_s"] > 0).all()
    assert set(sample["gpu"]) == {"a100", "a40", *of.NETWORKS}
    assert (README := ROOT / "data" / "perf" / "README.md").is_file() and "7d47513" in README.read_text()


def test_every_sample_point_prices(sample, priced):
    for pts in priced.values():
        assert pts.index.equals(sample.index) and (pts["measured_s"] == sample["measured_s"]).all()
        assert np.isfinite(pts["predicted_s"]).all() and (pts["predicted_s"] > 0).all()
        assert pts.loc[pts["family"].isin(of.GEMM_OPS), ["gemm_k", "gemm_n"]].notna().all().all()
        assert pts.loc[pts["family"].isin(of.COLLECTIVES), "link"].notna().all()


def test_default_stack_meets_its_bounds_and_ideal_does_not(priced):
    mape = {s: of.summarize(p, ["family", "gpu"]).set_index(["family", "gpu"])["mape_pct"] for s, p in priced.items()}
    over = {k: round(v, 1) for k, v in mape[DEFAULT_STACK].items() if v > BOUND[k[0]]}
    assert not over, f"MAPE % over the bound: {over}"
    pooled = {s: of.summarize(p, ["family"]).set_index("family")["mape_pct"] for s, p in priced.items()}
    for fam, factor in IDEAL_WORSE.items():  # fails if the stack stopped being applied
        assert pooled["ideal"][fam] > factor * pooled[DEFAULT_STACK][fam], fam
    assert pooled["ideal"][list(of.GEMM_OPS)].mean() > 1.4 * pooled[DEFAULT_STACK][list(of.GEMM_OPS)].mean()
    for fam in of.COLLECTIVES:  # links are hardware: the same under both stacks
        assert pooled["ideal"][fam] == pytest.approx(pooled[DEFAULT_STACK][fam])


def test_a_collective_is_priced_as_the_link_says(sample, priced):
    pts = priced[DEFAULT_STACK]
    r = pts[(pts["family"] == "all_reduce") & (pts["gpu"] == "a100_dgx")].iloc[0]
    link = get_topology("dgx-a100", gpus_per_node=int(r["devices_per_node"])).ring_link(0, int(r["num_workers"]))
    assert r["link"] == link.name
    assert r["predicted_s"] == pytest.approx(float(ops.allreduce_time(r["size_bytes"], int(r["num_workers"]), link)))


def test_elementwise_is_the_sum_of_its_pieces(priced):
    pts = priced[DEFAULT_STACK]
    key = ["gpu", "model", "tp", "num_tokens"]
    total = pts[pts["family"] == "elementwise"].set_index(key)
    pieces = pts[pts["family"].isin(of.ELEMENTWISE)].groupby(key)[["measured_s", "predicted_s"]].sum()
    both = total.join(pieces.add_suffix("_sum"), how="inner")
    assert len(both) > 100
    np.testing.assert_allclose(both["predicted_s"], both["predicted_s_sum"], rtol=1e-12)
    np.testing.assert_allclose(both["measured_s"], both["measured_s_sum"], rtol=1e-5)  # 6 digits in the file


def test_the_benchmark_and_the_figure_price_through_one_function(sample, priced):
    bench = _bench()
    assert bench.price is of.price and bench.summarize is of.summarize and bench.measured_points is vp.measured_points
    # What the benchmark would compute for these points is what the figure draws.
    sub = sample.groupby("family", sort=False).head(20)
    ours = bench.ordered(bench.price(sub, DEFAULT_STACK, "pcie"))
    fig = fig_operator_fidelity(sub)
    try:
        drawn = {}
        for ax, (title, families) in zip(fig.axes, PANELS):
            assert ax.get_title().startswith(title) and "MAPE" in ax.get_title()
            drawn[families] = np.sort(np.concatenate([c.get_offsets()[:, 1] for c in ax.collections
                                                      if isinstance(c, PathCollection)]))  # the scatters
        for families, ys in drawn.items():
            want = np.sort(ours.loc[ours["family"].isin(families), "predicted_s"].to_numpy() * 1e3)
            np.testing.assert_allclose(ys, want, rtol=1e-12)
    finally:
        style.close(fig)


def test_the_figure_is_drawn(tmp_path, priced):
    fig = fig_operator_fidelity()
    try:
        visible = [ax for ax in fig.axes if ax.get_visible()]
        assert len(visible) == len(PANELS) + 1
        default = of.mape_pct(priced[DEFAULT_STACK][priced[DEFAULT_STACK]["family"].isin(of.GEMM_OPS)])
        assert f"MAPE {default:.1f} %" in visible[0].get_title() and "ideal stack" in visible[0].get_title()
        path = style.save(fig, tmp_path / "perf_operator_fidelity.png")
    finally:
        style.close(fig)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 150_000


def test_the_stratified_sample_keeps_every_stratum():
    pts = pd.DataFrame({"family": ["mlp_up_proj"] * 50 + ["send_recv"] * 5, "gpu": ["a40"] * 50 + ["a100_dgx"] * 5,
                        "model": ["Llama-2-7b-hf"] * 50 + [""] * 5, "tp": [1] * 50 + [2] * 5,
                        "num_tokens": list(range(50, 0, -1)) + [np.nan] * 5, "num_workers": [np.nan] * 50 + [2] * 5,
                        "devices_per_node": [np.nan] * 50 + [1] * 5, "size_bytes": [np.nan] * 50 + [5, 4, 3, 2, 1],
                        "batch_size": np.nan, "context": np.nan, "measured_s": 1e-3})
    s = vp.stratified_sample(pts, fraction=0.1, minimum=3)
    assert s["family"].value_counts().to_dict() == {"mlp_up_proj": 5, "send_recv": 3}  # 50 x 0.1; the minimum
    assert sorted(s.loc[s["family"] == "mlp_up_proj", "num_tokens"]) == [6, 16, 26, 36, 46]  # slice middles
    assert sorted(s.loc[s["family"] == "send_recv", "size_bytes"]) == [1, 3, 5]
    assert s.equals(vp.stratified_sample(pts, fraction=0.1, minimum=3))


@pytest.mark.skipif(not (vp.VIDUR_DIR / "compute").is_dir(),
                    reason=f"Vidur's full profiles are not at {vp.VIDUR_DIR} (../shared is not in every checkout)")
def test_the_committed_sample_is_what_write_sample_regenerates(tmp_path):
    bench = _bench()
    out = tmp_path / "sample.csv"
    argv, sys.argv = sys.argv, [str(BENCH), "--write-sample", str(out)]
    try:
        bench.main()
    finally:
        sys.argv = argv
    assert out.read_text() == vp.SAMPLE_FILE.read_text(), "regenerate: python benchmarks/validate_operators.py " \
                                                          "--write-sample data/perf/vidur_operator_sample.csv"


def test_the_report_says_where_the_figure_comes_from(tmp_path):
    from harness.analysis.perf_model.perf_figures import FIGURES
    from harness.analysis.perf_model.report import perf_figures_section

    assert "perf_operator_fidelity" in dict(FIGURES)
    text = "\n".join(perf_figures_section([tmp_path / "perf" / "perf_operator_fidelity.png"], tmp_path))
    assert "### operator fidelity" in text and "data/perf/vidur_operator_sample.csv" in text
    assert "![operator fidelity](perf/perf_operator_fidelity.png)" in text
