"""Launching vLLM (`vllm serve`) with flags mapped from the harness's scheduler policies.

The command prefix comes from configuration (e.g. `[/path/to/vllm-venv/bin/python, -m,
vllm.entrypoints.openai.api_server]` or `[vllm, serve]`), so vLLM lives in its own environment
with its own torch; nothing here imports vLLM.

Two ways (`serve_command(plugin=...)`, the live backend's `backend.vllm_scheduler`): `plugin` runs
the policy itself inside vLLM (`--scheduler-cls`, engines/external/vllm_scheduler: every registered
policy, exactly; `plugin_flags`); `native` runs vLLM's own scheduler with the flags below, the
closest V1 comes (`policy_flags`). For native mode, each policy's registration declares which of
V1's two modes is its closest (`vllm=` of `register_policy`: chunked_prefill or whole_prompts;
none: not expressible in native mode), and the policy object
reports its batch limits (max_num_seqs, max_batch_tokens); nothing here branches on a policy's
name. What modern vLLM (V1 engine, 0.6+; checked against 0.32) can express of the paper's policies:

  vllm_v1        YES, exactly: it is V1's scheduler (engines/schedulers/vllm_v1.py), its knobs the flags
                 (`--max-num-batched-tokens`, `--max-num-seqs`, `--long-prefill-token-threshold`).
  sarathi        YES. V1's scheduler is stall-free batching: every step it first gives each running
                 request its tokens (decodes, then ongoing prefill chunks), then admits waiting
                 requests FCFS into what is left of the token budget, chunking the last prompt
                 (`--enable-chunked-prefill --max-num-batched-tokens BUDGET`). The budget counts
                 decode tokens, as in the paper.
  hybrid_only    YES (approximately). `--no-enable-chunked-prefill` with a budget of max_model_len
                 (vLLM refuses less without chunking): decodes plus whole prompts mixed in one
                 batch, no chunking.
  vllm           NO, not exactly. The paper's baseline is vLLM's old V0 scheduler: prefill-only
                 batches of whole prompts whenever any fit, decode-only batches otherwise (prefills
                 stall decodes). V1 has no prefill-only mode; `--no-enable-chunked-prefill` gives
                 whole prompts *mixed* with decodes, i.e. hybrid_only. We map `vllm` to that
                 (with max_num_batched_tokens = max(given, max_model_len)) and label it as the
                 closest modern setting: decodes still stall behind a whole long prompt in the same
                 iteration, which is the generation stall the paper measures, but not the pure
                 prefill-prioritising order. Reproducing V0 exactly needs a custom scheduler class
                 (`--scheduler-cls`) or an old vLLM release.
  orca           NO. Orca reserves KV for the maximum length per request; vLLM's paged KV cannot be
                 told to. Closest: hybrid_only with a small --max-num-seqs (not offered silently).
  fastertransformer NO. Request-level batching (a batch runs until all its requests finish) does
                 not exist in vLLM.
  chunked_only   NO. V1 always lets decodes and prefill chunks share an iteration.
  decode_maximal, orca_best, orca_worst (the first Sarathi paper's) NO: KV reserved for the maximum
                 length; V1 can put several prompts' chunks in one step (decode_maximal takes one).

Always set for scheduler comparisons: `--no-enable-prefix-caching` (vLLM enables it by default and
it would turn shared prompt prefixes into cache hits) unless the scheduler asks for prefix caching
(`prefix_caching: true`, then `--enable-prefix-caching`), `--seed`, `--max-num-seqs`.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from engines.schedulers import SchedulerConfig, make_policy, policy_names, policy_spec

# Offline, no telemetry, a small CPU KV cache (GiB) unless the caller overrides it.
DEFAULT_ENV: Mapping[str, str] = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
}



class UnsupportedPolicy(ValueError):
    pass


def expressible() -> tuple[str, ...]:
    """The registered policies that declare a `vllm serve` equivalent."""
    return tuple(n for n in policy_names() if policy_spec(n).vllm is not None)


def policy_flags(cfg: SchedulerConfig, max_model_len: int) -> list[str]:
    """The `vllm serve` flags that select `cfg`'s policy (see the module docstring for fidelity):
    the mode its registration declares (registry.VLLM_MODES) and the batch limits the policy
    object reports (max_num_seqs, max_batch_tokens)."""
    mode = policy_spec(cfg.policy).vllm
    if mode is None:
        raise UnsupportedPolicy(
            f"policy {cfg.policy!r} cannot be expressed with vLLM's flags "
            f"(expressible: {', '.join(expressible())}; see engines/external/vllm.py)"
        )
    policy = make_policy(cfg, max_model_len)
    # a policy's flags beyond its mode's and limits (vllm_v1: --long-prefill-token-threshold)
    seqs = ["--max-num-seqs", str(policy.max_num_seqs), *policy.vllm_flags]
    if mode == "chunked_prefill":
        return ["--enable-chunked-prefill", "--max-num-batched-tokens", str(policy.max_batch_tokens), *seqs]
    # Whole prompts: vLLM refuses a budget below max_model_len without chunking.
    budget = max(policy.max_batch_tokens or max_model_len, max_model_len)
    return ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(budget), *seqs]


def plugin_flags(cfg: SchedulerConfig, max_model_len: int, prefix_caching: bool = False) -> list[str]:
    """The `vllm serve` flags that run `cfg`'s policy itself inside vLLM (the `--scheduler-cls`
    plugin, engines/external/vllm_scheduler; its environment: `plugin_env`): any registered policy.
    vLLM's token budget and batch slots are sized to hold the policy's largest step (a step of whole
    prompts: max_num_seqs of max_model_len where the policy declares no token limit); chunked
    prefill on, since the policy decides whether to chunk."""
    from engines.external.vllm_scheduler import SCHEDULER_CLS

    if prefix_caching:
        raise UnsupportedPolicy("the vLLM scheduler plugin does not model prefix caching yet: run it without, or "
                                "with backend.vllm_scheduler=native")
    policy = make_policy(cfg, max_model_len)
    tokens = max(policy.max_batch_tokens or policy.max_num_seqs * max_model_len, policy.max_num_seqs, max_model_len)
    return ["--scheduler-cls", SCHEDULER_CLS, "--enable-chunked-prefill", "--max-num-batched-tokens", str(tokens),
            "--max-num-seqs", str(policy.max_num_seqs)]


def serve_command(
    prefix: Sequence[str],
    model: str,
    *,
    scheduler: SchedulerConfig,
    max_model_len: int,
    prefix_caching: bool = False,
    host: str = "127.0.0.1",
    port: int,
    served_model_name: str | None = None,
    seed: int = 0,
    extra_args: Sequence[str] = (),
    plugin: bool = False,
) -> list[str]:
    """The full command line: `prefix` (how to run vLLM's OpenAI server) plus mapped flags, or
    with `plugin` the flags that run the policy itself (`plugin_flags`).

    The model is passed as `--model`, which both `vllm serve` and
    `python -m vllm.entrypoints.openai.api_server` accept.
    """
    if not prefix:
        raise ValueError("the vLLM command prefix is empty (set backend.vllm.command)")
    return [
        *prefix,
        "--model", model,
        "--served-model-name", served_model_name or model,
        "--host", host,
        "--port", str(port),
        "--max-model-len", str(max_model_len),
        "--seed", str(seed),
        # with a cache, the usage of each response says how many prompt tokens it found cached
        *(["--enable-prefix-caching", "--enable-prompt-tokens-details"] if prefix_caching
          else ["--no-enable-prefix-caching"]),
        *(plugin_flags(scheduler, max_model_len, prefix_caching) if plugin else policy_flags(scheduler, max_model_len)),
        *extra_args,
    ]
