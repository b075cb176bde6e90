"""The iteration trace: what the plugin scheduled each engine step, and how long the step took.

One JSON object a line. The first line is the header (`{"header": {...}}`: vLLM's version, the
scheduler class, the policy and its knobs, block size, KV blocks); then one line a step with
tokens scheduled, in the order the step was scheduled:

  step              the step's number, from 0
  t_s               when schedule() began, seconds since the scheduler was built (monotonic clock)
  wall_s            schedule() began -> update_from_output() got the step's output: the step's
                    wall time as the engine core saw it (with async scheduling the next step is
                    scheduled while this one runs, so consecutive steps overlap)
  prefill_ids       per prefill chunk of the step, its vLLM request id
  prefill_tokens    per prefill chunk, its tokens
  prefill_context   per prefill chunk, the tokens already in KV before it (its context)
  decode_ids        per decode of the step, its vLLM request id
  decode_context    per decode, its context (tokens in KV before its one token)
  preempted         vLLM request ids preempted by this step's policy decision
  kv_blocks_used    KV blocks vLLM's block pool holds after scheduling the step
  kv_blocks_policy  KV blocks the policy's mirror holds (whole prompts, reservations: >= vLLM's)
  running, waiting  requests running and waiting in vLLM after the step was scheduled

Off (no path given) it costs nothing: the scheduler builds no record and reads no clock.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

COLUMNS = ("step", "t_s", "wall_s", "prefill_ids", "prefill_tokens", "prefill_context", "decode_ids", "decode_context", "preempted",
           "kv_blocks_used", "kv_blocks_policy", "running", "waiting")


class TraceWriter:
    """Appends the trace's lines to `path`, each written whole (line-buffered: a server killed
    mid-run leaves every finished step on disk)."""

    def __init__(self, path: str, header: dict) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a", buffering=1)  # noqa: SIM115 (open for the scheduler's lifetime)
        self.write({"header": {**header, "pid": os.getpid()}})

    def write(self, record: dict) -> None:
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")

    def close(self) -> None:
        self._file.close()


def read_trace(path: str | Path) -> tuple[list[dict], list[dict]]:
    """(headers, steps) of a trace file: a header per scheduler that wrote to it (a server restarted
    onto the same file appends), the steps in the order written. A last line cut short by a killed
    server is left out; any other bad line raises ValueError naming it."""
    headers: list[dict] = []
    steps: list[dict] = []
    lines = Path(path).read_text().splitlines()
    for i, line in enumerate(lines):
        try:
            record = json.loads(line)
        except ValueError:
            if i == len(lines) - 1:
                break
            raise ValueError(f"{path}:{i + 1}: not a trace line: {line[:80]!r}") from None
        if "header" in record:
            headers.append(record["header"])
        else:
            steps.append(record)
    return headers, steps
