"""harness.analysis: loader round trip, paper-vs-reproduced comparisons, figures and the report,
all from the committed fixture (tests/fixtures/results: real 128-request runs, trimmed; see its
README) or from runs written here through harness.results.RunWriter."""
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from harness.analysis import style
from harness.analysis.serve.capacity_figs import MissingResults, fig_capacity, fig_capacity_vs_slo, fig_pipeline
from harness.analysis.serve.compare import (
    capacity_ratio_table,
    common_qps,
    latency_ratio_table,
    paper_config,
    table4_frame,
    table4_orderings,
)
from harness.analysis.figures import build_figure, load_inputs
from harness.analysis.studies import STUDIES
from harness.analysis.study import capacity_runs
from harness.analysis.serve.latency_figs import fig_stall, pick_stall
from harness.analysis.loader import load_probes, load_requests, load_runs, load_token_times
from harness.analysis.paper import Tolerance, load_paper
from harness.analysis.report import write_report
from harness.analysis.trim import trim_run
from harness.records import RequestRecord
from harness.results.store import RunWriter, records_frame, token_frame

FIXTURE = Path(__file__).parent / "fixtures" / "results"

# the figures the capacity runs draw (Sarathi-Serve, P/D, prefix caching)
FIGURES = tuple(f for s in STUDIES if s.load is capacity_runs for f in s.figures)


@pytest.fixture(scope="module")
def inputs():
    return load_inputs(FIXTURE, include_other=True)  # the fixture's runs are 128-request runs


@pytest.fixture(scope="module")
def paper():
    return load_paper()


# ----------------------------------------------------------------------------- loader
def _summary(experiment: str, caps: dict[str, float], kind="strict", tbt=0.2, mode=None, repeats=None) -> dict:
    s = {
        "experiment": experiment, "git_commit": "abc123", "created": "2026-01-02T03:04:05+0000", "seed": 7,
        "backend": "sim", "deployment": "yi-34b on 2x a100-80g-sxm (tp=2, pp=1)",
        "slo": {"tbt_s": tbt, "tbt_quantile": 0.99, "scheduling_delay_s": 2.0, "scheduling_delay_quantile": 0.5,
                "kind": kind, "source": "paper"},
        "workload": {"dataset": "openchat_sharegpt4", "num_requests": 64},
        "schedulers": {
            name: {"config": {"policy": name, "max_num_seqs": 128, **({"token_budget": 512} if name == "sarathi" else {})},
                   "capacity_qps": cap, "lowest_failing_qps": None if cap >= 8 else cap * 1.02, "saturated": cap >= 8,
                   "probes": [{"qps": cap, "passed": True, "reason": "ok", "tbt_quantile_s": 0.1,
                               "scheduling_delay_quantile_s": 0.5, "ttft_p50_s": 0.3, "tbt_p50_s": 0.03,
                               "tbt_p99_s": 0.1, "request_throughput": cap, "num_completed": 64, "num_preemptions": 0},
                              {"qps": cap * 2, "passed": False, "reason": "P99 TBT", "tbt_quantile_s": 0.5,
                               "scheduling_delay_quantile_s": None, "ttft_p50_s": 0.9, "tbt_p50_s": 0.05,
                               "tbt_p99_s": 0.5, "request_throughput": cap, "num_completed": 60, "num_preemptions": 1}]}
            for name, cap in caps.items()
        },
    }
    if mode:
        s["mode"] = mode
    if repeats:
        s["schedulers"]["sarathi"]["repeats"] = repeats
    return s


CONFIG = """model: {name: yi-34b}
hardware: {gpu: a100-80g-sxm}
parallel: {tp: 2, pp: 1}
dataset: {name: openchat_sharegpt4}
search: {fixed_qps: null}
"""


