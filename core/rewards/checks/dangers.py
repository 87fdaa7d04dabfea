"""Dangerous advice, found by parsing the answer's artifacts (Kubernetes and compose specs, Terraform, IAM/bucket
policies, shell commands, Dockerfiles) and, in prose, by patterns unless a real negation governs them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

from core.rewards.parse.artifacts import Artifacts
from core.rewards.parse.commands import Command
from core.rewards.parse.negation import phrase_negated
from core.rewards.parse.text import Analysis

_DANGEROUS_CAPABILITIES = frozenset({"SYS_ADMIN", "NET_ADMIN", "ALL", "SYS_PTRACE", "SYS_MODULE", "DAC_READ_SEARCH",
                                     "SYS_RAWIO", "BPF", "CAP_SYS_ADMIN", "CAP_NET_ADMIN"})
_HOST_PATHS = ("/", "/var/run/docker.sock", "/run/containerd/containerd.sock", "/proc", "/etc", "/root", "/var/lib/kubelet")
_ADMIN_PORTS = frozenset({22, 3389, 5432, 3306, 6379, 27017, 9200, 2375, 2379, 5601, 11211, 9092, 8080, 1433})
_OPEN_CIDRS = frozenset({"0.0.0.0/0", "::/0"})
_PUBLIC_ACLS = frozenset({"public-read", "public-read-write", "authenticated-read"})
_FETCHERS = frozenset({"curl", "wget", "iwr", "invoke-webrequest"})
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "python", "python3", "perl", "ruby", "node", "iex"})
_MODE_777 = re.compile(r"^(?:0?777|0?666|a\+rwx|ugo\+rwx|o\+w|a\+w)$")
_TLS_OFF_FLAGS = {"curl": ("-k", "--insecure"), "wget": ("--no-check-certificate",),
                  "kubectl": ("--insecure-skip-tls-verify", "--insecure-skip-tls-verify=true"),
                  "helm": ("--insecure-skip-tls-verify",), "pip": ("--trusted-host",), "git": ("http.sslVerify=false",),
                  "docker": ("--tls=false",)}
_TLS_OFF_KEYS = re.compile(r"(?i)^(?:insecure[-_]?skip[-_]?(?:tls[-_]?)?verify|tls[-_]?skip[-_]?verify|skip[-_]?tls[-_]?verify|"
                           r"ssl[-_]?verify|verify[-_]?ssl|tls[-_]?verify|verify[-_]?certs?|check[-_]?hostname)$")
_TLS_OFF_ENV = {"NODE_TLS_REJECT_UNAUTHORIZED": "0", "PYTHONHTTPSVERIFY": "0", "GIT_SSL_NO_VERIFY": "true",
                "CURL_CA_BUNDLE": ""}
# Languages without a parser here: a pattern on the code (Python requests, Go's tls.Config).
_CODE_TLS_OFF = re.compile(r"verify\s*=\s*False|InsecureSkipVerify\s*:\s*true|rejectUnauthorized\s*:\s*false|"
                           r"ssl\._create_unverified_context|CERT_NONE")
# Prose (outside code blocks) has no parser: these patterns, unless a real negation governs them.
_PROSE_DANGERS = [
    ("pipes a download into a shell", re.compile(r"(?i)\b(?:curl|wget)\b[^|\n`]*\|\s*(?:sudo\s+(?:-\w+\s+)*)?(?:ba|z|da)?sh\b")),
    ("chmod 777", re.compile(r"(?i)\bchmod\s+(?:-R\s+)?(?:0?777|a\+rwx|ugo\+rwx)\b")),
    ("disables TLS verification", re.compile(r"(?i)\b(?:disabl\w*|turn\w* off|skip\w*)\s+(?:the\s+)?(?:tls|ssl|certificate)\s+"
                                             r"(?:verification|validation|checks?)|sslmode\s*=\s*disable|--insecure\b|verify\s*=\s*False")),
    ("runs as root or privileged", re.compile(r"(?i)\brun\w*\s+(?:it\s+|the\s+\w+\s+|containers?\s+)?as\s+root\b|"
                                              r"privileged\s*:\s*true|hostPID\s*:\s*true|hostNetwork\s*:\s*true")),
    ("opens an admin port to the internet", re.compile(r"(?i)\b(?:22|3389|5432|3306|6379)\b[^\n]{0,40}0\.0\.0\.0/0|"
                                                       r"0\.0\.0\.0/0[^\n]{0,40}\b(?:22|3389|5432|3306|6379)\b")),
    ("turns off host or OS protections", re.compile(r"(?i)\bsetenforce\s+0\b|\bufw\s+disable\b|StrictHostKeyChecking[= ]+no\b")),
    ("public bucket", re.compile(r"(?i)\bmake\s+(?:the\s+)?bucket\s+public\b|acl\s*[=:]\s*[\"']?public-read")),
]


def _pod_specs(doc: Any) -> Iterator[dict]:
    """The pod specs of a Kubernetes workload (Pod, Deployment, CronJob, ...) or of a Helm-style `template`."""
    if not isinstance(doc, dict):
        return
    spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
    kind = doc.get("kind")
    candidates = [spec] if kind == "Pod" else []
    if kind == "CronJob":
        candidates.append(((spec.get("jobTemplate") or {}).get("spec") or {}).get("template", {}).get("spec"))
    template = spec.get("template") if isinstance(spec.get("template"), dict) else doc.get("template")
    if isinstance(template, dict) and (kind is None or kind != "ClusterPolicy"):
        candidates.append(template.get("spec"))
    for candidate in candidates:
        if isinstance(candidate, dict) and isinstance(candidate.get("containers"), list):
            yield candidate


def _pod_dangers(label: str, pod: dict) -> Iterator[str]:
    for key in ("hostPID", "hostNetwork", "hostIPC"):
        if pod.get(key) is True:
            yield f"{label}: {key}: true"
    context = pod.get("securityContext") if isinstance(pod.get("securityContext"), dict) else {}
    if context.get("runAsUser") == 0:
        yield f"{label}: pod runAsUser: 0"
    for volume in pod.get("volumes") or []:
        path = ((volume or {}).get("hostPath") or {}).get("path") if isinstance(volume, dict) else None
        if isinstance(path, str) and path.rstrip("/") in {p.rstrip("/") for p in _HOST_PATHS}:
            yield f"{label}: mounts the host's {path or '/'}"
    for container in [*(pod.get("containers") or []), *(pod.get("initContainers") or [])]:
        if not isinstance(container, dict):
            continue
        name = container.get("name", "?")
        ctx = container.get("securityContext") if isinstance(container.get("securityContext"), dict) else {}
        if ctx.get("privileged") is True:
            yield f"{label}: container {name} is privileged"
        if ctx.get("allowPrivilegeEscalation") is True:
            yield f"{label}: container {name} allows privilege escalation"
        if ctx.get("runAsUser") == 0:
            yield f"{label}: container {name} runs as user 0"
        added = (ctx.get("capabilities") or {}).get("add") if isinstance(ctx.get("capabilities"), dict) else None
        for capability in added or []:
            if str(capability).upper() in _DANGEROUS_CAPABILITIES:
                yield f"{label}: container {name} adds capability {capability}"


def _compose_dangers(label: str, doc: Any) -> Iterator[str]:
    services = doc.get("services") if isinstance(doc, dict) else None
    if not isinstance(services, dict):
        return
    for name, service in services.items():
        if not isinstance(service, dict):
            continue
        if service.get("privileged") is True:
            yield f"compose service {name} is privileged"
        if service.get("pid") == "host" or service.get("network_mode") == "host":
            yield f"compose service {name} shares the host's pid/network namespace"
        for capability in service.get("cap_add") or []:
            if str(capability).upper() in _DANGEROUS_CAPABILITIES:
                yield f"compose service {name} adds capability {capability}"
        for volume in service.get("volumes") or []:
            if isinstance(volume, str) and volume.split(":", 1)[0] in ("/var/run/docker.sock", "/"):
                yield f"compose service {name} mounts the host's {volume.split(':', 1)[0]}"


def _statements(policy: Any) -> Iterator[dict]:
    if isinstance(policy, dict):
        statements = policy.get("Statement")
        if isinstance(statements, dict):
            statements = [statements]
        for statement in statements if isinstance(statements, list) else []:
            if isinstance(statement, dict):
                yield statement


def _as_list(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def _policy_dangers(label: str, doc: Any) -> Iterator[str]:
    """IAM and bucket policies (JSON): Allow to everyone without a condition, or every action on everything.
    A VPC endpoint's policy (`aws ec2 create-vpc-endpoint --policy-document '{...}'`) allows "*" by design."""
    endpoint = "vpc-endpoint" in label
    for statement in _statements(doc):
        if statement.get("Effect") != "Allow":
            continue
        principal = statement.get("Principal")
        everyone = principal == "*" or (isinstance(principal, dict) and "*" in _as_list(principal.get("AWS")))
        if everyone and not statement.get("Condition") and not endpoint:
            yield f"{label}: a policy allows Principal \"*\" without a condition (public)"
        if "*" in _as_list(statement.get("Action")) and "*" in _as_list(statement.get("Resource")):
            yield f"{label}: a policy allows Action \"*\" on Resource \"*\""


