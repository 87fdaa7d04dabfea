"""Errors that reach the user: a `UserError` becomes one `error: ...` line and exit code 2.

Raise it for anything the user can fix (a bad file, key or value); its message names what and how.
"""

import difflib
import unicodedata
from collections.abc import Iterable


class UserError(Exception):
    """A problem with the user's input or environment, explained in one line."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def shorten(value: object, limit: int = 120) -> str:
    """`value` as text of at most about `limit` characters, its middle cut out (a path keeps its folder's start and
    its file name), so an error line stays one readable line even for a 5,000-character id or a 20-digit number."""
    text = str(value)
    if len(text) <= limit:
        return text
    keep = max(limit - 30, 20)
    return f"{text[: keep // 2]}...{text[-(keep - keep // 2):]} ({len(text):,} characters)"


def printable(text: str, keep: str = "") -> str:
    """`text` safe to write to a terminal in any locale: bytes a non-UTF-8 locale smuggled into arguments as
    surrogates are decoded back (U+FFFD when they are not UTF-8), and control and format characters (escape
    sequences, bidi overrides) other than those in `keep` are shown as `\\xNN`/`\\uNNNN`, never sent raw."""
    try:
        text = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # a surrogate that no byte became
        text = text.encode("utf-8", "replace").decode("utf-8")
    if text.isprintable():
        return text
    return "".join(ch if ch in keep or unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Zl", "Zp")
                   else ascii(ch)[1:-1] for ch in text)


def did_you_mean(value: str, choices: Iterable[str]) -> str:
    """`"; did you mean 'x'?"` for the closest choice, or "" when none is close: the tail of an error line."""
    close = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""
