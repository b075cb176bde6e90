"""`python scripts/gpu_check [--tiny] [...]`: the GPU check in one call (check.py says what it runs)."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]

from scripts.gpu_check.check import main  # noqa: E402

raise SystemExit(main())