def _write_run(root: Path, experiment: str, summary: dict) -> Path:
    recs = [RequestRecord(request_id=i, arrival_s=0.1 * i, prompt_len=100 + i, output_len=3,
                          first_scheduled_s=0.1 * i, first_token_s=0.1 * i + 0.05,
                          token_times_s=np.array([0.1 * i + 0.05, 0.1 * i + 0.08, 0.1 * i + 0.2]),
                          finished_s=0.1 * i + 0.2) for i in range(4)]
    names = list(summary["schedulers"])
    req = pd.concat([records_frame(recs, scheduler=n, qps=summary["schedulers"][n]["capacity_qps"]) for n in names])
    tok = pd.concat([token_frame(recs, scheduler=n, qps=summary["schedulers"][n]["capacity_qps"]) for n in names])
    return RunWriter(root, experiment).write(CONFIG, summary, req, tok)


def test_loader_round_trips_what_the_results_store_writes(tmp_path):
    rep = {"seeds": [7, 8], "capacities_qps": [2.0, 2.2], "mean_qps": 2.1, "std_qps": 0.1414,
           "runs": [{"seed": 8, "capacity_qps": 2.2, "lowest_failing_qps": 2.25, "saturated": False,
                     "probes": [{"qps": 2.2, "passed": True}]}]}
    run = _write_run(tmp_path, "exp_a", _summary("exp_a", {"sarathi": 2.0, "vllm": 0.5, "orca": 8.0}, repeats=rep))
    runs = load_runs(tmp_path)
    assert list(runs["scheduler"]) == ["sarathi", "vllm", "orca"]
    r = runs.set_index("scheduler")
    assert r.at["sarathi", "capacity_qps"] == 2.0 and r.at["vllm", "bracket_hi_qps"] == pytest.approx(0.51)
    assert r.at["orca", "saturated"] and math.isinf(r.at["orca", "bracket_hi_qps"])
    assert r.at["sarathi", "token_budget"] == 512 and math.isnan(r.at["vllm", "token_budget"])
    assert (r.at["sarathi", "num_seeds"], r.at["sarathi", "capacity_mean_qps"]) == (2, 2.1)
    row = r.loc["vllm"]
    assert (row["experiment"], row["model"], row["gpu"], row["parallel"], row["num_gpus"], row["dataset"],
            row["num_requests"], row["slo_kind"], row["slo_tbt_s"], row["seed"], row["git_commit"], row["mode"]) == (
        "exp_a", "yi-34b", "a100-80g-sxm", "tp2", 2, "openchat_sharegpt4", 64, "strict", 0.2, 7, "abc123", "capacity")
    assert row["run"] == run.name and row["timestamp"] == pd.Timestamp("2026-01-02T03:04:05Z")

    probes = load_probes(tmp_path)
    assert len(probes) == 3 * 2 + 1  # two probes per scheduler, plus the second seed's one
    assert probes["is_capacity"].sum() == 4 and set(probes["seed"]) == {7, 8} and set(probes["run_seed"]) == {7}
    assert math.isnan(probes.loc[probes["qps"] == 4.0, "scheduling_delay_quantile_s"].iloc[0])  # null in JSON

    req = load_requests(run, scheduler="vllm")
    assert list(req["request_id"]) == [0, 1, 2, 3] and (req["qps"] == 0.5).all()
    tok = load_token_times(run, scheduler="sarathi")
    assert list(tok.iloc[1]["token_times_s"]) == pytest.approx([0.15, 0.18, 0.3])


def test_loader_skips_partial_runs_and_keeps_the_newest_run_per_cell(tmp_path):
    old = _write_run(tmp_path, "exp", _summary("exp", {"sarathi": 1.0}))
    newer = tmp_path / "exp" / (old.name + "-1")
    shutil.copytree(old, newer)
    s = json.loads((newer / "summary.json").read_text())
    s["schedulers"]["sarathi"]["capacity_qps"] = 1.5
    (newer / "summary.json").write_text(json.dumps(s))
    partial = tmp_path / "exp" / ".99999999-999999.partial"  # a crashed run: never read
    shutil.copytree(old, partial)
    assert load_runs(tmp_path)["capacity_qps"].tolist() == [1.5]
    assert sorted(load_runs(tmp_path, latest=False)["capacity_qps"]) == [1.0, 1.5]
    # another SLO is another cell: both kept
    _write_run(tmp_path, "exp", _summary("exp", {"sarathi": 3.0}, kind="relaxed", tbt=1.0))
    assert sorted(load_runs(tmp_path)["capacity_qps"]) == [1.5, 3.0]
    assert load_runs(tmp_path / "nothing_here").empty and load_probes(tmp_path / "nothing_here").empty


