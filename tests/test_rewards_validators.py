"""The real validators: each one finds its kind of mistake in a block, results are cached by block hash, and
a validator that is missing at run time is skipped with one warning and a note in the evidence."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from core.rewards import score
from core.rewards.checks import validators as v

REPO = Path(__file__).resolve().parents[1]

BAD_BLOCKS = {
    "shellcheck": ("shell", "set -euo pipefail\nrm -rf $dir/\n", "SC2115"),
    "hadolint": ("dockerfile", "FROM ubuntu:22.04\nWORKDIR app\nUSER 10001\n", "DL3000"),
    "kubernetes-validate": ("yaml", textwrap.dedent("""\
        apiVersion: apps/v1
        kind: Deployment
        metadata: {name: api}
        spec:
          selector: {matchLabels: {app: api}}
          template:
            metadata: {labels: {app: api}}
            spec:
              containers:
                - name: api
                  image: api:1.2
                  readinessprobe: {httpGet: {path: /, port: 80}}
        """), "readinessprobe"),
    "yamllint": ("yaml", "replicas: 3\nimage: api:1.2\nreplicas: 1\n", "duplication of key"),
    "python-hcl2": ("hcl", 'resource "aws_s3_bucket" "b" {\n  bucket = \n}\n', "does not parse"),
    "pglast": ("sql", "SELECT * FROM orders WHERE (id = 1;\n", "not valid PostgreSQL"),
    "detect-secrets": ("shell", "export GH=ghp_Zx8vQ2mK9pL4nR7tW1yB3cD5fG6hJ0kA2sE4\n", "GitHub Token"),
}


@pytest.mark.parametrize("name", list(BAD_BLOCKS))
def test_each_validator_finds_its_mistake_and_caches_it(name):
    kind, body, expected = BAD_BLOCKS[name]
    v.clear_cache()
    block = v.Block(kind, body)
    (found,), notes = v.validate([block])
    assert any(f.tool == name and expected in f.message for f in found), found
    assert (name, block.key) in v._CACHE
    assert not notes


@pytest.mark.parametrize("name", ["shellcheck", "hadolint"])
def test_a_users_ghc_runtime_options_do_not_silence_the_haskell_validators(name, monkeypatch):
    """shellcheck and hadolint are GHC programs: under a GHCRTS they do not take they print nothing, which
    would read as a clean block."""
    monkeypatch.setenv("GHCRTS", "-N1 -A64m -unknown-flag")
    v.clear_cache()
    v._hadolint_env.cache_clear()
    kind, body, expected = BAD_BLOCKS[name]
    (found,), notes = v.validate([v.Block(kind, body)])
    assert any(f.tool == name and expected in f.message for f in found), found
    v._hadolint_env.cache_clear()


def test_the_answer_pays_for_validator_errors():
    fence = "```"
    kind, body, _ = BAD_BLOCKS["kubernetes-validate"]
    answer = "Add the probe:\n\n" + fence + "yaml\n" + body + fence + "\n"
    task = {"type": "kubernetes", "expected_outputs": ["readinessProbe"]}
    checked = score(answer, task)
    assert any("kubernetes-validate" in line for line in checked.evidence["broken_code"])
    assert checked.penalties["broken_code"] > score(answer, task, validators=False).penalties["broken_code"]


def test_a_batch_runs_one_process_per_tool_and_keeps_the_order():
    v.clear_cache()
    good = v.Block("shell", "set -euo pipefail\necho \"$HOME\"\n")
    bad = v.Block("shell", "set -euo pipefail\nrm -rf $dir/\n")
    findings, _ = v.validate([good, bad, good])
    assert findings[0] == [] and findings[2] == [] and findings[1]


def _run_without(blocked_modules: list[str], hide_binaries: bool) -> subprocess.CompletedProcess:
    """Score an answer in a fresh Python where some validators cannot be found."""
    code = textwrap.dedent(f"""
        import json, sys
        for name in {blocked_modules!r}:
            sys.modules[name] = None  # how Python marks a module that cannot be imported
        from core.rewards import score
        fence = "`" * 3
        answer = ("Run it:\\n\\n" + fence + "bash\\nset -euo pipefail\\necho hi\\n" + fence + "\\n\\n"
                  + fence + "yaml\\nreplicas: 3\\nimage: api:1.2\\n" + fence + "\\n")
        task = {{"type": "kubernetes", "expected_outputs": ["x"]}}
        first = score(answer, task)
        second = score(answer + " ", task)
        print(json.dumps(first.evidence["broken_code"]))
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    executable = sys.executable
    if hide_binaries:
        # a python whose folder holds no shellcheck/hadolint, and a PATH without them
        folder = Path(os.environ.get("TMPDIR", "/tmp")) / f"devops-rl-nobin-{os.getpid()}"
        folder.mkdir(exist_ok=True)
        link = folder / "python"
        if not link.exists():
            link.symlink_to(sys.executable)
        executable = str(link)
        site = next(p for p in sys.path if p.endswith("site-packages"))
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), site])
        env["PATH"] = "/usr/bin:/bin"
    return subprocess.run([executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, cwd=REPO)


def test_a_missing_binary_is_skipped_with_one_warning_and_a_note():
    result = _run_without([], hide_binaries=True)
    assert result.returncode == 0, result.stderr
    notes = json.loads(result.stdout.strip().splitlines()[-1])
    assert "shellcheck not installed: 1 block(s) not checked" in notes
    assert result.stderr.count("reward validator shellcheck is not installed") == 1


def test_a_missing_module_is_skipped_with_one_warning_and_a_note():
    result = _run_without(["yamllint", "kubernetes_validate"], hide_binaries=False)
    assert result.returncode == 0, result.stderr
    notes = json.loads(result.stdout.strip().splitlines()[-1])
    assert "yamllint not installed: 1 block(s) not checked" in notes
    assert "kubernetes-validate not installed: 1 block(s) not checked" in notes
    assert result.stderr.count("reward validator yamllint is not installed") == 1


@pytest.mark.parametrize("body", [
    "a: 1\nb: 2\na: 3\n",
    "x:\n  - {k: 1, k: 2}\n  - name: a\n    name: b\n",
    "base: &b {a: 1}\nm:\n  <<: *b\n  <<: *b\n  a: 2\n  a: 3\n",   # the merge key may repeat
    "---\na: 1\n---\na: 1\na: 2\n",                                 # each document on its own
    "? [a, b]\n: 1\n? [a, b]\n: 2\n",                               # complex keys are not compared
    "k: [a: 1, a: 2]\n",                                            # pairs in a flow sequence are not a mapping
    "'a': 1\n\"a\": 2\n",                                           # quoting does not make a key different
    "r: !Ref X\nr: !Sub Y\n",
])
def test_the_duplicate_key_scan_reports_what_yamllint_reports(body):
    from yamllint import linter

    from core.rewards.checks.validators import _duplicate_keys, _yamllint_config

    expected = [(p.line, p.desc) for p in linter.run(body, _yamllint_config()) if p.rule == "key-duplicates"]
    assert _duplicate_keys(body) == expected
