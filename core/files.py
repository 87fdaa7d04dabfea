"""Reading and writing the user's files safely: one reader that takes only regular files of a bounded size (a FIFO,
a device or a symlink loop is refused in one line, never waited on), and whole-file writes that a reader or a crash
never sees half done (a temporary file beside the target, fsynced and renamed over it) and that never replace
anything but a regular file.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MAX_READ_BYTES = 64 * 2**20  # a config, task, answer or results file is kilobytes; past this it is not one
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class NotRegularFile(OSError):
    """A path that is not a regular file (a FIFO, a device, a socket, a folder): reading it could block forever or
    never end, and replacing it would destroy it."""

    def __init__(self, path: Path | str, kind: str) -> None:
        super().__init__(f"is {kind}, not a regular file")
        self.filename, self.kind = str(path), kind


class FileTooLarge(OSError):
    """A file past the reader's size limit."""

    def __init__(self, path: Path | str, limit: int) -> None:
        super().__init__(f"larger than {limit // 2**20} MiB")
        self.filename, self.limit = str(path), limit


def file_kind(mode: int) -> str:
    """What a stat mode is, in words: 'a named pipe (FIFO)', 'a character device', ..., 'a file' (a regular one)."""
    return next((kind for test, kind in _KINDS if test(mode)), "a file" if stat.S_ISREG(mode) else "a special file")


def open_regular(path: Path | str) -> int:
    """A read-only descriptor of `path`, which must be a regular file (symlinks followed); NotRegularFile otherwise.

    The open never blocks (O_NONBLOCK: a FIFO without a writer would wait forever) and the check is on the opened
    file (fstat), so a path swapped for a FIFO between a check and the open is still refused.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, file_kind(mode))
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: Path | str, limit: int = MAX_READ_BYTES, *, head: bool = False) -> bytes:
    """The bytes of regular file `path`, at most `limit` of them: NotRegularFile for anything else, FileTooLarge past
    the limit (read no further: /proc files and files still growing say size 0 or lie); `head=True` returns the
    first `limit` bytes of a longer file instead."""
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit and head:
        return data[:limit]
    if len(data) > limit:
        raise FileTooLarge(path, limit)
    return data


def read_bytes(path: Path, what: str = "file", limit: int = MAX_READ_BYTES, *, head: bool = False) -> bytes:
    """A user's file as bytes; UserError naming the file when it is missing, a folder, not a regular file (a FIFO,
    a device: never waited on), a symlink loop, larger than `limit` (unless `head`: then its first `limit` bytes) or
    unreadable."""
    from core.errors import UserError, shorten

    path = Path(path)
    try:
        return read_regular(path, limit, head=head)
    except FileNotFoundError:
        raise UserError(f"{shorten(path)}: no such {what}") from None
    except NotRegularFile as exc:
        if exc.kind == "a folder":
            raise UserError(f"{shorten(path)}: is a folder; pass the {what} itself") from None
        raise UserError(f"{shorten(path)}: is {exc.kind}, not a regular file; only regular files are read: save the "
                        f"{what} to a file and pass that") from None
    except FileTooLarge:
        raise UserError(f"{shorten(path)}: larger than {limit // 2**20} MiB, too large for a {what}; is it the "
                        f"right file?") from None
    except IsADirectoryError:
        raise UserError(f"{shorten(path)}: is a folder; pass the {what} itself") from None
    except OSError as exc:
        raise UserError(f"{shorten(path)}: cannot read the {what} ({exc.strerror or exc})") from None


def read_text(path: Path, what: str = "file", limit: int = MAX_READ_BYTES) -> str:
    """A user's text file as UTF-8; UserError naming the file (and the line of a byte that is not UTF-8) when it
    cannot be read (see `read_bytes`) or is not UTF-8 text."""
    return decode_text(read_bytes(path, what, limit), str(path), what)


def read_stdin(what: str, source: str = "stdin", limit: int = MAX_READ_BYTES) -> str:
    """Standard input as UTF-8 text, at most `limit` bytes (`< /dev/zero` is refused, not read forever)."""
    import sys

    from core.errors import UserError

    data = sys.stdin.buffer.read(limit + 1)
    if len(data) > limit:
        raise UserError(f"{source}: more than {limit // 2**20} MiB, too large for a {what}; is it the right input?")
    return decode_text(data, source, what)


def decode_text(data: bytes, source: str, what: str = "file") -> str:
    """`data` decoded as UTF-8; UserError naming `source:line` of the first byte that is not UTF-8."""
    from core.errors import UserError, shorten

    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UserError(f"{shorten(source)}:{line}: the {what} is not UTF-8 text (byte 0x{data[exc.start]:02x}); "
                        "save it as UTF-8") from None


def check_replaceable(path: Path) -> None:
    """UserError when `path` exists and is not a regular file: a device (/dev/full), a FIFO, a socket, a folder or a
    symbolic link is never replaced by a file (an atomic rename would destroy it)."""
    from core.errors import UserError, shorten

    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise UserError(f"{shorten(path)}: is a symbolic link (to {shorten(os.readlink(path))}); it is not replaced "
                        "by a file: write to the file it points to, or pick another name")
    if not stat.S_ISREG(mode):
        raise UserError(f"{shorten(path)}: is {file_kind(mode)}, not a regular file; it is never replaced: pick a "
                        "file name")


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside `path` to write to; on success it is fsynced and renamed to `path`.

    For writers that want a file name (pyarrow, torch); on an error the temporary file is removed and
    `path` is left as it was. A `path` that exists and is not a regular file is refused (`check_replaceable`),
    before and again right before the rename.
    """
    path = Path(path)
    check_replaceable(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)  # the data is on disk before the rename makes it the file
        finally:
            os.close(fd)
        check_replaceable(path)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` by `text` (UTF-8) atomically and durably."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
