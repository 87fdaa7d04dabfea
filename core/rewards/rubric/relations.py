"""Named relation checks a rubric references with `relation: NAME` (or `{name: NAME, <argument>: value}`):
small pure predicates over an answer's parsed artifacts that read values and the relations between documents
(a selector that matches the workload's pods, a rollout that can progress), each citing the behaviour it follows.

Every predicate takes the `Artifacts` of one answer and its arguments, and returns (score in [0, 1], evidence).
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

Result = tuple[float, list[str]]
RELATIONS: dict[str, Callable[..., Result]] = {}

WORKLOAD_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Rollout", "Job", "Pod"})


def relation(name: str) -> Callable[[Callable[..., Result]], Callable[..., Result]]:
    """Register a predicate under the name rubrics use."""

    def register(function: Callable[..., Result]) -> Callable[..., Result]:
        RELATIONS[name] = function
        return function

    return register


def relation_arguments(name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments a rubric gives a relation, checked against the predicate's signature (ValueError naming
    the unknown or missing argument)."""
    parameters = list(inspect.signature(RELATIONS[name]).parameters.values())[1:]
    known = {p.name: p for p in parameters}
    for key in arguments:
        if key not in known:
            raise ValueError(f"unknown argument '{key}' (it takes {', '.join(known) or 'no arguments'})")
    missing = [p.name for p in parameters if p.default is inspect.Parameter.empty and p.name not in arguments]
    if missing:
        raise ValueError(f"missing argument(s) {', '.join(missing)}")
    return dict(arguments)


# ---- reading Kubernetes objects -------------------------------------------------------------------------


def objects(artifacts: Any, *kinds: str) -> Iterator[dict]:
    """The answer's Kubernetes objects of these kinds (all kinds when none is given)."""
    for _, doc in artifacts.documents:
        if isinstance(doc, dict) and isinstance(doc.get("kind"), str) and (not kinds or doc["kind"] in kinds):
            yield doc


def name_of(obj: Mapping) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return f"{obj.get('kind')}/{name}" if name else str(obj.get("kind"))


def namespace_of(obj: Mapping) -> str | None:
    meta = obj.get("metadata")
    value = meta.get("namespace") if isinstance(meta, Mapping) else None
    return str(value) if value is not None else None


def _dig(value: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def pod_template(obj: Mapping) -> Mapping:
    """The pod template of a workload (a Pod is its own template; a CronJob's is two levels down)."""
    if obj.get("kind") == "Pod":
        return obj
    if obj.get("kind") == "CronJob":
        return _dig(obj, "spec", "jobTemplate", "spec", "template") or {}
    return _dig(obj, "spec", "template") or {}


def pod_labels(obj: Mapping) -> dict[str, str]:
    labels = _dig(pod_template(obj), "metadata", "labels")
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}


def containers(obj: Mapping) -> list[Mapping]:
    found = _dig(pod_template(obj), "spec", "containers")
    return [c for c in found if isinstance(c, Mapping)] if isinstance(found, list) else []


def workloads(artifacts: Any) -> list[dict]:
    return [o for o in objects(artifacts, *WORKLOAD_KINDS, "CronJob") if pod_labels(o) or o.get("kind") == "Pod"]


def selector_matches(selector: Any, labels: Mapping[str, str]) -> bool:
    """A label selector against a pod's labels, as Kubernetes reads it: `matchLabels` and every
    `matchExpressions` item must hold (In, NotIn, Exists, DoesNotExist); a plain map (a Service's
    `spec.selector`) is matchLabels; an empty selector `{}` matches every pod.
    https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors"""
    if not isinstance(selector, Mapping):
        return False
    if "matchLabels" not in selector and "matchExpressions" not in selector:
        match_labels, expressions = selector, []
    else:
        match_labels, expressions = selector.get("matchLabels") or {}, selector.get("matchExpressions") or []
    if not isinstance(match_labels, Mapping) or not isinstance(expressions, list):
        return False
    if any(labels.get(str(k)) != str(v) for k, v in match_labels.items()):
        return False
    for expression in expressions:
        if not isinstance(expression, Mapping):
            return False
        key, operator = str(expression.get("key")), str(expression.get("operator"))
        values = [str(v) for v in expression.get("values") or []]
        holds = {"In": key in labels and labels[key] in values, "NotIn": labels.get(key) not in values,
                 "Exists": key in labels, "DoesNotExist": key not in labels}.get(operator)
        if not holds:
            return False
    return True


