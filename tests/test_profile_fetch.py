"""`python -m harness profile fetch`: Vidur's public profiles fetched, checked and converted to the
long format. The network path runs against a real HTTP server on loopback laid out like GitHub's
raw and media (Git LFS) hosts, serving the shared copies of the profiles; the long file must price
every iteration exactly as the Vidur directory it came from."""
from __future__ import annotations

import functools
import shutil
import socket
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from engines.perf import Deployment
from engines.perf.measured import ProfilePerfModel
from harness.profile.fetch import PINNED_REF, _sha256

ROOT = Path(__file__).resolve().parent.parent
VIDUR = ROOT.parent / "shared" / "profiles" / "vidur"
MODEL = "meta-llama/Llama-2-70b-hf"
pytestmark = pytest.mark.skipif(not (VIDUR / "compute" / "a100" / MODEL / "attention.csv").is_file(),
                                reason="needs ../shared/profiles/vidur (the shared operator profiles)")


def fetch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", "profile", "fetch", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


@pytest.fixture
def hosts(tmp_path):
    """A loopback server with raw/<ref>/data/profiling/compute/... (attention.csv as a Git LFS pointer)
    and media/<ref>/... (the LFS content). Yields (raw_url, lfs_url, served root)."""
    root = tmp_path / "www"
    rel = Path("data/profiling/compute/a100") / MODEL
    raw, media = root / "raw" / PINNED_REF / rel, root / "media" / PINNED_REF / rel
    raw.mkdir(parents=True)
    media.mkdir(parents=True)
    shutil.copyfile(VIDUR / "compute/a100" / MODEL / "mlp.csv", raw / "mlp.csv")
    attention = (VIDUR / "compute/a100" / MODEL / "attention.csv").read_bytes()
    (media / "attention.csv").write_bytes(attention)
    (raw / "attention.csv").write_text(
        f"version https://git-lfs.github.com/spec/v1\noid sha256:{_sha256(attention)}\nsize {len(attention)}\n")
    handler = functools.partial(type("Quiet", (SimpleHTTPRequestHandler,), {"log_message": lambda *a: None}),
                                directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    yield f"{base}/raw", f"{base}/media", root
    server.shutdown()
    server.server_close()


@pytest.mark.live
def test_fetch_checks_converts_and_prices_as_the_vidur_directory(hosts, tmp_path):
    raw_url, lfs_url, _ = hosts
    out = tmp_path / "profiles"
    p = fetch("gpu=a100", f"model={MODEL}", f"out={out}", f"raw_url={raw_url}", f"lfs_url={lfs_url}")
    assert p.returncode == 0, p.stderr
    assert "mlp.csv: sha256 d690ce601f94 (pinned)" in p.stdout and "(Git LFS pointer)" in p.stdout
    long_csv = out / "meta-llama_Llama-2-70b-hf_a100_tp2.csv"
    assert long_csv.is_file() and (out / "vidur/a100" / MODEL / "attention.csv").read_bytes() == \
        (VIDUR / "compute/a100" / MODEL / "attention.csv").read_bytes()  # the LFS content, not the pointer
    d = Deployment.create(model="llama2-70b", gpu="a100-80g-pcie", tp=2)
    from_long, from_dir = ProfilePerfModel(d, long_csv), ProfilePerfModel(d, VIDUR / "compute/a100" / MODEL)
    rng = np.random.default_rng(0)
    new = np.where(rng.random((30, 12)) < 0.2, rng.integers(2, 2048, (30, 12)), 1)
    ctx = rng.integers(0, 4000, (30, 12))
    assert np.allclose(from_long.batch_times(new, ctx), from_dir.batch_times(new, ctx), rtol=1e-12, atol=0)


@pytest.mark.live
def test_a_file_that_does_not_match_its_pin_writes_nothing(hosts, tmp_path):
    raw_url, lfs_url, root = hosts
    mlp = root / "raw" / PINNED_REF / "data/profiling/compute/a100" / MODEL / "mlp.csv"
    mlp.write_bytes(mlp.read_bytes().replace(b"0.5", b"0.6", 1))
    out = tmp_path / "profiles"
    p = fetch("gpu=a100", f"model={MODEL}", f"out={out}", f"raw_url={raw_url}", f"lfs_url={lfs_url}")
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    assert "does not match the pinned d690ce601f94" in p.stderr and not out.exists()
    p = fetch("gpu=a100", f"model={MODEL}", f"out={out}", f"raw_url={raw_url}", f"lfs_url={lfs_url}", "verify=false")
    assert p.returncode == 0 and "MISMATCH, accepted" in p.stderr  # said loudly, on stderr


@pytest.mark.live
def test_git_lfs_content_that_does_not_match_its_pointer_writes_nothing(hosts, tmp_path):
    raw_url, lfs_url, root = hosts
    media = root / "media" / PINNED_REF / "data/profiling/compute/a100" / MODEL / "attention.csv"
    media.write_bytes(media.read_bytes() + b"\n")  # one byte more than the pointer says
    out = tmp_path / "profiles"
    p = fetch("gpu=a100", f"model={MODEL}", f"out={out}", f"raw_url={raw_url}", f"lfs_url={lfs_url}")
    assert p.returncode == 2 and "does not match its Git LFS pointer" in p.stderr and not out.exists()


def test_no_network_or_no_such_model_is_one_line(tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = fetch("gpu=a100", f"model={MODEL}", f"out={tmp_path / 'p'}", f"raw_url=http://127.0.0.1:{port}")
    assert p.returncode == 2 and p.stderr.startswith("error: fetch http://127.0.0.1") and "src=DIR" in p.stderr
    p = fetch("gpu=a100", "model=nobody/none", f"src={VIDUR}", f"out={tmp_path / 'p'}")
    assert p.returncode == 2 and "src: no " in p.stderr and not (tmp_path / "p").exists()
    p = fetch("gpu=a100")
    assert p.returncode == 2 and "needs gpu= and model=" in p.stderr
    p = fetch("gpu=a100", f"model={MODEL}", "tp=two", f"src={VIDUR}", f"out={tmp_path / 'p'}")
    assert p.returncode == 2 and p.stderr.startswith("error: tp=two: expected TP degrees") and not (tmp_path / "p").exists()
