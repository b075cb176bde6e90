"""What a job asks a cluster for (issue 13 item 3), checked on CPU: the shape of each request
(Ray num_gpus and placement groups, SLURM nodes/gpus_per_node/tasks_per_node/time), derived from
the deployment and the probe count; and bad input before anything is submitted (an unreachable
Ray address, no SLURM, a partition that does not exist, a job asking for more GPUs than a node
has): one line, exit status 2, nothing submitted, nothing written."""
from __future__ import annotations

import math
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from common.errors import HarnessError
from harness.launch import ray_session, slurm
from harness.launch.resources import (
    JobResources, job_resources, probes_per_search, ray_request, slurm_params, time_limit_min, with_fixed,
)
from harness.config import compose, experiment_config
from harness.settings.search import SearchSettings

ROOT = Path(__file__).resolve().parent.parent
LIVE = ["backend=live", "backend.server=vllm"]


def resources(*overrides: str, live_gpus: bool = True) -> JobResources:
    return job_resources(experiment_config(compose(list(overrides))), live_gpus)


@pytest.mark.parametrize("experiment, nodes, per_node", [
    ("mistral7b_strict", 1, 1),            # 1x A100
    ("yi34b_tp2_strict", 1, 2),            # TP2 on one 4-GPU node
    ("llama2_70b_tp4pp2_strict", 1, 8),    # TP4-PP2 on one 8x A40 server
    ("falcon180b_tp4pp2_strict", 2, 4),    # TP4-PP2 on two 4-GPU A100 nodes
    ("fig13_falcon180b_tp8", 2, 4),        # TP-8 across the same two nodes
])
def test_a_live_job_asks_for_its_deployment(experiment, nodes, per_node):
    res = resources(f"experiment={experiment}", *LIVE)
    assert (res.nodes, res.gpus_per_node, res.tasks_per_node, res.cpus_per_task) == (nodes, per_node, 1, 1)
    ray = ray_request(res)
    assert ray.options == {"num_cpus": 1, "num_gpus": per_node}
    if nodes == 1:
        assert ray.bundles == ()
    else:  # one bundle per node, each on another node; the job's own process in bundle 0
        assert ray.bundles == ({"CPU": 1, "GPU": 4}, {"CPU": 1, "GPU": 4}) and ray.strategy == "STRICT_SPREAD"
    params = slurm_params(res)
    assert {k: params[k] for k in ("nodes", "gpus_per_node", "tasks_per_node")} == {
        "nodes": nodes, "gpus_per_node": per_node, "tasks_per_node": 1}



def test_a_data_parallel_job_asks_for_every_rank_s_gpus():
    """vLLM's --data-parallel-size 2 on TP1 runs two engines, one GPU each: the job asks for the
    planner's count, tp x pp x dp (it asked for tp x pp, half of them)."""
    res = resources("experiment=mistral7b_strict", "model=qwen3-30b-a3b", "hardware=h100_80g", "parallel=dp2_ep",
                    "scheduler=[vllm_v1]", "perf.stack=vllm-0.32", "slo.tbt_s=0.1", *LIVE)
    assert (res.nodes, res.gpus_per_node, res.gpus) == (1, 2, 2)

def test_what_needs_no_gpu_asks_for_none():
    for overrides in (["experiment=falcon180b_tp4pp2_strict"],                          # simulated
                      ["experiment=live_smoke"],                                        # the perf model in real time
                      ["experiment=yi34b_tp2_strict", "backend=endpoint", "backend.base_url=http://127.0.0.1:9"],  # a server elsewhere
                      ["experiment=yi34b_tp2_strict", *LIVE]):
        res = resources(*overrides, live_gpus=overrides[-1] != "backend.server=vllm")
        assert (res.nodes, res.gpus_per_node, res.gpus) == (1, 0, 0), overrides
        assert "gpus_per_node" not in slurm_params(res) and ray_request(res).options["num_gpus"] == 0
    assert resources("experiment=yi34b_tp2_strict", "search.workers=4").cpus_per_task == 4  # its local pool
    assert resources("experiment=yi34b_tp2_strict", "search.workers=4", "search.executor=ray").cpus_per_task == 1
    torch = resources("experiment=live_smoke", "backend.executor=torch")
    assert (torch.nodes, torch.gpus_per_node) == (1, 1)