def _selector_of(obj: Mapping) -> Any:
    """The pod selector of an object that selects pods (None when it has none)."""
    kind = obj.get("kind")
    if kind == "Service":
        return _dig(obj, "spec", "selector")
    if kind == "NetworkPolicy":
        return _dig(obj, "spec", "podSelector")
    return _dig(obj, "spec", "selector")


def _same_namespace(a: Mapping, b: Mapping) -> bool:
    return namespace_of(a) is None or namespace_of(b) is None or namespace_of(a) == namespace_of(b)


def matched_workloads(artifacts: Any, selecting: Mapping) -> list[dict]:
    """The answer's workloads whose pods `selecting` (a Service, PDB, NetworkPolicy, ...) selects."""
    selector = _selector_of(selecting)
    return [w for w in workloads(artifacts) if _same_namespace(selecting, w) and selector is not None
            and selector_matches(selector, pod_labels(w) if w.get("kind") != "Pod" else
                                 {str(k): str(v) for k, v in (_dig(w, "metadata", "labels") or {}).items()})]


def _named(obj: Mapping, workload: str | None) -> bool:
    return workload is None or _dig(obj, "metadata", "name") == workload


def replicas_of(obj: Mapping) -> int | None:
    value = _dig(obj, "spec", "replicas")
    if value is None and obj.get("kind") in ("Deployment", "StatefulSet", "ReplicaSet", "Rollout"):
        return 1  # the API default
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def scaled_value(value: Any, total: int, *, round_up: bool) -> int | None:
    """An int-or-percent field (`2` or `"25%"`) as a number of pods out of `total`."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"\d+%", value.strip()):
        share = int(value.strip()[:-1]) * total / 100
        return math.ceil(share) if round_up else math.floor(share)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


# ---- the relations --------------------------------------------------------------------------------------


@relation("selector_matches")
def selects_workload(artifacts: Any, kind: str = "Service", workload: str | None = None) -> Result:
    """Every object of `kind` (Service, PodDisruptionBudget, NetworkPolicy, ...) selects the pods of a workload in
    the answer (of the one named `workload`, when given), in its namespace. A selector that matches no pod is the
    classic silent failure: a Service with no endpoints, a budget that protects nothing."""
    found = list(objects(artifacts, kind))
    if not found:
        return 0.0, [f"no {kind} in the answer"]
    good, evidence = 0, []
    for obj in found:
        matched = [w for w in matched_workloads(artifacts, obj) if _named(w, workload)]
        if matched:
            good += 1
            evidence.append(f"{name_of(obj)} selects the pods of {', '.join(map(name_of, matched))}")
        else:
            evidence.append(f"{name_of(obj)} selects no pod of {workload or 'any workload'} in the answer "
                            f"(selector {_selector_of(obj)!r})")
    return good / len(found), evidence


@relation("pdb_allows_disruption")
def pdb_allows_disruption(artifacts: Any, replicas: int | None = None, at_most: int | None = None,
                          workload: str | None = None) -> Result:
    """A PodDisruptionBudget that selects the workload allows at least one voluntary disruption (so a node drain
    can progress) and at most `at_most`. allowed = replicas - minAvailable, or maxUnavailable; a percentage is
    rounded up in both fields.
    https://kubernetes.io/docs/tasks/run-application/configure-pdb/#rounding-logic-when-specifying-percentages"""
    budgets = list(objects(artifacts, "PodDisruptionBudget"))
    if not budgets:
        return 0.0, ["no PodDisruptionBudget in the answer"]
    best, evidence = 0.0, []
    for pdb in budgets:
        matched = [w for w in matched_workloads(artifacts, pdb) if _named(w, workload)]
        if not matched and replicas is not None and any(objects(artifacts, *WORKLOAD_KINDS)):
            # The task gives the replica count, but the answer also shows its workloads: the budget must select one.
            evidence.append(f"{name_of(pdb)} selects none of the answer's workloads")
            continue
        total = replicas if replicas is not None else next(filter(None, map(replicas_of, matched)), None)
        if total is None:
            evidence.append(f"{name_of(pdb)} selects no workload of the answer with a replica count")
            continue
        spec = pdb.get("spec") or {}
        if "minAvailable" in spec:
            needed = scaled_value(spec["minAvailable"], total, round_up=True)
            allowed = None if needed is None else total - needed
        else:
            allowed = scaled_value(spec.get("maxUnavailable"), total, round_up=True)
        if allowed is None:
            evidence.append(f"{name_of(pdb)} sets neither minAvailable nor maxUnavailable as a number or percentage")
            continue
        ok = allowed >= 1 and (at_most is None or allowed <= at_most)
        evidence.append(f"{name_of(pdb)} allows {allowed} disruption(s) of {total} pods"
                        + ("" if ok else " (a drain can never evict a pod)" if allowed < 1 else f" (more than {at_most})"))
        best = max(best, 1.0 if ok else 0.0)
    return best, evidence


