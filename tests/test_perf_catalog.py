"""engines.perf catalogs: exact size arithmetic, Hugging Face config loading, names, placement."""
import json

import pytest

from common.errors import HarnessError
from engines.perf import Deployment, ModelArch, get_gpu, get_model, get_topology, known_gpus, known_models

# (model, exact parameter count, KV bytes per token in fp16 over all layers).
# Parameter counts are the totals of the public checkpoints (safetensors metadata / model cards:
# Llama-2-7B 6.74B, Mistral-7B 7.24B, Yi-34B 34.4B, CodeLlama-34B 33.7B, Llama-2-70B 69.0B,
# Llama-3-8B 8.03B, Llama-3-70B 70.6B, Qwen3-32B 32.8B of which 31.2B non-embedding); exact values
# follow from the config shapes.
# KV = layers * 2 (K, V) * kv_heads * head_dim * 2 bytes.
SIZES = [
    ("llama2-7b", 6_738_415_616, 32 * 2 * 32 * 128 * 2),  # 524288 B = 512 KiB per token (MHA)
    ("mistral-7b", 7_241_732_096, 32 * 2 * 8 * 128 * 2),  # 131072 B (GQA 8)
    ("yi-34b", 34_388_917_248, 60 * 2 * 8 * 128 * 2),  # 245760 B
    ("codellama-34b", 33_743_970_304, 48 * 2 * 8 * 128 * 2),  # 196608 B
    ("llama2-70b", 68_976_648_192, 80 * 2 * 8 * 128 * 2),  # 327680 B
    ("llama3-8b", 8_030_261_248, 32 * 2 * 8 * 128 * 2),  # 131072 B
    ("llama3-70b", 70_553_706_496, 80 * 2 * 8 * 128 * 2),  # 327680 B
    ("qwen3-32b", 32_762_123_264, 64 * 2 * 8 * 128 * 2),  # 262144 B; 31,206,298,624 without the untied embeddings
    ("llama-13b", 13_015_864_320, 40 * 2 * 40 * 128 * 2),  # LLaMA-1 13B (huggyllama/llama-13b): 819200 B (MHA)
    ("llama-33b", 32_528_943_616, 60 * 2 * 52 * 128 * 2),  # LLaMA-1 33B (huggyllama/llama-30b): 1597440 B
    ("tiny-llama", None, 2 * 2 * 2 * 32 * 2),  # 512 B
]


@pytest.mark.parametrize("name,params,kv", SIZES)
def test_exact_sizes(name, params, kv):
    m = get_model(name)
    if params is not None:
        assert m.num_params == params
        assert m.weight_bytes == 2 * params
    assert m.kv_bytes_per_token == kv


def test_opt_13b_is_within_its_unmodelled_biases_and_positions():
    """OPT-13B's 12,853,473,280 parameters (facebook/opt-13b checkpoint) less what the catalog leaves
    out: the learned position table (2050 x 5120) and the out-projection and MLP biases."""
    m = get_model("opt-13b")
    left_out = 2050 * 5120 + 40 * (5120 + 20480 + 5120)
    assert m.num_params + left_out == 12_853_473_280
    assert m.kv_bytes_per_token == 40 * 2 * 40 * 128 * 2 and not m.gated_mlp and m.tie_word_embeddings


def test_llama2_7b_kv_is_512_kib():
    assert get_model("llama2-7b").kv_bytes_per_token == 512 * 1024


def test_falcon_180b_shapes():
    m = get_model("falcon-180b")
    assert (m.head_dim, m.num_attention_heads, m.num_kv_heads) == (64, 232, 8)
    assert m.intermediate_size == 4 * 14848 and not m.gated_mlp and m.parallel_attn_mlp
    assert m.kv_bytes_per_token == 80 * 2 * 8 * 64 * 2  # 163840 B
    # per layer: QKV 14848 x (232 + 2*8)*64, dense 14848^2, MLP 2 x 14848 x 59392, 2 LayerNorms (w + b);
    # tied embeddings 65024 x 14848 counted once, final LayerNorm.
    per_layer = 14848 * 248 * 64 + 14848**2 + 2 * 14848 * 59392 + 2 * 2 * 14848
    assert m.num_params == 80 * per_layer + 65024 * 14848 + 2 * 14848
    assert 178e9 < m.num_params < 180e9  # "Falcon-180B"


def test_yi_kv_per_token_matches_brief():
    assert get_model("yi-34b").kv_bytes_per_token == 60 * 8 * 128 * 2 * 2 == 245760


