"""Real validators for the answer's code blocks: shellcheck, hadolint, actionlint, kubernetes-validate, yamllint,
python-hcl2, pglast/sqlglot and detect-secrets. Results are cached by block hash; many answers are checked
in one batch (one shellcheck or hadolint process for all their blocks); a validator that is not installed
is skipped with one warning per process and a note in the evidence.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

log = logging.getLogger(__name__)

KUBERNETES_VERSION = "1.30"
TIMEOUT_S = 60
CACHE_SIZE = 8192
# What counts: an error breaks the block (like a parse error); a warning is a missed basic.
ERROR, WARNING = "error", "warning"
_SHELLCHECK_LEVELS = {"error": ERROR, "warning": WARNING}
_HADOLINT_LEVELS = {"error": ERROR, "warning": WARNING}
# Rules that are advice for a real repository, not mistakes in an answer's snippet; SC1010 reads a keyword as an
# argument (`ping -M do`, `echo done`) as a missing `;`, but bash keeps such a word literal.
_SHELLCHECK_EXCLUDE = "SC1010,SC1091,SC2034,SC2154,SC2164"
_HADOLINT_IGNORE = ("DL3008", "DL3018", "DL3013", "DL3016", "DL3028", "DL3033", "DL3041", "DL3059")
_DETECT_SECRETS_PLUGINS = ("AWSKeyDetector", "ArtifactoryDetector", "AzureStorageKeyDetector", "BasicAuthDetector",
                           "DiscordBotTokenDetector", "GitHubTokenDetector", "GitLabTokenDetector", "JwtTokenDetector",
                           "MailchimpDetector", "NpmDetector", "OpenAIDetector", "PrivateKeyDetector", "PypiTokenDetector",
                           "SendGridDetector", "SlackDetector", "SquareOAuthDetector", "StripeDetector",
                           "TelegramBotTokenDetector", "TwilioKeyDetector")


@dataclass(frozen=True)
class Finding:
    """One message of one validator about one block."""

    tool: str
    severity: str  # ERROR | WARNING | "secret"
    message: str

    def __str__(self) -> str:
        return f"{self.tool}: {self.message}"


@dataclass(frozen=True)
class Block:
    """A code block to validate: its kind (shell, dockerfile, yaml, ...) and text."""

    kind: str
    body: str

    @property
    def key(self) -> str:
        return hashlib.sha1(f"{self.kind}\0{self.body}".encode("utf-8", "replace")).hexdigest()


def _binary(name: str) -> str | None:
    """The tool from this environment's bin folder (pip-installed wrappers), else from PATH."""
    local = Path(sys.executable).with_name(name)
    return str(local) if local.is_file() and os.access(local, os.X_OK) else shutil.which(name)


def _tool_env() -> dict[str, str]:
    """The validators' environment: this one without GHCRTS. A user's GHC runtime options are for their own
    programs; shellcheck and hadolint are GHC binaries that exit with no output under options they do not take,
    which would read as "no findings"."""
    return {name: value for name, value in os.environ.items() if name != "GHCRTS"}


def _run_files(argv: list[str], blocks: list[Block], suffix: str,
               env: dict[str, str] | None = None) -> tuple[str, dict[str, int]]:
    """Write the blocks to files in a temp folder, run the tool on all of them at once (with `env` as its
    environment when given), return its stdout and the file name -> block index map."""
    with tempfile.TemporaryDirectory(prefix="devops-rl-validate-") as folder:
        names: dict[str, int] = {}
        for index, block in enumerate(blocks):
            path = os.path.join(folder, f"b{index}{suffix}")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(block.body if block.body.endswith("\n") else block.body + "\n")
            names[path] = index
        result = subprocess.run([*argv, *names], capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
                                env=env if env is not None else _tool_env())
        return result.stdout, names


def _collect(tool: str, items: list[dict], names: dict[str, int], count: int, file_key: str,
             levels: dict[str, str], describe) -> list[list[Finding]]:
    """Findings per block from a tool's JSON items (each naming its file and level)."""
    out: list[list[Finding]] = [[] for _ in range(count)]
    for item in items:
        index = names.get(item.get(file_key))
        level = levels.get(item.get("level", "error"))
        if index is not None and level:
            out[index].append(Finding(tool, level, describe(item)[:140]))
    return out


