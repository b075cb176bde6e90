"""Mixture-of-experts models in the performance model: catalog sizes against the checkpoints' published
parameter counts, the expected-distinct-experts arithmetic against simulated routing, and what a
batch's expert FFN costs against dense twins of the same shape."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import HarnessError
from engines.perf import Deployment, ModelArch, PerfModel, get_model
from engines.perf.architectures import with_overrides
from engines.perf.moe import ExpertRouting, expected_distinct_experts

# (model, exact parameters from the config shapes, published total, published active; model cards:
# Mixtral-8x7B "46.7B total, 12.9B active" (Mixtral of Experts, arXiv:2401.04088), Qwen3-30B-A3B
# "30.5B in total and 3.3B activated", Qwen3-235B-A22B "235B in total and 22B activated").
MOE_SIZES = [
    ("mixtral-8x7b", 46_702_792_704, 46.7e9, 12.9e9),
    ("qwen3-30b-a3b", 30_532_122_624, 30.5e9, 3.3e9),
    ("qwen3-235b-a22b", 235_093_634_560, 235e9, 22e9),
]


@pytest.mark.parametrize("name,exact,total,active", MOE_SIZES)
def test_moe_weights_are_every_expert(name, exact, total, active):
    m = get_model(name)
    assert m.num_params == exact and m.weight_bytes == 2 * exact
    assert m.num_params == pytest.approx(total, rel=0.005)
    assert m.active_params == pytest.approx(active, rel=0.02)
    # one GPU of a TP1 deployment holds all of it; TP splits the experts (the router is replicated)
    assert m.stage_weight_params_per_gpu(1, 1) == [m.num_params]
    tp = 4
    per_gpu = m.stage_weight_params_per_gpu(tp, 1)[0]
    assert per_gpu == pytest.approx(m.num_params / tp, rel=2e-3) and per_gpu > m.num_params // tp


# Transcribed from the checkpoints' config.json (the keys the reader uses).
MIXTRAL_CFG = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
               "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000,
               "max_position_embeddings": 32768, "rms_norm_eps": 1e-5, "sliding_window": None,
               "tie_word_embeddings": False, "hidden_act": "silu"}
QWEN3_30B_CFG = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
                 "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48,
                 "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
                 "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936,
                 "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
                 "use_sliding_window": False, "sliding_window": None, "attention_bias": False, "hidden_act": "silu"}


def test_hf_configs_read_as_the_catalog():
    assert ModelArch.from_hf_config(MIXTRAL_CFG, name="mixtral-8x7b") == get_model("mixtral-8x7b")
    assert ModelArch.from_hf_config(QWEN3_30B_CFG, name="qwen3-30b-a3b") == get_model("qwen3-30b-a3b")
    assert get_model("mistralai/Mixtral-8x7B-v0.1") is get_model("mixtral-8x7b")


@pytest.mark.parametrize("change, message", [
    ({"first_k_dense_replace": 3}, "dense layers"),
    ({"mlp_only_layers": [0, 1]}, "dense layers"),
    ({"decoder_sparse_step": 2}, "dense layers"),
    ({"shared_expert_intermediate_size": 5632}, "shared experts"),
    ({"n_shared_experts": 1}, "shared experts"),
    ({"kv_lora_rank": 512}, "latent attention"),
])
def test_what_the_reader_does_not_model_is_refused(change, message):
    with pytest.raises(HarnessError, match=message):
        ModelArch.from_hf_config({**QWEN3_30B_CFG, **change})


def test_the_torch_engine_refuses_moe_models():
    from engines.models.config import ModelConfig

    with pytest.raises(HarnessError, match="mixture-of-experts"):
        ModelConfig.from_arch(get_model("mixtral-8x7b"))


def test_bad_expert_counts_are_refused():
    with pytest.raises(HarnessError, match="experts_per_token"):
        with_overrides(get_model("mixtral-8x7b"), experts_per_token=9)
    with pytest.raises(HarnessError, match="intermediate_size"):
        Deployment.create(model=with_overrides(get_model("qwen3-30b-a3b"), intermediate_size=770), gpu="h100", tp=4)


# ----------------------------------------------------------------------------- expected distinct experts
@pytest.mark.parametrize("experts,k", [(8, 2), (128, 8)])
def test_expected_distinct_experts_limits(experts, k):
    routing = ExpertRouting.build(experts, k)
    d = routing.distinct(np.arange(0, 5000, dtype=np.float64))
    assert d[0] == 0 and d[1] == pytest.approx(k, rel=1e-12)  # one token hits its k experts
    assert np.all(np.diff(d) >= 0) and d[-1] == experts  # more tokens never hit fewer; all, eventually
    assert d[2] < 2 * k  # two tokens already share some
    assert routing.distinct(np.array([1e9]))[0] == experts


@pytest.mark.parametrize("experts,k,tokens", [(8, 2, 3), (8, 2, 16), (128, 8, 4), (128, 8, 32), (128, 8, 256)])
def test_expected_distinct_experts_is_what_uniform_routing_hits(experts, k, tokens):
    # simulate the routing the formula assumes: each token a uniform k-subset, independently
    rng = np.random.default_rng(7)
    trials = 2000
    picks = np.argsort(rng.random((trials, tokens, experts)), axis=-1)[..., :k]
    hit = np.zeros((trials, experts), dtype=bool)
    np.put_along_axis(hit, picks.reshape(trials, -1), True, axis=1)
    mean = hit.sum(axis=1).mean()
    assert expected_distinct_experts(tokens, experts, k) == pytest.approx(mean, rel=0.01)


# ----------------------------------------------------------------------------- pricing
def _twins(m: ModelArch) -> tuple[ModelArch, ModelArch]:
    """Dense models of the same shape: every expert's width in one MLP (the total parameters), and
    the routed experts' (the active ones), router aside."""
    dense = dict(num_experts=0, experts_per_token=0)
    total = with_overrides(m, name="dense-total", intermediate_size=m.num_experts * m.intermediate_size, **dense)
    active = with_overrides(m, name="dense-active", intermediate_size=m.experts_per_token * m.intermediate_size, **dense)
    return total, active