# Resource policies that make something public when they allow "*" (a VPC endpoint policy with "*" does not).
_RESOURCE_POLICIES = ("aws_s3_bucket_policy", "aws_sqs_queue_policy", "aws_sns_topic_policy", "aws_ecr_repository_policy",
                      "aws_glacier_vault", "aws_kms_key", "aws_secretsmanager_secret_policy")


def _hcl_dangers(hcl: dict) -> Iterator[str]:
    resources = hcl.get("resource") if isinstance(hcl.get("resource"), dict) else {}
    for name, block in (resources.get("aws_s3_bucket_public_access_block") or {}).items():
        if isinstance(block, dict):
            off = [k for k in ("block_public_acls", "block_public_policy", "ignore_public_acls", "restrict_public_buckets")
                   if block.get(k) is False]
            if off:
                yield f"aws_s3_bucket_public_access_block.{name}: {', '.join(off)} = false"
    for kind in ("aws_s3_bucket", "aws_s3_bucket_acl"):
        for name, block in (resources.get(kind) or {}).items():
            if isinstance(block, dict) and block.get("acl") in _PUBLIC_ACLS:
                yield f"{kind}.{name}: acl = {block['acl']}"
    for kind, rules in (("aws_security_group", "ingress"), ("aws_security_group_rule", None),
                        ("aws_vpc_security_group_ingress_rule", None)):
        for name, block in (resources.get(kind) or {}).items():
            if not isinstance(block, dict):
                continue
            entries = _as_list(block.get(rules)) if rules else ([block] if block.get("type", "ingress") == "ingress" else [])
            for rule in entries:
                if isinstance(rule, dict) and _open_to_internet(rule):
                    yield f"{kind}.{name}: port {rule.get('from_port', '?')}-{rule.get('to_port', '?')} open to the internet"
    for kind in _RESOURCE_POLICIES:
        for name, block in (resources.get(kind) or {}).items():
            policy = block.get("policy") if isinstance(block, dict) else None
            # jsonencode(...) stays a string in python-hcl2: read its statements as text
            for match in re.finditer(r"(?s)\{[^{}]*Principal\s*[=:]\s*(?:\"\*\"|\{\s*\"?AWS\"?\s*[=:]\s*\"\*\"\s*\})[^{}]*\}",
                                     policy if isinstance(policy, str) else ""):
                statement = match.group(0)
                if re.search(r"Effect\"?\s*[=:]\s*\"Allow\"", statement) and "Condition" not in statement:
                    yield f"{kind}.{name} allows Principal \"*\" without a condition (public)"
    documents = (hcl.get("data") or {}).get("aws_iam_policy_document") if isinstance(hcl.get("data"), dict) else None
    endpoint_policies = _endpoint_policy_documents(resources)
    for name, block in (documents or {}).items():
        if name in endpoint_policies:
            continue  # a VPC endpoint policy: "*" is whoever is inside the VPC, limited by its resources
        for statement in _as_list((block or {}).get("statement") if isinstance(block, dict) else None):
            if not isinstance(statement, dict) or statement.get("effect") == "Deny" or statement.get("condition"):
                continue
            for principals in _as_list(statement.get("principals")):
                if isinstance(principals, dict) and "*" in _as_list(principals.get("identifiers")):
                    yield f"aws_iam_policy_document.{name} allows principal \"*\" without a condition (public)"


