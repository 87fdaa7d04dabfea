"""Test-wide settings: offline Hugging Face, and runs, cache and logs in temporary folders."""

from __future__ import annotations

import os

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
