"""The winner written out: the `vllm serve` command that runs it, and a harness experiment preset
that checks it (a capacity search, or `search.fixed_qps=` at a replica's share of the target)
against that server with `backend=endpoint`."""
from __future__ import annotations

import shlex
from collections.abc import Mapping

from omegaconf import OmegaConf

from engines.external.vllm import UnsupportedPolicy, policy_flags
from harness.search.plan import ExperimentPlan


def vllm_serve_words(plan: ExperimentPlan, scheduler: str) -> list[str] | str:
    """`vllm serve MODEL ...` for `scheduler` on the plan's deployment, or why vLLM cannot run it."""
    sc, d = plan.schedulers[scheduler], plan.deployment
    try:
        policy = policy_flags(sc, plan.max_model_len)
    except UnsupportedPolicy as e:
        return str(e)
    return ["vllm", "serve", "MODEL", "--tensor-parallel-size", str(d.tp), "--pipeline-parallel-size", str(d.pp),
            "--max-model-len", str(plan.max_model_len), "--gpu-memory-utilization", f"{plan.backend.gpu_memory_utilization:g}",
            "--block-size", str(d.block_size), "--no-enable-prefix-caching", *policy]


def vllm_serve_line(plan: ExperimentPlan, scheduler: str) -> str:
    words = vllm_serve_words(plan, scheduler)
    if isinstance(words, str):
        return f"# not expressible with vllm serve: {words}"
    return (f"# MODEL: the Hugging Face id or local path of {plan.deployment.model_name}\n"
            + " ".join(shlex.quote(w) for w in words))


def preset_yaml(cfg: Mapping, plan: ExperimentPlan, scheduler: str, name: str, comment: str) -> str:
    """A preset (experiments/experiment format) of the winner: the model, hardware, dataset and
    performance model as the plan resolved them, its deployment, SLO and one scheduler."""
    sc = plan.schedulers[scheduler]
    resolved = OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else dict(cfg)
    knobs = {"policy": sc.policy, "max_num_seqs": sc.max_num_seqs, "token_budget": sc.token_budget,
             "max_num_batched_tokens": sc.max_num_batched_tokens}
    body = {
        "name": name,
        "model": resolved["model"],
        "hardware": resolved["hardware"],
        "dataset": resolved["dataset"],
        "perf": resolved.get("perf"),
        "parallel": {"tp": plan.deployment.tp, "pp": plan.deployment.pp},
        "slo": {**{k: v for k, v in resolved["slo"].items() if k != "table"}, "tbt_s": plan.slo.tbt_s},
        "search": {"num_requests": plan.search.num_requests},
        "scheduler": {sc.policy: knobs},
    }
    head = "\n".join(f"# {line}" for line in comment.splitlines())
    return (f"# @package _global_\n{head}\ndefaults:\n  - override /scheduler: [{sc.policy}]\n\n"
            + OmegaConf.to_yaml(OmegaConf.create({k: v for k, v in body.items() if v is not None})))
