"""Fenced code blocks of an answer: split out and parsed (YAML multi-document, JSON, Python, Dockerfile,
shell, HCL), with the basics a reviewer flags (k8s resources/probes/non-root, pinned images, set -e).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache

from core.rewards.parse import shell

_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+#.\-]*)")
_LANGS = {
    "yaml": "yaml", "yml": "yaml", "k8s": "yaml",
    "dockerfile": "dockerfile", "docker": "dockerfile", "containerfile": "dockerfile",
    "bash": "shell", "sh": "shell", "shell": "shell", "zsh": "shell", "console": "console", "shell-session": "console",
    "json": "json",
    "hcl": "hcl", "terraform": "hcl", "tf": "hcl",
    "python": "python", "py": "python",
    "sql": "sql", "psql": "sql", "postgresql": "sql", "postgres": "sql", "mysql": "sql", "plpgsql": "sql", "pgsql": "sql",
    "text": "text", "txt": "text", "plaintext": "text", "markdown": "text", "md": "text", "": "",
}
WORKLOAD_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Pod", "Rollout"})
LONG_RUNNING_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Rollout"})
_DOCKER_INSTRUCTIONS = frozenset(
    "from run cmd label maintainer expose env add copy entrypoint volume user workdir arg onbuild stopsignal "
    "healthcheck shell".split()
)
_SHELL_CONTROL = re.compile(r"^\s*(?:if|for|while|until|case|function)\b|\(\)\s*\{", re.M)
_SHELL_STRICT = re.compile(r"^\s*set\s+(?:-[a-zA-Z]*e[a-zA-Z]*\b|-o\s+errexit)", re.M)
# (word, pattern) of openers and closers that must balance; a pattern only scans text holding its word.
_SHELL_PAIRS = tuple(((opener, re.compile(rf"(?:^|[;\s]){opener}{end}")), (closer, re.compile(rf"(?:^|[;\s]){closer}\b")))
                     for opener, end, closer in (("if", r"\s", "fi"), ("case", r"\s", "esac"), ("do", r"\b", "done")))
_SHELL_QUOTED = re.compile(r"\"(?:\\.|[^\"\\])*\"|'[^']*'")
_SHELL_FIRST = re.compile(r"(?:kubectl|helm|aws|gcloud|terraform|docker|git|curl|sudo|systemctl|psql)\s")
_YAML_LINE = re.compile(r"^(?:[\w.\-/\"']+:(?:\s|$)|-\s+[\w.\-\"']+:\s|---\s*$)")
_STRINGS_AND_COMMENTS = re.compile(r"\"(?:\\.|[^\"\\\n])*\"|'[^'\n]*'|(?:^|\s)(?:#|//|--\s).*$", re.M)
_PLACEHOLDER = re.compile(r"\.\.\.|<[^>\n]+>|\{\{|\{%")


@dataclass
class FencePart:
    """A stretch of the answer: prose (`lang is None`) or one fenced block."""

    lang: str | None
    body: str
    line: int  # 1-based line of the fence (or of the prose) in the answer
    closed: bool = True


@dataclass
class BlockReport:
    """What the checks found in one code block."""

    kind: str  # yaml, dockerfile, shell, console, json, hcl, python, sql, text, other
    lang: str
    line: int
    body: str = ""  # the block as written (the rubric's structural checks parse it again, cached)
    valid: bool = True
    problems: list[str] = field(default_factory=list)  # the block is broken (does not parse, not closed)
    issues: list[str] = field(default_factory=list)  # it parses but misses a basic (resources, USER, set -e)
    facts: list[str] = field(default_factory=list)  # good practice found (k8s non-root, pinned image...)


def split_fences(answer: str) -> list[FencePart]:
    """Prose and fenced blocks in order; an unclosed fence runs to the end and is marked `closed=False`."""
    parts: list[FencePart] = []
    lines = answer.splitlines()
    prose: list[str] = []
    prose_start = 1
    i = 0
    while i < len(lines):
        match = _FENCE_OPEN.match(lines[i])
        if not match:
            prose.append(lines[i])
            i += 1
            continue
        if prose:
            parts.append(FencePart(None, "\n".join(prose), prose_start))
            prose = []
        fence, lang, start = match.group(1), match.group(2).lower(), i + 1
        body: list[str] = []
        i += 1
        closed = False
        while i < len(lines):
            stripped = lines[i].strip()
            if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
                closed = True
                i += 1
                break
            body.append(lines[i])
            i += 1
        parts.append(FencePart(lang, "\n".join(body), start, closed))
        prose_start = i + 1
    if prose:
        parts.append(FencePart(None, "\n".join(prose), prose_start))
    return parts


def _guess_kind(body: str) -> str:
    lines = [ln for ln in body.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        return "text"
    first = lines[0].lstrip()
    if first.upper().startswith("FROM ") or body.startswith("# syntax="):
        return "dockerfile"
    if body.startswith("#!") or first.startswith("$ ") or _SHELL_STRICT.search(body):
        return "shell"
    if first.startswith(("{", "[")) and lines[-1].rstrip().endswith(("}", "]")):
        return "json"
    if len(list(filter(None, map(_YAML_LINE.match, map(str.lstrip, lines))))) >= max(2, len(lines) // 2):
        return "yaml"
    if _SHELL_FIRST.match(first):
        return "shell"
    return "text"


def _balanced(body: str) -> str | None:
    """The first unbalanced bracket, ignoring quoted strings and comments; None when balanced."""
    stripped = _STRINGS_AND_COMMENTS.sub("", body)
    for open_, close in ("()", "[]", "{}"):
        if stripped.count(open_) != stripped.count(close):
            return f"unbalanced '{open_}{close}' ({stripped.count(open_)} vs {stripped.count(close)})"
    return None


def _check_k8s(doc: dict, report: BlockReport) -> None:
    kind = doc.get("kind")
    if kind not in WORKLOAD_KINDS:
        return
    name = (doc.get("metadata") or {}).get("name", "?") if isinstance(doc.get("metadata"), dict) else "?"
    spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
    if kind == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec") or {})
    pod = spec if kind == "Pod" else ((spec.get("template") or {}).get("spec") or {})
    containers = pod.get("containers") if isinstance(pod, dict) else None
    if not isinstance(containers, list) or not containers:
        return  # a partial manifest (a patch, an overlay): nothing to hold it to
    label = f"{kind}/{name}"
    pod_ctx = pod.get("securityContext") if isinstance(pod.get("securityContext"), dict) else {}
    missing_resources, missing_probes, root = [], [], []
    for container in containers:
        if not isinstance(container, dict):
            continue
        cname = container.get("name", "?")
        if not container.get("resources"):
            missing_resources.append(cname)
        if kind in LONG_RUNNING_KINDS and not (container.get("readinessProbe") or container.get("livenessProbe")):
            missing_probes.append(cname)
        ctx = container.get("securityContext") if isinstance(container.get("securityContext"), dict) else {}
        non_root = ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot")) is True or (
            isinstance(ctx.get("runAsUser", pod_ctx.get("runAsUser")), int)
            and ctx.get("runAsUser", pod_ctx.get("runAsUser")) > 0)
        if not non_root:
            root.append(cname)
    if missing_resources:
        report.issues.append(f"{label}: container {', '.join(map(str, missing_resources))} has no resources requests/limits")
    else:
        report.facts.append(f"{label} sets resources")
    if missing_probes:
        report.issues.append(f"{label}: container {', '.join(map(str, missing_probes))} has no readiness/liveness probe")
    elif kind in LONG_RUNNING_KINDS:
        report.facts.append(f"{label} has probes")
    if root:
        report.issues.append(f"{label}: container {', '.join(map(str, root))} may run as root (set runAsNonRoot: true)")
    else:
        report.facts.append(f"{label} runs as non-root")


def _check_yaml(body: str, report: BlockReport) -> None:
    problems, issues, facts = _yaml_findings(body)
    report.problems.extend(problems)
    report.issues.extend(issues)
    report.facts.extend(facts)


@lru_cache(maxsize=1024)
def _yaml_findings(body: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(problems, issues, facts) of one YAML block; cached because parsing is the costliest check."""
    report = BlockReport(kind="yaml", lang="yaml", line=0)
    _parse_yaml(body, report)
    return tuple(report.problems), tuple(report.issues), tuple(report.facts)