def test_the_time_limit_follows_the_probe_count():
    paper = SearchSettings(start_qps=1.0, min_qps=0.01, max_qps=1000.0, rel_tol=0.025)
    # doublings 1 -> 1024 (past 1000), the first failing probe, bisecting a 2x bracket to 2.5 %
    assert probes_per_search(paper) == 10 + 1 + 6
    assert probes_per_search(replace(paper, fixed_qps=2.0)) == 1
    cfg = experiment_config(compose(["experiment=yi34b_tp2_strict", *LIVE, "search.time_limit_s=600"]))
    # 3 schedulers x 17 probes x 600 s, plus a server start each, with a 1.5x margin
    assert time_limit_min(cfg) == math.ceil(1.5 * (3 * 17 * 600 + 3 * 180) / 60)
    fewer = replace(cfg, scheduler={"sarathi": cfg.scheduler["sarathi"]})
    assert time_limit_min(fewer) < time_limit_min(cfg)
    assert resources("experiment=yi34b_tp2_strict", *LIVE).timeout_min > time_limit_min(cfg)  # 2048 s per probe at 1 QPS
    fixed = with_fixed(JobResources(nodes=2, gpus_per_node=4, timeout_min=99), {"timeout_min": 30, "nodes": None})
    assert (fixed.nodes, fixed.gpus_per_node, fixed.timeout_min) == (2, 4, 30)


