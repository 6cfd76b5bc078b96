"""Errors that reach a user as one line (CLI) or a 4xx / INVALID_ARGUMENT (servers)."""


class UserError(Exception):
    """Bad input from the user: a path, a name, a flag, a file. The message says what was wrong."""


class CheckpointError(UserError):
    """A checkpoint that cannot be read: missing, half-written, truncated, or of an unknown kind."""