@relation("rollout_progresses")
def rollout_progresses(artifacts: Any, min_available: int | None = None, keep_full_capacity: bool = False,
                       workload: str | None = None) -> Result:
    """Each Deployment's rolling update can progress (maxSurge and maxUnavailable are not both 0) and keeps the
    capacity the task asks for: replicas - maxUnavailable >= min_available (or >= replicas with
    keep_full_capacity). maxSurge percentages round up, maxUnavailable percentages round down; both default to 25%.
    https://kubernetes.io/docs/concepts/workloads/controllers/deployment/#rolling-update-deployment"""
    deployments = [d for d in objects(artifacts, "Deployment", "Rollout") if _named(d, workload)]
    if not deployments:
        return 0.0, [f"no Deployment{' ' + workload if workload else ''} in the answer"]
    good, evidence = 0, []
    for deployment in deployments:
        total = replicas_of(deployment) or 1
        strategy = _dig(deployment, "spec", "strategy") or {}
        if strategy.get("type") == "Recreate":
            ok = min_available is None and not keep_full_capacity
            evidence.append(f"{name_of(deployment)} uses Recreate: every pod stops before the new ones start")
            good += ok
            continue
        rolling = strategy.get("rollingUpdate") or {}
        surge = scaled_value(rolling.get("maxSurge", "25%"), total, round_up=True)
        unavailable = scaled_value(rolling.get("maxUnavailable", "25%"), total, round_up=False)
        if surge is None or unavailable is None:
            evidence.append(f"{name_of(deployment)}: maxSurge/maxUnavailable are not numbers or percentages")
            continue
        floor = total if keep_full_capacity else min_available
        problems = []
        if surge == 0 and unavailable == 0:
            problems.append("maxSurge and maxUnavailable are both 0: the rollout can never progress")
        if floor is not None and total - unavailable < floor:
            problems.append(f"only {total - unavailable} of {total} pods stay available (needs {floor})")
        evidence.append(f"{name_of(deployment)}: {total} replicas, maxSurge {surge}, maxUnavailable {unavailable}"
                        + (": " + "; ".join(problems) if problems else ": progresses"))
        good += not problems
    return good / len(deployments), evidence


def _probe_target(probe: Any) -> str | None:
    if not isinstance(probe, Mapping):
        return None
    if isinstance(probe.get("httpGet"), Mapping):
        return f"http {probe['httpGet'].get('path', '/')} :{probe['httpGet'].get('port')}"
    if isinstance(probe.get("exec"), Mapping):
        return "exec " + " ".join(map(str, probe["exec"].get("command") or []))
    if isinstance(probe.get("tcpSocket"), Mapping):
        return f"tcp :{probe['tcpSocket'].get('port')}"
    if isinstance(probe.get("grpc"), Mapping):
        return f"grpc :{probe['grpc'].get('port')} {probe['grpc'].get('service', '')}".strip()
    return None


