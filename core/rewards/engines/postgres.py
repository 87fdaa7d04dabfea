"""The answer's SQL migration applied to a throwaway PostgreSQL database (a copy of the scenario's schema and rows),
then the scenario's queries assert facts: the column exists, the trigger keeps two columns in sync, a setting holds.

One warm server per process (initdb into a temporary folder, a unix socket only, no TCP), a template database per
scenario `setup`, a fresh copy per answer (CREATE DATABASE ... TEMPLATE, https://www.postgresql.org/docs/15/manage-ag-templatedbs.html).
The migration runs as `app`, the owner of the copy and nothing more (no superuser, no CREATEROLE, so no COPY ...
PROGRAM or file access; the superuser needs a password only this process knows), from psql inside the sandbox
(psql's `\\!` stays in it); runs are one at a time.
"""

from __future__ import annotations

import atexit
import glob
import hashlib
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.rewards.engines.base import (
    Artifact,
    EngineResult,
    EngineTimeout,
    Finished,
    named_list_problems,
    register,
    run_bounded,
    timeout_problems,
    unknown_keys,
)
from core.rewards.engines.sandbox import NOBODY, run_sandboxed, sandbox_missing

SCENARIO_KEYS = {"engine", "database", "setup", "blocks", "exclude", "on_error", "twice", "cases", "timeout"}
CASE_KEYS = {"name", "sql", "rows"}
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")
_DATABASE = re.compile(r"^[a-z_][a-z0-9_]{0,30}$")
RESERVED = {"postgres", "template0", "template1"}
OWNER = "app"  # the role the migration and the cases run as: owner of the copy, nothing more
STATEMENT_SHARE = 0.8  # of the wall timeout, the statement timeout: a runaway query is cancelled with a clear error


def _bindir() -> str | None:
    """The folder with initdb, pg_ctl and psql: Debian's newest /usr/lib/postgresql/N/bin, else PATH's pg_ctl."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                   key=lambda p: int(re.sub(r"\D", "", p.split("/")[4]) or 0))
    pg_ctl = found[-1] if found else shutil.which("pg_ctl")
    if pg_ctl is None:
        return None
    folder = os.path.dirname(pg_ctl)
    return folder if all(os.access(os.path.join(folder, t), os.X_OK) for t in ("initdb", "psql")) else None


def _server_ids() -> tuple[int, int]:
    """Who the server runs as when this process is root (PostgreSQL refuses root): the `postgres` system user that
    Debian's package makes, else nobody (whose process limit the sandboxed scripts then share)."""
    try:
        entry = pwd.getpwnam("postgres")
        return entry.pw_uid, entry.pw_gid
    except KeyError:
        return NOBODY, NOBODY