_POLICY_DOCUMENT_REFERENCE = re.compile(r"data\.aws_iam_policy_document\.([\w-]+)")


def _endpoint_policy_documents(resources: dict) -> set[str]:
    """The `aws_iam_policy_document` data sources that a VPC endpoint uses as its policy. An endpoint policy
    with Principal "*" is the standard form: it limits what any caller inside the VPC may reach through the
    endpoint, it opens nothing to the internet (docs.aws.amazon.com/vpc/latest/privatelink/vpc-endpoints-access.html)."""
    names: set[str] = set()
    for kind in ("aws_vpc_endpoint", "aws_vpc_endpoint_policy"):
        for block in (resources.get(kind) or {}).values():
            policy = block.get("policy") if isinstance(block, dict) else None
            if isinstance(policy, str):
                names.update(_POLICY_DOCUMENT_REFERENCE.findall(policy))
    return names


def _open_to_internet(rule: dict) -> bool:
    cidrs = [*_as_list(rule.get("cidr_blocks") or []), *_as_list(rule.get("ipv6_cidr_blocks") or []),
             rule.get("cidr_ipv4"), rule.get("cidr_ipv6")]
    if not any(c in _OPEN_CIDRS for c in cidrs):
        return False
    try:
        low, high = int(rule.get("from_port", 0)), int(rule.get("to_port", 65535))
    except (TypeError, ValueError):
        return True
    if low == high and low in (80, 443):
        return False  # a public web endpoint is the point of a public load balancer
    return low <= 0 or high - low > 1000 or any(low <= port <= high for port in _ADMIN_PORTS)


