"""What a job sends back to the driver, wherever it ran: done or failed, with the run directory
or the one-line reason, and the host. The multirun's task function returns one; the sweeper and
run_configs print them."""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass

EXIT_BAD_INPUT, EXIT_BROKEN, EXIT_CRASHED = 2, 3, 1


@dataclass(frozen=True)
class JobOutcome:
    exit_code: int  # 0 done; 2 bad input; 3 the run broke; 1 crashed (a bug, a worker that died)
    run_dir: str | None = None
    error: str | None = None  # one line
    host: str = ""

    @property
    def done(self) -> bool:
        return self.exit_code == 0


def here() -> str:
    return socket.gethostname()


def first_line(e: BaseException) -> str:
    """An error's message in one line (its type's name where it has none)."""
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def exit_code(outcomes: list[JobOutcome]) -> int:
    """The driver's exit status: 0 when every job is done; else a crash (1) over a broken run (3)
    over bad input (2)."""
    codes = {o.exit_code for o in outcomes}
    for code in (EXIT_CRASHED, EXIT_BROKEN, EXIT_BAD_INPUT):
        if code in codes:
            return code
    return 0 if codes <= {0} else EXIT_CRASHED


def secondary_task() -> bool:
    """A SLURM job over several nodes runs one task per node: the first runs the harness, the
    others only hold their node (and its GPUs) for the servers the first starts there."""
    for var in ("SLURM_PROCID", "SUBMITIT_LOCAL_GLOBALID"):
        rank = os.environ.get(var)
        if rank is not None and rank.isdigit() and int(rank) > 0:
            return True
    return False
