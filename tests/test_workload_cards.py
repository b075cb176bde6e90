"""Dataset cards (data/cards/) agree with the Hydra dataset configs and the embedded tables."""
import hashlib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
CARDS = sorted((REPO / "data" / "cards").glob("*.yaml"))


@pytest.mark.parametrize("card_path", CARDS, ids=lambda p: p.stem)
def test_card_matches_config(card_path):
    card = yaml.safe_load(card_path.read_text())
    cfg = yaml.safe_load((REPO / card["config"]).read_text())
    assert card["name"] == cfg["name"] == card_path.stem
    assert card["length_filter"]["max_total_tokens"] == cfg["max_total_tokens"]
    emb = card.get("embedded_default")
    if emb:
        assert (REPO / emb["file"]).is_file()


@pytest.mark.parametrize("card_path", CARDS, ids=lambda p: p.stem)
def test_card_real_trace_checksum(card_path):
    card = yaml.safe_load(card_path.read_text())
    real = card.get("real_trace") or {}
    if not real.get("file"):
        pytest.skip(f"{card_path.stem}: no real trace named")
    path = REPO / real["file"]
    if not path.is_file():
        pytest.skip(f"real trace not present at <repo>/{real['file']}")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == real["sha256"]


def test_paper_cards_present():
    names = {p.stem for p in CARDS}
    assert {"openchat_sharegpt4", "arxiv_summarization"} <= names
