"""FP8 weights and KV cache (perf.weight_dtype, perf.kv_dtype) on the GPUs with FP8 tensor cores."""
import subprocess
import sys
from pathlib import Path

import pytest

from common.errors import HarnessError
from engines.perf import Deployment, PerfModel, get_gpu, get_model
from engines.perf import memory

ROOT = Path(__file__).resolve().parent.parent


def perf(model="llama3-70b", gpu="h100", tp=4, **kw):
    return PerfModel(Deployment.create(model=model, gpu=gpu, tp=tp, **kw))


def test_fp8_peaks_are_the_datasheets():
    # H100 SXM and H200 SXM datasheets: FP8 Tensor Core 3,958 TFLOPS with sparsity, BF16 1,979
    for name in ("h100-80g-sxm", "h200-141g"):
        gpu = get_gpu(name)
        assert gpu.fp8_peak_flops == 1979e12 == 2 * gpu.peak_flops + 1e12
    for name in ("a100-80g-pcie", "a100-80g-sxm", "a40-48g"):
        assert get_gpu(name).fp8_peak_flops is None


@pytest.mark.parametrize("gpu", ["a100-80g-pcie", "a100-80g-sxm", "a40"])
@pytest.mark.parametrize("knob", ["weight_dtype", "kv_dtype"])
def test_fp8_without_fp8_tensor_cores_is_refused(gpu, knob):
    with pytest.raises(HarnessError, match="has no FP8 tensor cores.*h100-80g-sxm.*h200-141g"):
        Deployment.create(model="yi-34b", gpu=gpu, tp=2, **{knob: "fp8"})


def test_unknown_dtype_is_refused_and_16_bit_spellings_are_the_default():
    with pytest.raises(HarnessError, match="kv_dtype='int3'"):
        Deployment.create(model="yi-34b", gpu="h100", tp=2, kv_dtype="int3")
    default = Deployment.create(model="yi-34b", gpu="h100", tp=2)
    for spelling in ("auto", "bf16", "FP16"):
        assert Deployment.create(model="yi-34b", gpu="h100", tp=2, weight_dtype=spelling, kv_dtype=spelling) == default


@pytest.mark.parametrize("model", ["llama3-70b", "mixtral-8x7b"])
def test_fp8_kv_halves_kv_bytes_and_raises_capacity(model):
    base = Deployment.create(model=model, gpu="h100", tp=4)
    fp8 = Deployment.create(model=model, gpu="h100", tp=4, kv_dtype="fp8")
    assert (base.kv_bytes_per_element, fp8.kv_bytes_per_element) == (2, 1)
    assert memory.inputs(fp8).stage_weight_bytes == memory.inputs(base).stage_weight_bytes
    tokens16, tokens8 = PerfModel(base).kv_capacity_tokens(), PerfModel(fp8).kv_capacity_tokens()
    assert abs(tokens8 - 2 * tokens16) <= 16  # the same bytes hold twice the tokens (whole 16-token blocks)
    # a decode at long context reads half the KV bytes (the kernel's launch and, split 32 x 2 KV heads
    # ways on 132 SMs, its combine kernel aside)
    models = [PerfModel(d) for d in (base, fp8)]
    att = models[0].kernels.attention
    fixed = (att.decode_fixed_s + att.decode_split.combine_s) * models[0].stage_layers[0]
    attn = [p.breakdown([1] * 32, [8192] * 32)["attention"] - fixed for p in models]
    assert attn[1] == pytest.approx(attn[0] / 2, rel=0.02)


def test_fp8_weights_halve_the_linear_layers_and_free_kv_room():
    m = get_model("llama3-70b")
    base, fp8 = (Deployment.create(model=m, gpu="h100", tp=4, weight_dtype=w) for w in (None, "fp8"))
    w16, w8 = memory.inputs(base).stage_weight_bytes[0], memory.inputs(fp8).stage_weight_bytes[0]
    # the embedding and LM head (2 x 128256 x 8192 / 4 per GPU) and the norms stay 16-bit
    emb = 2 * 128256 * 8192 // 4 * 2
    assert w8 - emb // 2 == pytest.approx((w16 - emb) / 2 + emb // 2, rel=1e-3)
    # the bytes freed hold KV: 81,920 B a token on one GPU of four (80 layers x 2 KV heads x 128 x 2 x 2 B)
    gained = PerfModel(fp8).kv_capacity_tokens() - PerfModel(base).kv_capacity_tokens()
    assert abs(gained - (w16 - w8) / m.kv_bytes_per_token_per_gpu(tp=4)) <= 16


@pytest.mark.parametrize("stack", ["sarathi-serve-2024", "ideal"])
def test_fp8_gemms_run_at_the_fp8_peak_and_stream_half_the_bytes(stack):
    base, fp8 = perf(stack=stack), perf(stack=stack, weight_dtype="fp8")
    launches = 4 * base.stage_layers[0] * base.kernels.gemm.fixed_s  # the measured kernels' fixed cost
    # a long prefill's GEMMs are compute-bound: twice the peak, half the time
    prefill = [p.breakdown([8192], [0])["linear"] - launches for p in (base, fp8)]
    assert prefill[1] == pytest.approx(prefill[0] / 2, rel=0.1)
    # a small decode batch streams its weights: half the bytes, half the time
    decode = [p.breakdown([1] * 8, [1024] * 8)["linear"] - launches for p in (base, fp8)]
    assert decode[1] == pytest.approx(decode[0] / 2, rel=0.1)
    # the LM head stays 16-bit
    assert base.breakdown([1] * 8, [1024] * 8)["lm_head"] == fp8.breakdown([1] * 8, [1024] * 8)["lm_head"]


def test_fp8_on_a100_at_the_cli_is_one_line_exit_2_nothing_written(tmp_path):
    p = subprocess.run([sys.executable, "-m", "harness", "model=mixtral-8x7b", "hardware=a100_80g", "parallel=tp2",
                        "perf.weight_dtype=fp8", "slo.tbt_s=0.1", "search.num_requests=16", f"results_dir={tmp_path}"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 2, (p.stdout, p.stderr)
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and "weight_dtype=fp8: a100-80g-pcie has no FP8 tensor cores" in err[0], p.stderr
    assert not any(tmp_path.iterdir())


def test_the_perf_group_reaches_the_deployment():
    from harness.config import compose
    from harness.config import plan_experiment

    cfg = ["model=qwen3-30b-a3b", "hardware=h100_80g", "slo.tbt_s=0.1"]
    base = plan_experiment(compose(cfg)).deployment
    fp8 = plan_experiment(compose([*cfg, "perf.weight_dtype=fp8", "perf.kv_dtype=fp8"])).deployment
    d = fp8.timer.deployment
    assert (d.weight_dtype, d.kv_dtype) == ("fp8", "fp8") and d.model.is_moe
    assert fp8.description.endswith("(tp=1, pp=1), weights fp8, KV fp8") and base.description.endswith("pp=1)")
    assert fp8.kv_capacity_tokens > 2 * base.kv_capacity_tokens
    assert fp8.timer.iteration_time([1] * 32, [4096] * 32) < base.timer.iteration_time([1] * 32, [4096] * 32)