def _as_server_user(*options: str) -> list[str]:
    """setpriv with `options` (when setpriv is there) and, when root, the server's user; else nothing."""
    if os.geteuid() == 0:
        uid, gid = _server_ids()
        return ["setpriv", *options, f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
    return ["setpriv", *options] if options and shutil.which("setpriv") else []


class PostgresError(RuntimeError):
    """The server or an administrative statement failed (not the answer's fault)."""


@dataclass
class _Server:
    """A PostgreSQL cluster in a temporary folder of this process, reached through its unix socket."""

    bindir: str
    root: Path
    pid: int  # the process that owns it (a forked child starts its own)
    process: Any = None  # the postmaster, our child: it gets SIGINT (fast shutdown) when we die, even by SIGKILL
    password: str = ""  # the superuser's, known to this process only: the answer's psql may not `\c - postgres`

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def socket(self) -> Path:
        return self.root / "socket"

    def psql(self, database: str, sql: str | Sequence[str], timeout: float, *, user: str = "postgres",
             stop: bool = True, options: str = "") -> Finished:
        """One psql session (not sandboxed: administrative statements and the task's own SQL); each string of a
        list is a transaction of its own (DROP DATABASE runs in none)."""
        commands = [sql] if isinstance(sql, str) else list(sql)
        argv = [f"{self.bindir}/psql", "-X", "-w", "-q", "-A", "-t", "-h", str(self.socket), "-U", user, "-d", database,
                "-v", f"ON_ERROR_STOP={int(stop)}"] + [arg for command in commands for arg in ("-c", command)]
        env = {"PATH": "/usr/bin:/bin", "PGOPTIONS": options, "PGCONNECT_TIMEOUT": "5"}
        if user == "postgres":
            env["PGPASSWORD"] = self.password
        return run_bounded(argv, timeout, env=env)

    def admin(self, *sql: str, database: str = "postgres") -> str:
        finished = self.psql(database, sql, 30)
        if finished.returncode != 0:
            raise PostgresError(f"{'; '.join(sql)[:80]!r}: {finished.output.strip()[:200]}")
        return finished.output

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        if self.pid == os.getpid():
            if self.alive():
                self.process.send_signal(signal.SIGINT)
                try:
                    self.process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
            shutil.rmtree(self.root, ignore_errors=True)


PREFIX = "devops-rl-postgres-"


def _sweep() -> None:
    """Remove the folders of servers whose process is gone (killed without running its exit handlers)."""
    for folder in Path(tempfile.gettempdir()).glob(PREFIX + "*"):
        try:
            owner = int((folder / "owner").read_text())
            os.kill(owner, 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except (OSError, ValueError):  # not ours to judge, or still being made
            continue


def _start(bindir: str) -> _Server:
    _sweep()
    root = Path(tempfile.mkdtemp(prefix=PREFIX))
    (root / "owner").write_text(str(os.getpid()))
    (root / "socket").mkdir()
    if os.geteuid() == 0:
        for path in (root, root / "socket"):
            os.chown(path, *_server_ids())
    root.chmod(0o700 if os.geteuid() != 0 else 0o711)
    (root / "socket").chmod(0o755)
    server = _Server(bindir, root, os.getpid())
    prefix = _as_server_user()
    server.password = secrets.token_hex(16)
    (root / "pw").write_text(server.password)
    if os.geteuid() == 0:
        os.chown(root / "pw", *_server_ids())
    made = run_bounded(prefix + [f"{bindir}/initdb", "-D", str(server.data), "-U", "postgres", f"--pwfile={root}/pw",
                                 "--auth-local=scram-sha-256", "--locale=C", "--encoding=UTF8", "--no-sync",
                                 "--no-instructions"], 120)
    (root / "pw").unlink()
    if made.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise PostgresError("initdb failed: " + made.output.strip()[-300:])
    # the owner role needs no password; the superuser does (the sandbox reaches the same socket)
    (server.data / "pg_hba.conf").write_text(f"local all {OWNER} trust\nlocal all all scram-sha-256\n")
    settings = {"listen_addresses": "", "unix_socket_directories": str(server.socket), "fsync": "off",
                "synchronous_commit": "off", "full_page_writes": "off", "shared_buffers": "32MB",
                "max_connections": "30", "client_connection_check_interval": "1000"}
    options = [arg for key, value in settings.items() for arg in ("-c", f"{key}={value}")]
    with open(root / "server.log", "wb") as log:
        server.process = subprocess.Popen(
            _as_server_user("--pdeathsig", "INT") + [f"{bindir}/postgres", "-D", str(server.data), *options],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    atexit.register(server.stop)
    for _ in range(600):
        if not server.alive():
            break
        if server.psql("postgres", "SELECT 1", 10).returncode == 0:
            break
        time.sleep(0.05)
    if not server.alive():
        text = (root / "server.log").read_text(errors="replace")
        server.stop()
        raise PostgresError("the server did not start: " + text.strip()[-300:])
    server.admin(f"CREATE ROLE {OWNER} LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB",
                 "REVOKE CONNECT ON DATABASE postgres, template1 FROM PUBLIC")
    return server


_LOCK = threading.Lock()
_STATE: dict[str, Any] = {"server": None, "templates": set(), "copies": set()}


def _server() -> _Server:
    """The warm server of this process (a forked child starts its own)."""
    server = _STATE["server"]
    if server is None or server.pid != os.getpid() or not server.alive():
        if server is not None:
            server.stop()  # a server that died (its creating thread ended, or it crashed): its folder goes
        bindir = _bindir()
        if bindir is None:
            raise PostgresError("PostgreSQL's server programs are not installed")
        _STATE.update(server=_start(bindir), templates=set(), copies=set())
    return _STATE["server"]


def _template(server: _Server, setup: str) -> str:
    """The template database holding the scenario's setup, made once per server."""
    name = "tpl_" + hashlib.sha256(setup.encode()).hexdigest()[:16]
    if name not in _STATE["templates"]:
        server.admin(f"DROP DATABASE IF EXISTS {name}", f"CREATE DATABASE {name} OWNER {OWNER}")
        if setup.strip():
            made = server.psql(name, setup, 60, user=OWNER)
            if made.returncode != 0:
                raise PostgresError("the scenario's setup fails: " + made.output.strip()[:300])
        server.admin(f"ALTER DATABASE {name} WITH IS_TEMPLATE true ALLOW_CONNECTIONS false")
        _STATE["templates"].add(name)
    return name


_MESSAGE = re.compile(r"^(psql:\S* )?(NOTICE|WARNING|INFO|DETAIL|HINT|CONTEXT|LINE \d+):")


def _errors(output: str) -> list[str]:
    return [line.split("ERROR:", 1)[1].strip() for line in output.splitlines() if "ERROR:" in line]


def _case_problems(case: Mapping[str, Any], where: str) -> list[str]:
    problems = []
    if not (isinstance(case.get("name"), str) and _NAME.match(case["name"])):
        problems.append(f"{where}: 'name' is lowercase letters, digits, '-' or '_'")
    if not (isinstance(case.get("sql"), str) and case["sql"].strip()):
        problems.append(f"{where}: 'sql' is the query run after the migration, as the owner")
    rows = case.get("rows")
    if not (isinstance(rows, list) and all(isinstance(r, str) for r in rows)):
        problems.append(f"{where}: 'rows' lists the rows the query returns, columns joined by '|' "
                        "(psql -At: booleans are t/f)")
    return problems


class Postgres:
    """The answer's SQL blocks applied with psql to a fresh copy of the scenario's database, then its queries."""

    name = "postgres"
    install = "install PostgreSQL's server programs (Debian/Ubuntu, as root: apt-get install postgresql) and bubblewrap"

    def missing(self) -> str | None:
        if _bindir() is None:
            return "PostgreSQL's server programs (initdb, pg_ctl, psql) are not installed"
        if os.geteuid() == 0 and shutil.which("setpriv") is None:
            return "setpriv not found (util-linux): PostgreSQL cannot run as root"
        return sandbox_missing()

    def scenario_problems(self, scenario: Mapping[str, Any]) -> list[str]:
        problems = unknown_keys(scenario, SCENARIO_KEYS)
        database = scenario.get("database", OWNER)
        if not (isinstance(database, str) and _DATABASE.match(database)) or database in RESERVED \
                or str(database).startswith("tpl_"):
            problems.append("'database' is the name the migration connects to: lowercase letters, digits and '_', "
                            "not postgres, template0/1 or tpl_*")
        if not isinstance(scenario.get("setup", ""), str):
            problems.append("'setup' is the SQL of the existing schema and rows (a string)")
        for key in ("blocks", "exclude"):
            if key in scenario:
                try:
                    re.compile(scenario[key])
                except (re.error, TypeError) as exc:
                    problems.append(f"'{key}' is a regular expression over a SQL block: {exc}")
        if scenario.get("on_error", "stop") not in ("stop", "continue"):
            problems.append("'on_error' is 'stop' (the migration must apply without an error, the default) or "
                            "'continue' (errors are reported, the cases decide)")
        if not isinstance(scenario.get("twice", False), bool):
            problems.append("'twice' is true when the migration must apply a second time (idempotent)")
        cases = scenario.get("cases", [])
        if not isinstance(cases, list):
            return problems + ["'cases' is a list of {name, sql, rows}"]
        problems += named_list_problems(cases, "cases", "case", CASE_KEYS, _case_problems)
        return problems + timeout_problems(scenario)

    def artifact(self, artifacts: Any, scenario: Mapping[str, Any]) -> Artifact | None:
        """Every SQL block, in order, that matches `blocks` (when given) and not `exclude`."""
        blocks = [b for b in artifacts.valid_blocks if b.kind == "sql"]
        if "blocks" in scenario:
            blocks = [b for b in blocks if re.search(scenario["blocks"], b.body, re.M | re.I)]
        if "exclude" in scenario:
            blocks = [b for b in blocks if not re.search(scenario["exclude"], b.body, re.M | re.I)]
        if not blocks:
            return None
        return Artifact("\n;\n".join(b.body for b in blocks), tuple(blocks))

    def run(self, artifact: str, scenario: Mapping[str, Any], timeout: float) -> EngineResult:
        with _LOCK:
            server = _server()
            template = _template(server, scenario.get("setup", ""))
            database = scenario.get("database", OWNER)
            # the previous answer's copy is dropped here, in the same psql as the new one is made (one process less)
            left = sorted(_STATE["copies"] | {database})
            server.admin(*[f"DROP DATABASE IF EXISTS {name} WITH (FORCE)" for name in left],
                         f"ALTER ROLE {OWNER} RESET ALL",
                         f"CREATE DATABASE {database} TEMPLATE {template} OWNER {OWNER}")
            _STATE["copies"] = {database}
            deadline = time.monotonic() + timeout  # the answer's time starts with its copy, not the server's start
            return _judge(server, database, artifact, scenario, deadline)


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise EngineTimeout("timed out (no time left for the scenario's queries)")
    return left


def _statement_timeout(deadline: float) -> str:
    return f"-c statement_timeout={int(_left(deadline) * STATEMENT_SHARE * 1000)}"


def _apply(server: _Server, database: str, artifact: str, stop: bool, deadline: float) -> Finished:
    """The migration with psql in the sandbox, as the owner of the copy, under a statement timeout."""
    with tempfile.TemporaryDirectory(prefix="devops-rl-sql-") as tmp:
        Path(tmp).chmod(0o755)
        script = Path(tmp, "migration.sql")
        script.write_text(artifact)
        script.chmod(0o644)
        env = {"PATH": "/usr/bin:/bin", "PGOPTIONS": _statement_timeout(deadline)}
        command = [f"{server.bindir}/psql", "-X", "-w", "-q", "-h", "/run/pg", "-U", OWNER, "-d", database,
                   "-v", f"ON_ERROR_STOP={int(stop)}", "-f", "/task/migration.sql"]
        return run_sandboxed([(str(server.socket), "/run/pg"), (tmp, "/task")], env, command, _left(deadline))


def _judge(server: _Server, database: str, artifact: str, scenario: Mapping[str, Any], deadline: float) -> EngineResult:
    stop = scenario.get("on_error", "stop") == "stop"
    evidence, passed = [], True
    for attempt in ("applies", "applies twice")[:2 if scenario.get("twice") else 1]:
        finished = _apply(server, database, artifact, stop, deadline)
        errors = _errors(finished.output)
        if stop and (finished.returncode != 0 or errors):
            first = errors[0] if errors else finished.output.strip()[-200:] or f"psql exit {finished.returncode}"
            return EngineResult(False, tuple(evidence + [f"{attempt}: NO, psql stops at: {first[:240]}"]))
        evidence.append(f"{attempt}: OK" if not errors else
                        f"{attempt}: with {len(errors)} error(s), continued (first: {errors[0][:160]})")
    for case, (ok, line) in zip(scenario.get("cases", []), _cases(server, database, scenario.get("cases", []),
                                                                 deadline)):
        passed &= ok
        evidence.append(f"{case['name']}: {line}")
    return EngineResult(passed, tuple(evidence))


def _cases(server: _Server, database: str, cases: Sequence[Mapping[str, Any]],
           deadline: float) -> list[tuple[bool, str]]:
    """Every case's query in order in one psql session, each after a marker line; an error fails its case only."""
    if not cases:
        return []
    commands = [part for index, case in enumerate(cases) for part in (f"\\echo @@case {index}", case["sql"])]
    finished = server.psql(database, commands, _left(deadline), user=OWNER, stop=False,
                           options=_statement_timeout(deadline))
    parts = re.split(r"^@@case (\d+)$", finished.output, flags=re.M)
    replies = {int(parts[i]): parts[i + 1] for i in range(1, len(parts) - 1, 2)}
    results = []
    for index, case in enumerate(cases):
        reply = replies.get(index)
        if reply is None:
            results.append((False, "not run: " + (finished.output.strip().splitlines() or ["no output"])[-1][:200]))
        elif _errors(reply):
            results.append((False, "ERROR: " + _errors(reply)[0][:240]))
        else:
            rows = [line for line in reply.splitlines() if line.strip() and not _MESSAGE.match(line)]
            results.append(_rows_match(rows, case["rows"]))
    return results


def _rows_match(got: Sequence[str], expected: Sequence[str]) -> tuple[bool, str]:
    if list(got) == list(expected):
        return True, f"{_shown(got)} as expected"
    return False, f"got {_shown(got)}, expected {_shown(expected)}"


def _shown(rows: Sequence[str]) -> str:
    text = ", ".join(rows[:5]) + (f", ... ({len(rows)} rows)" if len(rows) > 5 else "")
    return f"[{text[:200]}]"


ENGINE = register(Postgres())
