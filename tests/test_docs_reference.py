"""The documentation is reference: a page says what the code does and its current figure, with the
command that measures it. Run-by-run history (which commit measured what, A/B pairs) belongs in
`benchmarks/RESULTS.md`, so no page under docs/ names a commit of this repository."""
from __future__ import annotations

import re
import subprocess

import pytest

from harness.paths import ROOT

HEX = re.compile(r"(?<![0-9A-Za-z_/.-])[0-9a-f]{7,40}(?![0-9A-Za-z_])")


def our_commits(words: set[str]) -> set[str]:
    """The words that name a commit of this repository (git knows them); third-party commits cited
    as provenance (Vidur's profiles, AIConfigurator's example) are not ours and stay."""
    ordered = sorted(words)
    out = subprocess.run(["git", "cat-file", "--batch-check"], input="".join(f"{w}^{{commit}}\n" for w in ordered),
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    return {w for w, line in zip(ordered, out.stdout.splitlines()) if line.split()[1:2] == ["commit"]}


def test_no_page_under_docs_names_a_commit_of_this_repository() -> None:
    if subprocess.run(["git", "rev-parse", "--git-dir"], cwd=ROOT, capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    found: dict[str, set[str]] = {}
    for page in sorted((ROOT / "docs").rglob("*.md")):
        words = {w for w in HEX.findall(page.read_text()) if any(c.isalpha() for c in w) and any(c.isdigit() for c in w)}
        ours = our_commits(words)
        if ours:
            found[str(page.relative_to(ROOT))] = ours
    assert not found, f"commit hashes in docs (history goes to benchmarks/RESULTS.md): {found}"


def test_the_check_finds_a_commit_of_this_repository() -> None:
    if subprocess.run(["git", "rev-parse", "--git-dir"], cwd=ROOT, capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    head = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert our_commits({head, "0253f8e2"}) == {head}
