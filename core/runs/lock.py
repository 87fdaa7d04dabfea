"""The single-writer rule of a run folder: one process at a time holds its `writer.lock`, an OS file lock (flock).

The kernel drops the lock when its process ends, however it ends (kill -9 included), so a stale lock is free
again by itself; the file's text says who holds it (host, pid, since when) for the error a second writer gets.
`flock` is per machine: on a network file system (NFS, CIFS, Lustre...) two hosts could both hold it, so there
the writer also keeps a heartbeat lease (`core.runs.lease`) that a writer on any host sees.
"""

from __future__ import annotations

import json
import os
import socket
from datetime import UTC, datetime
from pathlib import Path

from core.errors import UserError, shorten
from core.runs.lease import Lease, lease_is_live, network_filesystem, read_lease

LOCK_FILE = "writer.lock"

# The locks this process holds, by folder: taking a lock it already holds is a no-op (the CLI takes it before the
# backend does), and a second open file of the same lock would otherwise conflict with the first.
_held: dict[Path, RunLock] = {}


def _key(folder: Path) -> Path:
    return Path(os.path.abspath(folder))


class RunLock:
    """The writer lock of one run folder, held from `acquire()` until `release()` or the end of the process.

    `lease`: also keep the cross-host lease (None: when the folder is on a network file system); `lease_options`
    go to `Lease` (heartbeat_s, stale_s).
    """

    def __init__(self, folder: Path, *, lease: bool | None = None, **lease_options: float) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_FILE
        self._fd: int | None = None
        self._want_lease, self._lease_options = lease, lease_options
        self._lease: Lease | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> RunLock:
        """Take the lock without waiting; UserError naming the holder when another process has it."""
        import fcntl

        held = _held.get(_key(self.folder))
        if held is not None and held.held:
            return held
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise UserError(f"{shorten(self.folder)}: the run folder is not writable ({exc.strerror or exc}); a run "
                            "is written where it lives: copy it somewhere writable, or fix the permissions") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UserError(f"{shorten(self.folder)}: {describe_holder(read_holder(self.folder))} is writing this run; "
                            "one process writes a run at a time: wait for it to end or stop it "
                            "(devops-rl tui, or kill -INT PID)") from None
        except BaseException:
            os.close(fd)
            raise
        want_lease = self._want_lease if self._want_lease is not None else network_filesystem(self.folder) is not None
        if want_lease:
            try:
                self._lease = Lease(self.folder, **self._lease_options).take(describe_holder)
            except BaseException:
                os.close(fd)
                raise
        self._fd = fd
        text = json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                           "since": datetime.now(UTC).isoformat(timespec="seconds")}) + "\n"
        os.ftruncate(fd, 0)
        os.pwrite(fd, text.encode("utf-8"), 0)
        _held[_key(self.folder)] = self
        return self

    def release(self) -> None:
        """Give the lock up (its file stays; what it says is only read while someone holds the lock)."""
        if self._fd is None:
            return
        if self._lease is not None:
            self._lease.drop()
            self._lease = None
        os.close(self._fd)  # closing the only descriptor of the open file drops its flock
        self._fd = None
        if _held.get(_key(self.folder)) is self:
            del _held[_key(self.folder)]

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def release_lock(folder: Path) -> None:
    """Give up the lock this process holds on `folder`, if it holds one."""
    held = _held.get(_key(folder))
    if held is not None:
        held.release()


def read_holder(folder: Path) -> dict:
    """What the lock file says about its last holder ({} when it says nothing readable)."""
    try:
        holder = json.loads((Path(folder) / LOCK_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def describe_holder(holder: dict) -> str:
    """'process 4242 on host gpu-1 (since 2026-01-01T12:00:00+00:00)', or a neutral phrase when unknown."""
    if not holder.get("pid"):
        return "another process"
    since = f" (since {holder['since']})" if holder.get("since") else ""
    return f"process {holder['pid']} on host {holder.get('host', '?')}{since}"


def lock_holder(folder: Path) -> dict | None:
    """Who holds the folder's writer lock (or its live cross-host lease) right now ({"host", "pid", "since"},
    possibly empty), or None when it is free. For a launcher's check before it starts a writer; the writer itself
    must still `acquire()`."""
    import fcntl

    folder = Path(folder)
    held = _held.get(_key(folder))
    if held is not None and held.held:
        return read_holder(folder)
    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return read_holder(folder)
    finally:
        os.close(fd)
    lease = read_lease(folder)
    return lease if lease and lease_is_live(lease) else None
