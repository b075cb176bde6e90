"""What figure=all and nightly do around their jobs: compose the matrix two processes at a time,
and simulate and summarize a probe that two runs share once (harness.commands.jobs, harness.search.probe)."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from common.errors import HarnessError

TINY = ["experiment=mistral7b_strict", "scheduler=[vllm]", "search.num_requests=32", "progress=false"]


def test_the_matrix_composed_in_two_processes_is_the_one_composed_in_one():
    from harness.commands.jobs import compose_all
    from harness.config import compose

    words = [[*TINY, "results_dir=r"], [*TINY, "slo.kind=relaxed", "name=x", "results_dir=r"],
             ["experiment=yi34b_tp2_strict", "progress=false", "results_dir=r"]]
    together = compose_all(words, n_jobs=2)
    assert [OmegaConf.to_yaml(c) for c in together] == [OmegaConf.to_yaml(compose(w)) for w in words]
    with pytest.raises(HarnessError, match="search.num_requestz"):  # a bad word: the one line, from a worker too
        compose_all([*words, [*TINY, "search.num_requestz=3"]], n_jobs=2)


def test_a_shared_probe_is_simulated_and_summarized_once_and_judged_per_slo():
    from harness.backends import open_backend
    from harness.config import compose
    from harness.config.experiment import experiment_config
    from harness.experiment import plan_experiment
    from harness.search.probe import probe_outcome, run_probe, shared_probes

    strict = plan_experiment(experiment_config(compose(TINY)))
    relaxed = plan_experiment(experiment_config(compose([*TINY, "slo.kind=relaxed"])))
    ran = []
    with open_backend(strict.job("vllm", progress=False)) as backend:
        def run(requests, label):
            ran.append(label)
            return backend.run(requests, label)

        with shared_probes() as shared:
            first = run_probe(strict, "vllm", 4.0, run)
            second = run_probe(relaxed, "vllm", 4.0, run)
    assert len(ran) == 1 and shared.hits == 1
    assert second.summary is first.summary and second.requests is first.requests  # summarized once
    alone = probe_outcome(relaxed, "vllm", 4.0, first.records)
    assert second.verdict == alone.verdict and second.summary == alone.summary  # what the relaxed run gets alone
    assert first.verdict != second.verdict  # each judged by its own SLO (its thresholds: a verdict of its own)
