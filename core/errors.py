"""Errors that reach the user: a `UserError` becomes one `error: ...` line and exit code 2.

Raise it for anything the user can fix (a bad file, key or value); its message names what and how.
"""


class UserError(Exception):
    """A problem with the user's input or environment, explained in one line."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message
