"""`release`: a shipped engine named once (`release=vllm-0.19`). It sets together what would
otherwise be said twice and could disagree: the stack that prices it (`perf.stack`), the release
rules of every `vllm_v1` scheduler (`scheduler.NAME.release`) and, where those leave vLLM's batch
flags at the policy's defaults, the defaults that release picks on the experiment's GPU
(engines/perf/vllm_releases.py [ARGS], the one table of them). Words that name another engine are
refused in one line: a `perf.stack` other than the default, a scheduler's release other than its
default. Without `release`, `perf.stack=vllm-X` and `scheduler.NAME.release=X` still work as
before (a stack and a scheduler of two releases are refused at planning: check_one_release)."""
from __future__ import annotations

from dataclasses import replace

from common.errors import HarnessError
from engines.perf.cpu_device import is_cpu
from engines.perf.hardware import get_gpu
from engines.perf.kernels import DEFAULT_STACK, STACKS
from engines.perf.vllm_releases import batch_defaults, get_release
from engines.schedulers import policy_spec

POLICY = "vllm_v1"  # the policy whose rules follow a release
BATCH_KNOBS = ("max_num_batched_tokens", "max_num_seqs")  # [ARGS]: batch_defaults' pair, in its order


def with_release(config):
    """`config` (an ExperimentConfig) with its `release` applied; unchanged without one."""
    name = config.release
    if name is None:
        return config
    known = sorted(n for n, stack in STACKS.items() if stack.release is not None)  # the shipped engine releases
    if name not in known:
        raise HarnessError(f"release={name}: not a shipped engine release; known: {', '.join(known)}")
    if config.perf.stack not in (DEFAULT_STACK, name):
        raise HarnessError(f"release={name} and perf.stack={config.perf.stack} name two engines: the release sets "
                           f"the stack (drop perf.stack)")
    version = STACKS[name].release
    defaults = {k.name: k.default for k in policy_spec(POLICY).knobs}
    batch = {}
    if not is_cpu(config.hardware.gpu):  # vLLM's CPU platform sizes its batch by world size, not in the table
        gpu = get_gpu(config.hardware.gpu)
        batch = dict(zip(BATCH_KNOBS, batch_defaults(get_release(version), gpu.name, gpu.visible_bytes)))
    schedulers = dict(config.scheduler)
    for sname, node in config.schedulers().items():
        if node["policy"] != POLICY:
            continue
        said = str(node.get("release", defaults["release"]))
        if said not in (defaults["release"], version):
            raise HarnessError(f"release={name} and scheduler.{sname}.release={said} name two releases: the release "
                               f"sets the scheduler's (drop scheduler.{sname}.release)")
        own = {k: node[k] for k in BATCH_KNOBS if node.get(k, defaults[k]) != defaults[k]}
        schedulers[sname] = {**node, **batch, **own, "release": version}
    return replace(config, perf=replace(config.perf, stack=name), scheduler=schedulers)