@relation("liveness_independent")
def liveness_independent(artifacts: Any, dependencies: list[str] | None = None, workload: str | None = None) -> Result:
    """Every container's livenessProbe checks the process only: it is not the readiness check (a slow dependency
    would fail both and the kubelet restarts every pod) and names none of `dependencies` (redis, db, ...).
    https://kubernetes.io/docs/concepts/configuration/liveness-readiness-startup-probes/"""
    words = [d.lower() for d in dependencies or []]
    checked, good, evidence = 0, 0, []
    for obj in workloads(artifacts):
        if not _named(obj, workload):
            continue
        for container in containers(obj):
            liveness = container.get("livenessProbe")
            if liveness is None:
                continue
            checked += 1
            target = _probe_target(liveness)
            readiness = _probe_target(container.get("readinessProbe"))
            text = str(liveness).lower()
            named = [w for w in words if w in text]
            if target is not None and target == readiness:
                evidence.append(f"{name_of(obj)} container {container.get('name')}: liveness is the readiness check ({target})")
            elif named:
                evidence.append(f"{name_of(obj)} container {container.get('name')}: liveness calls {', '.join(named)}")
            else:
                good += 1
                evidence.append(f"{name_of(obj)} container {container.get('name')}: liveness {target} is independent")
    if not checked:
        return 0.0, ["no container with a livenessProbe"]
    return good / checked, evidence


def _values(value: Any) -> Iterator[str]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from _values(item)
    elif isinstance(value, list):
        for item in value:
            yield from _values(item)
    elif value is not None:
        yield str(value)


@relation("values_present")
def values_present(artifacts: Any, values: list[Any]) -> Result:
    """The task's own names, ports and numbers appear as values in the answer's artifacts (YAML/JSON, HCL, SQL,
    commands, Dockerfiles), not only in its prose: the probe targets this port, the budget selects this app."""
    haystack: set[str] = set()
    texts: list[str] = []
    for _, doc in artifacts.documents:
        haystack.update(_values(doc))
    if artifacts.hcl is not None:
        haystack.update(_values(artifacts.hcl))
    for command in artifacts.commands:
        haystack.update(command.words)
        texts.append(" ".join(command.words))
    for instructions in artifacts.dockerfiles:
        texts.extend(args for _, args in instructions)
    texts.extend(normalised for normalised, _ in artifacts.sql)
    joined = "\n".join(texts).lower()
    found, evidence = 0, []
    for value in values:
        wanted = str(value)
        pattern = re.compile(r"(?<![\w.-])" + re.escape(wanted.lower()) + r"(?![\w-])")
        hit = wanted in haystack or any(pattern.search(v.lower()) for v in haystack) or bool(pattern.search(joined))
        found += hit
        evidence.append(f"{wanted!s}: {'in the artifacts' if hit else 'not in any artifact'}")
    return found / len(values) if values else 0.0, evidence


@relation("hpa_bounds")
def hpa_bounds(artifacts: Any, min_replicas: int | None = None, max_replicas: int | None = None,
               workload: str | None = None) -> Result:
    """Each HorizontalPodAutoscaler scales between minReplicas < maxReplicas (minReplicas defaults to 1), within the
    bounds the task gives, and targets a workload of the answer when the answer has one.
    https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/"""
    found = list(objects(artifacts, "HorizontalPodAutoscaler"))
    if not found:
        return 0.0, ["no HorizontalPodAutoscaler in the answer"]
    named = {_dig(w, "metadata", "name") for w in workloads(artifacts)}
    good, evidence = 0, []
    for hpa in found:
        low, high = _dig(hpa, "spec", "minReplicas"), _dig(hpa, "spec", "maxReplicas")
        low = 1 if low is None else low
        target = _dig(hpa, "spec", "scaleTargetRef", "name")
        problems = []
        if not isinstance(low, int) or not isinstance(high, int) or low >= high:
            problems.append(f"minReplicas {low} is not below maxReplicas {high}")
        if isinstance(low, int) and min_replicas is not None and low < min_replicas:
            problems.append(f"minReplicas {low} < {min_replicas}")
        if isinstance(high, int) and max_replicas is not None and high > max_replicas:
            problems.append(f"maxReplicas {high} > {max_replicas}")
        if workload is not None and target != workload:
            problems.append(f"targets {target}, not {workload}")
        elif named and target not in named:
            problems.append(f"targets {target}, which is not a workload of the answer")
        good += not problems
        evidence.append(f"{name_of(hpa)}: {low}-{high} replicas of {target}" + (": " + "; ".join(problems) if problems else ""))
    return good / len(found), evidence


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|y|w|d|h|m|s)")
_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def duration_seconds(value: Any) -> float | None:
    """A Prometheus/Go duration (`1h30m`, `5m`, `30s`, `35d`) or a bare number of seconds, in seconds.
    https://prometheus.io/docs/prometheus/latest/configuration/configuration/#duration"""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip().lower()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _SECONDS[u] for n, u in parts)


