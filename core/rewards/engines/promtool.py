"""Alerting and recording rules run by Prometheus's own `promtool`: `check rules` on the answer's rule groups,
then `test rules` with the task's series: an incident must fire the alert in time, healthy traffic must not.

Rule unit tests: https://prometheus.io/docs/prometheus/latest/configuration/unit_testing_rules/
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from core.rewards.engines.base import (
    Artifact,
    EngineResult,
    named_list_problems,
    register,
    run_bounded,
    timeout_problems,
    unknown_keys,
)

_DURATION = re.compile(r"^(\d+)(s|m|h)$")
_SECONDS = {"s": 1, "m": 60, "h": 3600}
_CASE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")
SCENARIO_KEYS = {"engine", "alert", "labels", "interval", "cases", "timeout"}
CASE_KEYS = {"name", "series", "fires_within", "quiet_for", "alert", "labels"}
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def _duration(value: Any) -> int | None:
    match = _DURATION.match(str(value).strip()) if isinstance(value, str) else None
    return int(match.group(1)) * _SECONDS[match.group(2)] if match else None


def rule_groups(documents: list[tuple[str, Any]]) -> list[dict]:
    """Every rule group of the answer: a rules file (`groups:`) or a PrometheusRule (`spec.groups`); a group
    name used twice gets a suffix (promtool rejects a repeated name in one file)."""
    groups: list[dict] = []
    for _, doc in documents:
        if not isinstance(doc, dict):
            continue
        found = doc.get("groups") if isinstance(doc.get("groups"), list) else None
        if found is None and doc.get("kind") == "PrometheusRule" and isinstance(doc.get("spec"), dict):
            found = doc["spec"].get("groups")
        for group in found if isinstance(found, list) else []:
            if isinstance(group, dict) and isinstance(group.get("rules"), list):
                groups.append(dict(group))
    seen: dict[str, int] = {}
    for group in groups:
        name = str(group.get("name", "rules"))
        seen[name] = seen.get(name, 0) + 1
        group["name"] = name if seen[name] == 1 else f"{name}-{seen[name]}"
    return groups


class Promtool:
    """`promtool check rules` and `promtool test rules` on the answer's rule groups."""

    name = "promtool"
    install = "install Prometheus's promtool (Debian/Ubuntu: apt-get install prometheus; or the release tarball)"

    def missing(self) -> str | None:
        return None if shutil.which("promtool") else "promtool is not on PATH"

    def scenario_problems(self, scenario: Mapping[str, Any]) -> list[str]:
        problems = unknown_keys(scenario, SCENARIO_KEYS)
        problems += _matcher_problems(scenario, "", required=True)
        if "interval" in scenario and _duration(scenario["interval"]) is None:
            problems.append(f"'interval' is a duration like 1m or 30s; got {scenario['interval']!r}")
        cases = scenario.get("cases")
        if not isinstance(cases, list) or not cases:
            return problems + ["'cases' is a list of {name, series, fires_within or quiet_for}"]
        problems += named_list_problems(cases, "cases", "case", CASE_KEYS, _case_problems)
        return problems + timeout_problems(scenario)

    def artifact(self, artifacts: Any, scenario: Mapping[str, Any]) -> Artifact | None:
        groups = rule_groups(artifacts.documents)
        if not groups:
            return None
        blocks = tuple(b for b in artifacts.valid_blocks if b.kind in ("yaml", "json") and "rules" in b.body)
        return Artifact(yaml.safe_dump({"groups": groups}, sort_keys=False), blocks)

    def run(self, artifact: str, scenario: Mapping[str, Any], timeout: float) -> EngineResult:
        alert = scenario["alert"]
        groups = yaml.safe_load(artifact)["groups"]
        names = [r["alert"] for g in groups for r in g["rules"] if isinstance(r, dict) and isinstance(r.get("alert"), str)]
        matching = [n for n in names if re.fullmatch(alert, n)]
        with tempfile.TemporaryDirectory(prefix="devops-rl-promtool-") as tmp:
            Path(tmp, "rules.yaml").write_text(artifact)
            checked = run_bounded(["promtool", "check", "rules", "rules.yaml"], timeout, cwd=tmp)
            if checked.returncode != 0:
                lines = [ln.strip() for ln in checked.output.splitlines() if ln.strip() and "Checking" not in ln]
                return EngineResult(False, tuple(["check rules failed: " + "; ".join(lines[:3])[:300]]))
            if not matching:
                return EngineResult(False, (f"check rules: OK; no alert rule matches /{alert}/ "
                                            f"(alerts: {', '.join(names) or 'none'})",))
            Path(tmp, "test.yaml").write_text(yaml.safe_dump(_unit_tests(scenario), sort_keys=False))
            tested = run_bounded(["promtool", "test", "rules", "test.yaml"], timeout, cwd=tmp)
        failed = _failed_cases(tested.output, scenario["cases"]) if tested.returncode != 0 else set()
        if tested.returncode != 0 and not failed:
            lines = [ln.strip() for ln in tested.output.splitlines() if ln.strip()]
            return EngineResult(False, ("test rules failed: " + "; ".join(lines[-3:])[:300],))
        evidence = [f"check rules: OK ({len(names)} alerts; about: {', '.join(matching)})"]
        for case in scenario["cases"]:
            ok = case["name"] not in failed
            if "fires_within" in case:
                evidence.append(f"{case['name']}: " + (f"fires within {case['fires_within']}" if ok
                                                       else f"does NOT fire within {case['fires_within']}"))
            else:
                evidence.append(f"{case['name']}: " + (f"quiet for {case['quiet_for']}" if ok
                                                       else f"FIRES (must stay quiet for {case['quiet_for']})"))
        return EngineResult(not failed, tuple(evidence))


