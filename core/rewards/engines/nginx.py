"""The answer's nginx server blocks checked with `nginx -t`, then served in the sandbox on 127.0.0.1 with a
throwaway certificate and a stub upstream; each request of the scenario asserts the status, headers and body.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from core.rewards.engines.base import (
    Artifact,
    EngineResult,
    named_list_problems,
    register,
    timeout_problems,
    unknown_keys,
)
from core.rewards.engines.sandbox import run_sandboxed, sandbox_missing

SCENARIO_KEYS = {"engine", "upstreams", "requests", "timeout"}
REQUEST_KEYS = {"name", "url", "expect"}
EXPECT_KEYS = {"status", "headers", "body"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
_UPSTREAM = re.compile(r"^127\.0\.0\.1:\d{2,5}$")
_SERVER = re.compile(r"^\s*server\s*\{", re.M)
# Directives that name files of the host (certificates, logs, snippets): replaced or dropped, as they cannot exist
# in the sandbox; an `include` of a snippet is dropped, so its settings are not judged.
_DROPPED = re.compile(r"^\s*(include|ssl_dhparam|ssl_trusted_certificate|ssl_stapling\w*|access_log|error_log|"
                      r"ssl_certificate_key|ssl_certificate|pid|user)\b[^;]*;\s*$", re.M)
_LISTEN = re.compile(r"^(\s*)listen\s+([^;]+);", re.M)

MAIN = """daemon off; master_process off; worker_processes 1; pid /tmp/nginx.pid; error_log stderr warn;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path /tmp/body; proxy_temp_path /tmp/proxy; fastcgi_temp_path /tmp/fcgi;
  uwsgi_temp_path /tmp/uwsgi; scgi_temp_path /tmp/scgi;
  ssl_certificate /task/tls/cert.pem; ssl_certificate_key /task/tls/key.pem;
  include /task/site.conf;
UPSTREAMS}
"""
STUB_UPSTREAM = ('  server { listen ADDR; location / { default_type text/plain; '
                 'return 200 "upstream reached ADDR $http_host $request_uri\\n"; } }\n')


def port_in_sandbox(port: int) -> int:
    """Ports below 1024 need privileges the sandbox does not have: 80 is served on 8080, 443 on 8443."""
    return port + 8000 if port < 1024 else port


def _listen(match: re.Match) -> str:
    """`listen 443 ssl http2;` as `listen 127.0.0.1:8443 ssl http2;`; IPv6 and socket listeners are dropped."""
    indent, words = match.group(1), match.group(2).split()
    where, flags = words[0], [w for w in words[1:] if not w.startswith("ipv6only")]
    if where.startswith("[") or where.startswith("unix:"):
        return f"{indent}# {match.group(0).strip()}"
    port = int(where.rsplit(":", 1)[-1]) if where.rsplit(":", 1)[-1].isdigit() else 80
    return f"{indent}listen 127.0.0.1:{port_in_sandbox(port)} {' '.join(flags)};".replace(" ;", ";")


def _inside_http(text: str) -> str:
    """The body of a full nginx.conf's `http { }`, else the text itself (server, upstream and map blocks)."""
    match = re.search(r"^\s*http\s*\{", text, re.M)
    if match is None:
        return text
    depth = 0
    for index in range(match.end() - 1, len(text)):
        depth += {"{": 1, "}": -1}.get(text[index], 0)
        if depth == 0:
            return text[match.end():index]
    return text[match.end():]


def site_config(text: str) -> str:
    """The answer's configuration as the sandbox serves it: local ports, the throwaway certificate, no host files."""
    # the throwaway certificate is set once for all servers in MAIN's http block
    return _LISTEN.sub(_listen, _DROPPED.sub("", _inside_http(text)))