def _shellcheck(blocks: list[Block]) -> list[list[Finding]]:
    stdout, names = _run_files([_binary("shellcheck"), "-f", "json1", "-S", "warning", "-s", "bash",
                                "-e", _SHELLCHECK_EXCLUDE], blocks, ".sh")
    items = json.loads(stdout or "{}").get("comments") or []
    return _collect("shellcheck", items, names, len(blocks), "file", _SHELLCHECK_LEVELS,
                    lambda c: f"SC{c.get('code')} line {c.get('line')}: {c.get('message', '')[:90]}")


@lru_cache(maxsize=1)
def _hadolint_env() -> dict[str, str] | None:
    """hadolint's environment: its release binaries are built with `-with-rtsopts=-N5`, five GHC capabilities
    whose parallel garbage collection costs 25-30 % more CPU than one on a worker's core; the same output.
    GHCRTS=-N1 only where this build takes it (a build without the threaded runtime fails on it): None there."""
    env = {**_tool_env(), "GHCRTS": "-N1"}
    try:
        probe = subprocess.run([_binary("hadolint"), "--version"], capture_output=True, text=True, timeout=TIMEOUT_S,
                               check=False, env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    return env if probe.returncode == 0 and not probe.stderr.strip() else None


def _hadolint(blocks: list[Block]) -> list[list[Finding]]:
    ignores = [arg for rule in _HADOLINT_IGNORE for arg in ("--ignore", rule)]
    stdout, names = _run_files([_binary("hadolint"), "-f", "json", "--no-fail", *ignores], blocks, ".Dockerfile",
                               env=_hadolint_env())
    return _collect("hadolint", json.loads(stdout or "[]"), names, len(blocks), "file", _HADOLINT_LEVELS,
                    lambda i: f"{i.get('code')} line {i.get('line')}: {i.get('message', '')[:90]}")


def _is_workflow(block: Block) -> bool:
    return "jobs:" in block.body and ("runs-on:" in block.body or "uses:" in block.body)


def _actionlint(blocks: list[Block]) -> list[list[Finding]]:
    stdout, names = _run_files([_binary("actionlint"), "-format", "{{json .}}", "-no-color"], blocks, ".yaml")
    return _collect("actionlint", json.loads(stdout or "[]") or [], names, len(blocks), "filepath", {"error": ERROR},
                    lambda i: f"line {i.get('line')}: {i.get('message', '')[:90]}")


@lru_cache(maxsize=256)
def _k8s_validator(api_version: str, kind: str):
    """A strict JSON-schema validator for one Kubernetes kind from kubernetes-validate's offline schemas,
    built once (its `validate` re-reads the schema and the large definitions file on every call); None
    for a kind without a schema (a custom resource)."""
    import re

    import jsonschema
    from kubernetes_validate import utils
    from referencing import Registry, Resource

    version = [v for v in utils.all_versions() if utils.major_minor(v) <= KUBERNETES_VERSION][-1]
    folder = f"kubernetes-json-schema/v{version}-local-strict"
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)  # rbac.authorization.k8s.io/v1 -> rbac-v1
    try:
        schema = utils.schema_contents(f"{folder}/{kind.lower()}-{group}.json", KUBERNETES_VERSION)
    except (FileNotFoundError, utils.InvalidSchemaError, utils.VersionNotSupportedError):
        return None
    definitions = _k8s_definitions(folder)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


@lru_cache(maxsize=2)
def _k8s_definitions(folder: str):
    from kubernetes_validate import utils

    return utils.schema_contents(f"{folder}/_definitions.json", KUBERNETES_VERSION)


def _kubernetes(blocks: list[Block]) -> list[list[Finding]]:
    import jsonschema

    from core.rewards.parse.code_blocks import yaml_documents

    out: list[list[Finding]] = []
    for block in blocks:
        found = []
        for doc in yaml_documents(block.body):
            if not (isinstance(doc, dict) and isinstance(doc.get("apiVersion"), str) and isinstance(doc.get("kind"), str)):
                continue
            validator = _k8s_validator(doc["apiVersion"], doc["kind"])
            if validator is None:
                continue  # a custom resource: no schema to hold it to
            error = jsonschema.exceptions.best_match(validator.iter_errors(doc))
            if error is not None:
                path = ".".join(str(p) for p in error.absolute_path)
                message = str(error.message).splitlines()[0]
                found.append(Finding("kubernetes-validate", ERROR, f"{doc['kind']}: {path or '(root)'}: {message[:90]}"))
        out.append(found)
    return out