def test_fixture_loads_with_every_cell(inputs):
    runs = inputs.runs
    assert set(runs["experiment"]) == {
        "yi34b_tp2_strict", "yi34b_tp2_relaxed", "mistral7b_strict", "llama2_70b_tp4pp2_strict",
        "falcon180b_tp4pp2_strict", "falcon180b_tp8_strict", "yi34b_tp2_ablation", "yi34b_tp2_fixed_rate"}
    assert runs["capacity_qps"].notna().all() and (runs["num_requests"] == 128).all()
    assert set(runs.loc[runs["experiment"] == "yi34b_tp2_ablation", "mode"]) == {"fixed_rate"}
    assert set(runs.loc[runs["model"] == "falcon-180b", "parallel"]) == {"tp4pp2", "tp8"}
    assert (inputs.probes.groupby(["run_dir", "scheduler"]).size() >= 1).all()


# ----------------------------------------------------------------------------- paper and comparisons
def test_paper_numbers_are_the_published_ones(paper):
    ratios = {c.id: c.value for c in paper.capacity_ratios}
    assert ratios["mistral7b_vs_vllm"] == 2.6 and ratios["yi34b_strict_sharegpt_vs_orca"] == 4.0
    assert ratios["llama2_70b_strict_sharegpt_vs_orca"] == 6.3 and ratios["falcon180b_pp_relaxed_vs_vllm_pp"] == 1.48
    t4 = {(r.dataset, r.scheduler): (r.ttft_p50_s, r.tbt_p99_s) for r in paper.table4.rows}
    assert t4[("openchat_sharegpt4", "chunked_only")] == (1.04, 0.17)
    assert t4[("arxiv_summarization", "hybrid_only")] == (3.78, 1.38)
    assert paper.slos["yi-34b"] == {"strict": 0.2, "relaxed": 1.0}
    assert all(c.source for c in paper.capacity_ratios + paper.latency_ratios + paper.perf_facts)


def test_every_operator_fact_the_model_misses_says_why(paper):
    # the report's operator-level facts: a miss is a known, written-down one (the YAML's note), never silent
    from harness.analysis.perf_model.perf_facts import perf_fact_table
    table = perf_fact_table(paper.perf_facts)
    missed = table[~table["within"].astype(bool)]
    assert set(missed["id"]) == {"falcon_decode_b32", "decode_b32_mistral7b", "decode_b32_llama2_70b"}
    assert all("engines/perf/README.md" in note for note in missed["note"])
    assert (table.loc[table["within"].astype(bool), "note"] == "").all()


def test_tolerance():
    assert Tolerance(rel=0.25).within(4.0, 4.9) and not Tolerance(rel=0.25).within(4.0, 5.1)
    assert Tolerance(abs=0.1).within(0.2, 0.29) and not Tolerance(rel=0.1).within(1.0, float("nan"))
    with pytest.raises(ValueError):
        Tolerance()


def test_capacity_ratios_from_fixture(inputs, paper):
    t = capacity_ratio_table(inputs.runs, paper).set_index("id")
    r = inputs.runs[inputs.runs["experiment"] == "yi34b_tp2_strict"].set_index("scheduler")["capacity_qps"]
    assert t.at["yi34b_strict_sharegpt_vs_vllm", "reproduced"] == pytest.approx(r["sarathi"] / r["vllm"])
    assert t.at["yi34b_strict_sharegpt_vs_orca", "ratio"] == pytest.approx(r["sarathi"] / r["orca"] / 4.0)
    f = inputs.runs[inputs.runs["model"] == "falcon-180b"].set_index(["parallel", "scheduler"])["capacity_qps"]
    assert t.at["falcon180b_pp_strict_vs_vllm_tp8", "reproduced"] == pytest.approx(
        f[("tp4pp2", "sarathi")] / f[("tp8", "vllm")])
    # no relaxed Falcon run in the fixture: reported as missing, never as a pass or a fail
    assert t.at["falcon180b_pp_relaxed_vs_vllm_pp", "within"] is None
    assert "no results" in t.at["falcon180b_pp_relaxed_vs_vllm_pp", "note"]
    assert t["within"].map(lambda v: v in (True, False, None)).all()


