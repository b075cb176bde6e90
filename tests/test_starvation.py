"""Starvation is visible: a probe that passes the paper's criterion while completing far fewer
requests a second than arrive, or with a P99 TTFT over a minute, is flagged in the run's table,
summary.json and the report; the verdict stays the criterion's (harness/starvation.py)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import examples.policies.shortest_prompt_first  # noqa: F401  (registers the example policy)
from harness.analysis.loader import _starvation_of, load_runs
from harness.analysis.tables import capacity_markdown
from harness.commands.main import main
from harness.starvation import STARVED_TTFT_P99_S, starvation

ROOT = Path(__file__).resolve().parent.parent


def readme_sentence(summary: dict) -> str:
    """The sentence of docs/metrics.md (the README's before the site) about its shortest-prompt-first
    command, from that command's summary."""
    sarathi = summary["schedulers"]["sarathi"]["probes"][0]
    spf = summary["schedulers"]["shortest_prompt_first"]["probes"][0]
    return (f"Sarathi-Serve fails at 8 QPS (median scheduling delay {sarathi['scheduling_delay_quantile_s']:.1f} s); "
            f"shortest-prompt-first passes (median delay {spf['scheduling_delay_quantile_s']:.2f} s) while long prompts "
            f"wait: P99 TTFT {spf['ttft_p99_s']:.0f} s, {spf['request_throughput']:.2g} requests completed a second of "
            "8 arriving.")


def test_the_two_signs_and_only_for_a_passing_probe():
    assert starvation(True, 10.0, 9.5, 3.0) == ""
    assert starvation(True, 10.0, 4.9, 3.0) == "completed 4.9 req/s of 10 arriving"
    assert starvation(True, 10.0, 5.0, 3.0) == ""  # half the rate: not yet
    assert starvation(True, 1.0, 0.9, STARVED_TTFT_P99_S + 1) == "P99 TTFT 61 s > 60 s"
    assert starvation(True, 13.5, 2.79, 149.5) == "completed 2.79 req/s of 13.5 arriving; P99 TTFT 149.5 s > 60 s"
    assert starvation(False, 13.5, 2.79, 149.5) == ""  # a failing probe is failing already
    assert starvation(True, 1.0, math.nan, 1.0) == ""
    # runs saved before the flag existed are judged from their saved numbers
    old = {"passed": True, "qps": 13.5, "request_throughput": 2.79, "ttft_p99_s": 149.5}
    assert _starvation_of(old) == starvation(True, 13.5, 2.79, 149.5)
    assert _starvation_of({**old, "starvation": ""}) == ""  # a saved verdict stands


def test_shortest_prompt_first_passes_starved_and_is_flagged(tmp_path, capsys):
    """The issue's case at a small scale: Mistral-7B strict at 8 QPS (512 requests), where
    Sarathi-Serve fails on its scheduling delay and shortest-prompt-first passes it while long
    prompts wait over two minutes."""
    args = ["experiment=mistral7b_strict", "scheduler=[sarathi,shortest_prompt_first]", "search.num_requests=512",
            "search.fixed_qps=8", f"results_dir={tmp_path}", "progress=false"]
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    header = next(line for line in out if line.startswith("scheduler"))
    assert "P99 TTFT" in header and "done/s" in header
    spf = next(line for line in out if line.startswith("shortest_prompt_first")).split()
    sarathi = next(line for line in out if line.startswith("sarathi")).split()
    assert spf[3] == "pass!" and sarathi[3] == "FAIL"
    warning = next(line for line in out if line.startswith("WARNING: shortest_prompt_first"))
    assert "passes the criterion at 8 QPS but looks starved: completed" in warning and "P99 TTFT" in warning

    run_dir = Path(out[-1].removeprefix("results: "))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["starvation_bounds"] == {"completed_fraction_of_rate": 0.5, "ttft_p99_s": 60.0}
    probe = summary["schedulers"]["shortest_prompt_first"]["probes"][0]
    assert probe["passed"] and probe["request_throughput"] < 4 and probe["ttft_p99_s"] > 60
    assert probe["starvation"] == starvation(True, 8.0, probe["request_throughput"], probe["ttft_p99_s"])
    assert summary["schedulers"]["sarathi"]["probes"][0]["starvation"] == ""  # failed: no flag

    # docs/metrics.md quotes this very command; its sentence about it is recomputed here.
    readme = " ".join((ROOT / "docs" / "metrics.md").read_text().split())
    assert readme_sentence(summary) in readme, readme_sentence(summary)

    runs = load_runs(tmp_path).set_index("scheduler")
    assert runs.at["shortest_prompt_first", "capacity_starvation"] == probe["starvation"]
    assert runs.at["shortest_prompt_first", "capacity_ttft_p99_s"] == probe["ttft_p99_s"]
    table = capacity_markdown(runs.reset_index().assign(settings=""))
    assert "looks starved" in table and probe["starvation"].split(";")[0] in table


def test_the_planner_table_marks_a_starved_capacity():
    """The planner's ranked table is a capacity table too: P99 TTFT beside P99 TBT, and "!" plus a
    WARNING for a configuration whose capacity probe looks starved."""
    from harness.planner.answer import HEADER, Row, starved_lines, table_lines
    from harness.planner.tasks import ProbeSummary

    starved = ProbeSummary(8.0, True, "ok", 0.07, 0.4, 0.6, 145.0, 900.0, 1.0, 2.8)
    assert starved.starvation == starvation(True, 8.0, 2.8, 145.0) != ""
    assert ProbeSummary(8.0, True, "ok", 0.07, 0.4, 0.6, 5.0, 900.0, 1.0, 7.9).starvation == ""
    row = Row(1, "tp1_spf", "TP-1 (1 GPU)", "shortest_prompt_first", "shortest_prompt_first", 1, 8.0, 8.0, None, None,
              0.6, 0.07, None, "full", 145.0, starved.starvation)
    lines = table_lines([row])
    assert "P99 TTFT" in HEADER and "8!" in lines[1].split() and "145 s" in lines[1]
    assert starved_lines([row]) == [f"WARNING: #1 tp1_spf passes the criterion at its capacity but looks starved: "
                                    f"{starved.starvation} (harness/starvation.py; its capacity stays the criterion's)"]
