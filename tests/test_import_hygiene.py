"""The core never imports the UI: every `core.*` and `tasks` module imports cleanly in a fresh process without
loading textual, and no import statement in them, lazy ones inside functions included, names the cockpit."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
UI = ("textual", "devops_tui")
# The one door from the CLI to the cockpit: `devops-rl tui` imports the app when it runs.
ALLOWED = {("core/cli/tui_cmd.py", "devops_tui.app")}


def test_every_core_module_imports_without_loading_textual():
    code = r"""
import importlib, json, pkgutil, sys
import core, tasks
names = [info.name for pkg in (core, tasks) for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")]
for name in names:
    importlib.import_module(name)  # an ImportError fails the test: every extra the suite needs is installed
print(json.dumps({"modules": names, "textual": sorted(m for m in sys.modules if m.split(".")[0] in ("textual", "devops_tui"))}))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=REPO,
                            env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert {"core.cli.main", "core.log", "core.training.verl_backend.runner", "tasks.prompt"} <= set(report["modules"])
    assert report["textual"] == []


def imported_names(path: Path) -> list[tuple[int, str]]:
    """Every module an import statement in `path` names, wherever the statement is (functions included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
    return found


def test_no_import_statement_in_the_core_names_the_cockpit():
    offenders = []
    for path in sorted([*REPO.glob("core/**/*.py"), *REPO.glob("tasks/**/*.py")]):
        rel = path.relative_to(REPO).as_posix()
        for line, name in imported_names(path):
            if name.split(".")[0] in UI and (rel, name) not in ALLOWED:
                offenders.append(f"{rel}:{line}: imports {name}")
    assert offenders == []


def test_the_static_check_sees_lazy_imports(tmp_path):
    sample = tmp_path / "lazy.py"
    sample.write_text("def show():\n    from textual.app import App\n    import devops_tui.screens\n")
    assert imported_names(sample) == [(2, "textual.app"), (3, "devops_tui.screens")]
