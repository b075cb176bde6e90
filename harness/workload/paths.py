"""Where committed data lives and how user-given paths are resolved."""
from __future__ import annotations

from pathlib import Path

from harness.paths import ROOT

DATA_DIR = ROOT / "data"


def resolve_path(path: str | Path) -> Path:
    """Absolute paths as given; relative ones against the current directory, else the repo root.

    The fallback lets configs name files relative to the repository (e.g.
    `../shared/traces/x.csv`) and still work when Hydra or a test runs from another directory.
    """
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists():
        return p
    alt = ROOT / p
    return alt if alt.exists() else p


def display_path(path: Path) -> str:
    """A path as shown to users and in `Workload.source`: repo-relative when possible."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)
