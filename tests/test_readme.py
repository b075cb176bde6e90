"""The commands of the README and of the documentation site (docs/), as written: every `python -m`
line in their code blocks either runs here (the fast ones) or, where it would take minutes or names
a placeholder (PATH, HOST, NAME...), is composed and planned exactly as `python -m harness` would
before running anything. And every number they take from the committed reference runs, each on
the page that says it."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from itertools import product
from pathlib import Path

import pytest

import examples.policies.shortest_prompt_first  # noqa: F401  (the README runs the example policy)
from harness.config import compose, experiment_config

ROOT = Path(__file__).resolve().parent.parent
PLACEHOLDER = re.compile(r"\b(PATH|HOST|PORT|NAME|KEY|PROFILE|DIR|RATE)\b")


# The README is the front door; the rest moved to the documentation site (mkdocs.yml, docs/).
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]


def page(name: str) -> str:
    """The text of README.md or a page of the site (e.g. "docs/routers.md")."""
    return (ROOT / name).read_text()


def all_pages() -> str:
    return "\n\n".join(page(p) for p in PAGES)


def page_commands(name: str) -> list[str]:
    """Each `python -m ...` command of one page's bash blocks, continuations joined, comments cut."""
    text = page(name)
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            for part in line.split("&&"):
                part = part.strip()
                if part.startswith("python -m") and "pytest" not in part:
                    out.append(" ".join(part.split()))
    return out


def readme_commands() -> list[str]:
    """The README's commands first (the main job leads), then each page's of the site."""
    return [c for p in PAGES for c in page_commands(p)]


COMMANDS = readme_commands()


def test_the_readme_has_its_commands():
    assert COMMANDS[0] == "python -m harness experiment=yi34b_tp2_strict"  # the main job comes first
    assert page_commands("README.md")[0] == COMMANDS[0]
    assert len(COMMANDS) >= 50  # the 50 the README held before the site took them: none lost


def _multirun_overrides(words: list[str]) -> list[list[str]]:
    """`-m a=x,y b=z` -> [[a=x, b=z], [a=y, b=z]] (Hydra's basic sweeper, lists in [] kept whole)."""
    axes = []
    for w in words:
        key, _, value = w.partition("=")
        values = [value] if value.startswith("[") else value.split(",")
        axes.append([f"{key}={v}" for v in values])
    return [list(c) for c in product(*axes)]


def _planned(overrides: list[str]) -> None:
    from harness.config import plan_experiment

    cfg = compose(overrides)
    if not PLACEHOLDER.search(" ".join(overrides)):
        plan_experiment(cfg)  # every check a run makes before it starts (traces, schedulers, lengths)


