"""Where the project's own files are (the repository is installed in editable mode)."""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = ROOT / "experiments"