def _yamllint(blocks: list[Block]) -> list[list[Finding]]:
    from yamllint import linter

    config = _yamllint_config()
    out = []
    for block in blocks:
        duplicates = _duplicate_keys(block.body)
        if duplicates is None:  # libyaml cannot compose it (a template): yamllint's own token scan
            duplicates = [(p.line, p.desc) for p in linter.run(block.body, config) if p.rule == "key-duplicates"]
        out.append([Finding("yamllint", ERROR, f"line {line}: {desc[:90]}") for line, desc in duplicates])
    return out


def _duplicate_keys(body: str) -> list[tuple[int, str]] | None:
    """yamllint's key-duplicates rule (line, message), read from libyaml's node graph instead of yamllint's
    pure-Python token scan (ten times faster); None when the block does not compose. As in yamllint, a key is
    its scalar's text, only mapping keys count and the merge key `<<` may repeat."""
    import yaml

    try:
        roots = list(yaml.compose_all(body, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
    except (yaml.YAMLError, RecursionError, ValueError):
        return None
    found: list[tuple[int, int, str]] = []
    stack = [node for node in roots if node is not None]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:  # an alias points to a node already read
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys: set[str] = set()
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    if key.value in keys and key.value != "<<":
                        found.append((key.start_mark.line + 1, key.start_mark.column + 1,
                                      f'duplication of key "{key.value}" in mapping'))
                    keys.add(key.value)
                stack.extend((key, value))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return [(line, desc) for line, _, desc in sorted(found)]


@lru_cache(maxsize=1)
def _yamllint_config():
    from yamllint.config import YamlLintConfig

    # duplicate keys are a real bug PyYAML hides (the last one silently wins); style rules are not
    return YamlLintConfig("rules: {key-duplicates: enable}")


def _hcl(blocks: list[Block]) -> list[list[Finding]]:
    from core.rewards.parse.artifacts import hcl_loads  # the same reading the rubric's checks use, parsed once

    out = []
    for block in blocks:
        raw, error = hcl_loads(block.body)
        out.append([] if raw is not None else [Finding("python-hcl2", ERROR, f"does not parse: {error[:90]}")])
    return out


def _sql(blocks: list[Block]) -> list[list[Finding]]:
    import pglast
    import sqlglot
    from sqlglot.errors import SqlglotError

    from core.rewards.parse.artifacts import quiet_sqlglot

    quiet_sqlglot()
    out = []
    for block in blocks:
        script = "\n".join(ln for ln in block.body.splitlines() if not ln.lstrip().startswith("\\"))
        try:
            pglast.parse_sql(script)
            out.append([])
            continue
        except pglast.parser.ParseError as exc:
            postgres_error = str(exc)
        try:
            parsed = sqlglot.parse(script, read="mysql")
        except (SqlglotError, RecursionError, ValueError):
            out.append([Finding("pglast", ERROR, f"not valid PostgreSQL or MySQL: {postgres_error[:90]}")])
            continue
        # sqlglot turns what it does not know into a generic Command: another dialect, or a typo
        unknown = any(isinstance(e, sqlglot.exp.Command) for e in parsed if e is not None)
        out.append([Finding("pglast", WARNING, f"not valid PostgreSQL: {postgres_error[:90]}")] if unknown else [])
    return out


def _detect_secrets(blocks: list[Block]) -> list[list[Finding]]:
    from detect_secrets.core.scan import scan_line
    from detect_secrets.settings import get_plugins, transient_settings

    out = []
    with transient_settings({"plugins_used": [{"name": name} for name in _DETECT_SECRETS_PLUGINS]}):
        # every plugin is a regex detector: a line none of their regexes matches holds no finding, and
        # scan_line's set-up per call costs more than the regexes
        patterns = [regex for plugin in get_plugins() for regex in plugin.denylist]
        for block in blocks:
            found = []
            for number, line in enumerate(block.body.splitlines(), 1):
                if not any(pattern.search(line) for pattern in patterns):
                    continue
                for secret in scan_line(line):
                    found.append(Finding("detect-secrets", "secret", f"{secret.type} at block line {number}"))
            out.append(found)
    return out


# How to get a validator that is missing (pip installs all but actionlint, whose PyPI wrapper downloads its
# binary at build time and so cannot be a dependency here).
INSTALL_HINTS = {"actionlint": "put an actionlint binary on PATH"}
# name -> (block kinds it reads, extra filter, runner, how to find out it is installed)
VALIDATORS: dict[str, tuple[tuple[str, ...], Callable[[Block], bool] | None, Callable, Callable[[], bool]]] = {
    "shellcheck": (("shell",), None, _shellcheck, lambda: _binary("shellcheck") is not None),
    "hadolint": (("dockerfile",), None, _hadolint, lambda: _binary("hadolint") is not None),
    "actionlint": (("yaml",), _is_workflow, _actionlint, lambda: _binary("actionlint") is not None),
    "kubernetes-validate": (("yaml", "json"), None, _kubernetes,
                            lambda: _importable("kubernetes_validate") and _importable("jsonschema")),
    "yamllint": (("yaml",), None, _yamllint, lambda: _importable("yamllint")),
    "python-hcl2": (("hcl",), None, _hcl, lambda: _importable("hcl2")),
    "pglast": (("sql",), None, _sql, lambda: _importable("pglast") and _importable("sqlglot")),
    "detect-secrets": (("yaml", "json", "shell", "console", "dockerfile", "hcl", "python", "other", "text", "sql"), None,
                       _detect_secrets, lambda: _importable("detect_secrets")),
}

_CACHE: OrderedDict[tuple[str, str], tuple[Finding, ...]] = OrderedDict()
_AVAILABLE: dict[str, bool] = {}


def _importable(module: str) -> bool:
    import importlib

    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def available(name: str) -> bool:
    """Is the validator installed? Asked once per process; a missing one is warned about once."""
    if name not in _AVAILABLE:
        _AVAILABLE[name] = bool(VALIDATORS[name][3]())
        if not _AVAILABLE[name]:
            log.warning("reward validator %s is not installed: its blocks are not checked (%s)", name,
                        INSTALL_HINTS.get(name, "bash scripts/bootstrap.sh installs it"))
    return _AVAILABLE[name]


def _wanted(name: str, block: Block) -> bool:
    kinds, keep, _, _ = VALIDATORS[name]
    return block.kind in kinds and (keep is None or keep(block))


def prefetch(blocks: Iterable[Block], only: Iterable[str] | None = None) -> None:
    """Validate every uncached block with every validator that reads it: one batch per validator."""
    blocks = list(dict.fromkeys(blocks))
    for name in (only or VALIDATORS):
        todo = [b for b in blocks if _wanted(name, b) and (name, b.key) not in _CACHE]
        if not todo or not available(name):
            continue
        try:
            results = VALIDATORS[name][2](todo)
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            log.warning("reward validator %s failed (%s); its blocks are not checked this time", name, exc)
            continue
        for block, findings in zip(todo, results):
            _CACHE[(name, block.key)] = tuple(findings)
            while len(_CACHE) > CACHE_SIZE:
                _CACHE.popitem(last=False)


def validate(blocks: list[Block]) -> tuple[list[list[Finding]], list[str]]:
    """Findings per block (in order) and notes on validators that were skipped (not installed)."""
    prefetch(blocks)
    findings: list[list[Finding]] = [[] for _ in blocks]
    skipped: dict[str, int] = {}
    for index, block in enumerate(blocks):
        for name in VALIDATORS:
            if not _wanted(name, block):
                continue
            cached = _CACHE.get((name, block.key))
            if cached is None:
                if not available(name):
                    skipped[name] = skipped.get(name, 0) + 1
                continue
            _CACHE.move_to_end((name, block.key))
            findings[index].extend(cached)
    notes = [f"{name} not installed: {count} block(s) not checked" for name, count in skipped.items()]
    return findings, notes


def clear_cache() -> None:
    """Forget cached results (benchmarks measure fresh answers)."""
    _CACHE.clear()
