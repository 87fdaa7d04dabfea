"""The core never imports the UI: importing every `core.*` module in a fresh process loads no textual."""

from __future__ import annotations

import json
import subprocess
import sys


def test_core_modules_do_not_import_textual():
    code = r"""
import importlib, json, pkgutil, sys
import core
names = []
for info in pkgutil.walk_packages(core.__path__, "core."):
    try:
        importlib.import_module(info.name)
    except ImportError as exc:  # an optional extra (verl) missing is fine; textual is the point
        if "textual" in str(exc):
            raise
    names.append(info.name)
print(json.dumps({"modules": names, "textual": sorted(m for m in sys.modules if m.split(".")[0] == "textual")}))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert "core.cli.main" in report["modules"] and "core.log" in report["modules"]
    assert report["textual"] == []
