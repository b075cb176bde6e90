"""`python -m harness profile fetch gpu=a100 model=meta-llama/Llama-2-70b-hf [tp=2] [out=profiles]
[ref=7d47513] [src=DIR] [verify=true]`

Vidur's public operator profiles (github.com/microsoft/vidur, MIT licence, `data/profiling/compute/
<gpu>/<model>/{mlp,attention}.csv`), fetched and checked, then converted to the long format
(engines/perf/profile_format.md): one CSV per TP degree, so `perf=profile perf.path=...` is one
command away. Needs the internet, unless `src=` names a local copy of `data/profiling`.

Checks: files this project has seen are pinned by sha256 (PINNED, at PINNED_REF: the copies under
the shared profiles, whose README gives their provenance); a file stored with Git LFS is fetched
from GitHub's media host and checked against the pointer's own sha256 and size; any other file's
sha256 is printed with a warning. A mismatch is an error (`verify=false` accepts it), and nothing
is written.
"""
from __future__ import annotations

import csv
import hashlib
import io
import re
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from common.errors import HarnessError
from engines.perf import get_model
from engines.perf.measured import VIDUR_MODELS, OperatorProfile, load_profile
from harness.overrides import options as parse_options

RAW_URL = "https://raw.githubusercontent.com/microsoft/vidur"
LFS_URL = "https://media.githubusercontent.com/media/microsoft/vidur"
PINNED_REF = "7d47513"  # the commit the shared profiles were taken from (2024-11-19)
PINNED = {  # data/profiling/compute/... at PINNED_REF -> sha256
    "a100/meta-llama/Llama-2-70b-hf/mlp.csv": "d690ce601f94ab80586e1d5a6a92ea0d64114dc3e0895bf32b3bee270f3d9b7f",
    "a100/meta-llama/Llama-2-7b-hf/mlp.csv": "2cfacca979f32e83257753cf6fd815a71af8ba9a7a9d0643b18d9f54e8a37688",
    "a100/meta-llama/Meta-Llama-3-70B/mlp.csv": "6929c6f4afae67f7d91a7938ebdb350a47923b077a1b1c2a4e1911f5ec9e601f",
    "a100/meta-llama/Meta-Llama-3-8B/mlp.csv": "98c26488298e324e89db7349e213f75c856ae83dc6b17548a68636d2cb5efff0",
    "a40/meta-llama/Llama-2-70b-hf/mlp.csv": "a666d9463c0f6994f8103175cad6359bd738e6d4f8e66e56f1dcf88482f91485",
    "a40/meta-llama/Llama-2-7b-hf/mlp.csv": "f8d0f455d0b72b7975be0ed8e1951dcbf2eabc083001b27f6ef8203c0a96962c",
}
FILES = ("mlp.csv", "attention.csv")
_LFS = re.compile(rb"^version https://git-lfs\.github\.com/spec/v1\noid sha256:([0-9a-f]{64})\nsize (\d+)\n?$")
TIMEOUT_S = 60.0


