"""User-facing errors: a command line prints the message as one line and exits with status 2.

Lives below `engines` and `harness` so the engine packages stay usable without the harness."""


class HarnessError(Exception):
    """Bad input or configuration. The message must name the problem (file, row, field, value)."""


class RunBroken(Exception):
    """A run that broke while measuring (its server died, the client could not keep its schedule):
    nothing it measured may pass for a result. A command exits with status 3 and leaves the run
    directory marked partial, the reason written in it."""