def test_ablation_sarathi_does_not_stand_in_for_the_papers_sarathi(paper):
    runs = pd.DataFrame({"scheduler": ["sarathi", "sarathi", "orca", "orca", "hybrid_only"],
                         "policy": ["sarathi"] * 2 + ["orca"] * 2 + ["hybrid_only"],
                         "model": ["yi-34b", "yi-34b", "llama2-70b", "llama2-70b", "yi-34b"],
                         "slo_kind": ["strict", "strict", "relaxed", "relaxed", "strict"],
                         "token_budget": [512, 1024, np.nan, np.nan, 1024], "max_num_seqs": [128, 128, 8, 16, 128]})
    assert paper_config(runs, paper).tolist() == [True, False, True, False, True]


def test_latency_ratio_reads_both_sides_at_one_passing_rate(inputs, paper):
    row = latency_ratio_table(inputs.probes, paper).iloc[0]
    assert np.isfinite(row["reproduced"]) and "QPS" in row["cells"]
    p = inputs.probes[(inputs.probes["model"] == "falcon-180b") & (inputs.probes["scheduler"] == "vllm")]
    q = float(row["cells"].split(" at ")[1].split(" QPS")[0])
    at_q = p[np.isclose(p["qps"], q, rtol=1e-3)]
    assert at_q["passed"].all() and set(at_q["parallel"]) == {"tp8", "tp4pp2"}


def test_common_qps_prefers_rates_every_required_side_passed():
    p = pd.DataFrame({"g": ["a", "a", "a", "b", "b"], "qps": [1.0, 2.0, 4.0, 2.0, 4.0],
                      "passed": [True, True, False, True, True]})
    assert common_qps(p, "g", must_pass=("a", "b")) == 2.0
    assert common_qps(p, "g") == 4.0
    assert common_qps(p[p["g"] == "a"].assign(g="a").iloc[:0], "g") is None


def test_table4_from_fixed_rate_ablation_runs(inputs, paper):
    t4 = table4_frame(inputs.probes, paper)
    assert len(t4) == 12 and t4["reproduced"].notna().all()
    share = t4[(t4["dataset"] == "openchat_sharegpt4")]
    assert set(share["qps"]) == {1.0}
    p = inputs.probes[(inputs.probes["experiment"] == "yi34b_tp2_ablation")
                      & (inputs.probes["dataset"] == "openchat_sharegpt4")].set_index("scheduler")
    got = share.set_index(["scheduler", "metric"])["reproduced"]
    assert got[("hybrid_only", "tbt_p99_s")] == p.at["hybrid_only", "tbt_p99_s"]
    assert got[("sarathi", "ttft_p50_s")] == p.at["sarathi", "ttft_p50_s"]
    orders = table4_orderings(t4)
    assert len(orders) == 4 and orders["same"].map(lambda v: v in (True, False)).all()


def test_table4_without_ablation_runs_reports_missing(inputs, paper):
    t4 = table4_frame(inputs.probes[inputs.probes["experiment"] != "yi34b_tp2_ablation"], paper)
    assert t4["reproduced"].isna().all() and t4["within"].isna().all() and (t4["note"] != "").all()


# ----------------------------------------------------------------------------- figures
def _assert_labelled(fig: Figure) -> None:
    assert fig._suptitle is not None and fig._suptitle.get_text()
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert visible
    for ax in visible:
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title(), ax
        assert ax.has_data()


BUILDERS = {
    "fig10_11": lambda i: fig_capacity(i.runs, i.paper),
    "fig12": lambda i: fig_capacity_vs_slo(i.runs, i.paper),
    "fig13": lambda i: fig_pipeline(i.runs, i.probes, i.paper),
    "fig01": lambda i: fig_stall(i.runs, i.probes),
}


@pytest.fixture(scope="module")
def figs(inputs):
    built = {name: b(inputs) for name, b in BUILDERS.items()}  # once per module: rendering is the slow part
    yield built
    for f in built.values():
        style.close(f)


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("figures")
    write_report(FIXTURE, out, include_other=True)
    return out


