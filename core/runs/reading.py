"""Reading the run folder's line files: all at once (`read_jsonl`) or as they grow (`FileTail`).

Both tolerate a partial last line (a writer that crashed mid-line) and lines that are not JSON objects;
`FileTail` also survives a file that is replaced, truncated or rewritten in place.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

HEAD_BYTES = 64  # the first bytes of a followed file, compared on every poll to notice an in-place rewrite


def parse_record(line: bytes | str, path: Path | str = "") -> dict | None:
    """One line as a JSON object; None for a line that is not one (logged at DEBUG with `path`). A byte-order mark
    before it (a file saved by an editor that writes one) is not part of the line."""
    if isinstance(line, str) and line.startswith("\ufeff"):
        line = line[1:]
    try:
        record = json.loads(line)
    except ValueError:  # UnicodeDecodeError included
        if line.strip():
            log.debug("%s: skipping a line that is not JSON: %r", path, line[:80])
        return None
    return record if isinstance(record, dict) else None


def _records(text: str, path: Path) -> list[dict]:
    # Text decoded once for many lines: json.loads(str) beats json.loads(bytes), which decodes each line again.
    return [r for r in (parse_record(line, path) for line in text.split("\n")) if r is not None]


def read_run_file(path: Path) -> bytes:
    """A run folder's file as bytes; b"" when it is missing or not a regular file (a FIFO or a device put in its
    place is never waited on nor read forever)."""
    from core.files import NotRegularFile, open_regular

    try:
        fd = open_regular(path)
    except (FileNotFoundError, NotRegularFile):
        return b""
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def read_jsonl(path: Path) -> list[dict]:
    """Every complete JSON object in a file ([] if missing or not a regular file); a partial or broken line is
    skipped."""
    return _records(read_run_file(path).decode("utf-8", "replace"), path)


def metric_rows(records: Iterable[dict]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(step, data) of the records in verl's file-logger format; other records are left out."""
    for r in records:
        if isinstance(r.get("step"), int) and isinstance(r.get("data"), dict):
            yield r["step"], r["data"]


def last_step(metrics_path: Path) -> int | None:
    steps = [step for step, _ in metric_rows(read_jsonl(metrics_path))]
    return max(steps) if steps else None


class FileTail:
    """Non-blocking reader of the complete lines appended to a file since the last `poll()`.

    `from_end=None` reads the file from its start; `from_end=N` starts at its last N bytes (0: only what is
    appended from now on), skipping the line the cut falls into. `max_bytes` caps what one poll reads (the
    rest comes with the next ones). Waits for the file to appear; keeps a partial last line until its newline
    arrives; when the file is replaced (new inode), truncated (shorter than what was read) or rewritten in
    place (its first bytes changed), starts again from its top and counts it in `restarts`. The file is only
    open during a poll, so a follower holds no descriptor between polls.
    """

    def __init__(self, path: Path, *, from_end: int | None = None, max_bytes: int | None = None) -> None:
        self.path = Path(path)
        self.from_end = from_end
        self.max_bytes = max_bytes
        self.restarts = 0
        self.position = 0  # bytes of the file consumed so far
        self._identity: tuple[int, int] | None = None
        self._head = b""
        self._pending = b""  # a partial last line, waiting for its newline
        self._skip_to_newline = False  # started inside a line: drop its tail

    def poll(self) -> list[bytes]:
        """The complete lines (without line endings, blank ones left out) that arrived since the last call."""
        data, cut = self._take()
        lines = data.split(b"\n")
        lines.pop()  # the partial line, kept in _pending (splitting all of data spares a copy of data[:cut])
        return [line.rstrip(b"\r") for line in lines if line.strip()]

    def poll_spans(self) -> list[tuple[int, bytes]]:
        """`poll()` with where each line starts in the file, so a reader can index a file and read a line back
        later (`os.pread`) instead of keeping it; blank lines are left out."""
        data, cut = self._take()
        spans, offset = [], self.position - len(data)  # data always ends where reading stopped
        for line in data[:cut].split(b"\n")[:-1]:
            if line.strip():
                spans.append((offset, line.rstrip(b"\r")))
            offset += len(line) + 1
        return spans

    def poll_records(self) -> list[dict]:
        """`poll()`, each line parsed as a JSON object (lines that are not one are skipped)."""
        data, cut = self._take()
        return _records(str(memoryview(data)[:cut], "utf-8", "replace"), self.path)

    def _take(self) -> tuple[bytes, int]:
        """(data, cut): data[:cut] are the complete lines that arrived since the last call, data[cut:] the
        partial last one, kept for the next call."""
        from core.files import NotRegularFile, open_regular

        try:
            handle = os.fdopen(open_regular(self.path), "rb")
        except (FileNotFoundError, NotRegularFile):
            return b"", 0  # not there yet, or deleted (a new file is noticed as a restart), or a FIFO: nothing to read
        with handle:
            chunk = self._read(handle.fileno())
        data = self._pending + chunk
        if self._skip_to_newline:
            start = data.find(b"\n") + 1
            data = data[start:] if start else b""
            self._skip_to_newline = not start
        cut = data.rfind(b"\n") + 1
        self._pending = data[cut:]
        return data, cut

    def _read(self, fd: int) -> bytes:
        st = os.fstat(fd)
        identity = (st.st_dev, st.st_ino)
        if self._identity is None:
            self._start(fd, st.st_size)
        elif identity != self._identity or st.st_size < self.position or self._head_changed(fd):
            self.restarts += 1
            self.position, self._head, self._pending, self._skip_to_newline = 0, b"", b"", False
        self._identity = identity
        wanted = st.st_size - self.position
        if wanted <= 0:
            return b""
        if self.max_bytes is not None:
            wanted = min(wanted, self.max_bytes)
        chunk = os.pread(fd, wanted, self.position)
        self.position += len(chunk)
        if len(self._head) < HEAD_BYTES:
            self._head = os.pread(fd, min(HEAD_BYTES, self.position), 0)
        return chunk

    def _start(self, fd: int, size: int) -> None:
        """The first time the file is seen: where reading begins."""
        if self.from_end is None or size <= self.from_end:
            return
        self.position = size - self.from_end
        self._skip_to_newline = os.pread(fd, 1, self.position - 1) != b"\n"
        self._head = os.pread(fd, min(HEAD_BYTES, self.position), 0)

    def _head_changed(self, fd: int) -> bool:
        return bool(self._head) and os.pread(fd, len(self._head), 0) != self._head
