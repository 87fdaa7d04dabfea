"""The postgres engine: an answer's SQL migration applied to a fresh copy of the scenario's database, the scenario's
queries asserting facts; missing, crashing and hanging engines, and one answer never seeing another's changes.
"""

from __future__ import annotations

import sys
import time

import pytest

from core.rewards.engines import CACHE, ENGINES, engine_missing, forget_availability, run_engine
from core.rewards.parse.artifacts import Artifacts
from core.rewards.parse.text import analyse

POSTGRES = sys.modules["core.rewards.engines.postgres"]


@pytest.fixture(autouse=True)
def _fresh():
    CACHE.clear()
    forget_availability()
    yield
    CACHE.clear()
    forget_availability()


needs_postgres = pytest.mark.skipif(ENGINES["postgres"].missing() is not None,
                                    reason=f"postgres engine unavailable: {ENGINES['postgres'].missing()}")

EXPAND = """SET lock_timeout = '3s';
ALTER TABLE users ADD COLUMN IF NOT EXISTS display_name text;
CREATE OR REPLACE FUNCTION users_sync() RETURNS trigger AS $$
BEGIN
  NEW.display_name := NEW.fullname;
  RETURN NEW;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS users_sync ON users;
CREATE TRIGGER users_sync BEFORE INSERT OR UPDATE ON users FOR EACH ROW EXECUTE FUNCTION users_sync();
"""

SCENARIO = {"engine": "postgres", "database": "shop",
            "setup": "CREATE TABLE users (id bigserial PRIMARY KEY, fullname text);\n"
                     "INSERT INTO users (fullname) SELECT 'User ' || g FROM generate_series(1, 20) g;",
            "cases": [
                {"name": "column-added", "sql": "SELECT data_type FROM information_schema.columns "
                                                "WHERE table_name = 'users' AND column_name = 'display_name'",
                 "rows": ["text"]},
                {"name": "old-code-insert",
                 "sql": "INSERT INTO users (fullname) VALUES ('Ada') RETURNING display_name", "rows": ["Ada"]},
                {"name": "rows-kept", "sql": "SELECT count(*) FROM users WHERE fullname LIKE 'User %'",
                 "rows": ["20"]}]}


def _answer(*blocks: str) -> str:
    return "The migration:\n\n" + "\n\n".join(f"```sql\n{b}```" for b in blocks) + "\n"


@pytest.mark.parametrize(("scenario", "fragment"), [
    ({"database": "postgres"}, "'database' is the name the migration connects to"),
    ({"on_error": "ignore"}, "'on_error' is 'stop'"),
    ({"exclude": "DROP("}, "'exclude' is a regular expression"),
    ({"cases": [{"name": "a", "sql": "SELECT 1", "rows": [1]}]}, "'rows' lists the rows"),
    ({"cases": [{"name": "a", "query": "SELECT 1", "rows": ["1"]}]}, "unknown key 'query'"),
    ({"twice": "yes"}, "'twice' is true when"),
    ({"timeout": 600}, "'timeout' is seconds of wall time"),
])
def test_bad_postgres_scenarios_name_the_key(scenario, fragment):
    problems = ENGINES["postgres"].scenario_problems({"engine": "postgres", **scenario})
    assert any(fragment in p for p in problems), problems


def test_the_artifact_is_the_sql_blocks_in_order_without_the_excluded_ones():
    answer = _answer("ALTER TABLE users ADD COLUMN display_name text;\n", "ALTER TABLE users DROP COLUMN fullname;\n",
                     "SELECT 1;\n") + "```bash\npsql -c 'DROP TABLE users'\n```\n"
    artifact = ENGINES["postgres"].artifact(Artifacts(analyse(answer)), {"exclude": r"DROP\s+COLUMN"})
    assert artifact.text == "ALTER TABLE users ADD COLUMN display_name text;\n;\nSELECT 1;"
    assert ENGINES["postgres"].artifact(Artifacts(analyse("No SQL here.")), {}) is None


@needs_postgres
def test_the_migration_passes_and_a_rename_in_place_fails_with_the_error():
    assert run_engine("postgres", EXPAND, SCENARIO).evidence == (
        "applies: OK", "column-added: [text] as expected", "old-code-insert: [Ada] as expected",
        "rows-kept: [20] as expected")
    renamed = run_engine("postgres", "ALTER TABLE users RENAME COLUMN fullname TO display_name;", SCENARIO)
    assert not renamed.passed
    assert 'old-code-insert: ERROR: column "fullname" of relation "users" does not exist' in renamed.evidence


@needs_postgres
def test_a_failing_statement_stops_the_migration_unless_errors_may_continue():
    broken = EXPAND.replace("ADD COLUMN IF NOT EXISTS display_name text", "ADD COLUMN display_name txet")
    result = run_engine("postgres", broken, SCENARIO)
    assert not result.passed and result.evidence == ('applies: NO, psql stops at: type "txet" does not exist',)
    extension = "CREATE EXTENSION pg_repack;\n" + EXPAND
    assert not run_engine("postgres", extension, SCENARIO).passed
    result = run_engine("postgres", extension, {**SCENARIO, "on_error": "continue"})
    assert result.passed and result.evidence[0].startswith("applies: with 1 error(s), continued")


