"""The winner written out: the `vllm serve` command that runs it, and a harness experiment preset
that checks it (a capacity search, or `search.fixed_qps=` at a replica's share of the target)
against that server with `backend=endpoint`."""
from __future__ import annotations

import shlex
from dataclasses import asdict

from omegaconf import OmegaConf

from engines.external.vllm import UnsupportedPolicy, policy_flags
from harness.experiment import ExperimentPlan
from harness.settings.experiment import ExperimentConfig


def vllm_serve_words(plan: ExperimentPlan, scheduler: str) -> list[str] | str:
    """`vllm serve MODEL ...` for `scheduler` on the plan's deployment, or why vLLM cannot run it."""
    sc, d = plan.schedulers[scheduler], plan.deployment
    try:
        policy = policy_flags(sc, plan.max_model_len)
    except UnsupportedPolicy as e:
        return str(e)
    ranks = ["--data-parallel-size", str(d.dp), "--enable-expert-parallel"] if d.ep else []
    return ["vllm", "serve", "MODEL", "--tensor-parallel-size", str(d.tp), "--pipeline-parallel-size", str(d.pp), *ranks,
            "--max-model-len", str(plan.max_model_len), "--gpu-memory-utilization", f"{plan.backend.gpu_memory_utilization:g}",
            "--block-size", str(d.block_size), "--no-enable-prefix-caching", *policy]


# vLLM's disaggregated prefill: every instance loads a KV connector (NIXL here; vLLM's docs,
# "Disaggregated Prefilling", features/nixl_connector_usage) and a proxy sends each request to a
# prefill server, then to a decode server with the prefill's kv_transfer_params.
KV_TRANSFER_CONFIG = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'


def vllm_serve_line(plan: ExperimentPlan, scheduler: str) -> str:
    if plan.disagg is not None:
        return _pd_serve_lines(plan, scheduler)
    words = vllm_serve_words(plan, scheduler)
    if isinstance(words, str):
        return f"# not expressible with vllm serve: {words}"
    return (f"# MODEL: the Hugging Face id or local path of {plan.deployment.model_name}\n"
            + " ".join(shlex.quote(w) for w in words))


def preset_yaml(config: ExperimentConfig, plan: ExperimentPlan, scheduler: str, name: str, comment: str) -> str:
    """A preset (experiments/experiment format) of the winner: the model, hardware, dataset and
    performance model as the plan resolved them, its deployment, SLO and one scheduler."""
    sc = plan.schedulers[scheduler]
    body = {
        "name": name, "model": asdict(config.model), "hardware": asdict(config.hardware), "dataset": dict(config.dataset),
        "perf": asdict(config.perf),
        "parallel": ({"tp": plan.deployment.tp, "pp": plan.deployment.pp}
                     | ({"dp": plan.deployment.dp, "ep": True} if plan.deployment.ep else {})),
        "cluster": ({k: v for k, v in asdict(plan.cluster).items() if k != "replicas"} if plan.disagg else None),
        "slo": {**{k: v for k, v in asdict(config.slo).items() if k != "table"}, "tbt_s": plan.slo.tbt_s},
        "search": {"num_requests": plan.search.num_requests}, "scheduler": {sc.policy: sc.as_dict()},
    }
    head = "\n".join(f"# {line}" for line in comment.splitlines())
    return (f"# @package _global_\n{head}\ndefaults:\n  - override /scheduler: [{sc.policy}]\n\n"
            + OmegaConf.to_yaml(OmegaConf.create({k: v for k, v in body.items() if v is not None})))


def _pd_serve_lines(plan: ExperimentPlan, scheduler: str) -> str:
    """Each role's `vllm serve` flags with a P/D connector, marked for what they are: the harness
    simulates the unit but does not generate a working P/D deployment (no proxy, no connector setup)."""
    from dataclasses import replace

    c = plan.cluster
    lines = [f"# A P/D unit ({c.prefill_instances} prefill + {c.decode_instances} decode servers): NOT a working deployment.",
             "# vLLM serves it only with a KV connector on every server (--kv-transfer-config) and a proxy that sends",
             "# each request to a prefill server, then to a decode server; the harness generates neither (it simulates",
             f"# the unit). MODEL: the Hugging Face id or local path of {plan.deployment.model_name}"]
    for role, count, d in (("prefill", c.prefill_instances, plan.disagg.prefill), ("decode", c.decode_instances, plan.disagg.decode)):
        words = vllm_serve_words(replace(plan, deployment=d), scheduler)
        if isinstance(words, str):
            return f"# not expressible with vllm serve: {words}"
        lines += [f"# {role} servers (x{count}):",
                  " ".join(shlex.quote(w) for w in words + ["--kv-transfer-config", KV_TRANSFER_CONFIG])]
    return "\n".join(lines)