def alerting_rules(artifacts: Any) -> list[tuple[str, Mapping]]:
    """(group name, rule) for every alerting rule: PrometheusRule objects and plain rule files (`groups:`)."""
    out = []
    for _, doc in artifacts.documents:
        if not isinstance(doc, Mapping):
            continue
        groups = _dig(doc, "spec", "groups") if doc.get("kind") == "PrometheusRule" else doc.get("groups")
        for group in groups if isinstance(groups, list) else []:
            rules = group.get("rules") if isinstance(group, Mapping) else None
            out.extend((str(group.get("name")), rule) for rule in rules or [] if isinstance(rule, Mapping) and "alert" in rule)
    return out


def _alerts(artifacts: Any, alert: str | None) -> list[Mapping]:
    pattern = re.compile(alert, re.I) if alert else None
    return [rule for _, rule in alerting_rules(artifacts) if pattern is None or pattern.search(str(rule.get("alert")))]


@relation("alert_for_within")
def alert_for_within(artifacts: Any, max: str, min: str = "0s", alert: str | None = None) -> Result:  # noqa: A002
    """Every alerting rule (named like `alert`, a regex) waits `for:` no longer than `max` (an alert whose `for:`
    outlasts the outage never fires) and no shorter than `min` (a page on every blip). `for` defaults to 0s.
    https://prometheus.io/docs/prometheus/latest/configuration/alerting_rules/"""
    rules = _alerts(artifacts, alert)
    if not rules:
        return 0.0, [f"no alerting rule{' matching ' + alert if alert else ''}"]
    high, low = duration_seconds(max), duration_seconds(min)
    good, evidence = 0, []
    for rule in rules:
        waits = duration_seconds(rule.get("for", "0s"))
        ok = waits is not None and high is not None and low is not None and low <= waits <= high
        good += ok
        evidence.append(f"{rule.get('alert')}: for {rule.get('for', '0s')}" + ("" if ok else f" (needs {min} to {max})"))
    return good / len(rules), evidence


_COMPARISON = re.compile(r"(?<![=!<>])(>=|<=|==|!=|>|<)\s*(?:bool\s+)?([-+*/().\deE\s]+?)\s*(?=$|\b(?:and|or|unless)\b|\)\s*$)",
                         re.I | re.S)


def _arithmetic(text: str) -> float | None:
    """A literal arithmetic expression (`14.4 * 0.001`) as a number; None for anything else."""
    import ast

    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        return None

    def value(node: Any) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return float(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return -value(node.operand) if isinstance(node.op, ast.USub) else value(node.operand)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div, ast.Add, ast.Sub)):
            left, right = value(node.left), value(node.right)
            return {ast.Mult: left * right, ast.Add: left + right, ast.Sub: left - right}.get(type(node.op)) \
                if not isinstance(node.op, ast.Div) else left / right
        raise ValueError("not a literal")

    try:
        return value(tree.body)
    except (ValueError, ZeroDivisionError):
        return None


def thresholds(expr: str) -> list[tuple[str, float]]:
    """(operator, number) for every comparison of a PromQL expression against a literal (`> 0.05`, `< 14.4 * 0.001`)."""
    found = []
    for operator, literal in _COMPARISON.findall(" ".join(str(expr).split())):
        number = _arithmetic(literal)
        if number is not None:
            found.append((operator, number))
    return found