def test_sharded_kv_and_weights():
    yi = get_model("yi-34b")
    assert yi.kv_bytes_per_token_per_gpu(tp=2) == 245760 // 2
    falcon = get_model("falcon-180b")
    assert falcon.kv_bytes_per_token_per_gpu(tp=4, pp=2) == 40 * 2 * 2 * 64 * 2  # 2 KV heads/GPU, 40 layers
    llama = get_model("llama2-70b")
    # 8 KV heads: TP8 gives 1 per GPU, TP16 replicates (still 1 per GPU, not 1/2)
    assert llama.kv_bytes_per_token_per_gpu(tp=8) == 80 * 2 * 1 * 128 * 2
    assert llama.kv_bytes_per_token_per_gpu(tp=16) == llama.kv_bytes_per_token_per_gpu(tp=8)
    assert llama.weight_bytes_per_gpu(1, 1) == llama.weight_bytes
    # TP splits everything but the (tiny) norms: within 0.01 % of an even split
    assert llama.weight_bytes_per_gpu(4, 1) * 4 == pytest.approx(llama.weight_bytes, rel=1e-4)
    # PP: the first stage holds the embedding, the last the LM head; 40 layers each
    stages = llama.stage_weight_params_per_gpu(1, 2)
    assert stages[0] + stages[1] == llama.num_params
    assert llama.layers_per_stage(3) == [27, 27, 26]


def test_invalid_tp_raises():
    with pytest.raises(HarnessError, match="num_attention_heads"):
        get_model("llama2-70b").check_tp(3)
    with pytest.raises(HarnessError):
        Deployment.create(model="falcon-180b", gpu="a100-80g-sxm", tp=16)  # 232 heads / 16


LLAMA_CFG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
    "intermediate_size": 688, "num_attention_heads": 8, "num_key_value_heads": 2,
    "num_hidden_layers": 3, "vocab_size": 1000, "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "hidden_act": "silu",
}


def test_from_hf_config_round_trip(tmp_path):
    m = ModelArch.from_hf_config(LLAMA_CFG, name="small")
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.num_kv_heads, m.head_dim) == (3, 256, 8, 2, 32)
    assert (m.intermediate_size, m.vocab_size, m.max_position_embeddings) == (688, 1000, 2048)
    assert m.gated_mlp and not m.parallel_attn_mlp and m.sliding_window is None and not m.layer_norm
    # parameters: 3 x (attn 256*(256+2*64) + 256*256, MLP 3*256*688, 2 RMSNorm) + 2 x 1000*256 + final norm
    assert m.num_params == 3 * (256 * 384 + 256 * 256 + 3 * 256 * 688 + 2 * 256) + 2 * 1000 * 256 + 256
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_CFG))
    assert ModelArch.from_hf_config(tmp_path, name="small") == m  # a directory
    assert ModelArch.from_hf_config(tmp_path / "config.json", name="small") == m  # a file


def test_from_hf_config_mistral_and_falcon_spellings():
    mistral = dict(LLAMA_CFG, model_type="mistral", sliding_window=4096, hidden_size=4096, intermediate_size=14336,
                   num_attention_heads=32, num_key_value_heads=8, num_hidden_layers=32, vocab_size=32000,
                   max_position_embeddings=32768)
    assert ModelArch.from_hf_config(mistral, name="mistral-7b") == get_model("mistral-7b")
    # tiiuae/falcon-180B config.json keys (no head_dim, no intermediate size, no tie flag)
    falcon = {"model_type": "falcon", "hidden_size": 14848, "num_attention_heads": 232, "num_hidden_layers": 80,
              "num_kv_heads": 8, "new_decoder_architecture": True, "parallel_attn": True, "bias": False,
              "alibi": False, "vocab_size": 65024, "layer_norm_epsilon": 1e-5}
    assert ModelArch.from_hf_config(falcon, name="falcon-180b") == get_model("falcon-180b")
    # RW-era spellings
    rw = {"model_type": "RefinedWeb", "hidden_size": 8192, "n_head": 128, "n_layer": 60, "n_head_kv": 8,
          "new_decoder_architecture": True, "parallel_attn": True, "vocab_size": 65024}
    m = ModelArch.from_hf_config(rw)
    assert (m.num_layers, m.num_attention_heads, m.num_kv_heads, m.intermediate_size) == (60, 128, 8, 4 * 8192)


def test_untied_embeddings_unless_the_family_ties_them():
    # transformers' defaults when config.json omits the flag: LlamaConfig/MistralConfig do not tie,
    # FalconConfig (PretrainedConfig) does. The torch engine reads its shapes through this parser.
    from engines.models.config import ModelConfig

    llama = {k: v for k, v in LLAMA_CFG.items() if k != "tie_word_embeddings"}
    assert not ModelArch.from_hf_config(llama).tie_word_embeddings
    assert not ModelConfig.from_hf_dict(llama).tie_word_embeddings
    falcon = {"model_type": "falcon", "hidden_size": 256, "num_attention_heads": 8, "num_hidden_layers": 2,
              "num_kv_heads": 2, "new_decoder_architecture": True, "vocab_size": 1000}
    assert ModelArch.from_hf_config(falcon).tie_word_embeddings
    torch_cfg = ModelConfig.from_hf_dict(falcon)
    assert torch_cfg.tie_word_embeddings and torch_cfg.family == "falcon" and torch_cfg.falcon_qkv_layout == "grouped"
    assert (torch_cfg.num_heads, torch_cfg.num_kv_heads, torch_cfg.intermediate_size) == (8, 2, 1024)


