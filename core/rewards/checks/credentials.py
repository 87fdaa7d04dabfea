"""Hard-coded secrets: credentials recognised by their format anywhere in the answer, and secret-named keys,
variables, flags and URLs with a literal value in the parsed artifacts.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from core.rewards.parse.artifacts import Artifacts
from core.rewards.parse.commands import Command
from core.rewards.parse.text import Analysis

# Credentials recognisable by their format, wherever they appear; each with the literal text every match
# holds (a quick test before the regex scans the answer).
_TOKENS = [
    ("AWS access key id", ("AKIA", "ASIA"), re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("private key", ("PRIVATE KEY",), re.compile(r"-----BEGIN (?:RSA |EC |OPENSSH |DSA |ENCRYPTED )?PRIVATE KEY-----")),
    ("API token", ("gh", "sk-", "xox", "glpat-", "sk_live_", "AIza"),
     re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,}|sk-(?:proj-)?[A-Za-z0-9]{20,}|"
                r"xox[baprs]-[A-Za-z0-9-]{10,}|glpat-[A-Za-z0-9_-]{20}|sk_live_[A-Za-z0-9]{16,}|AIza[0-9A-Za-z_-]{35})\b")),
]
# A name holds a secret when a secret word is its head, the last word: DB_PASSWORD, apiKey, client_secret,
# GITHUB_TOKEN. A secret word earlier in the name only qualifies the head: secretProviderClass, token_policies,
# secretName, PASSWORD_FILE, secretKeyRef and tokenTTL name, point to or describe a secret, they do not hold one.
_NAME_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_SECRET_HEADS = ("password", "passwd", "passphrase", "secret", "token", "apikey", "credential", "credentials")
_SHORT_SECRET_HEADS = frozenset({"pass", "pwd", "pw", "creds"})
_KEY_QUALIFIERS = frozenset("api access secret private signing auth encryption client master shared hmac webhook "
                            "license".split())  # access_key, signingKey; a bare `key` is anything
# Words after the head that do not change what the value is (DB_PASSWORD_PROD, API_KEY_2, password_plain).
_TRAILING_QUALIFIERS = frozenset("value plain plaintext raw prod production staging stage dev test live ro rw old new "
                                 "current previous primary secondary".split())
_PLACEHOLDER_VALUE = re.compile(
    r"(?i)^(?:\$|<|\{|%|\*|x{3,}|\.{3}|redacted|example|placeholder|changeme|change[-_]me|dummy|fake|test|null|none|true|"
    r"false|yes|no|from[-_]env|env|secret|password|required|optional|string|your[-_]|ref\+|vault:|arn:|projects/|file:|/|"
    r"\(|\[|sm://|ssm:|awssm|op://)"
)
_FROM_ENV = re.compile(r"(?i)environ|getenv|process\.env|\benv\b|secret|vault|\(|\[|\$\{|\$\(|\{\{")
_URL_CREDENTIALS = re.compile(r"\b[a-z][a-z0-9+.-]*://(?P<user>[^\s:/@'\"]+):(?P<value>[^\s@/'\"]{3,})@[\w.-]+")
_FLAG_SECRETS = ("--password", "--passwd", "--token", "--secret", "--api-key", "--client-secret", "--db-password")


def _literal_secret(value: Any) -> bool:
    """A value that is a real secret, not a placeholder, a reference or an environment lookup."""
    if not isinstance(value, str):
        return False
    value = value.strip().strip("'\"")
    if len(value) < 6 or len(set(value)) < 3 or " " in value:
        return False
    if _PLACEHOLDER_VALUE.match(value) or _FROM_ENV.search(value):
        return False
    if value.isupper() and "_" in value:
        return False  # DB_PASSWORD_FROM_SECRET-style names
    # a short all-lowercase word is a keyword or an enum value (`secrets: inherit`, `auth: required`)
    return len(value) >= 16 or not (value.isalpha() and value.islower())


@lru_cache(maxsize=8192)
def _secret_name(name: Any) -> bool:
    """DB_PASSWORD, apiKey, client_secret, PGPASSWORD; not secretName, PASSWORD_FILE, secretProviderClass,
    token_policies, or an annotation/claim key with dots."""
    if not isinstance(name, str) or any(c in name for c in "./:"):
        return False
    words = [w.lower() for w in _NAME_WORD.findall(name)]
    while words and (words[-1].isdigit() or words[-1] in _TRAILING_QUALIFIERS):
        words.pop()
    if not words:
        return False
    head = words[-1]
    if head == "key":
        return len(words) > 1 and words[-2] in _KEY_QUALIFIERS
    return head in _SHORT_SECRET_HEADS or head.endswith(_SECRET_HEADS)


_OBJECT_NAME = re.compile(r"^[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?$")


def _secret_pair(name: Any, value: Any) -> bool:
    """A secret-named key with a literal secret value; `githubConfigSecret: arc-github-app` names a Secret."""
    if not (_secret_name(name) and _literal_secret(value)):
        return False
    return not (str(name).lower().endswith("secret") and _OBJECT_NAME.match(str(value).strip()) and "-" in str(value))


def _decode_base64(value: str) -> str:
    try:
        return base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return ""


def _doc_pairs(node: Any, depth: int = 0) -> Iterator[tuple[str, Any, str]]:
    """(name, value, where) for values that may hold a secret: mapping entries, `{name, value}` env items
    (Kubernetes, ECS), `NAME=value` strings of compose environment lists; `where` is "base64" for a
    Secret's data (decoded), "stringData" for a Secret's stringData (a secret whatever its key), else ""."""
    if depth > 16:
        return
    if isinstance(node, dict):
        name, value = node.get("name"), node.get("value")
        if isinstance(name, str) and "value" in node:
            yield name, value, ""
        is_secret = node.get("kind") == "Secret"
        for key, child in node.items():
            if is_secret and key == "data" and isinstance(child, dict):
                for data_key, encoded in child.items():
                    yield str(data_key), _decode_base64(str(encoded)) if isinstance(encoded, str) else "", "base64"
                continue
            if is_secret and key == "stringData" and isinstance(child, dict):
                for data_key, plain in child.items():
                    yield str(data_key), plain, "stringData"
                continue
            if isinstance(child, (dict, list)):
                yield from _doc_pairs(child, depth + 1)
            elif key not in ("name", "value"):
                yield str(key), child, ""
    elif isinstance(node, list):
        for item in node:
            if isinstance(item, str) and "=" in item and not item.startswith("-"):
                name, _, value = item.partition("=")
                yield name, value, ""
            else:
                yield from _doc_pairs(item, depth + 1)


def _doc_secrets(label: str, doc: Any) -> Iterator[str]:
    """Secret-named keys (and every stringData entry) with a literal value in one parsed document."""
    for name, value, where in _doc_pairs(doc):
        if _literal_secret(value) if where == "stringData" else _secret_pair(name, value):
            yield f"{label}: {name}{f' ({where})' if where else ''} has a literal value"


def _command_secrets(command: Command) -> Iterator[str]:
    words = command.raw
    for at, word in enumerate(words):
        if "=" in word and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", word):
            name, _, value = word.partition("=")
            if _secret_name(name) and _literal_secret(value):
                yield f"{name}={value[:3]}…"
        for flag in _FLAG_SECRETS:
            if word.startswith(flag + "="):
                if _literal_secret(word.split("=", 1)[1]):
                    yield f"{flag}=…"
            elif word == flag and at + 1 < len(words) and _literal_secret(words[at + 1]):
                yield f"{flag} …"
    name = command.name
    if name in ("mysql", "mysqldump", "mysqladmin"):
        for word in words:
            if word.startswith("-p") and len(word) > 2 and not word.startswith("--") and _literal_secret(word[2:]):
                yield "mysql -p<password>"


def find_secrets(analysis: Analysis, artifacts: Artifacts) -> list[str]:
    """Each hard-coded secret, from its format anywhere, or from a secret-named key, variable, flag or URL
    with a literal value in the parsed artifacts."""
    found: list[str] = []
    text = analysis.answer
    for label, literals, pattern in _TOKENS:
        if not any(literal in text for literal in literals):
            continue
        for match in pattern.finditer(text):
            if "EXAMPLE" not in match.group(0):
                found.append(f"{label}: \"{match.group(0)[:12]}…\"")
    for match in _URL_CREDENTIALS.finditer(text) if "://" in text and "@" in text else ():
        if _literal_secret(match.group("value")):
            found.append(f"password in URL: \"{match.group(0)[:40]}\"")
    for label, doc in artifacts.documents:
        found.extend(_doc_secrets(label, doc))
    if artifacts.hcl:
        found.extend(_doc_secrets("Terraform", artifacts.hcl))
    for instructions in artifacts.dockerfiles:
        for word, args in instructions:
            if word in ("ENV", "ARG"):
                for pair in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)[= ]\s*(\"[^\"]*\"|'[^']*'|\S+)", args):
                    if _secret_name(pair[0]) and _literal_secret(pair[1]):
                        found.append(f"Dockerfile {word} {pair[0]} has a literal value")
    for command in artifacts.commands:
        found.extend(f"{command.source}: {what}" for what in _command_secrets(command))
    return list(dict.fromkeys(found))