@lru_cache(maxsize=1)
def yaml_loader():
    """PyYAML's safe loader (libyaml's when built) that also reads application tags such as CloudFormation's
    `!Ref`, `!Sub` and `!GetAtt` as the plain value they tag, so such templates parse and can be checked."""
    import yaml

    class TagTolerantLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
        pass

    def plain(loader, _suffix: str, node):
        if isinstance(node, yaml.MappingNode):
            return loader.construct_mapping(node, deep=True)
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node, deep=True)
        return loader.construct_scalar(node)

    TagTolerantLoader.add_multi_constructor("!", plain)
    return TagTolerantLoader


@lru_cache(maxsize=1024)
def yaml_documents(body: str) -> tuple:
    """The non-empty documents of a YAML (or JSON) block, () when it does not parse or is a template.
    Cached and shared: callers must not modify them."""
    import yaml

    try:
        return tuple(d for d in yaml.load_all(body, Loader=yaml_loader()) if d is not None)
    except (yaml.YAMLError, RecursionError, ValueError):
        return ()


def _check_compose(doc: dict, report: BlockReport) -> None:
    services = doc.get("services")
    if not isinstance(services, dict):
        return
    services = [s for s in services.values() if isinstance(s, dict)]
    if services and all(str(s.get("user", "0")).split(":")[0] not in ("0", "root", "") for s in services if "build" in s):
        if any("build" in s for s in services):
            report.facts.append("compose services run as a non-root user")
    images = [str(s["image"]) for s in services if "image" in s]
    if images and all(":" in i.rsplit("/", 1)[-1] and not i.endswith(":latest") for i in images):
        report.facts.append("compose images are pinned")
    if any("healthcheck" in s for s in services):
        report.facts.append("compose services have health checks")


