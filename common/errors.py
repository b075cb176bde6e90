"""User-facing errors: a command line prints the message as one line and exits with status 2.

Lives below `engines` and `harness` so the engine packages stay usable without the harness."""


class HarnessError(Exception):
    """Bad input or configuration. The message must name the problem (file, row, field, value)."""