def test_a_job_that_fits_no_node_is_refused_before_submission():
    falcon = resources("experiment=falcon180b_tp4pp2_strict", *LIVE)
    four_gpu_nodes = [{"CPU": 32, "GPU": 4}] * 2
    ray_session.check_fits([("falcon", falcon)], four_gpu_nodes)  # fits: two nodes of 4
    with pytest.raises(HarnessError, match="needs 2 nodes with 4 GPU"):
        ray_session.check_fits([("falcon", falcon)], four_gpu_nodes[:1])
    with pytest.raises(HarnessError, match=r"llama asks for 8 GPU\(s\) per node, a node of the Ray cluster has at most 4"):
        ray_session.check_fits([("falcon", falcon), ("llama", resources("experiment=llama2_70b_tp4pp2_strict", *LIVE))],
                               four_gpu_nodes)
    with pytest.raises(HarnessError, match="asks for 8 CPUs"):
        ray_session.check_fits([("sim", JobResources(cpus_per_task=8))], [{"CPU": 2}])


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """sinfo (partition gpu: 4 nodes of 4 A100, 2 days; cpu: no GPU), sbatch keeping each script
    it is given and answering with a job id, srun never run; on PATH for this test and its
    subprocesses."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = tmp_path / "sbatch"
    scripts.mkdir()
    (bin_dir / "sinfo").write_text('#!/bin/sh\necho "gpu*|4|gpu:a100:4(S:0-1)|64|2-00:00:00"\necho "cpu|8|(null)|32|infinite"\n')
    (bin_dir / "sbatch").write_text(f'#!/bin/sh\nn=$(ls {scripts} | wc -l)\ncp "$1" {scripts}/job$((100 + n)).sh\n'
                                    'echo "Submitted batch job $((100 + n))"\n')
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin")
    return scripts


def test_slurm_jobs_carry_their_deployment(fake_slurm, tmp_path):
    from harness.launch.submitit_jobs import submit

    part = slurm.check_partition("gpu", [("falcon", resources("experiment=falcon180b_tp4pp2_strict", *LIVE))])
    assert (part.nodes, part.gpus_per_node, part.cpus_per_node, part.time_limit_min) == (4, 4, 64, 2880)
    jobs = [resources("experiment=mistral7b_strict", *LIVE, "search.time_limit_s=600"),
            resources("experiment=falcon180b_tp4pp2_strict", *LIVE, "search.time_limit_s=600")]
    params = {"submitit_folder": str(tmp_path / "jobs" / "%j"), "partition": "gpu", "name": "harness"}
    submitted = submit("slurm", params, print, [("a",), ("b",)], jobs)  # one sbatch per shape, nothing waited for
    assert [j.job_id for j in submitted] == ["100", "101"]
    heads = [{line.split("=")[0].removeprefix("#SBATCH --"): line.split("=", 1)[1]
              for line in p.read_text().splitlines() if line.startswith("#SBATCH --") and "=" in line}
             for p in sorted(fake_slurm.iterdir())]
    assert [(h["nodes"], h["gpus-per-node"], h["ntasks-per-node"], h["partition"]) for h in heads] == [
        ("1", "1", "1", "gpu"), ("2", "4", "1", "gpu")]
    assert heads[0]["time"] == heads[1]["time"] == str(jobs[0].timeout_min)


def harness(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, cwd=ROOT, timeout=300)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SMALL = ["scheduler=[vllm]", "search.num_requests=16", "progress=false"]


@pytest.mark.parametrize("launcher, extra, message", [
    ("submitit_slurm", ["hydra.launcher.partition=gpu", "experiment=llama2_70b_tp4pp2_strict", *LIVE],
     "asks for 8 GPU(s) per node, a node of SLURM partition gpu has at most 4"),
    ("submitit_slurm", ["hydra.launcher.partition=a100x", "experiment=mistral7b_strict"],
     "SLURM partition 'a100x' does not exist (sinfo knows: cpu, gpu)"),
    ("submitit_slurm", ["hydra.launcher.partition=cpu", "experiment=mistral7b_strict", *LIVE],
     "asks for 1 GPU(s) per node, a node of SLURM partition cpu has at most 0"),
    ("submitit_local", ["experiment=mistral7b_strict", *LIVE], "asks for 1 GPU(s) per node, this machine has at most 0"),
    ("submitit_local", ["experiment=falcon180b_tp4pp2_strict", *LIVE], "runs on this machine only"),
    ("ray", ["hydra.launcher.ray.init.address=127.0.0.1:PORT", "experiment=mistral7b_strict"],
     "Ray cluster at 127.0.0.1:PORT is unreachable"),
])
def test_bad_cluster_input_one_line_exit_2_nothing_submitted(fake_slurm, tmp_path, monkeypatch, capfd, launcher, extra,
                                                           message):
    from harness.commands.main import main

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # this machine: no GPU, whatever it has
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    port = str(_free_port())
    extra = [e.replace("PORT", port) for e in extra]
    assert main(["-m", f"hydra/launcher={launcher}", *extra, *SMALL, f"results_dir={tmp_path / 'results'}"]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message.replace("PORT", port) in err[0], err
    assert not any(fake_slurm.iterdir())  # nothing submitted
    assert not (tmp_path / "results").exists() or not any(
        d for d in (tmp_path / "results").iterdir() if d.name != ".multirun")  # nothing written


def test_no_slurm_here_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:/usr/bin:/bin")  # no sinfo
    p = harness("-m", "hydra/launcher=slurm_cluster", "experiment=mistral7b_strict", *SMALL, f"results_dir={tmp_path}")
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [
        "error: hydra/launcher=submitit_slurm needs SLURM, and this machine has no `sinfo` on PATH (run from a "
        "SLURM login node); nothing was submitted"], p.stderr


def test_an_unreachable_ray_executor_writes_nothing(tmp_path):
    p = harness("experiment=yi34b_tp2_strict", *SMALL, "search.workers=2", "search.executor=ray",
                f"search.ray_address=127.0.0.1:{_free_port()}", f"results_dir={tmp_path}")
    assert p.returncode == 2, p.stderr
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and "is unreachable" in err[0] and "nothing was submitted" in err[0], p.stderr
    assert not any(tmp_path.iterdir())
    p = harness("experiment=yi34b_tp2_strict", *SMALL, "search.executor=dask", f"results_dir={tmp_path}")
    assert p.returncode == 2 and "executor must be one of local, ray" in p.stderr


def test_an_unknown_launcher_names_the_known_ones(tmp_path):
    p = harness("-m", "hydra/launcher=kubernetes", "experiment=mistral7b_strict", *SMALL, f"results_dir={tmp_path}")
    assert p.returncode == 2 and p.stderr.startswith("error: unknown launcher hydra/launcher=kubernetes; known: ")
    assert "ray" in p.stderr and "submitit_slurm" in p.stderr and "slurm_cluster" in p.stderr
    # figure=all and nightly refuse it before composing their matrix (that took 20 s before the line)
    p = harness("figure=all", "launcher=kubernetes", f"results_dir={tmp_path}", f"figures_dir={tmp_path / 'f'}")
    assert p.returncode == 2 and "hydra/launcher/kubernetes" in p.stderr
    assert "matrix:" not in p.stdout
    p = harness("nightly", "launcher=kubernetes", f"results_dir={tmp_path}", f"out={tmp_path / 'DRIFT.md'}")
    assert p.returncode == 2 and "hydra/launcher/kubernetes" in p.stderr and "matrix:" not in p.stdout
    assert not list(tmp_path.iterdir())  # nothing written


def test_the_example_cluster_configs_compose():
    from harness.config.compose import compose_launcher

    slurm_cfg = compose_launcher("slurm_cluster")
    assert slurm_cfg["_target_"].endswith("SubmititSlurmLauncher") and slurm_cfg["partition"] == "gpu"
    assert all(slurm_cfg[k] is None for k in ("nodes", "gpus_per_node", "tasks_per_node", "timeout_min"))  # derived
    ray_cfg = compose_launcher("ray_cluster", ["hydra.launcher.ray.init.address=head:6379"])
    assert ray_cfg["_target_"].endswith("RayLauncher") and ray_cfg["ray"]["init"]["address"] == "head:6379"
    assert compose_launcher("joblib")["n_jobs"] == 2
    with pytest.raises(HarnessError, match="hydra.launcher.partiton: unknown key"):
        compose_launcher("submitit_slurm", ["hydra.launcher.partiton=gpu"])
