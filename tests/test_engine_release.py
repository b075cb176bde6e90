"""An engine release is one named choice: `release=vllm-X` sets the stack that prices it, every
`vllm_v1` scheduler's release rules and, where the batch flags are left at the policy's defaults,
the defaults that release picks on the experiment's GPU (engines/perf/vllm_releases.py [ARGS], the
one table). Words naming another engine are refused in one line, exit 2; the old spellings keep
working; the presets and the policy's release list agree with the table."""
from __future__ import annotations

import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from common.errors import HarnessError
from engines.perf.hardware import get_gpu
from engines.perf.vllm_releases import RELEASES, batch_defaults
from engines.schedulers import vllm_v1
from harness.config import compose, experiment_config, plan_experiment
from harness.paths import CONFIG_DIR, ROOT

BASE = ["experiment=mistral7b_strict", "scheduler=[vllm_v1]", "slo.tbt_s=0.1", "search.num_requests=8"]


def planned(*words: str):
    plan = plan_experiment(compose([*BASE, *words]))
    return plan.deployment.perf.deployment.stack, plan.schedulers["vllm_v1"]


@pytest.mark.parametrize("hardware, release, batch", [
    ("a100_80g", "vllm-0.32", (2048, 256)),
    ("h100_80g", "vllm-0.19", (8192, 1024)),
    ("h100_80g", "vllm-0.32", (8192, 1024)),
    ("b200", "vllm-0.19", (8192, 1024)),  # 0.19 has no >= 160 GiB tier
    ("b200", "vllm-0.32", (16384, 1024)),
])
def test_a_release_sets_the_stack_the_rules_and_the_gpus_defaults(hardware, release, batch):
    stack, sc = planned(f"hardware={hardware}", f"release={release}")
    assert stack == release and sc.release == release.removeprefix("vllm-")
    assert (sc.max_num_batched_tokens, sc.max_num_seqs) == batch


def test_a_flag_the_config_sets_is_kept():
    _, sc = planned("hardware=h100_80g", "release=vllm-0.32", "scheduler.vllm_v1.max_num_seqs=128")
    assert (sc.max_num_batched_tokens, sc.max_num_seqs) == (8192, 128)


def test_without_a_release_nothing_changes():
    stack, sc = planned("hardware=h100_80g")
    assert (stack, sc.release, sc.max_num_batched_tokens, sc.max_num_seqs) == ("sarathi-serve-2024", "0.32", 2048, 256)
    stack, sc = planned("hardware=h100_80g", "perf.stack=vllm-0.19", "scheduler.vllm_v1.release=0.19")  # the old spelling
    assert (stack, sc.release) == ("vllm-0.19", "0.19")


@pytest.mark.parametrize("words, line", [
    (["release=vllm-0.19", "perf.stack=vllm-0.32"], "release=vllm-0.19 and perf.stack=vllm-0.32 name two engines"),
    (["release=vllm-0.32", "scheduler.vllm_v1.release=0.19"],
     "release=vllm-0.32 and scheduler.vllm_v1.release=0.19 name two releases"),
    (["release=vllm-9.9"], "release=vllm-9.9: not a shipped engine release; known: vllm-0.19, vllm-0.32"),
    (["perf.stack=vllm-0.19"], "name the engine once, release=vllm-0.19 or release=vllm-0.32"),
])
def test_contradictory_words_are_refused_in_one_line(words, line, tmp_path):
    with pytest.raises(HarnessError, match=line.replace("(", r"\(").replace(")", r"\)")):
        plan_experiment(compose([*BASE, *words]))
    p = subprocess.run([sys.executable, "-m", "harness", *BASE, *words, f"results_dir={tmp_path}"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 2 and line in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("preset, gpu", [("vllm_v1_hopper", "h100-80g-sxm"), ("vllm_v1_b200", "b200")])
def test_the_presets_are_the_tables_rows(preset, gpu):
    node = OmegaConf.load(CONFIG_DIR / "scheduler" / f"{preset}.yaml")
    spec = get_gpu(gpu)
    assert (node.max_num_batched_tokens, node.max_num_seqs) == batch_defaults(RELEASES["0.32"], spec.name,
                                                                              spec.visible_bytes)


def test_the_policy_knows_the_tables_releases():
    assert set(vllm_v1.RELEASES) == set(RELEASES)
    assert experiment_config(compose(BASE)).release is None
