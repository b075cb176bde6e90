"""`python -m harness.data`: stats, sample, build (offline: local source files, local tokenizer)."""
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from harness.data.cli import main
from harness.workload import load_workload

REPO = Path(__file__).resolve().parents[1]
FIX = REPO / "tests" / "fixtures" / "workload"


def test_stats_embedded(capsys):
    assert main(["stats", "dataset=openchat_sharegpt4", "n=20000"]) == 0
    out = capsys.readouterr().out
    assert "prompt" in out and "1730/5696" in out and "pd_ratio" in out and "20000" in out


def test_stats_trace_override(capsys, tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("num_prefill_tokens,num_decode_tokens\n10,2\n20,4\n9000,1\n")
    assert main(["stats", "dataset=openchat_sharegpt4", f"dataset.trace_file={p}"]) == 0
    out = capsys.readouterr().out
    assert "1 over max_total_tokens dropped" in out and "requests  2" in out


def test_sample_matches_load_workload(tmp_path):
    out = tmp_path / "s.csv"
    assert main(["sample", "dataset=arxiv_summarization", "n=300", "seed=4", f"out={out}"]) == 0
    df = pd.read_csv(out)
    w = load_workload(yaml.safe_load((REPO / "experiments/dataset/arxiv_summarization.yaml").read_text()), 300, 4)
    assert df["num_prefill_tokens"].tolist() == w.prompt_lens.tolist()
    assert yaml.safe_load(out.with_name("s.csv.provenance.yaml").read_text())["seed"] == 4


@pytest.mark.parametrize("argv,msg", [
    (["stats"], "dataset=NAME is required"),
    (["stats", "dataset=nope"], "unknown dataset 'nope'"),
    (["sample", "dataset=openchat_sharegpt4"], "out=FILE"),
    (["stats", "dataset=openchat_sharegpt4", "n=abc"], "n must be an integer"),
    (["frobnicate"], "unknown command"),
    (["stats", "dataset=openchat_sharegpt4", "dataset.trace_file=missing.csv"], "trace file not found: missing.csv"),
])
def test_errors_are_one_line_exit_2(capsys, argv, msg):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1


def test_module_entry_point():
    r = subprocess.run([sys.executable, "-m", "harness.data", "stats", "dataset=nope"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 2 and "unknown dataset" in r.stderr


@pytest.fixture(scope="module")
def word_tokenizer(tmp_path_factory):
    """A tiny word-level tokenizer.json that adds BOS, built locally: 1 token per word."""
    tokenizers = pytest.importorskip("tokenizers", reason="`tokenizers` not installed")
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(["hello world"], trainers.WordLevelTrainer(special_tokens=["<unk>", "<s>"]))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    assert tokenizers is not None
    return path


def test_build_sharegpt_offline(tmp_path, word_tokenizer):
    pytest.importorskip("datasets", reason="`datasets` not installed")
    out = tmp_path / "sg.csv"
    rc = main(["build", "dataset=openchat_sharegpt4", f"tokenizer={word_tokenizer}",
               f"source={FIX / 'sharegpt_gpt4_tiny.json'}", f"out={out}", "dataset.max_total_tokens=22"])
    assert rc == 0
    df = pd.read_csv(out)
    # Rounds: (5 words + BOS -> 2), (5+2+4 + BOS = 12 -> 9), (empty reply: dropped), (orphan gpt
    # turn + 14-word question + BOS = 7+14+1 = 22 prompt + 1 output = 23 > 22: dropped)
    assert df["num_prefill_tokens"].tolist() == [6, 12]
    assert df["num_decode_tokens"].tolist() == [2, 9]
    assert list(df.columns) == ["num_prefill_tokens", "num_decode_tokens", "num_total_tokens", "pd_ratio", "conversation_id"]
    assert df["conversation_id"].tolist() == [0, 0]  # both rounds of the first record
    prov = yaml.safe_load(out.with_name("sg.csv.provenance.yaml").read_text())
    assert prov["dropped_empty"] == 1 and prov["dropped_over_max_total_tokens"] == 1 and prov["rows_written"] == 2
    assert prov["tokenizer"]["specials_per_sequence"] == 1 and prov["source"]["file"] == "sharegpt_gpt4_tiny.json"
    # the built trace is a valid dataset.trace_file
    w = load_workload({"name": "openchat_sharegpt4", "trace_file": str(out), "max_total_tokens": 8192}, 2, 0)
    assert sorted(w.prompt_lens.tolist()) == [6, 12]
    # and replays as one conversation of two turns (dataset.sessions, grouped by conversation_id)
    conv = load_workload({"name": "c", "trace_file": str(out), "max_total_tokens": 8192, "sampling": "sequential",
                          "sessions": {"kind": "conversation", "lengths": "trace"}}, 2, 0)
    assert conv.sessions.turn.tolist() == [0, 1] and conv.prompt_lens.tolist() == [6, 12]
    assert "rebuilt (conversation_id)" in conv.source


def test_build_arxiv_offline(tmp_path, word_tokenizer):
    pytest.importorskip("datasets", reason="`datasets` not installed")
    out = tmp_path / "ax.csv"
    assert main(["build", "dataset=arxiv_summarization", f"tokenizer={word_tokenizer}",
                 f"source={FIX / 'arxiv_tiny.jsonl'}", f"out={out}"]) == 0
    df = pd.read_csv(out)
    assert df["num_prefill_tokens"].tolist() == [12, 4] and df["num_decode_tokens"].tolist() == [3, 1]


def test_build_needs_tokenizer(capsys):
    assert main(["build", "dataset=openchat_sharegpt4"]) == 2
    assert "tokenizer=PATH" in capsys.readouterr().err
