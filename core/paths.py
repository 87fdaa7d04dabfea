"""Where devops-rl keeps things: the runs folder, the cache (built-in model) and the default log file.

Each location can be moved with an environment variable so tests, CI and shared boxes stay isolated.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

RUNS_DIR_ENV = "DEVOPS_RL_RUNS_DIR"
CACHE_DIR_ENV = "DEVOPS_RL_CACHE_DIR"
LOG_DIR_ENV = "DEVOPS_RL_LOG_DIR"


def runs_root() -> Path:
    """The folder holding one sub-folder per run: `$DEVOPS_RL_RUNS_DIR`, else `./runs`."""
    return Path(os.environ.get(RUNS_DIR_ENV) or "runs")


def _user_dir(env: str, kind: str) -> Path:
    """The folder `$env` names, else the platform's user `kind` folder ("cache" or "log") for devops-rl."""
    configured = os.environ.get(env)
    if configured:
        return Path(configured)
    import platformdirs

    return Path(getattr(platformdirs, f"user_{kind}_dir")("devops-rl"))


def cache_dir() -> Path:
    """The user cache folder (built-in tiny model, SFT warm-start), created on demand; UserError when it cannot be."""
    return writable_dir(_user_dir(CACHE_DIR_ENV, "cache"), f"the cache folder (${CACHE_DIR_ENV})")


def log_dir() -> Path:
    """Folder for the log file of commands that are not tied to a run; OSError when it cannot be made."""
    path = _user_dir(LOG_DIR_ENV, "log")
    path.mkdir(parents=True, exist_ok=True)
    return path


def writable_dir(path: Path, what: str) -> Path:
    """`path`, created if needed, after proving a file can be written in it; UserError naming `what` and the cause.

    Permission bits alone do not tell (root ignores them, a read-only mount does not), so a probe file is written.
    """
    import tempfile

    from core.errors import UserError, shorten

    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except FileExistsError:
        raise UserError(f"{what} {shorten(path)} is a file, not a folder; point it at a folder") from None
    except OSError as exc:
        raise UserError(f"{what} {shorten(path)} is not writable ({exc.strerror or exc}); point it at a folder you "
                        "can write to") from None
    return path


@contextmanager
def build_lock(target: Path) -> Iterator[None]:
    """Hold an exclusive lock while building the cache entry `target`.

    A second process that wants the same entry waits here and then finds it built, instead of
    spending the same minutes of CPU on a copy (as two test workers or two runs starting at once would).
    """
    import fcntl

    lock_path = target.with_name(f".{target.name}.lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