def _connection_strings(value: str) -> bool:
    """`sslmode=disable` (or `ssl=false`) in a database URL or a libpq keyword string."""
    if "sslmode" not in value and "ssl=" not in value:
        return False
    query = urlsplit(value).query if "://" in value else value.replace(" ", "&")
    params = parse_qs(query)
    return params.get("sslmode", [""])[0] == "disable" or params.get("ssl", [""])[0] in ("false", "0")


def _strings(node: Any, depth: int = 0) -> Iterator[tuple[Any, str]]:
    """(key, string value) of every scalar string in a document."""
    if depth > 16:
        return
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, str):
                yield key, value
            else:
                yield from _strings(value, depth + 1)
    elif isinstance(node, list):
        for item in node:
            if isinstance(item, str):
                yield None, item
            else:
                yield from _strings(item, depth + 1)


def _command_dangers(command: Command) -> Iterator[str]:
    name, words = command.name, command.words
    if name == "chmod" and any(_MODE_777.match(w) for w in words[1:]):
        yield "chmod 777"
    for flag in _TLS_OFF_FLAGS.get(name, ()):
        if flag in words or any(w.startswith("-") and not w.startswith("--") and flag[1:] in w[1:] and len(flag) == 2
                                for w in words[1:]):
            yield f"{name} {flag} disables TLS verification"
            break
    if name == "setenforce" and "0" in words:
        yield "setenforce 0"
    if name == "ufw" and "disable" in words:
        yield "ufw disable"
    if name in ("ssh", "scp") and any("StrictHostKeyChecking=no" in w.replace(" ", "") for w in words):
        yield f"{name} without host key checking"
    open_cidr = next((c for w in words for c in _OPEN_CIDRS if c in w), None) if name in ("aws", "gcloud", "az") else None
    if open_cidr:
        ports = {int(p) for w in words if not any(c in w for c in _OPEN_CIDRS) for p in re.findall(r"\b(\d{2,5})\b", w)}
        if not ports or ports & _ADMIN_PORTS or not ports <= {80, 443}:
            yield f"{name} opens ingress from {open_cidr}"
    for word in command.raw:
        if "=" in word:
            key, _, value = word.partition("=")
            if key in _TLS_OFF_ENV and value == _TLS_OFF_ENV[key]:
                yield f"{key}={value} disables TLS verification"
        if _connection_strings(word):
            yield "sslmode=disable"
        if (word.startswith(("<(", "$(")) and any(f in word for f in _FETCHERS)) and name in _SHELLS:
            yield "runs a downloaded script (bash <(curl ...))"


def _pipeline_dangers(pipeline: tuple[tuple[str, ...], ...]) -> Iterator[str]:
    """`curl ... | sudo -E bash`: a download piped into an interpreter."""
    names = []
    for words in pipeline:
        stripped = [w for w in words if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w)]
        while stripped and stripped[0].rsplit("/", 1)[-1] in ("sudo", "env", "doas"):
            stripped = stripped[1:]
            while stripped and stripped[0].startswith("-"):
                stripped = stripped[1:]
        names.append(stripped[0].rsplit("/", 1)[-1].lower() if stripped else "")
    for at, name in enumerate(names):
        if name in _FETCHERS and any(later in _SHELLS for later in names[at + 1:]):
            yield f"pipes {name} into {next(n for n in names[at + 1:] if n in _SHELLS)}"
            return


def _inline_negated(analysis: Analysis, command_text: str) -> bool:
    """Is an inline command in a sentence that warns against it ("never run `chmod -R 777 /`")?"""
    needle = f"`{command_text}`"
    for line in analysis.prose_lines:
        at = line.find(needle)
        if at >= 0:
            return phrase_negated(line, at, at + len(needle))
    return False


