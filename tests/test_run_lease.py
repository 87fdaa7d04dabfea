"""One writer per run across hosts: run folders on NFS/CIFS/Lustre are found from mountinfo, and there a writer's
heartbeat lease refuses a second writer that `flock` (per machine) would let through. The second host is played
by this process with `flock` made a no-op, as it is between two NFS clients; the first writer is a real process.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from core.errors import UserError
from core.runs import RunDirectory, lock_holder
from core.runs.lease import LEASE_FILE, mount_type, network_filesystem, read_lease
from core.runs.lock import RunLock
from tests.conftest import REPO

MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:45 / /nfs-h23 rw,relatime shared:20 - nfs4 fs1:/export rw,vers=4.2
41 40 0:46 / /nfs-h23/local\\040scratch rw shared:21 - xfs /dev/sdb1 rw
42 22 0:47 / /lustre-h23 rw - lustre 10.0.0.1@tcp:/fs rw
43 22 0:48 / /cifs-h23 rw - cifs //srv/share rw
44 22 0:49 / /tmp-h23 rw - tmpfs tmpfs rw
"""


def test_network_run_roots_are_found_in_mountinfo():
    assert mount_type("/nfs-h23/runs/r1", MOUNTINFO) == "nfs4"
    assert network_filesystem("/nfs-h23/runs/r1", MOUNTINFO) == "nfs4"
    assert network_filesystem("/nfs-h23/local scratch/runs", MOUNTINFO) is None  # a local disk mounted inside it
    assert network_filesystem("/lustre-h23/runs", MOUNTINFO) == "lustre"
    assert network_filesystem("/cifs-h23", MOUNTINFO) == "cifs"
    assert network_filesystem("/nfs-h23x/runs", MOUNTINFO) is None  # a prefix of the name is not the mount
    assert network_filesystem("/tmp-h23/runs", MOUNTINFO) is None
    assert network_filesystem("/home/u/runs", MOUNTINFO) is None
    assert mount_type("/anything", "garbage line\n") is None


HOLDER = r"""
import sys, time
from core.runs.lock import RunLock
RunLock(sys.argv[1], lease=True, heartbeat_s=0.2).acquire()
print("holding", flush=True)
time.sleep(120)
"""


@pytest.fixture
def other_host(monkeypatch):
    """This process as a second NFS client: the folder is on "nfs4" and flock does not see the first host's lock."""
    import fcntl

    from core.runs import lock

    monkeypatch.setattr(lock, "network_filesystem", lambda folder: "nfs4")
    monkeypatch.setattr(fcntl, "flock", lambda fd, op: None)


def test_a_second_writer_is_refused_by_the_live_lease_and_takes_it_once_the_writer_is_gone(tmp_path, other_host):
    run = tmp_path / "run"
    run.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        first = read_lease(run)
        assert first["pid"] == holder.pid and first["host"] == socket.gethostname()
        time.sleep(0.6)
        assert read_lease(run)["heartbeat"] > first["heartbeat"]  # renewed while it writes
        with pytest.raises(UserError) as info:
            RunDirectory(run).hold_lock()  # what train, resume and the verl launcher take
        message = str(info.value)
        assert f"process {holder.pid} on host {socket.gethostname()}" in message and "holds this run's lease" in message
        assert "\n" not in message
        assert lock_holder(run)["pid"] == holder.pid  # the cockpit's check before it starts a writer sees it too
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
    # kill -9 leaves the lease behind; its process is gone from this host, so it is stale at once
    taken = RunLock(run).acquire()
    try:
        assert read_lease(run)["pid"] == os.getpid()
    finally:
        taken.release()
    assert not (run / LEASE_FILE).exists()  # released: nothing left to go stale


def _lease_from(run, *, host: str, age_s: float) -> None:
    (run / LEASE_FILE).write_text(json.dumps({"host": host, "pid": 4242, "since": "2026-01-01T00:00:00+00:00",
                                              "heartbeat": time.time() - age_s}))


def test_another_hosts_lease_holds_until_its_heartbeat_is_stale(tmp_path, other_host):
    run = tmp_path / "run"
    run.mkdir()
    _lease_from(run, host="gpu-7", age_s=5)
    with pytest.raises(UserError, match=r"process 4242 on host gpu-7 .*last heartbeat \d+s ago"):
        RunLock(run).acquire()
    assert read_lease(run)["host"] == "gpu-7"  # a refused writer changes nothing
    _lease_from(run, host="gpu-7", age_s=300)  # gpu-7 stopped renewing 5 minutes ago: a dead writer
    lock = RunLock(run).acquire()
    try:
        assert read_lease(run)["host"] == socket.gethostname() and not list(run.glob(LEASE_FILE + ".*"))
    finally:
        lock.release()


def test_a_lease_is_kept_only_on_a_network_run_root(tmp_path):
    lock = RunLock(tmp_path).acquire()
    try:
        assert (tmp_path / LEASE_FILE).exists() == (network_filesystem(tmp_path) is not None)  # /tmp: local here
    finally:
        lock.release()