@relation("alert_threshold")
def alert_threshold(artifacts: Any, low: float, high: float, alert: str | None = None) -> Result:
    """Every alerting rule (named like `alert`) compares its expression against a threshold inside [low, high]:
    a ratio alert compared with 5 (instead of 0.05) can never fire; one compared with 0.00001 pages all night."""
    rules = _alerts(artifacts, alert)
    if not rules:
        return 0.0, [f"no alerting rule{' matching ' + alert if alert else ''}"]
    good, evidence = 0, []
    for rule in rules:
        found = thresholds(str(rule.get("expr", "")))
        ok = bool(found) and all(low <= number <= high for _, number in found)
        good += ok
        shown = ", ".join(f"{op} {number:g}" for op, number in found) or "no comparison with a number"
        evidence.append(f"{rule.get('alert')}: {shown}" + ("" if ok else f" (needs a threshold in [{low:g}, {high:g}])"))
    return good / len(rules), evidence


_RETENTION_KEY = r"retention|expiration|expire|ttl|keep|days|delete_after|deleteafter|lifecycle"
_UNIT_OF_KEY = (("seconds", 1 / 86400), ("hours", 1 / 24), ("hour", 1 / 24), ("weeks", 7), ("months", 30), ("years", 365))


def _days(key: str, value: Any) -> float | None:
    """A retention value in days: a duration string (`35d`, `840h`), or a number whose key names its unit
    (`retention_hours: 24`, days otherwise)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        lowered = key.lower()
        factor = next((f for unit, f in _UNIT_OF_KEY if unit in lowered), 1.0)
        return float(value) * factor
    seconds = duration_seconds(value)
    if seconds is not None and not str(value).strip().isdigit():
        return seconds / 86400
    if isinstance(value, str) and value.strip().isdigit():
        return _days(key, int(value.strip()))
    return None


def _keyed_numbers(value: Any, key: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping):
        for k, item in value.items():
            yield from _keyed_numbers(item, str(k))
    elif isinstance(value, list):
        for item in value:
            yield from _keyed_numbers(item, key)
    else:
        yield key, value


@relation("retention_days")
def retention_days(artifacts: Any, min: float, max: float | None = None, key: str = _RETENTION_KEY) -> Result:  # noqa: A002
    """Every retention-like setting (a key matching `key`, a regex, in YAML/JSON or HCL, or a `--...retention...`
    flag of a command) keeps data at least `min` days (and at most `max`): 1 day where the task asks for 35 is a
    wrong decision, whatever else the answer gets right."""
    pattern = re.compile(key, re.I)
    found: list[tuple[str, float]] = []
    sources = [doc for _, doc in artifacts.documents] + ([artifacts.hcl] if artifacts.hcl is not None else [])
    for doc in sources:
        for name, value in _keyed_numbers(doc):
            if pattern.search(name):
                days = _days(name, value)
                if days is not None:
                    found.append((name, days))
    for command in artifacts.commands:
        words = command.words
        for at, word in enumerate(words):
            flag, _, inline = word.partition("=")
            if flag.startswith("--") and pattern.search(flag):
                days = _days(flag, inline or (words[at + 1] if at + 1 < len(words) else ""))
                if days is not None:
                    found.append((flag, days))
    if not found:
        return 0.0, [f"no retention setting (keys like /{key}/)"]
    bad = [(name, days) for name, days in found if days < min or (max is not None and days > max)]
    shown = ", ".join(f"{name} = {days:g} d" for name, days in found[:6])
    if bad:
        return 0.0, [f"{shown}; outside {min:g}-{max if max is not None else '∞'} days: "
                     + ", ".join(f"{n} ({d:g} d)" for n, d in bad[:3])]
    return 1.0, [shown]


@relation("rbac_least_privilege")
def rbac_least_privilege(artifacts: Any, forbid_verbs: list[str] | None = None, namespaced: bool = False) -> Result:
    """No Role or ClusterRole grants a privilege-escalation verb (escalate, bind, impersonate) or a wildcard verb
    or resource, and with `namespaced` no ClusterRoleBinding grants it cluster-wide.
    https://kubernetes.io/docs/concepts/security/rbac-good-practices/#privilege-escalation-risks"""
    verbs = {v.lower() for v in (forbid_verbs or ["escalate", "bind", "impersonate", "*"])}
    roles = list(objects(artifacts, "Role", "ClusterRole"))
    if not roles:
        return 0.0, ["no Role or ClusterRole in the answer"]
    problems = []
    for role in roles:
        for rule in role.get("rules") or []:
            if not isinstance(rule, Mapping):
                continue
            granted = {str(v).lower() for v in rule.get("verbs") or []} & verbs
            if granted:
                problems.append(f"{name_of(role)} grants {', '.join(sorted(granted))}")
            if "*" in [str(r) for r in rule.get("resources") or []]:
                problems.append(f"{name_of(role)} grants every resource ('*')")
    if namespaced:
        problems.extend(f"{name_of(b)} binds cluster-wide" for b in objects(artifacts, "ClusterRoleBinding"))
    if problems:
        return 0.0, problems[:4]
    return 1.0, [f"{len(roles)} role(s) without escalation verbs or wildcards"]