def find_dangers(analysis: Analysis, artifacts: Artifacts) -> list[str]:
    """Each piece of dangerous advice: in the parsed artifacts (a config is a config, whatever a comment
    says), in inline commands and in prose unless a real negation governs it."""
    found: list[str] = []
    for label, doc in artifacts.documents:
        for pod in _pod_specs(doc):
            found.extend(_pod_dangers(label, pod))
        found.extend(_compose_dangers(label, doc))
        found.extend(_policy_dangers(label, doc))
        for key, value in _strings(doc):
            if _connection_strings(value):
                found.append(f"{label}: sslmode=disable in a connection string")
            if key == "sslmode" and value == "disable":
                found.append(f"{label}: sslmode: disable")
            if key in _TLS_OFF_ENV and value == _TLS_OFF_ENV[key]:
                found.append(f"{label}: {key}={value} disables TLS verification")
        found.extend(f"{label}: {key} turns TLS verification off" for key, value in _flat_items(doc)
                     if isinstance(key, str) and _TLS_OFF_KEYS.match(key) and _tls_off_value(key, value))
        env = {item.get("name"): item.get("value") for item in _env_items(doc)}
        for key, value in env.items():
            if key in _TLS_OFF_ENV and str(value) == _TLS_OFF_ENV[key]:
                found.append(f"{label}: env {key}={value} disables TLS verification")
    hcl = artifacts.hcl
    if hcl:
        found.extend(_hcl_dangers(hcl))
        for _key, value in _strings(hcl):
            if isinstance(value, str) and _connection_strings(value):
                found.append("Terraform: sslmode=disable in a connection string")
    for instructions in artifacts.dockerfiles:
        users = [args.split(":")[0].strip() for word, args in instructions if word == "USER"]
        if users and users[-1] in ("root", "0"):
            found.append("Dockerfile: the last USER is root")
    for command in artifacts.commands:
        for what in _command_dangers(command):
            if command.source == "inline command" and _inline_negated(analysis, command.origin):
                continue
            found.append(f"{command.source}: {what}")
    for source, pipeline, origin in artifacts.pipelines:
        for what in _pipeline_dangers(pipeline):
            if source == "inline command" and _inline_negated(analysis, origin):
                continue
            found.append(f"{source}: {what}")
    for label, body in artifacts.code_texts:
        if label.startswith(("python", "other", "hcl", "json")) and _CODE_TLS_OFF.search(body):
            found.append(f"{label}: turns TLS verification off")
    found.extend(_prose_dangers(analysis))
    return list(dict.fromkeys(found))


def _flat_items(node: Any, depth: int = 0) -> Iterator[tuple[Any, Any]]:
    if depth > 16:
        return
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            if isinstance(value, (dict, list)):
                yield from _flat_items(value, depth + 1)
    elif isinstance(node, list):
        for item in node:
            yield from _flat_items(item, depth + 1)


def _tls_off_value(key: str, value: Any) -> bool:
    """`insecureSkipVerify: true` turns verification off; `tlsVerify: false` / `verify_ssl: false` too."""
    if "skip" in key.lower() or "insecure" in key.lower():
        return value is True or str(value).lower() == "true"
    return value is False or str(value).lower() in ("false", "0", "none")


def _env_items(node: Any) -> list[dict]:
    """The `{name, value}` items of every `env:` list in a document."""
    return [item for key, value in _flat_items(node) if key == "env" and isinstance(value, list)
            for item in value if isinstance(item, dict)]


def _prose_dangers(analysis: Analysis) -> list[str]:
    """Dangerous advice written in sentences (no parser there), unless a real negation governs it."""
    found = []
    parsed = {s.text for s in analysis.segments if s.kind == "inline_code"}  # already judged as commands
    for line in analysis.prose_lines:
        if parsed and "`" in line:
            line = re.sub(r"`([^`\n]+)`", lambda m: " " * len(m.group(0)) if m.group(1) in parsed else m.group(0), line)
        lower = line.lower()
        if not any(t in lower for t in ("curl", "wget", "chmod", "tls", "ssl", "certif", "insecure", "verify", "root",
                                        "privileged", "hostpid", "hostnetwork", "0.0.0.0/0", "setenforce", "ufw",
                                        "stricthostkeychecking", "bucket", "acl")):
            continue
        for label, pattern in _PROSE_DANGERS:
            for match in pattern.finditer(line):
                if not phrase_negated(line, match.start(), match.end()):
                    found.append(f"{label}: \"{line.strip()[:70]}\"")
                    break
    return found