def _parse_yaml(body: str, report: BlockReport) -> None:
    import yaml

    if "{{" in body or "{%" in body:
        return  # a Helm/Jinja template: not YAML until rendered
    docs = yaml_documents(body)  # parsed once, shared with the rubric's checks
    if not docs:  # broken or empty: parse again (rare) for the reason
        try:
            docs = [d for d in yaml.load_all(body, Loader=yaml_loader()) if d is not None]
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at block line {mark.line + 1}" if mark is not None else ""
            report.problems.append(f"yaml does not parse{where}: {getattr(exc, 'problem', None) or 'syntax error'}")
            return
    if not docs:
        report.problems.append("yaml block is empty")
        return
    for doc in docs:
        if _keyword_mapping(doc):
            report.problems.append("yaml block is a flat list of keys with true/empty values: keywords, not configuration")
            return
        if isinstance(doc, dict):
            _check_k8s(doc, report)
            _check_compose(doc, report)
        elif isinstance(doc, list) and doc and all(isinstance(item, (dict, list)) for item in doc):
            for item in doc:
                if isinstance(item, dict):
                    _check_k8s(item, report)
        elif not (isinstance(doc, list) and doc and isinstance(doc[0], (dict, list))):
            report.problems.append("yaml block holds bare words, not a mapping or a list of mappings")
            return


@lru_cache(maxsize=1024)
def dockerfile_instructions(body: str) -> tuple[tuple[str, str], ...]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    out = []
    for raw in re.sub(r"\\\n", " ", body).splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            word, *args = line.split(None, 1)
            out.append((word.upper(), args[0].strip() if args else ""))
    return tuple(out)


def _keyword_mapping(doc: object) -> bool:
    """`oidc: true`, `blue_green: true`, ...: a flat mapping of 5+ keys whose values are nearly all true, null
    or empty. Real configuration nests, or has values that say something."""
    if not isinstance(doc, dict) or len(doc) < 5:
        return False
    trivial = sum(v is None or v is True or v == "" or v == [] or v == {} for v in doc.values())
    return trivial >= 0.8 * len(doc)


def _check_dockerfile(body: str, report: BlockReport) -> None:
    stages: list[dict] = []
    for word, args in dockerfile_instructions(body):
        if word.lower() not in _DOCKER_INSTRUCTIONS:
            report.problems.append(f"Dockerfile: unknown instruction '{word[:20]}'")
            return
        if word == "FROM":
            words = [a for a in args.split() if not a.startswith("--")]
            alias = words[2] if len(words) >= 3 and words[1].lower() == "as" else None
            stages.append({"image": words[0] if words else "", "alias": alias, "user": None})
        elif word == "USER" and stages:
            stages[-1]["user"] = args
    if not stages:
        report.problems.append("Dockerfile has no FROM")
        return
    for stage in stages:
        image = stage["image"]
        base = image.rsplit("/", 1)[-1]
        if image.lower() == "scratch" or "$" in image or "@sha256:" in image or image in {s["alias"] for s in stages}:
            continue
        if ":" not in base or base.endswith(":latest"):
            report.issues.append(f"Dockerfile: base image '{image}' is not pinned (use a version tag or digest)")
    if not any("not pinned" in issue for issue in report.issues):
        report.facts.append("Dockerfile base images are pinned")
    final = stages[-1]
    user = (final["user"] or "").split(":")[0]
    if final["image"].endswith(":nonroot") or (user and user not in {"root", "0"}):
        report.facts.append("Dockerfile runs as a non-root USER")
    else:
        report.issues.append("Dockerfile: the final stage runs as root (add a non-root USER)")