def _case_problems(case: Mapping[str, Any], where: str) -> list[str]:
    problems = _matcher_problems(case, f"{where}: ", required=False)
    if not (isinstance(case.get("name"), str) and _CASE_NAME.match(case["name"])):
        problems.append(f"{where}: 'name' is lowercase letters, digits, '-' or '_'")
    if ("fires_within" in case) == ("quiet_for" in case):
        problems.append(f"{where}: give either 'fires_within' (the alert fires by then) or 'quiet_for' "
                        "(no alert fires that long)")
    elif _duration(case.get("fires_within", case.get("quiet_for"))) is None:
        problems.append(f"{where}: the duration is like 15m or 1h")
    series = case.get("series")
    if not isinstance(series, list) or not series or not all(
            isinstance(s, Mapping) and isinstance(s.get("series"), str) and isinstance(s.get("values"), str)
            for s in series):
        problems.append(f"{where}: 'series' is a list of {{series: 'metric{{label=\"v\"}}', values: '0+10x60'}} "
                        "(promtool's expanding notation)")
    return problems


def _matcher_problems(where_from: Mapping[str, Any], where: str, *, required: bool) -> list[str]:
    problems = []
    alert = where_from.get("alert")
    if not (isinstance(alert, str) and alert.strip()):
        if alert is not None or required:
            problems.append(f"{where}'alert' is a regular expression (RE2, anchored) of the alert names it is about")
    else:
        try:
            re.compile(alert)
        except re.error as exc:
            problems.append(f"{where}'alert' {alert!r} is not a valid regular expression: {exc}")
    labels = where_from.get("labels", {})
    if not isinstance(labels, Mapping) or not all(isinstance(k, str) and _LABEL.match(k) and isinstance(v, str)
                                                  for k, v in labels.items()):
        problems.append(f"{where}'labels' maps a label of the alert to a regular expression ({{severity: page|critical}})")
    return problems


def _quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _firing(alert: str, labels: Mapping[str, str], window: str, name: str) -> str:
    """1 (labelled with the case) when an alert whose name and labels match fired at some point in the last
    `window`: the ALERTS series Prometheus writes for every pending and firing alert."""
    matchers = "".join(f',{key}=~"{_quoted(value)}"' for key, value in labels.items())
    return (f'label_replace(clamp_max(count(max_over_time(ALERTS{{alertname=~"{_quoted(alert)}",alertstate="firing"'
            f'{matchers}}}[{window}])), 1), "case", "{name}", "", "")')


def _unit_tests(scenario: Mapping[str, Any]) -> dict:
    """promtool's test file: one test group per case, its series, and one query of the ALERTS series."""
    interval = scenario.get("interval", "1m")
    tests = []
    for case in scenario["cases"]:
        window = case.get("fires_within", case.get("quiet_for"))
        expected = [{"labels": f'{{case="{case["name"]}"}}', "value": 1}] if "fires_within" in case else []
        tests.append({"interval": interval,
                      "input_series": [{"series": s["series"], "values": s["values"]} for s in case["series"]],
                      "promql_expr_test": [{"expr": _firing(case.get("alert", scenario["alert"]),
                                                            case.get("labels", scenario.get("labels", {})),
                                                            window, case["name"]),
                                            "eval_time": window, "exp_samples": expected}]})
    return {"rule_files": ["rules.yaml"], "evaluation_interval": interval, "tests": tests}


def _failed_cases(output: str, cases: list[Mapping[str, Any]]) -> set[str]:
    """The cases whose query promtool reports as failed (its report quotes the expression with the case name)."""
    return {c["name"] for c in cases if f'\\"case\\", \\"{c["name"]}\\"' in output}


ENGINE = register(Promtool())
