"""Whole-file writes that a reader or a crash never sees half done: a temporary file beside the target,
flushed to disk (fsync) and renamed over it, so the target holds either the old or the new content.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside `path` to write to; on success it is fsynced and renamed to `path`.

    For writers that want a file name (pyarrow, torch); on an error the temporary file is removed and
    `path` is left as it was.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)  # the data is on disk before the rename makes it the file
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` by `text` (UTF-8) atomically and durably."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def read_text(path: Path, what: str = "file") -> str:
    """A user's text file as UTF-8; UserError naming the file (and the line of a byte that is not UTF-8) when it is
    missing, a folder, unreadable or not UTF-8 text."""
    from core.errors import UserError, shorten

    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{shorten(path)}: no such {what}") from None
    except IsADirectoryError:
        raise UserError(f"{shorten(path)}: is a folder; pass the {what} itself") from None
    except OSError as exc:
        raise UserError(f"{shorten(path)}: cannot read the {what} ({exc.strerror or exc})") from None
    return decode_text(data, str(path), what)


def decode_text(data: bytes, source: str, what: str = "file") -> str:
    """`data` decoded as UTF-8; UserError naming `source:line` of the first byte that is not UTF-8."""
    from core.errors import UserError, shorten

    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UserError(f"{shorten(source)}:{line}: the {what} is not UTF-8 text (byte 0x{data[exc.start]:02x}); "
                        "save it as UTF-8") from None