def _shell_count(word_pattern: tuple[str, re.Pattern], code: str) -> int:
    """How often a keyword pattern matches; no scan when the word is not in the code at all."""
    word, pattern = word_pattern
    return len(pattern.findall(code)) if word in code else 0


ARITHMETIC = re.compile(r"\$\(\((?:[^()]|\([^()]*\))*\)\)")


@lru_cache(maxsize=1024)
def _bash_parses(code: str) -> bool:
    """Does bashlex parse the script (`$((...))`, which it does not implement, read as a number)? The fast
    splitter answers first: what it accepts, bashlex accepts. False when bashlex is not installed."""
    text = ARITHMETIC.sub("0", code)
    if "\\\n" not in text:
        try:
            shell.split(text)
            return True
        except shell.Unsupported:
            pass
    try:
        import bashlex
    except ImportError:
        return False
    try:
        bashlex.parse(text)
    except Exception:  # bashlex raises its own errors and others on odd input
        return False
    return True


def _check_shell(body: str, report: BlockReport) -> None:
    code = "\n".join(ln for ln in body.splitlines() if not ln.lstrip().startswith("#") or ln.startswith("#!"))
    unquoted = _SHELL_QUOTED.sub("''", code)
    for opener, closer in _SHELL_PAIRS:
        # the keywords are counted first (fast); a miscount (`ping -M do`, `echo done`) is settled by the parser
        if _shell_count(opener, unquoted) != _shell_count(closer, unquoted) and not _bash_parses(code):
            report.problems.append("shell: unbalanced if/fi, case/esac or do/done")
            return
    if code.rstrip().endswith("\\"):
        report.problems.append("shell: the last line ends with a continuation '\\'")
        return
    commands = [ln for ln in code.splitlines() if ln.strip() and not ln.rstrip().endswith("\\")]
    script_like = body.startswith("#!") or _SHELL_CONTROL.search(code) is not None or len(commands) >= 8
    if _SHELL_STRICT.search(code):
        report.facts.append("shell script stops on errors (set -euo pipefail)")
    elif script_like:
        report.issues.append("shell: script without 'set -euo pipefail'")


def _check_kind(kind: str, lang: str, body: str, report: BlockReport) -> None:
    if kind == "yaml":
        _check_yaml(body, report)
    elif kind == "dockerfile":
        _check_dockerfile(body, report)
    elif kind == "shell":
        _check_shell(body, report)
    elif kind == "json":
        if not _PLACEHOLDER.search(body):
            try:
                json.loads(body)
            except ValueError as exc:
                report.problems.append(f"json does not parse: {str(exc).split(':')[0]}")
    elif kind == "python":
        try:
            compile(body, "<answer>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            report.problems.append(f"python does not compile: {getattr(exc, 'msg', exc)}")
    elif kind in ("hcl", "sql", "other"):
        problem = _balanced(body)
        if problem:
            report.problems.append(f"{lang or kind}: {problem}")


def check_block(part: FencePart) -> BlockReport:
    """Parse and check one fenced block."""
    lang = part.lang or ""
    kind = _LANGS.get(lang, "other")
    if kind == "":
        kind = _guess_kind(part.body)
    report = BlockReport(kind=kind, lang=lang, line=part.line, body=part.body)
    if not part.closed:
        report.problems.append(f"code block opened at line {part.line} is never closed")
    elif not part.body.strip():
        report.problems.append("code block is empty")
    else:
        try:
            _check_kind(kind, lang, part.body, report)
        except (RecursionError, MemoryError):
            report.problems.append(f"{kind} block is nested too deeply to parse")
    report.valid = not report.problems
    return report
