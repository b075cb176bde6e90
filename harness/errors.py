"""User-facing errors: the CLI prints the message as one line and exits with status 2."""


class HarnessError(Exception):
    """Bad input or configuration. The message must name the problem (file, row, field, value)."""
