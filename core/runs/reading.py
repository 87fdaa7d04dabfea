"""Reading the run folder's line files: all at once (`read_jsonl`) or as they grow (`FileTail`).

Both tolerate a partial last line (a writer that crashed mid-line) and lines that are not JSON objects;
`FileTail` also survives a file that is replaced, truncated or rewritten in place.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

HEAD_BYTES = 64  # the first bytes of a followed file, compared on every poll to notice an in-place rewrite


def parse_record(line: bytes | str, path: Path | str = "") -> dict | None:
    """One line as a JSON object; None for a line that is not one (logged at DEBUG with `path`)."""
    try:
        record = json.loads(line)
    except ValueError:  # UnicodeDecodeError included
        if line.strip():
            log.debug("%s: skipping a line that is not JSON: %r", path, line[:80])
        return None
    return record if isinstance(record, dict) else None


def read_jsonl(path: Path) -> list[dict]:
    """Every complete JSON object in a file ([] if missing); a partial or broken line is skipped."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    # One decode for the whole file: json.loads(str) per line beats json.loads(bytes), which decodes each again.
    lines = data.decode("utf-8", "replace").split("\n")
    return [r for r in map(parse_record, lines, [path] * len(lines)) if r is not None]


def metric_rows(records: list[dict]) -> list[tuple[int, dict[str, Any]]]:
    """(step, data) of the records in verl's file-logger format; other records are left out."""
    return [(r["step"], r["data"]) for r in records if isinstance(r.get("step"), int) and isinstance(r.get("data"), dict)]


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
        try:
            handle = open(self.path, "rb")  # noqa: SIM115 - closed below; `with` would hide the early returns
        except OSError:
            return []  # not there yet, or deleted: a new file is noticed as a restart
        try:
            chunk = self._read(handle.fileno())
        finally:
            handle.close()
        if not chunk:
            return []
        data = self._pending + chunk
        if self._skip_to_newline:
            start = data.find(b"\n") + 1
            if not start:
                self._pending = b""
                return []
            data, self._skip_to_newline = data[start:], False
        cut = data.rfind(b"\n") + 1
        self._pending = data[cut:]
        return [line.rstrip(b"\r") for line in data[:cut].split(b"\n") if line.strip()]

    def poll_records(self) -> list[dict]:
        """`poll()`, each line parsed as a JSON object (lines that are not one are skipped)."""
        return [r for r in (parse_record(line, self.path) for line in self.poll()) if r is not None]

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
