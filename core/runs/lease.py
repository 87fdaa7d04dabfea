"""The single-writer rule across hosts: on a network file system (NFS, CIFS, Lustre...), where `flock` is per
machine, a run's writer also keeps a lease file with its host, pid and a heartbeat; a fresh lease refuses a
second writer on any host, and a lease whose heartbeat stopped (or whose process is gone from this host) is stale.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from core.errors import UserError, shorten

LEASE_FILE = "writer.lease"
HEARTBEAT_S = 10.0  # how often the writer renews its lease
STALE_S = 60.0  # a lease not renewed for this long is a dead writer's (hosts' clocks must agree to within it)

# File systems on which a lock taken on one host is not seen, or not reliably, on another (mountinfo's type).
NETWORK_FILESYSTEMS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "ceph", "fuse.glusterfs", "glusterfs", "gpfs", "beegfs",
    "fuse.sshfs", "9p", "afs", "ocfs2", "gfs2",
})


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash in paths as octal escapes (\\040 ...)."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def mount_type(path: Path, mountinfo: str | None = None) -> str | None:
    """The file system type of the mount that holds `path` (its longest mount point prefix in
    /proc/self/mountinfo, or in `mountinfo` when given); None when that cannot be read (not Linux)."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
    target = os.path.realpath(path)
    best, kind = -1, None
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        point = _unescape(fields[4])
        after = line.split(" - ", 1)[1].split()
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if after and inside and len(point) >= best:  # later lines mount over earlier ones at the same point
            best, kind = len(point), after[0]
    return kind


def network_filesystem(path: Path, mountinfo: str | None = None) -> str | None:
    """The network file system type under `path` (e.g. "nfs4"), or None on a local one."""
    kind = mount_type(path, mountinfo)
    return kind if kind in NETWORK_FILESYSTEMS else None


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _read_json(path: Path) -> dict:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def read_lease(folder: Path) -> dict:
    """What the folder's lease says ({} when there is none or it is unreadable)."""
    return _read_json(Path(folder) / LEASE_FILE)


def lease_is_live(record: dict, *, stale_s: float = STALE_S, now: float | None = None) -> bool:
    """Whether a lease still names a running writer: renewed within `stale_s`, and, when it was taken on this
    host, by a process that still exists (a crash on this host frees it at once)."""
    from core.runs.process import pid_alive

    beat = record.get("heartbeat")
    if not isinstance(beat, (int, float)) or (now if now is not None else time.time()) - beat > stale_s:
        return False
    if record.get("host") == socket.gethostname() and pid_alive(record.get("pid")) is False:
        return False
    return True


class Lease:
    """This process's lease on a run folder: taken with `take()`, renewed by a daemon thread, removed by `drop()`."""

    def __init__(self, folder: Path, *, heartbeat_s: float = HEARTBEAT_S, stale_s: float = STALE_S) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LEASE_FILE
        self.heartbeat_s, self.stale_s = heartbeat_s, stale_s
        self.record = {"host": socket.gethostname(), "pid": os.getpid(), "since": _now_iso(), "heartbeat": time.time()}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def take(self, describe) -> Lease:
        """Create the lease, or take over a stale one; UserError naming the live holder (`describe(record)`)."""
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)  # exclusive on NFSv3+ too
            except FileExistsError:
                found = read_lease(self.folder)
                if lease_is_live(found, stale_s=self.stale_s):
                    raise self._refusal(found, describe) from None
                self._move_aside(found, describe)
                continue
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(json.dumps(self.record) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            self._thread = threading.Thread(target=self._beat, name="run-lease", daemon=True)
            self._thread.start()
            return self
        raise self._refusal(read_lease(self.folder), describe)

    def _refusal(self, record: dict, describe) -> UserError:
        beat = record.get("heartbeat")
        age = f", last heartbeat {time.time() - beat:.0f}s ago" if isinstance(beat, (int, float)) else ""
        return UserError(f"{shorten(self.folder)}: {describe(record)} holds this run's lease ({LEASE_FILE}{age}) and "
                         f"is writing it from another process or host; one process writes a run at a time: wait for it "
                         f"to end or stop it (a lease not renewed for {self.stale_s:.0f}s is taken over)")

    def _move_aside(self, judged: dict, describe) -> None:
        """Retire the stale lease judged from `judged`: renamed away (only one taker can move one file), and put
        back when what moved is not that lease (another writer renewed or replaced it in between)."""
        aside = self.path.with_name(f"{LEASE_FILE}.stale-{socket.gethostname()}-{os.getpid()}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return  # another taker retired it first; the exclusive create decides between us
        moved = _read_json(aside)
        if moved != judged and lease_is_live(moved, stale_s=self.stale_s):
            try:
                os.link(aside, self.path)  # fails when yet another lease appeared: that one stands
            except FileExistsError:
                pass
            aside.unlink(missing_ok=True)
            raise self._refusal(moved, describe)
        aside.unlink(missing_ok=True)

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            if not self._ours(read_lease(self.folder)):
                return  # someone took it over (this process stalled past the stale limit): never write over theirs
            self.record["heartbeat"] = time.time()
            try:
                tmp = self.path.with_name(f"{LEASE_FILE}.{os.getpid()}.tmp")
                tmp.write_text(json.dumps(self.record) + "\n", encoding="utf-8")
                os.replace(tmp, self.path)
            except OSError:
                continue  # a full or briefly unreachable share: try again at the next beat

    def drop(self) -> None:
        """Stop renewing and remove the lease if it is still this process's."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.heartbeat_s + 5)
        if self._ours(read_lease(self.folder)):
            self.path.unlink(missing_ok=True)

    def _ours(self, record: dict) -> bool:
        return (record.get("host"), record.get("pid")) == (self.record["host"], self.record["pid"])

