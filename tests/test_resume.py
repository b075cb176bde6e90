"""An interrupted capacity search resumes from the probe cache and reruns nothing finished."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.backends import open_backend
from harness.config import compose
from harness.search.cache import ProbeCache
from harness.config import plan_experiment
from harness.search.probe import search_capacity

ROOT = Path(__file__).resolve().parent.parent


class Interrupt(Exception):
    pass


def test_interrupted_search_resumes_without_rerunning(tmp_path):
    plan = plan_experiment(compose(["experiment=yi34b_tp2_strict", "scheduler=[vllm]", "search.num_requests=64"]))
    run = open_backend(plan.job("vllm", progress=False)).run  # the simulator starts nothing
    fresh = search_capacity(plan, "vllm", run)

    cache = ProbeCache(tmp_path)
    seen = []

    def interrupt_after_three(p):
        seen.append(p.qps)
        if len(seen) == 3:
            raise Interrupt

    with pytest.raises(Interrupt):
        search_capacity(plan, "vllm", run, on_probe=interrupt_after_three, cache=cache)

    reran = []
    resumed = search_capacity(plan, "vllm", run, on_probe=lambda p: reran.append(p.detail.records is not None), cache=cache)
    assert reran[:3] == [False, False, False] and all(reran[3:])  # the 3 finished probes came from disk
    assert resumed.bracket == fresh.bracket
    assert [(p.qps, p.passed) for p in resumed.probes] == [(p.qps, p.passed) for p in fresh.probes]
    cached = cache.load("vllm", plan.seed, fresh.probes[0].qps)
    assert cached.summary == fresh.probes[0].detail.summary
    assert cached.requests.equals(fresh.probes[0].detail.requests)


def test_repeats_and_fixed_rate(tmp_path):
    args = ["experiment=yi34b_tp2_strict", "scheduler=[sarathi]", "search.num_requests=32", f"results_dir={tmp_path}", "progress=false"]
    p = subprocess.run([sys.executable, "-m", "harness", *args, "search.repeats=2"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert p.returncode == 0, p.stderr
    summary = json.loads((Path(p.stdout.splitlines()[-1].removeprefix("results: ")) / "summary.json").read_text())
    rep = summary["schedulers"]["sarathi"]["repeats"]
    assert rep["seeds"] == [0, 1] and len(rep["capacities_qps"]) == 2 and "mean capacity" in p.stdout

    p = subprocess.run([sys.executable, "-m", "harness", *args, "search.fixed_qps=0.5"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert p.returncode == 0, p.stderr
    summary = json.loads((Path(p.stdout.splitlines()[-1].removeprefix("results: ")) / "summary.json").read_text())
    assert summary["mode"] == "fixed_rate" and len(summary["schedulers"]["sarathi"]["probes"]) == 1


def test_the_cache_key_sees_uncommitted_changes(tmp_path):
    """The probe cache keys on the commit; a checkout that edits the code (a tracked file changed, a
    new file) must not be served the commit's probes: worktree_changes is its digest, None if clean."""
    import subprocess

    from harness.results.store import worktree_changes

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "model.py").write_text("COST = 1.0\n")
    (tmp_path / ".gitignore").write_text("results/\n")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    assert worktree_changes(tmp_path) is None
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "probe.json").write_text("{}")  # ignored output changes nothing
    assert worktree_changes(tmp_path) is None
    (tmp_path / "model.py").write_text("COST = 2.0\n")
    edited = worktree_changes(tmp_path)
    assert edited is not None
    (tmp_path / "links.py").write_text("X = 1\n")
    added = worktree_changes(tmp_path)
    assert added not in (None, edited)
    (tmp_path / "links.py").write_text("X = 2\n")
    assert worktree_changes(tmp_path) not in (None, edited, added)
    assert worktree_changes(tmp_path / "results") == worktree_changes(tmp_path)  # from any folder of it
    # ... and the probe cache's key takes it in (a clean checkout's key as before)
    from harness.search.cache import cache_key, code_version

    prov = {"git_commit": "abc", "versions": {"sarathi-harness": "0.1"}, "git_changes": None}
    assert code_version(prov) == "abc/0.1/"
    keys = {cache_key({"seed": 0}, code_version({**prov, "git_changes": d})) for d in (None, edited, added)}
    assert len(keys) == 3


def _leaves(node, path=()):
    if isinstance(node, dict) and node:
        for k, v in node.items():
            yield from _leaves(v, (*path, k))
    else:
        yield path, node


def _changed(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value * 2 + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return [*value, 1]
    return 1  # None, {}


def test_every_setting_that_can_change_a_probe_is_in_its_cache_key():
    """Change any one leaf of a resolved config (every group: the SLO, the workload, the model, the
    scheduler ...): the key changes, unless the leaf only says where output goes or how many probes
    run at once, and where. A setting left out would serve another setting's cached verdicts."""
    from omegaconf import OmegaConf

    from harness.search.cache import cache_key
    from harness.settings.experiment import HOW_NOT_WHAT

    cfg = OmegaConf.to_container(compose(["experiment=yi34b_tp2_strict", "slo.ttft_s=2"]), resolve=True)
    base = cache_key(cfg, "v")
    same = []
    for path, value in _leaves(cfg):
        edited = json.loads(json.dumps(cfg))
        node = edited
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = _changed(value)
        if cache_key(edited, "v") == base:
            same.append(".".join(map(str, path)))
    paths = {".".join(map(str, p)) for p, _ in _leaves(cfg)}
    assert len(paths) > 50 and {"slo.tbt_s", "slo.ttft_s", "slo.criterion", "dataset.name"} <= paths
    allowed = set(HOW_NOT_WHAT)
    assert set(same) == allowed & paths, sorted(same)
    assert allowed == {"results_dir", "progress", "cache", "search.workers", "search.executor", "search.ray_address",
                       "search.searches_at_once", "cluster.workers"}


def test_a_search_under_another_slo_is_not_served_the_first_one_s_verdicts(tmp_path):
    """Run the same search under a relaxed and then a strict SLO into one results_dir (the probe
    cache on): the strict one's answer is a cache-free strict search's, not the relaxed one's."""
    args = [sys.executable, "-m", "harness", "experiment=yi34b_tp2_strict", "scheduler=[sarathi]",
            "search.num_requests=64", "progress=false"]

    def capacity(*words):
        p = subprocess.run([*args, *words], capture_output=True, text=True, cwd=ROOT, timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]
        summary = Path(p.stdout.splitlines()[-1].removeprefix("results: ")) / "summary.json"
        return json.loads(summary.read_text())["schedulers"]["sarathi"]["capacity_qps"]

    relaxed = capacity("slo.tbt_s=1", f"results_dir={tmp_path}")
    strict = capacity("slo.tbt_s=0.1", f"results_dir={tmp_path}")
    fresh = capacity("slo.tbt_s=0.1", f"results_dir={tmp_path / 'fresh'}", "cache=false")
    assert strict == fresh and relaxed != strict, (relaxed, strict, fresh)