def _get(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as r:  # noqa: S310 (fixed https hosts, or the user's)
            return r.read()
    except urllib.error.HTTPError as e:
        raise HarnessError(f"fetch {url}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        raise HarnessError(f"fetch {url}: {getattr(e, 'reason', e)} (no internet? use src=DIR for a local copy)") from None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fetch_file(rel: str, *, ref: str, src: Path | None, raw_url: str, lfs_url: str, verify: bool) -> tuple[bytes, str]:
    """One profile file (path under data/profiling/compute/) and how it was checked."""
    if src is not None:
        path = src / "compute" / rel
        if not path.is_file():
            raise HarnessError(f"src: no {path}")
        data = path.read_bytes()
    else:
        data = _get(f"{raw_url}/{ref}/data/profiling/compute/{rel}")
    lfs = _LFS.match(data)
    if lfs:  # a Git LFS pointer: the content lives on the media host
        oid, size = lfs.group(1).decode(), int(lfs.group(2))
        if src is not None:
            raise HarnessError(f"src: {src / 'compute' / rel} is a Git LFS pointer, not the data (git lfs pull)")
        data = _get(f"{lfs_url}/{ref}/data/profiling/compute/{rel}")
        if verify and (_sha256(data) != oid or len(data) != size):
            raise HarnessError(f"{rel}: content does not match its Git LFS pointer (sha256 {oid[:12]}, {size} bytes)")
        return data, f"sha256 {oid[:12]} (Git LFS pointer)"
    digest = _sha256(data)
    pinned = PINNED.get(rel) if ref == PINNED_REF else None
    if pinned is None:
        return data, f"sha256 {digest[:12]} (not pinned: unchecked)"
    if digest != pinned and verify:
        raise HarnessError(f"{rel}: sha256 {digest[:12]} does not match the pinned {pinned[:12]} at {ref} "
                           "(verify=false to accept it)")
    return data, f"sha256 {digest[:12]} (pinned{'' if digest == pinned else ': MISMATCH, accepted'})"


def long_rows(profile: OperatorProfile) -> list[tuple]:
    """A loaded profile as long-format rows (op, num_tokens, context_len, batch_size, tp, time_s):
    the measured knots, so the long file prices exactly as the directory it came from."""
    tp, ew = profile.tp, profile.elementwise[0]
    total = ew.y.copy()
    for extra in profile.elementwise[1:]:  # e.g. the KV-cache write, on its own token grid
        total = total + extra(ew.x)
    return ([("linear", int(t), "", "", tp, float(v)) for t, v in zip(profile.linear.x, profile.linear.y)]
            + [("elementwise", int(t), "", "", tp, float(v)) for t, v in zip(ew.x, total)]
            + [("attention_prefill", int(n), int(c), "", tp, float(per_token * n))
               for n, c, per_token in zip(*profile.prefill_per_token.points())]
            + [("attention_decode", "", int(c), int(b), tp, float(v)) for b, c, v in zip(*profile.decode_batch.points())])


def _tp_degrees(data: bytes) -> list[int]:
    """The TP degrees a Vidur CSV holds rows for (its num_tensor_parallel_workers column)."""
    rows = csv.DictReader(io.StringIO(data.decode()))
    return sorted({int(float(r["num_tensor_parallel_workers"])) for r in rows if r.get("num_tensor_parallel_workers")})


def fetch_command(argv: list[str]) -> int:
    opts = parse_options(argv, {"gpu": "", "model": "", "tp": "", "out": "profiles", "ref": PINNED_REF, "src": "",
                                "verify": True, "raw_url": RAW_URL, "lfs_url": LFS_URL})
    gpu, model = str(opts["gpu"]).strip("/"), str(opts["model"]).strip("/")
    if not gpu or not model:
        raise HarnessError("fetch needs gpu= and model= (e.g. gpu=a100 model=meta-llama/Llama-2-70b-hf)")
    try:
        wanted = [int(t) for t in str(opts["tp"]).replace("[", "").replace("]", "").split(",") if t.strip()]
    except ValueError:
        raise HarnessError(f"tp={opts['tp']}: expected TP degrees, e.g. tp=2 or tp=1,2") from None
    src = Path(str(opts["src"])).expanduser() if opts["src"] else None
    got = {f: fetch_file(f"{gpu}/{model}/{f}", ref=str(opts["ref"]), src=src, raw_url=str(opts["raw_url"]).rstrip("/"),
                         lfs_url=str(opts["lfs_url"]).rstrip("/"), verify=bool(opts["verify"])) for f in FILES}
    both = sorted(set(_tp_degrees(got["mlp.csv"][0])) & set(_tp_degrees(got["attention.csv"][0])))
    degrees = wanted or both
    if not degrees:
        raise HarnessError(f"{gpu}/{model}: mlp.csv and attention.csv share no TP degree")
    arch = get_model(VIDUR_MODELS[model]) if model in VIDUR_MODELS else None  # the shape check
    out = Path(str(opts["out"]))
    where = f"microsoft/vidur@{opts['ref']} data/profiling/compute/{gpu}/{model}" if src is None else str(src)
    provenance = f"from {where}; {', '.join(c for _, c in got.values())}"
    with tempfile.TemporaryDirectory() as tmp:  # convert every TP degree first: a bad file writes nothing
        for name, (data, _) in got.items():
            (Path(tmp) / name).write_bytes(data)
        converted = {tp: long_rows(load_profile(tmp, tp, arch)) for tp in degrees}
        raw_dir = out / "vidur" / gpu / model
        raw_dir.mkdir(parents=True, exist_ok=True)
        for name in FILES:
            shutil.copyfile(Path(tmp) / name, raw_dir / name)
    for f, (_, check) in got.items():
        print(f"{f}: {check}", file=sys.stderr if "unchecked" in check or "MISMATCH" in check else sys.stdout)
    slug = f"{model.replace('/', '_')}_{gpu}"
    for tp, rows in converted.items():
        path = out / f"{slug}_tp{tp}.csv"
        lines = ["op,num_tokens,context_len,batch_size,tp,time_s,notes"]
        lines += [f"{op},{n},{c},{b},{t},{s!r}," for op, n, c, b, t, s in rows]
        lines[1] += provenance.replace(",", ";")  # the notes column of the first row
        path.write_text("\n".join(lines) + "\n")
        print(f"wrote {path}  (python -m harness perf=profile perf.path={path} parallel.tp={tp} ...)")
    return 0