@pytest.mark.parametrize("name", list(BUILDERS))
def test_figures_from_fixture_are_labelled(figs, name):
    fig = figs[name]
    _assert_labelled(fig)
    w, h = fig.get_size_inches()
    assert 4 <= w <= 13 and h >= 3  # README width: at most two panels across


def test_capacity_figure_annotates_published_ratios(figs):
    fig = figs["fig10_11"]
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert any("paper 3.7×" in t for t in texts) and any("paper 6.3×" in t for t in texts)
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert titles[0].startswith("Mistral-7B") and titles[1].startswith("Yi-34B")  # the paper's order


def test_stall_figure_shows_the_longest_baseline_stall(inputs, figs):
    run = inputs.runs[(inputs.runs["experiment"] == "yi34b_tp2_fixed_rate")].iloc[0]
    tok = load_token_times(run["run_dir"])
    rid, stall = pick_stall(tok)
    vllm = tok[(tok["scheduler"] == "vllm") & (tok["request_id"] == rid)].iloc[0]["token_times_s"]
    assert stall == pytest.approx(np.max(np.diff(vllm))) and stall > float(run["slo_tbt_s"])
    ax = figs["fig01"].axes[0]
    assert "same load" in ax.get_title() and f"request {rid}" in ax.get_title()
    assert any("generation stall" in t.get_text() for t in ax.texts)


def test_report_writes_every_figure_as_png(report_dir):
    for s in FIGURES:
        if s.name in ("fig17_prefill_decode", "fig18_prefix_caching"):  # cluster and prefix-study runs: the fixture
            continue  # has none (tests/test_analysis_pd.py and tests/test_analysis_prefix.py draw them)
        png = report_dir / f"{s.name}.png"
        assert png.is_file() and png.stat().st_size > 20_000, png


def test_figures_skip_without_results(tmp_path, paper):
    empty = load_inputs(tmp_path / "none")
    outcomes = [build_figure(f, empty, tmp_path / "figs") for f in FIGURES]
    assert all(o.path is None and o.skipped for o in outcomes)
    with pytest.raises(MissingResults, match="falcon180b"):
        fig_pipeline(load_runs(FIXTURE).query("model != 'falcon-180b'"), load_probes(FIXTURE), paper)
    report = write_report(tmp_path / "none", tmp_path / "figs").read_text()
    serve, sarathi23 = report.split("\n# Sarathi (2023)")  # the first Sarathi paper's section comes last
    assert "No finished runs found" in serve and serve.count("_Skipped:") == len(FIGURES)
    assert "No offline runs of this study found" in sarathi23


# ----------------------------------------------------------------------------- report and trim
def test_report_from_fixture(report_dir):
    text = (report_dir / "REPORT.md").read_text()
    assert (report_dir / "table4.md").is_file()
    for s in FIGURES:  # drawn, or skipped with why (the fixture has no cluster runs, no prefix-study runs)
        assert f"]({s.name}.png)" in text or (s.name == "fig17_prefill_decode" and "pd_cells" in text) \
            or (s.name == "fig18_prefix_caching" and "prefix_cells" in text)
    assert "## Paper vs reproduced" in text and "Yi-34B TP2, strict SLO, openchat_sharegpt4: 3.7x vs vLLM" in text
    assert "| sharegpt4 | hybrid-batching only | 1 | 0.53 |" in text  # Table 4 row, paper value beside ours
    assert "Operator-level facts" in text and "not reproduced (missing results)" in text


def test_trim_keeps_what_the_analysis_reads(tmp_path):
    src = Path(load_runs(FIXTURE).query("experiment == 'yi34b_tp2_fixed_rate'")["run_dir"].iloc[0])
    dst = trim_run(src, tmp_path / "yi34b_tp2_fixed_rate" / src.name, keep_requests=1, request_rows=2)
    assert json.loads((dst / "summary.json").read_text()) == json.loads((src / "summary.json").read_text())
    assert pick_stall(load_token_times(dst)) == pick_stall(load_token_times(src))
    assert load_requests(dst).groupby("scheduler").size().max() <= 2