def test_from_hf_config_errors(tmp_path):
    with pytest.raises(HarnessError, match="hidden_size"):
        ModelArch.from_hf_config({"model_type": "llama", "vocab_size": 10})
    with pytest.raises(HarnessError, match="cannot read"):
        ModelArch.from_hf_config(tmp_path / "missing.json")


def test_unknown_names_list_known_ones():
    with pytest.raises(HarnessError) as err:
        get_model("gpt-5")
    for name in known_models():
        assert name in str(err.value)
    with pytest.raises(HarnessError) as err:
        get_gpu("tpu-v5")
    for name in known_gpus():
        assert name in str(err.value)
    with pytest.raises(HarnessError, match="paper-a100"):
        get_topology("torus")


def test_gpu_aliases():
    for alias in ("a100-80g-sxm", "A100_80G_SXM", "a100_sxm"):
        assert get_gpu(alias).name == "a100-80g-sxm"
    assert get_gpu("A100-PCIE").name == "a100-80g-pcie"
    for ambiguous in ("A100_80G", "a100_80g", "a100", "a100-80gb"):  # PCIe or SXM: never guessed
        with pytest.raises(HarnessError, match="ambiguous.*a100-80g-pcie.*a100-80g-sxm"):
            get_gpu(ambiguous)
    assert get_gpu("a40").name == "a40-48g"
    assert get_gpu("H200").hbm_bytes > get_gpu("h100").hbm_bytes
    assert get_model("Yi_34B") is get_model("01-ai/Yi-34B") is get_model("yi-34b")


def test_link_selection_follows_topology():
    yi = Deployment.create(model="yi-34b", gpu="a100-80g-sxm", tp=2, topology="paper_a100")
    assert yi.tp_link.name == "nvlink3" and yi.pp_link is None  # a pair on NVLink
    falcon = Deployment.create(model="falcon-180b", gpu="a100-80g-sxm", tp=4, pp=2, topology="paper_a100", gpus_per_node=4)
    assert falcon.tp_link.name == "pcie4"  # the TP4 ring crosses from one NVLink pair to the other
    assert falcon.pp_link.name == "eth100g"  # stages on different nodes
    llama = Deployment.create(model="llama2-70b", gpu="a40", tp=4, pp=2, topology="paper_a40")
    assert (llama.tp_link.name, llama.pp_link.name) == ("pcie4-a40", "pcie4-a40")  # one 8-GPU server (its PCIe: sends via host memory)
    tp8 = Deployment.create(model="falcon-180b", gpu="a100-80g-sxm", tp=8, topology="paper_a100")
    assert tp8.tp_link.name == "eth100g"  # cross-node TP
    sxm = Deployment.create(model="falcon-180b", gpu="a100-80g-sxm", tp=8)
    assert sxm.tp_link.name == "nvswitch-a100"  # the SXM part's usual node: 8 on NVSwitch (dgx-a100)
    dgx = Deployment.create(model="llama2-70b", gpu="h100", tp=8)
    assert dgx.tp_link.name == "nvlink4"
    big_node = Deployment.create(model="falcon-180b", gpu="a100-80g-sxm", tp=4, pp=2, topology="paper_a100", gpus_per_node=8)
    assert big_node.pp_link.name == "pcie4"
    with pytest.raises(HarnessError):
        Deployment(model=get_model("yi-34b"), gpu=get_gpu("a100"), tp=2)  # tp > 1 without a link


# Qwen/Qwen3-32B config.json (the shape keys, as published).
QWEN3_32B_CFG = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 5120,
                 "num_hidden_layers": 64, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
                 "intermediate_size": 25600, "vocab_size": 151936, "max_position_embeddings": 40960,
                 "tie_word_embeddings": False, "attention_bias": False, "sliding_window": None,
                 "use_sliding_window": False, "hidden_act": "silu"}


def test_qwen3_32b_is_its_hf_config():
    """The catalog entry is what the HF reader makes of the published config (qk-norm included)."""
    m = get_model("Qwen/Qwen3-32B")
    assert ModelArch.from_hf_config(QWEN3_32B_CFG, name="qwen3-32b") == m
    assert m.qk_norm and not m.tie_word_embeddings and round(m.num_params / 1e9, 1) == 32.8
