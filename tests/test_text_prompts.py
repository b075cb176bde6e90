"""Text prompts of exact length under a named tokenizer, the chat API, and the endpoint backend's
check that the server counts prompts as that tokenizer does (real BPE tokenizers trained here,
a real in-repo server on loopback)."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from common.errors import HarnessError
from harness.backends.live.lifecycle import LaunchSpec, ServerProcess, free_port
from harness.loadgen import LoadOptions, run_load
from harness.records import RequestSpec, error_kind
from harness.workload.text_prompts import TextPrompter, with_prompt_texts

tokenizers = pytest.importorskip("tokenizers")
ROOT = Path(__file__).resolve().parent.parent


def _train(path: Path, vocab: int, seed: int) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rng = random.Random(seed)
    words = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 7))) for _ in range(400)]
    lines = [" ".join(rng.choices(words, k=rng.randint(5, 20))) for _ in range(3000)]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<unk>", "<s>", "</s>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                       show_progress=False))
    tok.save(str(path))
    return path


@pytest.fixture(scope="module")
def tokenizer_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    return _train(d / "server.json", 1500, 0), _train(d / "other.json", 1500, 1)


@pytest.fixture(scope="module")
def server(tokenizer_files):
    port = free_port()
    cmd = [sys.executable, "-m", "engines.server", "--model", "tiny", "--executor", "null", "--port", str(port),
           "--tokenizer", str(tokenizer_files[0]), "--kv-capacity-tokens", "65536", "--max-model-len", "2048"]
    with ServerProcess(LaunchSpec(cmd, f"http://127.0.0.1:{port}", model=None, cwd=str(ROOT),
                                  env={"PYTHONPATH": str(ROOT)})):
        yield f"http://127.0.0.1:{port}"


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def _count(p: TextPrompter, text: str) -> int:
    """Tokens the prompter's tokenizer counts in `text` (special tokens not counted)."""
    return len(p.tok.encode(text, add_special_tokens=False).ids)


def test_prompts_have_exactly_the_asked_length(tokenizer_files):
    p = TextPrompter(tokenizer_files[0])
    lengths = [1, 7, 64, 900]
    texts = p.texts(lengths, [(5, 3, i) for i in range(4)])
    assert [_count(p, t) for t in texts] == lengths
    assert texts == p.texts(lengths, [(5, 3, i) for i in range(4)])  # seeded
    again = p.texts([64, 64], [(5, 3, 0), (5, 3, 1)])
    assert again[0] != again[1]  # every request its own words: no shared prefix to cache


def test_requests_get_text_less_what_the_server_adds(tokenizer_files):
    p = TextPrompter(tokenizer_files[0])
    reqs = [RequestSpec(i, 0.0, 20 + i, 4) for i in range(5)]
    out = with_prompt_texts(reqs, p, seed=1, overhead=3)
    assert [_count(p, r.prompt_text) for r in out] == [17 + i for i in range(5)]
    assert [r.prompt_len for r in out] == [r.prompt_len for r in reqs]
    short = with_prompt_texts(reqs, p, seed=1, overhead=22)  # prompts of 20 and 21 cannot be that short
    assert [r.prompt_len for r in short] == [23, 23, 23, 23, 24]
    assert [_count(p, r.prompt_text) for r in short] == [1, 1, 1, 1, 2]
    with pytest.raises(HarnessError, match="no such tokenizer.json"):
        TextPrompter(tokenizer_files[0].parent / "missing.json")


@pytest.mark.live
def test_the_server_chats_and_counts_its_template(server, tokenizer_files):
    p = TextPrompter(tokenizer_files[0])
    text = p.texts([12], [(0, 3, 0)])[0]
    whole = _post(server + "/v1/chat/completions", {"messages": [{"role": "user", "content": text}], "max_tokens": 3,
                                                    "ignore_eos": True})
    assert whole["object"] == "chat.completion" and whole["choices"][0]["message"]["role"] == "assistant"
    template = _count(p, "<|user|>\n" + text + "\n<|assistant|>\n")
    assert whole["usage"]["prompt_tokens"] == template > 12
    plain = _post(server + "/v1/completions", {"prompt": text, "max_tokens": 1})
    assert plain["usage"]["prompt_tokens"] == 12
    bad = urllib.request.Request(server + "/v1/chat/completions", data=b'{"messages": [{"role": "robot", "content": "x"}]}',
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(bad, timeout=10)
    assert e.value.code == 400 and "messages[0].role" in json.loads(e.value.read())["error"]["message"]


@pytest.mark.live
@pytest.mark.parametrize("api", ["completions", "chat"])
def test_the_load_generator_streams_text_and_checks_the_servers_count(server, tokenizer_files, api):
    p = TextPrompter(tokenizer_files[0])
    overhead = _count(p, "<|user|>\n" + "\n<|assistant|>\n") if api == "chat" else 0
    reqs = [RequestSpec(i, 0.01 * i, 30 + 3 * i, 5) for i in range(12)]
    opts = LoadOptions(base_url=server, model="tiny", api=api, progress=False)
    good = run_load(with_prompt_texts(reqs, p, seed=2, overhead=overhead), opts)
    assert [r.error for r in good.records] == [None] * 12
    assert all(len(r.token_times_s) == 5 for r in good.records)
    # A wrong idea of the server's count is an error of kind prompt_len on every request, not hidden.
    off = run_load(with_prompt_texts(reqs, p, seed=2, overhead=overhead + 1), opts)
    assert {error_kind(r.error) for r in off.records} == {"prompt_len"}
    assert "prompt_len" in off.notes[0]


def _harness(server: str, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    args = ["experiment=yi34b_tp2_strict", "model.name=tiny", "dataset.max_total_tokens=256", "max_model_len=1024",
            "slo.tbt_s=0.05", "scheduler=[sarathi]", "search.num_requests=32", "search.fixed_qps=8",
            "search.time_limit_s=30", "backend=endpoint", f"backend.base_url={server}/v1", f"results_dir={tmp_path}",
            "progress=false", "backend.strict=false", *extra]  # the subject is the prompts, not the client's timing
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env)


@pytest.mark.live
def test_endpoint_chat_with_the_servers_tokenizer_runs_clean(server, tokenizer_files, tmp_path):
    proc = _harness(server, tmp_path, "backend.api=chat", f"backend.tokenizer={tokenizer_files[0]}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(next(tmp_path.rglob("summary.json")).read_text())
    assert "prompt_len" not in json.dumps(summary)


@pytest.mark.live
def test_endpoint_refuses_a_tokenizer_that_counts_otherwise(server, tokenizer_files, tmp_path):
    proc = _harness(server, tmp_path, "backend.api=chat", f"backend.tokenizer={tokenizer_files[1]}")
    assert proc.returncode == 2
    assert "does not count as" in proc.stderr and "Traceback" not in proc.stderr
    chat_without = _harness(server, tmp_path, "backend.api=chat")
    assert chat_without.returncode == 2 and "backend.tokenizer" in chat_without.stderr
