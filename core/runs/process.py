"""A run's training process: whether it is alive, and stopping it the one agreed way.

Stopping is SIGINT first (the trainer saves a checkpoint and ends `stopped`), then SIGTERM, then SIGKILL,
each after its own wait; `STOP_GRACE_S` is how long a checkpoint may take before the run is pushed harder.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from collections.abc import Callable

from core.errors import UserError

log = logging.getLogger(__name__)

STOP_GRACE_S = 60.0  # after SIGINT: time to save a checkpoint and exit cleanly (a big model's save takes a while)
TERM_GRACE_S = 15.0  # after SIGTERM, the trainer's second interrupt: it aborts without a checkpoint
KILL_WAIT_S = 5.0  # after SIGKILL: only the kernel is left to act


def pid_alive(pid) -> bool | None:
    """Whether a process with this id (from meta.json) exists on this machine; None when the id is
    missing or not a positive integer (0 or a negative id would signal a process group)."""
    try:
        pid = int(pid)
    except (TypeError, ValueError):
        return None
    if pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def on_this_host(meta: dict) -> bool:
    """Whether meta.json's `host` is this machine (a pid means nothing on another one)."""
    return bool(meta.get("host")) and meta.get("host") == socket.gethostname()


def local_pid(meta: dict) -> int:
    """The pid of a run's live process on this host; UserError saying why there is none."""
    name = meta.get("run_id") or "this run"
    if not meta.get("host"):
        raise UserError(f"run {name} has no host in meta.json; stop it where it was started")
    if not on_this_host(meta):
        raise UserError(f"run {name} runs on host {meta.get('host')}; stop it there")
    alive = pid_alive(meta.get("pid"))
    if alive is None:
        raise UserError(f"run {name} has no pid in meta.json; stop it where it was started")
    if not alive:
        raise UserError(f"run {name}: process {meta.get('pid')} is not running any more")
    return int(meta["pid"])


def _poll_gone(pid: int) -> Callable[[float], bool]:
    def wait(timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while pid_alive(pid):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
        return True

    return wait


def stop_process(pid: int, *, group: bool = False, wait: Callable[[float], bool] | None = None,
                 grace_s: float = STOP_GRACE_S) -> bool:
    """Stop a training process: SIGINT, SIGTERM after `grace_s`, SIGKILL after `TERM_GRACE_S`; True once it is gone.

    `group` signals its whole process group (a child started in its own session, with its workers).
    `wait(timeout) -> bool` says whether the process ended within `timeout`; give `Popen.wait`-based one for
    a child of this process (it must be reaped), the default polls the pid.
    """
    wait = wait or _poll_gone(pid)
    send = os.killpg if group else os.kill
    if wait(0):
        return True  # already gone: signalling a group now could hit what the run left behind
    for sig, timeout in ((signal.SIGINT, grace_s), (signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, KILL_WAIT_S)):
        try:
            send(pid, sig)
        except ProcessLookupError:
            return True
        if wait(timeout):
            return True
        log.warning("process %d still running %.0f s after %s; escalating", pid, timeout, signal.Signals(sig).name)
    return False


def stop_child(child, *, group: bool = True, grace_s: float = STOP_GRACE_S) -> bool:
    """`stop_process` for a `subprocess.Popen` child of this process (waited on, so it is reaped);
    `group` (the default) signals the process group a child started with `start_new_session=True` leads."""
    import subprocess

    def exited_within(timeout: float) -> bool:
        try:
            child.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    return stop_process(child.pid, group=group, wait=exited_within, grace_s=grace_s)