@needs_postgres
def test_twice_asks_for_a_migration_that_applies_again():
    assert run_engine("postgres", EXPAND, {**SCENARIO, "twice": True}).passed
    once = run_engine("postgres", EXPAND.replace(" IF NOT EXISTS", ""), {**SCENARIO, "twice": True})
    assert not once.passed
    assert once.evidence[-1] == 'applies twice: NO, psql stops at: column "display_name" of relation "users" already exists'


@needs_postgres
def test_each_answer_gets_a_fresh_copy_one_answer_s_drop_table_is_not_seen_by_the_next():
    dropped = run_engine("postgres", "DROP TABLE users;", SCENARIO)
    assert not dropped.passed and 'rows-kept: ERROR: relation "users" does not exist' in dropped.evidence
    assert run_engine("postgres", EXPAND, SCENARIO).passed
    run_engine("postgres", "ALTER ROLE app SET search_path = nowhere;\n" + EXPAND, SCENARIO)  # its own role
    assert run_engine("postgres", EXPAND + "-- another answer\n", SCENARIO).passed


@needs_postgres
def test_the_migration_runs_without_superuser_powers_or_the_host():
    result = run_engine("postgres", EXPAND + "COPY users TO PROGRAM 'touch /tmp/devops-rl-pg-escape';\n", SCENARIO)
    assert not result.passed and "pg_execute_server_program" in result.evidence[0]
    shell = run_engine("postgres", EXPAND + "\\! touch /tmp/devops-rl-pg-escape\n", SCENARIO)
    assert shell.passed  # psql's shell escape runs, but in the sandbox's private /tmp
    import os

    assert not os.path.exists("/tmp/devops-rl-pg-escape")


@needs_postgres
def test_a_query_that_never_ends_is_cancelled_and_the_next_answer_runs():
    started = time.monotonic()
    slow = run_engine("postgres", "SELECT pg_sleep(100);", {**SCENARIO, "timeout": 4})
    assert not slow.passed and "canceling statement due to statement timeout" in slow.evidence[0]
    hung = run_engine("postgres", "SET statement_timeout = 0;\nSELECT pg_sleep(100);", {**SCENARIO, "timeout": 4})
    assert not hung.passed and hung.evidence[0].startswith("timed out after")
    assert time.monotonic() - started < 20
    assert run_engine("postgres", EXPAND, SCENARIO).passed  # the next run drops the killed session's copy


def test_without_postgres_its_criteria_score_zero_and_say_what_to_install(monkeypatch):
    from core.rewards import score

    monkeypatch.setattr(POSTGRES, "_bindir", lambda: None)
    assert engine_missing("postgres") == "PostgreSQL's server programs (initdb, pg_ctl, psql) are not installed"
    result = run_engine("postgres", EXPAND, SCENARIO)
    assert not result.passed and result.evidence == (
        "engine postgres not installed: PostgreSQL's server programs (initdb, pg_ctl, psql) are not installed; "
        + ENGINES["postgres"].install,)
    task = {"type": "database_ops", "expected_outputs": ["display_name"], "rubric": [
        {"id": "synced", "description": "old writes reach display_name", "weight": 1, "check": {"run": SCENARIO}},
        {"id": "named", "description": "names the new column display_name", "weight": 1, "check": {"concept": ["display_name"]}},
        {"id": "trigger", "description": "a trigger keeps both columns in sync", "weight": 1, "check": {"concept": ["trigger"]}},
        {"id": "migration", "description": "the migration is written out", "weight": 1, "check": {"concept": ["migration"]}}]}
    criteria = score(_answer(EXPAND), task).rubric["criteria"]
    synced = next(c for c in criteria if c["id"] == "synced")
    assert synced["score"] == 0 and "engine postgres not installed" in " ".join(synced["evidence"])


def test_a_broken_server_fails_only_its_check(monkeypatch):
    def broken():
        raise POSTGRES.PostgresError("the server did not start: FATAL: could not create shared memory segment")

    monkeypatch.setattr(POSTGRES, "_server", broken)
    monkeypatch.setattr(POSTGRES.Postgres, "missing", lambda self: None)
    result = run_engine("postgres", EXPAND, SCENARIO)
    assert not result.passed
    assert result.evidence == ("engine postgres crashed: PostgresError: the server did not start: FATAL: could not "
                               "create shared memory segment",)


@needs_postgres
def test_a_killed_process_leaves_no_server_running_and_its_folder_is_swept():
    import os
    import subprocess
    from pathlib import Path

    code = ("import os, signal\nfrom core.rewards.engines import postgres as P\ns = P._server()\n"
            "print(s.root, s.process.pid, flush=True)\nos.kill(os.getpid(), signal.SIGKILL)\n")
    killed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            cwd=str(Path(__file__).resolve().parents[1]))
    root, postmaster = killed.stdout.split()
    for _ in range(100):
        if not Path(f"/proc/{postmaster}").exists() or "zombie" in Path(f"/proc/{postmaster}/status").read_text():
            break
        time.sleep(0.1)
    assert not Path(f"/proc/{postmaster}/cmdline").exists() or not Path(f"/proc/{postmaster}/cmdline").read_text()
    POSTGRES._sweep()
    assert not os.path.exists(root)


@needs_postgres
def test_the_migration_cannot_reconnect_as_the_superuser():
    result = run_engine("postgres", EXPAND + "\\c - postgres\nCOPY users TO PROGRAM 'true';\n", SCENARIO)
    assert not result.passed and "no password supplied" in result.evidence[0], result.evidence
