"""Test-wide settings: offline Hugging Face, and runs, cache and logs in temporary folders.

Also plain helpers any test can import for bad-input checks: run_cli, assert_user_error, snapshot_files.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True)
def _isolated_paths(tmp_path, monkeypatch):
    """Every test gets its own runs and log folders, so nothing leaks between tests or into ~."""
    monkeypatch.setenv("DEVOPS_RL_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("DEVOPS_RL_LOG_DIR", str(tmp_path / "logs"))


@pytest.fixture(scope="session", autouse=True)
def _shared_cache(tmp_path_factory):
    """One cache per test session (the built-in model is built once), shared by subprocesses."""
    if "DEVOPS_RL_CACHE_DIR" not in os.environ:
        os.environ["DEVOPS_RL_CACHE_DIR"] = str(tmp_path_factory.getbasetemp().parent / "devops-rl-cache")
    yield


# Plain helpers for bad-input tests of any command: import them with `from tests.conftest import ...`.

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`devops-rl ARGS` in a real subprocess (this checkout's code), with its exit code, stdout and stderr."""
    return subprocess.run([sys.executable, "-m", "core.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or REPO, env=env)


def assert_user_error(result, *fragments: str) -> str:
    """Exit code 2, exactly one `error: ...` line on stderr holding every fragment, no traceback anywhere.

    `result` is anything with `returncode`, `stdout` and `stderr` (a CompletedProcess); returns the error line.
    """
    shown = f"exit {result.returncode}\nstdout: {result.stdout[-1500:]}\nstderr: {result.stderr[-1500:]}"
    assert result.returncode == 2, shown
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, shown
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout, shown
    for fragment in fragments:
        assert fragment in errors[0], shown
    return errors[0]


def snapshot_files(*roots: Path) -> dict[Path, bytes]:
    """Every file under `roots` with its bytes, to show later that a command left them as they were."""
    return {path: path.read_bytes() for root in roots for path in sorted(Path(root).rglob("*")) if path.is_file()}


def assert_files_unchanged(before: dict[Path, bytes]) -> None:
    """Every file of an earlier `snapshot_files` still exists with the same bytes."""
    for path, content in before.items():
        assert path.is_file(), f"{path} is gone"
        assert path.read_bytes() == content, f"{path} changed"


def cli_in_process(capsys, *args: str):
    """`devops-rl ARGS` through `core.cli.main.main` in this process (no interpreter start-up: for long tables of
    cases), as an object with `returncode`, `stdout` and `stderr` like `run_cli`'s."""
    from types import SimpleNamespace

    from core.cli.main import main

    capsys.readouterr()
    code = main(list(args))
    captured = capsys.readouterr()
    return SimpleNamespace(returncode=code, stdout=captured.out, stderr=captured.err)
