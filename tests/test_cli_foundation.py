"""The CLI shell: help without heavy imports, version, one-line errors with the right exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import typer

import core
from core.cli import main as cli_main

HEAVY = ("torch", "transformers", "verl", "textual", "ray", "openai", "pandas")
GROUPS = ("train", "tail", "eval", "serve", "tasks", "reward", "config", "runs", "tui")


def run_cli(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "core.cli.main", *args], capture_output=True, text=True, timeout=120, env=env)


def test_help_lists_every_group_and_imports_nothing_heavy():
    code = (
        "import sys, json\n"
        "from core.cli.main import main\n"
        "rc = main(['--help'])\n"
        f"print(json.dumps([m for m in sys.modules if m.split('.')[0] in {HEAVY!r}]))\n"
        "sys.exit(rc)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded == []
    commands = result.stdout.split("Commands:")[1]
    for group in GROUPS:
        assert f"\n  {group} " in commands, group


def test_version():
    result = run_cli("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"devops-rl {core.__version__}"


def test_bad_option_is_one_line_exit_2():
    result = run_cli("--no-such-option")
    assert result.returncode == 2
    assert result.stderr.strip() == "error: No such option: --no-such-option (see 'devops-rl --help')"


def test_unknown_command_is_one_line_exit_2():
    result = run_cli("trian")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("error: No such command 'trian'")


def test_unexpected_error_points_at_the_log_file(tmp_path, monkeypatch, capsys):
    boom = typer.Typer()

    @boom.command()
    def explode() -> None:
        from core.log import setup_logging

        setup_logging(console=False, log_file=tmp_path / "devops-rl.log")
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(cli_main, "app", boom)
    assert cli_main.main([]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"error: unexpected RuntimeError: disk on fire (traceback in {tmp_path / 'devops-rl.log'})"
    logged = (tmp_path / "devops-rl.log").read_text()
    assert "Traceback" in logged and "disk on fire" in logged
