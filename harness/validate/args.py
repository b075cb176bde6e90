"""The words `validate` and `calibrate` read: the run, --flags of their own, and the experiment's
key=value overrides (the deployment the simulator replays the run on)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from common.errors import HarnessError
from engines.perf.calibration import FACTORS

# flag -> (type, default); every flag takes one value (`--flag V` or `--flag=V`)
FLAGS = {
    "--max-error": (float, None),  # validate: exit 1 when the largest headline error is over this fraction
    "--out": (str, None),  # validate: the output directory; calibrate: the calibration file
    "--probe": (str, None),  # a harness run with several probes: SCHEDULER@QPS
    "--kv-tokens": (int, None),  # the engine's KV pool in tokens (one DP rank's), where it is not the deployment's
    "--window": (float, 0.5),  # calibrate: the share of the run's requests fitted on (spread over the run)
    "--factors": (str, ",".join(FACTORS)),  # calibrate: the factors fitted
}


@dataclass(frozen=True)
class Words:
    run: str
    flags: dict
    overrides: tuple[str, ...]

    @property
    def probe(self) -> tuple[str | None, float | None]:
        p = self.flags["--probe"]
        if p is None:
            return None, None
        sched, _, qps = p.partition("@")
        try:
            rate = float(qps) if qps else None
            if rate is not None and not (math.isfinite(rate) and rate > 0):
                raise ValueError
            return sched or None, rate
        except ValueError:
            raise HarnessError(f"--probe: expected SCHEDULER@QPS (a rate > 0), got {p!r}") from None


def parse(argv: list[str], command: str, allowed: tuple[str, ...]) -> Words:
    flags = {k: v[1] for k, v in FLAGS.items() if k in allowed}
    run, overrides, i = None, [], 0
    while i < len(argv):
        word = argv[i]
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            if name not in flags:
                raise HarnessError(f"{command}: unknown flag {name}; known: {', '.join(flags)}")
            if not eq:
                i += 1
                if i == len(argv):
                    raise HarnessError(f"{command}: {name} needs a value")
                value = argv[i]
            try:
                flags[name] = FLAGS[name][0](value)
            except ValueError:
                raise HarnessError(f"{command}: {name}: not a {FLAGS[name][0].__name__}: {value!r}") from None
        elif "=" in word:
            overrides.append(word)
        elif run is None:
            run = word
        else:
            raise HarnessError(f"{command}: one run at a time (got {run} and {word})")
        i += 1
    if run is None:
        raise HarnessError(f"{command}: name the measured run (python -m harness {command} RUN [key=value ...])")
    # Values a flag's type lets through but that mean nothing: refused before anything runs.
    limit = flags.get("--max-error")
    # nan, a negative or an infinite limit would fail every run or none, whatever the error
    if limit is not None and not (math.isfinite(limit) and limit >= 0):
        raise HarnessError(f"{command}: --max-error must be a fraction >= 0 (0.25 for 25 %), got {limit}")
    kv = flags.get("--kv-tokens")
    if kv is not None and kv < 1:  # 0 would otherwise read as "not given": the deployment's own KV, in silence
        raise HarnessError(f"{command}: --kv-tokens must be a number of tokens >= 1, got {kv}")
    return Words(run, flags, tuple(overrides))


def check_out(command: str, out: str | None, directory: bool) -> None:
    """--out where the command can write what it writes (a directory, or a file): refused before any work."""
    if out is None:
        return
    p = Path(out)
    if p.exists() and p.is_dir() != directory:
        raise HarnessError(f"{command}: --out {out} is a {'directory' if p.is_dir() else 'file'}; "
                           f"{command} writes {'a directory' if directory else 'a file'} there")
    parent = next((q for q in p.parents if q.exists()), None)
    if parent is not None and not parent.is_dir():
        raise HarnessError(f"{command}: --out {out}: {parent} is a file, not a directory")