@lru_cache(maxsize=1)
def _certificate() -> tuple[str, str]:
    """A self-signed certificate made once per process (its directory lives as long as the process)."""
    folder = Path(tempfile.mkdtemp(prefix="devops-rl-nginx-tls-"))
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30", "-subj", "/CN=localhost",
                    "-keyout", str(folder / "key.pem"), "-out", str(folder / "cert.pem")],
                   check=True, capture_output=True, timeout=60)
    for path in (folder, *folder.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return str(folder), str(folder / "cert.pem")


def _nginx() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx", "/sbin/nginx") if Path(p).exists()), None)


class Nginx:
    """`nginx -t` on the answer's server blocks, then real requests with curl inside the sandbox."""

    name = "nginx"
    install = "install nginx (Debian/Ubuntu, as root: apt-get install nginx-light or nginx) and bubblewrap"

    def missing(self) -> str | None:
        if _nginx() is None:
            return "nginx is not installed"
        for tool in ("curl", "openssl"):
            if shutil.which(tool) is None:
                return f"{tool} is not on PATH"
        return sandbox_missing()

    def scenario_problems(self, scenario: Mapping[str, Any]) -> list[str]:
        problems = unknown_keys(scenario, SCENARIO_KEYS)
        upstreams = scenario.get("upstreams", [])
        if not isinstance(upstreams, list) or not all(isinstance(u, str) and _UPSTREAM.match(u) for u in upstreams):
            problems.append("'upstreams' lists the stub backends as 127.0.0.1:PORT (what proxy_pass names)")
        requests = scenario.get("requests")
        if not isinstance(requests, list) or not requests:
            return problems + ["'requests' is a list of {name, url, expect: {status, headers, body}}"]
        problems += named_list_problems(requests, "requests", "request", REQUEST_KEYS, _request_problems)
        return problems + timeout_problems(scenario)

    def artifact(self, artifacts: Any, scenario: Mapping[str, Any]) -> Artifact | None:
        """Every block with a `server { }` (an nginx site file or a whole nginx.conf), joined."""
        blocks = [b for b in artifacts.valid_blocks if b.kind not in ("shell", "yaml", "json", "hcl", "python")
                  and _SERVER.search(b.body)]
        if not blocks:
            return None
        return Artifact("\n".join(b.body for b in blocks), tuple(blocks))

    def run(self, artifact: str, scenario: Mapping[str, Any], timeout: float) -> EngineResult:
        tls, _ = _certificate()
        upstreams = "".join(STUB_UPSTREAM.replace("ADDR", u) for u in scenario.get("upstreams", []))
        with tempfile.TemporaryDirectory(prefix="devops-rl-nginx-") as tmp:
            root = Path(tmp)
            root.chmod(0o755)
            (root / "nginx.conf").write_text(MAIN.replace("UPSTREAMS", upstreams))
            (root / "site.conf").write_text(site_config(artifact))
            (root / "run.sh").write_text(_driver(scenario["requests"]))
            for path in root.iterdir():
                path.chmod(0o644)
            binds = [(str(root / n), f"/task/{n}") for n in ("nginx.conf", "site.conf", "run.sh")] + [(tls, "/task/tls")]
            finished = run_sandboxed(binds, {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, ["/bin/bash", "/task/run.sh"],
                                     timeout)
        return _judge(scenario["requests"], finished.returncode, finished.output)


def _request_problems(request: Mapping[str, Any], where: str) -> list[str]:
    problems = []
    if not (isinstance(request.get("name"), str) and _NAME.match(request["name"])):
        problems.append(f"{where}: 'name' is letters, digits, '-', '_' or '.'")
    url = request.get("url")
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        problems.append(f"{where}: 'url' is http:// or https:// with a host name, as a client would ask")
    expect = request.get("expect")
    if not isinstance(expect, Mapping) or not expect:
        return problems + [f"{where}: 'expect' with any of {', '.join(sorted(EXPECT_KEYS))}"]
    problems += unknown_keys(expect, EXPECT_KEYS, f"{where}: expect: ")
    statuses = expect.get("status", 200)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (statuses if isinstance(statuses, list)
                                                                          else [statuses])):
        problems.append(f"{where}: expect.status is a number (301) or a list of them ([301, 308])")
    patterns = list(expect.get("headers", {}).values()) if isinstance(expect.get("headers", {}), Mapping) else None
    if patterns is None:
        problems.append(f"{where}: expect.headers maps a header name to a regular expression of its value")
    for pattern in (patterns or []) + ([expect["body"]] if "body" in expect else []):
        try:
            re.compile(pattern)
        except (re.error, TypeError) as exc:
            problems.append(f"{where}: {pattern!r} is not a valid regular expression: {exc}")
    return problems


def _driver(requests: list) -> str:
    """The script run in the sandbox: check the configuration, serve it, then one curl per request."""
    lines = ["nginx -t -q -p /tmp -c /task/nginx.conf -e stderr || { echo '@@nginx-t-failed'; exit 3; }",
             "nginx -p /tmp -c /task/nginx.conf -e stderr 2>/tmp/nginx.err &",
             "for i in $(seq 100); do [ -s /tmp/nginx.pid ] && break; sleep 0.05; done",
             "[ -s /tmp/nginx.pid ] || { echo '@@nginx-not-started'; cat /tmp/nginx.err; exit 4; }"]
    for index, request in enumerate(requests):
        parts = urlsplit(request["url"])
        port = port_in_sandbox(parts.port or (443 if parts.scheme == "https" else 80))
        url = parts._replace(netloc=f"{parts.hostname}:{port}").geturl()
        lines += [f"echo '@@request {index}'",
                  f"curl -sk --max-time 3 --resolve {parts.hostname}:{port}:127.0.0.1 -D /tmp/h{index} -o /tmp/b{index} "
                  f"'{url}' || echo \"@@curl-failed $?\"",
                  f"cat /tmp/h{index} 2>/dev/null; echo '@@body'; head -c 4096 /tmp/b{index} 2>/dev/null; echo"]
    return "\n".join(lines) + "\n"


def _judge(requests: list, code: int, output: str) -> EngineResult:
    if "@@nginx-t-failed" in output or "@@nginx-not-started" in output:
        errors = [line for line in output.splitlines() if line.startswith("nginx:") or "emerg" in line][:3]
        return EngineResult(False, ("nginx -t rejects the configuration: " + " | ".join(errors)[:300],))
    replies = re.split(r"^@@request (\d+)$", output, flags=re.M)
    by_index = {int(replies[i]): replies[i + 1] for i in range(1, len(replies) - 1, 2)}
    evidence, passed = [], True
    for index, request in enumerate(requests):
        ok, line = _check(request, by_index.get(index, "@@curl-failed (no reply)"))
        passed &= ok
        evidence.append(f"{request['name']}: {line}")
    return EngineResult(passed, tuple(evidence))


def _check(request: Mapping[str, Any], reply: str) -> tuple[bool, str]:
    head, _, body = reply.partition("@@body")
    if "@@curl-failed" in head:
        return False, f"GET {request['url']}: no response ({head.strip()[:80]})"
    lines = [line.strip() for line in head.strip().splitlines() if line.strip()]
    status = int(lines[0].split()[1]) if lines and len(lines[0].split()) > 1 and lines[0].split()[1].isdigit() else 0
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    expect, missed = request["expect"], []
    wanted = expect.get("status")
    if wanted is not None and status not in (wanted if isinstance(wanted, list) else [wanted]):
        missed.append(f"status {status}, expected {wanted}")
    for name, pattern in expect.get("headers", {}).items():
        value = headers.get(name.lower())
        if value is None or re.search(pattern, value) is None:
            missed.append(f"{name}: {value!r} does not match /{pattern}/")
    if "body" in expect and re.search(expect["body"], body) is None:
        missed.append(f"body has no /{expect['body']}/ ({body.strip()[:60]!r})")
    line = f"GET {request['url']}: {status}"
    return (not missed), line + ("; " + "; ".join(missed) if missed else "; as expected")


ENGINE = register(Nginx())
