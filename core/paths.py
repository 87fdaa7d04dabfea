"""Where devops-rl keeps things: the runs folder, the cache (built-in model) and the default log file.

Each location can be moved with an environment variable so tests, CI and shared boxes stay isolated.
"""

from __future__ import annotations

import os
from pathlib import Path

RUNS_DIR_ENV = "DEVOPS_RL_RUNS_DIR"
CACHE_DIR_ENV = "DEVOPS_RL_CACHE_DIR"
LOG_DIR_ENV = "DEVOPS_RL_LOG_DIR"


def runs_root() -> Path:
    """The folder holding one sub-folder per run: `$DEVOPS_RL_RUNS_DIR`, else `./runs`."""
    return Path(os.environ.get(RUNS_DIR_ENV) or "runs")


def cache_dir() -> Path:
    """The user cache folder (built-in tiny model, SFT warm-start), created on demand."""
    configured = os.environ.get(CACHE_DIR_ENV)
    if configured:
        path = Path(configured)
    else:
        import platformdirs

        path = Path(platformdirs.user_cache_dir("devops-rl"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def log_dir() -> Path:
    """Folder for the log file of commands that are not tied to a run."""
    configured = os.environ.get(LOG_DIR_ENV)
    if configured:
        path = Path(configured)
    else:
        import platformdirs

        path = Path(platformdirs.user_log_dir("devops-rl"))
    path.mkdir(parents=True, exist_ok=True)
    return path
