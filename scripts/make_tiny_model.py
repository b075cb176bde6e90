"""Build a tiny Llama model + tokenizer on local disk, for serving tests (no model hub here).

    ~/vllm-venv/bin/python scripts/make_tiny_model.py DIR

Needs torch, transformers, tokenizers and safetensors (the vLLM venv has them). A byte-level
BPE tokenizer (vocab 2048, specials <unk> <s> </s> <pad>) is trained on generated text; the model
is LlamaConfig(hidden 128, 2 layers, 2 heads -> head_dim 64, intermediate 256) with random
weights, saved as bf16 safetensors (~2 MB). head_dim 64, because vLLM's CPU attention backend
accepts only head sizes {32, 64, 80, 96, 112, 128, ...}: head_dim 16 starts and then crashes at
the first request. Deterministic (seeded); idempotent (an existing complete DIR is kept).
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

VOCAB = 2048
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
WORDS = (
    "the a of to and in is for on with as by at from that this it be are was were batch token prefill "
    "decode chunk schedule latency throughput server request model cache memory block stall budget "
    "queue iteration attention layer kernel tensor pipeline parallel stage serving capacity"
).split()


def _corpus(n_lines: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for _ in range(n_lines):
        words = [rng.choice(WORDS) if rng.random() < 0.7 else "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 9)))
                 for _ in range(rng.randint(5, 30))]
        lines.append(" ".join(words) + rng.choice([".", "!", "?", ",", ""]) + f" {rng.randint(0, 9999)}")
    return lines


def build_tokenizer(out: Path, seed: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_corpus(20000, seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", model_max_length=4096)
    fast.save_pretrained(out)
    return fast


def build_model(out: Path, tokenizer, seed: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
        vocab_size=len(tokenizer), max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        torch_dtype="bfloat16",
    )
    assert cfg.hidden_size // cfg.num_attention_heads == 64, "vLLM's CPU attention needs head_dim 64 here"
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir", type=Path)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    out: Path = a.dir
    if (out / "config.json").exists() and (out / "tokenizer.json").exists() and any(out.glob("*.safetensors")):
        print(f"tiny model already at {out}")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(out, a.seed)
    build_model(out, tokenizer, a.seed)
    cfg = json.loads((out / "config.json").read_text())
    print(f"tiny model at {out}: vocab {cfg['vocab_size']}, head_dim {cfg['hidden_size'] // cfg['num_attention_heads']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