@pytest.mark.parametrize("command", COMMANDS)
def test_readme_command(command, tmp_path):
    words = shlex.split(command)
    module, args = words[2], words[3:]
    if module == "engines.perf" or args in (["--help"], ["-h"]):
        p = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert p.returncode == 0, p.stderr
        return
    assert module == "harness", command
    if args[:2] == ["profile", "fetch"]:
        # needs the internet: run as written but from the shared local copy of the same files
        vidur = ROOT.parent / "shared" / "profiles" / "vidur"
        if not vidur.is_dir():
            pytest.skip("profile fetch needs the internet or ../shared/profiles/vidur")
        words = [a for a in args if not a.startswith("out=")] + [f"src={vidur}", f"out={tmp_path}"]
        p = subprocess.run([sys.executable, "-m", "harness", *words], capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert p.returncode == 0 and list(tmp_path.glob("*_tp*.csv")), p.stderr
        return
    if args[:1] == ["plan"]:
        # Minutes of simulation: planned as the command plans before its search (tests/test_plan*.py run plans)
        from harness.planner.search import check_slo_reachable
        from harness.planner.settings import plan_settings, split_words
        from harness.planner.space import enumerate_space

        mine, rest = split_words(args[1:])
        space = enumerate_space(experiment_config(compose(rest)), plan_settings(mine))
        check_slo_reachable(space)
        assert space.candidates
        if command == next(c for c in page_commands("docs/planner.md") if c.startswith("python -m harness plan ")):
            said = f"{len(space.candidates)} configurations for the first command"
            assert said in _flat(page("docs/planner.md")), said
        return
    if args[:1] == ["report"]:
        if "tables_only=true" in args:  # it writes the committed file: checked below, never rewritten here
            return
        p = subprocess.run([sys.executable, "-m", "harness", *args, f"figures_dir={tmp_path}"],
                           capture_output=True, text=True, cwd=ROOT, timeout=900)
        assert p.returncode == 0 and (tmp_path / "REPORT.md").is_file(), p.stderr
        return
    if args[:1] == ["nightly"] or (any(a.startswith("figure=") for a in args) and "run_missing=false" not in args):
        # Minutes of simulation: the figure and nightly commands run end to end in test_commands.
        pytest.skip("runs the paper's matrix; checked by tests/test_commands.py")
    if any(a.startswith("figure=") for a in args):
        p = subprocess.run([sys.executable, "-m", "harness", *args, f"figures_dir={tmp_path}"],
                           capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert p.returncode == 0, p.stderr
        return
    for overrides in (_multirun_overrides(args[1:]) if args[:1] == ["-m"] else [args]):
        _planned(overrides)


def test_every_preset_the_readme_names_exists():
    """`mistral7b_{strict,relaxed}`, `fig12_yi34b_tp2`...: each name in backticks that looks like a
    preset, in the README or a page of the site, is a file under experiments/experiment/."""
    known = {p.stem for p in (ROOT / "experiments" / "experiment").glob("*.yaml")}
    named = set()
    for token in re.findall(r"`([a-z0-9_{},]+)`", all_pages()):
        m = re.fullmatch(r"([a-z0-9_]*)\{([a-z0-9_,]+)\}([a-z0-9_]*)", token)
        names = [m.group(1) + v + m.group(3) for v in m.group(2).split(",")] if m else [token]
        named |= {n for n in names if re.match(r"(mistral7b|yi34b|llama2_70b|falcon180b|fig\d+|table\d+)_", n)}
    assert len(named) >= 10
    assert named <= known, f"the README names presets that do not exist: {sorted(named - known)}"


# ----------------------------------------------------------------------------- the README's numbers
# Every number the README and the site's pages take from the committed reference runs is recomputed
# here from them, in the page's own words: a run that moves a number fails this test until the page
# says the new one (regenerate the reference, then paste what the failure prints). Numbers from commands cheap
# enough to run are checked by running them (here and in tests/test_starvation.py); the long ones
# (planner and benchmark timings, live runs) say the commit and load they were measured at.
REFERENCE = "results/reference"


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def reference():
    import os

    from harness.analysis.figures import load_inputs
    from harness.analysis.loader import load_results

    here = os.getcwd()
    os.chdir(ROOT)  # the report names the results directory as given: relative, as the README's command
    try:
        inputs = load_inputs(REFERENCE)
        runs, probes = load_results(REFERENCE)
        from harness.analysis.report import tables_report

        report = tables_report(REFERENCE, inputs)
    finally:
        os.chdir(here)
    return inputs, runs, probes, report


def _capacity(runs, experiment: str, scheduler: str, dataset: str = "openchat_sharegpt4") -> float:
    hit = runs[(runs["experiment"] == experiment) & (runs["scheduler"] == scheduler) & (runs["dataset"] == dataset)]
    assert len(hit) == 1, (experiment, scheduler, len(hit))
    return float(hit["capacity_qps"].iloc[0])


def _probe(probes, experiment: str, scheduler: str, qps: float | None = None):
    p = probes[(probes["experiment"] == experiment) & (probes["scheduler"] == scheduler)]
    p = p[p["is_capacity"].astype(bool)] if qps is None else p[p["qps"] == qps]
    assert len(p) == 1, (experiment, scheduler, qps, len(p))
    return p.iloc[0]


# Where each quote lives: the README keeps the headline table, the site the rest.
QUOTED_ON = {"headline table": "README.md", "prefill/decode table": "docs/routers.md",
             "the paper's matrix, live": "docs/clusters.md", "TP-8 median TBT": "docs/sarathi-serve.md",
             "four Yi replicas": "docs/routers.md", "attainment example": "docs/metrics.md",
             "split vs replicas": "docs/routers.md", "DistServe": "docs/routers.md",
             "Sarathi (2023) checks": "README.md", "Sarathi (2023) table": "README.md"}


def readme_quotes(reference) -> dict[str, str]:
    """What the README and the site must say, computed from results/reference."""
    from harness.analysis.serve.compare import latency_ratio_table
    from harness.analysis.serve.cost import matrix_cost_text
    from harness.analysis.serve.headline import headline_markdown
    from harness.analysis.pd.figs import distserve_check, pd_markdown, pd_table

    inputs, runs, probes, _ = reference
    out = {"headline table": headline_markdown(inputs.runs, inputs.paper),
           "prefill/decode table": pd_markdown(pd_table(inputs.clusters)),
           "the paper's matrix, live": matrix_cost_text(inputs.probes)}
    lat = latency_ratio_table(inputs.probes, inputs.paper).iloc[0]
    qps = float(re.search(r"at ([0-9.]+) QPS", lat["cells"]).group(1))
    out["TP-8 median TBT"] = (f"cross-node TP-8 comes out at {lat['reproduced']:.2f}x, not ~2x, the median TBT of TP4-PP2 "
                              f"(vLLM at {qps:.2g} QPS in the reference runs")
    one = ", ".join(f"{_capacity(runs, 'yi34b_tp2_strict', s):.3g}" for s in ("sarathi", "vllm", "orca"))
    x4 = [_capacity(runs, "yi34b_tp2_x4", s) for s in ("sarathi", "vllm", "orca")]
    out["four Yi replicas"] = (f"The run above gives Sarathi {x4[0]:.4g} QPS, vLLM {x4[1]:.4g}, Orca {x4[2]:.4g} "
                               f"(one instance: {one};")
    att = [_capacity(runs, "yi34b_tp2_attainment", s) for s in ("sarathi", "vllm", "orca")]
    miss = 1 - float(_probe(probes, "yi34b_tp2_attainment", "sarathi", 1.0)["goodput_fraction"])
    out["attainment example"] = (f"gives capacities at 90 % attainment of Sarathi {att[0]:.3g} QPS, vLLM {att[1]:.3g}, Orca "
                                 f"{att[2]:.3g} (the paper criterion: {one}): the 2 s TTFT, not TPOT, is what Sarathi's "
                                 f"512-token chunks miss ({miss * 100:.0f} % of requests at 1 QPS, those with long prompts)")
    split, four = _probe(probes, "pd_mistral7b_paper_3p1d", "vllm"), _probe(probes, "pd_mistral7b_paper_x4", "sarathi")
    out["split vs replicas"] = (
        f"3 prefill + 1 decode instance (vLLM prefills) reaches {split['qps']:.4g} QPS under the paper's criterion, with "
        f"only {split['goodput_fraction'] * 100:.0f} % of its requests meeting TPOT <= 0.1 s; four colocated Sarathi replicas "
        f"reach {four['qps']:.1f} QPS with " + ("all of them" if four["goodput_fraction"] == 1 else
                                                f"{four['goodput_fraction'] * 100:.0f} % of them"))
    check = distserve_check(inputs.runs, inputs.clusters)
    out["DistServe"] = (f"reaches {check['per_gpu']['disaggregated']:.3g} QPS per GPU against vLLM's "
                        f"{check['per_gpu']['colocated']:.3g} ({check['ratio']:.2f}x)")
    out["Sarathi (2023) checks"], out["Sarathi (2023) table"] = sarathi23_quotes()
    return out


def sarathi23_quotes() -> tuple[str, str]:
    """The first Sarathi paper's count of checks within tolerance and end-to-end table, from its
    reference runs (harness/analysis/sarathi23/report.py readme_quotes)."""
    from harness.analysis.sarathi23 import report as s23
    from harness.analysis.sarathi23.claims import claim_table

    drawn, study = s23.load_study(ROOT / REFERENCE, None)
    return s23.readme_quotes(study.claims, claim_table(study.claims, drawn.runs))


def test_the_committed_reference_report_is_what_the_runs_give(reference):
    committed = (ROOT / REFERENCE / "REPORT.md").read_text()
    assert committed == reference[3], ("results/reference/REPORT.md is stale: python -m harness report "
                                       "results_dir=results/reference tables_only=true")


def test_every_number_the_readme_takes_from_the_reference(reference):
    quotes = readme_quotes(reference)
    assert set(quotes) == set(QUOTED_ON), "each quote names its page"
    stale = {name: text for name, text in quotes.items() if _flat(text) not in _flat(page(QUOTED_ON[name]))}
    assert not stale, "the README or the site no longer says what results/reference gives; they should say:\n\n" + \
        "\n\n".join(f"[{name}: {QUOTED_ON[name]}]\n{text}" for name, text in stale.items())


def test_the_figure_labels_the_paper_as_the_readme_does(reference):
    """One rule puts the paper's number beside ours (harness/analysis/serve/headline.py): the capacity
    figure's annotation of Mistral-7B's strict sharegpt cell says what the README's table says."""
    from harness.analysis.serve.capacity_figs import fig_capacity

    inputs = reference[0]
    fig = fig_capacity(inputs.runs, inputs.paper)
    notes = [t.get_text() for ax in fig.axes for t in ax.texts]
    readme = (ROOT / "README.md").read_text()
    assert "| Mistral-7B, 1x A100, strict | up to 2.6x / 2.88x |" in readme
    assert any("2.9× vLLM (paper up to 2.6×)" in n for n in notes), notes
    assert any("3.4× vLLM (paper 3.7×)" in n for n in notes), notes
    assert sum("(paper up to 2.6×)" in n for n in notes) == 1  # the best cell only


def test_the_replicas_example_as_written(tmp_path):
    """Cheap enough to run (8 CPU-s): the replicas command (docs/routers.md) and what it says of the result."""
    import json

    words = shlex.split(next(c for c in page_commands("docs/routers.md") if "cluster.replicas=" in c))
    p = subprocess.run([sys.executable, *words[1:], f"results_dir={tmp_path}", "progress=false"],
                       capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert p.returncode == 0, p.stderr
    s = json.loads(next(tmp_path.glob("*/*/summary.json")).read_text())["schedulers"]["sarathi"]
    cap = next(x for x in s["probes"] if x["passed"] and x["qps"] == s["capacity_qps"])
    said = (f"Sarathi reaches {s['capacity_qps']:.3g} QPS on these 5 GPUs by the paper's criterion, and the run flags it: "
            f"P99 TTFT {cap['ttft_p99_s']:.0f} s, {cap['request_throughput']:.2g} requests completed a second of "
            f"{s['capacity_qps']:.3g} arriving")
    assert _flat(said) in _flat(page("docs/routers.md")), said


# ----------------------------------------------------------------------------- the documentation site
def test_the_pages_name_no_path_outside_the_repository():
    """The README and the site name the data's public sources (docs/data.md), never a local copy
    beside the checkout (`../shared/...`, `../vidur`)."""
    outside = {p: re.findall(r"[`\s(]\.\./(?!\w+\.md\b)[\w./-]*", page(p)) for p in PAGES}
    outside = {p: found for p, found in outside.items() if found}
    assert not outside, outside


def test_the_site_builds_strict(tmp_path):
    """mkdocs.yml and docs/ build with no warning (a broken link or anchor, a page left out of the
    nav). This is CI's build of the site (.ci/run runs the suite and builds no other)."""
    pytest.importorskip("mkdocs", reason="the dev extra installs mkdocs-material")
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
                       capture_output=True, text=True, cwd=ROOT, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    assert "up to 2.6x / 2.88x" in (tmp_path / "index.html").read_text()  # the front page includes README's tables