@pytest.mark.parametrize("gpu", ["h100", "a100-80g-pcie"])
def test_mixtral_decode_reads_less_than_dense_47b_and_more_than_dense_13b(gpu):
    mixtral = get_model("mixtral-8x7b")
    total, active = _twins(mixtral)
    assert total.num_params == pytest.approx(46.7e9, rel=0.01) and active.num_params == pytest.approx(12.9e9, rel=0.01)
    moe, dense47, dense13 = (PerfModel(Deployment.create(model=m, gpu=gpu, tp=2)) for m in (mixtral, total, active))
    for batch in (4, 8, 16):  # 5.5, 7.2, 7.9 of the 8 experts hit
        t = {name: p.breakdown([1] * batch, [1024] * batch)["linear"] for name, p in
             (("moe", moe), ("47b", dense47), ("13b", dense13))}
        assert t["13b"] * 1.5 < t["moe"] < t["47b"], (batch, t)


def test_decode_streams_the_experts_a_batch_hits():
    # memory-bound decodes (H100: the GEMMs' compute is far below their weight streaming): the experts'
    # GEMMs take the share D(b) / E of the dense twin's MLP that holds every expert
    mixtral = get_model("mixtral-8x7b")
    moe, dense = (PerfModel(Deployment.create(model=m, gpu="h100", tp=2)) for m in (mixtral, _twins(mixtral)[0]))

    def mlp(perf, batch):
        parts = perf.breakdown([1] * batch, [1024] * batch)
        return parts["linear.mlp_up"] + parts["linear.mlp_down"]

    for batch in (1, 2, 4, 8):
        share = expected_distinct_experts(batch, 8, 2) / 8
        assert mlp(moe, batch) / mlp(dense, batch) == pytest.approx(share, rel=0.1), batch


def test_expert_flops_are_top_k_dense_ffns():
    # a long prefill is compute-bound: the experts cost what k dense FFNs a token cost, not E. Qwen3's
    # narrow experts (768, 384 a GPU) move T x k activation rows of 2 x 2432 B through the down GEMM,
    # a quarter of its time at 8k tokens: dearer than the active twin's 8k rows, still far from E.
    for name, rel in (("mixtral-8x7b", 0.15), ("qwen3-30b-a3b", 0.5)):
        m = get_model(name)
        total, active = _twins(m)
        moe, dense_total, dense_active = (PerfModel(Deployment.create(model=x, gpu="h100", tp=2))
                                          for x in (m, total, active))
        up = {k: p.breakdown([8192], [0])["linear.mlp_down"] for k, p in
              (("moe", moe), ("total", dense_total), ("active", dense_active))}
        assert up["active"] * 0.95 <= up["moe"] <= up["active"] * (1 + rel), (name, up)
        assert up["moe"] < 2 * m.experts_per_token / m.num_experts * up["total"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 700), st.integers(0, 5000)), min_size=1, max_size=40))
def test_moe_batches_price_the_same_one_at_a_time_and_vectorized(items):
    perf = PerfModel(Deployment.create(model="qwen3-30b-a3b", gpu="h100", tp=2))
    n = np.array([[a for a, _ in items]])
    c = np.array([[b for _, b in items]])
    assert float(perf.batch_times(n, c)[0]) == perf.iteration_time(n[0].tolist(), c[0].tolist())


def test_moe_kv_capacity_counts_every_expert():
    # the KV cache gets what the weights of all experts leave: Mixtral TP2 on H100 80GB holds
    # 46.7 GB of weights per GPU, the dense 13B twin 12.9 GB
    mixtral = PerfModel(Deployment.create(model="mixtral-8x7b", gpu="h100", tp=2))
    twin = PerfModel(Deployment.create(model=_twins(get_model("mixtral-8x7b"))[1], gpu="h100", tp=2))
    assert mixtral.kv_capacity_tokens() < 0.5 * twin.kv_capacity_tokens()
    with pytest.raises(HarnessError, match="perf=analytical"):
        from engines.perf.factory import build_perf_model

        build_perf_model(mixtral.deployment, {"kind": "profile", "path": "anything"})


def test_a_moe_capacity_search_end_to_end(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    p = subprocess.run([sys.executable, "-m", "harness", "model=mixtral-8x7b", "hardware=h100_80g", "parallel=tp2",
                        "slo.tbt_s=0.1", "scheduler=[sarathi]", "search.num_requests=64", f"results_dir={tmp_path}"],
                       capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0].startswith("custom: mixtral-8x7b on 2x h100-80g-sxm (tp=2, pp=1)")
    run_dir = Path(p.stdout.splitlines()[-1].removeprefix("results: "))
    assert json.loads((run_dir / "summary.json").read_text())["schedulers"]["sarathi"]["capacity_qps"] > 0
