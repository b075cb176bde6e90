"""The words `validate` and `calibrate` read: the run, --flags of their own, and the experiment's
key=value overrides (the deployment the simulator replays the run on)."""
from __future__ import annotations

from dataclasses import dataclass

from common.errors import HarnessError

# flag -> (type, default); every flag takes one value (`--flag V` or `--flag=V`)
FLAGS = {
    "--max-error": (float, None),  # validate: exit 1 when the largest headline error is over this fraction
    "--out": (str, None),  # validate: the output directory; calibrate: the calibration file
    "--probe": (str, None),  # a harness run with several probes: SCHEDULER@QPS
    "--kv-tokens": (int, None),  # the engine's KV pool in tokens, where it is not the deployment's
    "--window": (float, 0.5),  # calibrate: the share of the run's arrival span fitted on
    "--factors": (str, "flops_scale,bandwidth_scale,step_cpu_s,seq_cpu_s"),  # calibrate: the factors fitted
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
            return sched or None, float(qps) if qps else None
        except ValueError:
            raise HarnessError(f"--probe: expected SCHEDULER@QPS, got {p!r}") from None


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
    return Words(run, flags, tuple(overrides))