def _names_namespace(selector: Any, namespace: str) -> bool:
    labels = selector.get("matchLabels") if isinstance(selector, Mapping) else None
    return isinstance(labels, Mapping) and namespace in {str(v) for v in labels.values()}


@relation("networkpolicy_peers")
def networkpolicy_peers(artifacts: Any, namespace: str | None = None, pod_labels: dict | None = None,
                        allow_any_namespace: bool = False) -> Result:
    """Ingress peers read the way Kubernetes reads them: items of `from` are ORed, and a namespaceSelector and a
    podSelector in ONE item are ANDed. Fails on a rule that admits everything (no `from`, an empty peer, a bare
    `namespaceSelector: {}`, an ipBlock 0.0.0.0/0) and, with `namespace`/`pod_labels`, unless one item admits
    exactly those pods of that namespace (two separate items would admit all of that namespace OR those pods).
    https://kubernetes.io/docs/concepts/services-networking/network-policies/#behavior-of-to-and-from-selectors"""
    policies = [p for p in objects(artifacts, "NetworkPolicy") if _dig(p, "spec", "ingress") is not None]
    if not policies:
        return 0.0, ["no NetworkPolicy with ingress rules in the answer"]
    problems, matched = [], False
    for policy in policies:
        for rule in _dig(policy, "spec", "ingress") or []:
            peers = rule.get("from") if isinstance(rule, Mapping) else None
            if not peers:
                problems.append(f"{name_of(policy)}: an ingress rule without `from` admits every source")
                continue
            for peer in peers:
                if not isinstance(peer, Mapping) or not peer:
                    problems.append(f"{name_of(policy)}: an empty peer admits every pod")
                    continue
                ns, pods, block = peer.get("namespaceSelector"), peer.get("podSelector"), peer.get("ipBlock")
                if isinstance(block, Mapping) and str(block.get("cidr")) in ("0.0.0.0/0", "::/0"):
                    problems.append(f"{name_of(policy)}: ipBlock {block.get('cidr')} admits the internet")
                if ns is not None and not ns and not pods and not allow_any_namespace:
                    problems.append(f"{name_of(policy)}: `namespaceSelector: {{}}` alone admits every pod of every namespace")
                in_namespace = namespace is None or (ns is not None and _names_namespace(ns, namespace))
                right_pods = pod_labels is None or (isinstance(pods, Mapping) and selector_matches(pods, {
                    str(k): str(v) for k, v in pod_labels.items()}))
                if in_namespace and right_pods and (namespace is not None or pod_labels is not None):
                    matched = True
    if namespace is not None or pod_labels is not None:
        if not matched:
            problems.append("no single `from` item admits "
                            + " and ".join(filter(None, [f"namespace {namespace}" if namespace else "",
                                                         f"pods {pod_labels}" if pod_labels else ""])))
    if problems:
        return 0.0, problems[:4]
    return 1.0, [f"{len(policies)} NetworkPolicy object(s) admit only the peers asked for"]
