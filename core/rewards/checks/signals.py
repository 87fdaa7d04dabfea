"""The rubric: which phrases are evidence of automation, reliability, security, observability and
documentation, and the tolerant matcher for a task's expected outputs.

Each signal counts once per answer (distinct signals, not mentions) and only in substantive segments.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter
from functools import lru_cache
from itertools import accumulate

from core.rewards.parse.text import Segment, phrase_key, stem

# dimension -> signal name -> (weight, phrases). Phrases are written naturally; they are normalised with
# the same tokenizer as the answer, so "readinessProbe", "readiness probe" and "readiness-probes" meet.
RUBRIC: dict[str, dict[str, tuple[float, tuple[str, ...]]]] = {
    "automation": {
        "ci_pipeline": (1.0, ("GitHub Actions", "github actions", "GitLab CI", "gitlab-ci", "Jenkinsfile", "CI pipeline",
                              "CI/CD", "pipeline", "workflow", "Tekton", "CircleCI", "Buildkite", "Azure Pipelines")),
        "gitops": (1.0, ("GitOps", "Argo CD", "ArgoCD", "Flux", "ApplicationSet", "pull request", "merge request",
                         "code review", "version control")),
        "infrastructure_as_code": (1.0, ("Terraform", "OpenTofu", "Pulumi", "CloudFormation", "AWS CDK", "Crossplane",
                                         "Bicep", "infrastructure as code", "terraform plan", "terraform apply",
                                         "Terraform module")),
        "config_management": (0.8, ("Ansible", "playbook", "Helm", "Kustomize", "helmfile", "overlay", "Chef", "Puppet")),
        "scripted": (0.8, ("script", "Makefile", "make target", "automation", "automate", "automated")),
        "scheduled": (0.7, ("CronJob", "cron", "systemd timer", "OnCalendar", "scheduled", "schedule")),
        "idempotent": (1.0, ("idempotent", "idempotency", "safe to re-run", "safe to rerun", "converge")),
        "dry_run": (0.8, ("dry run", "dry-run", "check mode", "what-if", "plan output", "kubectl diff", "helm diff")),
        "autoscaling": (0.7, ("autoscaler", "autoscaling", "HorizontalPodAutoscaler", "HPA", "KEDA", "Karpenter",
                              "scale to zero", "ScaledObject")),
        "policy_as_code": (0.8, ("policy as code", "OPA", "Gatekeeper", "Kyverno", "conftest", "Sentinel",
                                 "admission controller")),
        "automated_tests": (0.8, ("unit test", "integration test", "smoke test", "test stage", "promtool test",
                                 "terraform validate", "kubeconform", "lint", "shellcheck", "tflint")),
        "artifacts": (0.6, ("container registry", "artifact", "build and push", "image tag", "release pipeline")),
        "progressive_delivery": (0.7, ("Argo Rollouts", "Flagger", "canary", "blue/green", "blue-green", "setWeight")),
        "remote_state": (0.6, ("remote state", "state lock", "state locking", "DynamoDB lock", "backend \"s3\"")),
    },
    "reliability": {
        "probes": (1.0, ("readinessProbe", "livenessProbe", "startupProbe", "health check", "healthcheck", "healthz",
                         "readyz", "readiness", "liveness")),
        "retries_backoff": (1.0, ("retry", "retries", "exponential backoff", "backoff", "jitter", "Retry-After")),
        "timeouts_breakers": (0.8, ("timeout", "circuit breaker", "outlier detection", "deadline", "bulkhead")),
        "redundancy": (1.0, ("replicas", "multi-AZ", "availability zone", "high availability", "redundant", "redundancy",
                             "topologySpreadConstraints", "podAntiAffinity", "anti-affinity", "standby", "multi-region")),
        "disruption_budget": (1.0, ("PodDisruptionBudget", "PDB", "maxUnavailable", "minAvailable", "maxSurge")),
        "rollback": (1.0, ("rollback", "roll back", "rollout undo", "revert", "failback", "previous version")),
        "backups": (1.0, ("backup", "snapshot", "point-in-time recovery", "PITR", "restore", "WAL archiving", "Velero")),
        "recovery_objectives": (0.8, ("RPO", "RTO", "recovery point", "recovery time")),
        "failover": (0.8, ("failover", "fail over", "promote", "switchover", "replication", "replica")),
        "graceful_shutdown": (0.8, ("graceful shutdown", "SIGTERM", "preStop", "terminationGracePeriodSeconds",
                                    "connection draining", "drain")),
        "load_protection": (0.8, ("rate limit", "load shedding", "backpressure", "throttle", "throttling",
                                  "concurrency limit", "dead letter queue", "DLQ")),
        "progressive_rollout": (0.8, ("canary", "rolling update", "blue/green", "feature flag", "gradual", "progressive",
                                      "staging", "staged rollout", "low-traffic window", "maintenance window",
                                      "one at a time", "pilot")),
        "resource_guarantees": (0.8, ("resource requests", "resources requests", "resources limits", "memory limit", "cpu limit",
                                      "ResourceQuota", "LimitRange", "PriorityClass", "headroom", "capacity")),
        "resilience_testing": (0.8, ("chaos", "game day", "failure injection", "DR drill", "restore test", "load test")),
        "idempotent_operations": (0.6, ("idempotency key", "idempotent", "exactly once", "deduplication")),
    },
    "security": {
        "least_privilege": (1.0, ("least privilege", "least-privilege", "RBAC", "RoleBinding", "ClusterRole",
                                  "IAM role", "IAM policy", "minimal permissions", "read-only", "ServiceAccount",
                                  "permissions")),
        "secrets_management": (1.0, ("secrets manager", "Secrets Manager", "Vault", "sealed secrets", "External Secrets",
                                     "secretKeyRef", "secretRef", "Parameter Store", "SOPS", "KMS", "Kubernetes Secret",
                                     "docker secrets", "secrets file", "gitignore", "git-ignored", "never committed",
                                     "not committed")),
        "transport_encryption": (1.0, ("TLS", "mTLS", "HTTPS only", "redirect to HTTPS", "certificate", "cert-manager", "HSTS",
                                       "encryption in transit")),
        "encryption_at_rest": (0.8, ("encryption at rest", "encrypted", "encrypt", "KMS key", "SSE-KMS")),
        "scanning_supply_chain": (1.0, ("Trivy", "Grype", "Snyk", "image scan", "vulnerability", "CVE", "SBOM", "cosign",
                                        "signature", "Dependabot", "SAST", "scan")),
        "non_root": (1.0, ("runAsNonRoot", "non-root", "nonroot", "readOnlyRootFilesystem", "allowPrivilegeEscalation",
                           "drop ALL", "capabilities", "seccompProfile", "Pod Security", "restricted")),
        "network_segmentation": (1.0, ("NetworkPolicy", "default deny", "security group", "firewall", "WAF", "allowlist",
                                       "private subnet", "egress", "ingress rule", "PeerAuthentication", "not exposed",
                                       "127.0.0.1", "localhost only", "private IP", "private endpoint")),
        "audit": (0.8, ("audit log", "CloudTrail", "audit", "access log")),
        "identity_federation": (0.8, ("OIDC", "workload identity", "IRSA", "short-lived credentials", "assume role",
                                      "AssumeRole", "SSO", "MFA")),
        "rotation": (0.7, ("rotate", "rotation", "revoke", "expiry")),
        "pinning": (0.6, ("digest", "sha256", "pinned", "pin the version", "immutable tag")),
        "policy_enforcement": (0.6, ("Kyverno", "Gatekeeper", "admission", "SCP", "service control policy", "policy as code")),
    },
    "observability": {
        "metrics": (1.0, ("Prometheus", "metrics", "metric", "CloudWatch", "Datadog", "StatsD", "exporter", "PromQL",
                          "ServiceMonitor", "PodMonitor")),
        "logging": (1.0, ("logs", "logging", "Loki", "Elasticsearch", "Fluent Bit", "Fluentd", "structured logs",
                          "log group", "journalctl")),
        "tracing": (1.0, ("tracing", "traces", "trace", "OpenTelemetry", "Jaeger", "Tempo", "X-Ray")),
        "alerting": (1.0, ("alert", "alerts", "alerting", "Alertmanager", "PagerDuty", "paged", "on-call", "PrometheusRule",
                           "notification", "Opsgenie")),
        "slo": (1.0, ("SLO", "SLI", "error budget", "burn rate", "availability target")),
        "dashboards": (0.8, ("Grafana", "dashboard", "Kibana")),
        "golden_signals": (0.8, ("latency", "error rate", "saturation", "p99", "p95", "percentile", "throughput",
                                 "5xx", "histogram_quantile")),
        "recording_rules": (0.6, ("recording rule", "recording rules", "PromQL", "LogQL")),
        "synthetic_monitoring": (0.6, ("synthetic", "blackbox exporter", "uptime check", "probe_success", "canary check")),
        "correlation": (0.6, ("trace id", "correlation id", "request id", "exemplar")),
        "monitoring": (0.6, ("monitor", "monitoring", "observability", "telemetry")),
    },
    "documentation": {
        "rationale": (1.0, ("because", "so that", "the reason", "why", "trade-off", "tradeoff", "instead of",
                            "rather than", "otherwise", "which means", "this avoids", "this prevents")),
        "verification": (1.0, ("verify", "verification", "validate", "confirm", "check that", "smoke test", "expected output",
                               "should show", "must show")),
        "rollback_plan": (1.0, ("rollback", "roll back", "revert", "undo", "back out")),
        "runbook": (0.8, ("runbook", "README", "documentation", "ADR", "postmortem", "playbook", "wiki", "document")),
        "assumptions": (0.6, ("assume", "assumption", "prerequisite", "requirement", "constraint")),
        "risks": (0.6, ("risk", "caveat", "limitation", "watch out", "pitfall", "note that", "beware")),
        "ordered_steps": (0.6, ("step", "first", "then", "finally", "phase", "before", "after")),
        "ownership": (0.5, ("owner", "on-call", "approve", "approval", "sign-off", "team")),
    },
}

DEPTH_BONUS = 0.3
SATURATION = {"automation": 2.7, "reliability": 2.7, "security": 2.7, "observability": 2.7, "documentation": 2.3}

# Phrase alternatives for expected outputs, keyed by the normalised phrase.
_SYNONYMS_RAW = {
    "PodDisruptionBudget": ("PDB",),
    "HorizontalPodAutoscaler": ("HPA",),
    "VerticalPodAutoscaler": ("VPA",),
    "rollback": ("roll back", "rollout undo", "revert"),
    "roll back": ("rollback", "rollout undo", "revert"),
    "CI/CD": ("pipeline", "continuous delivery"),
    "Kubernetes": ("k8s",),
    "Terraform": ("tf", "OpenTofu"),
    "secrets manager": ("Secrets Manager", "Vault", "secret store"),
    "least privilege": ("least-privilege", "minimal permissions"),
    "mTLS": ("mutual TLS",),
    "SLO": ("service level objective",),
    "SLI": ("service level indicator",),
    "postmortem": ("post-mortem", "incident review"),
    "dry run": ("dry-run", "--dry-run", "plan"),
    "exponential backoff": ("backoff",),
    "non-root": ("nonroot", "runAsNonRoot", "run as non root"),
    "multi-stage build": ("multi stage", "AS build", "builder stage"),
    "point-in-time recovery": ("PITR",),
}
SYNONYMS: dict[tuple[str, ...], tuple[tuple[str, ...], ...]] = {
    phrase_key(k): tuple(phrase_key(v) for v in vs) for k, vs in _SYNONYMS_RAW.items()
}


def _build_index() -> tuple[dict[str, list[tuple[tuple[str, ...], str, str]]], dict[tuple[str, str], float]]:
    index: dict[str, list[tuple[tuple[str, ...], str, str]]] = {}
    weights: dict[tuple[str, str], float] = {}
    for dimension, signals in RUBRIC.items():
        for name, (weight, phrases) in signals.items():
            weights[(dimension, name)] = weight
            for phrase in phrases:
                key = phrase_key(phrase)
                if key:
                    index.setdefault(key[0], []).append((key, dimension, name))
    return index, weights


_INDEX, _WEIGHTS = _build_index()
_FIRST_TOKENS = frozenset(_INDEX)
_SINGLE = frozenset(first for first, entries in _INDEX.items() if any(len(k) == 1 for k, _, _ in entries))
# Per first token: its rubric entries with the " a b " needle of multi-token phrases (None for one token),
# and the distinct multi-token needles with their lengths.
_ENTRIES = {first: [(" " + " ".join(k) + " " if len(k) > 1 else None, k, d, n) for k, d, n in entries]
            for first, entries in _INDEX.items()}
_LONGER = {first: sorted({(" " + " ".join(k) + " ", len(k)) for k, _, _ in entries if len(k) > 1})
           for first, entries in _INDEX.items()}
_SINGLE_HITS = {first: [(d, n, k) for k, d, n in entries] for first, entries in _INDEX.items() if not _LONGER[first]}


def rubric_keywords() -> list[str]:
    """Every phrase of the rubric (the raw material of a keyword salad, for tests and docs)."""
    return [p for signals in RUBRIC.values() for _, phrases in signals.values() for p in phrases]


@lru_cache(maxsize=256)
def _one_line(text: str) -> tuple[str, str]:
    """The text on one line, and lowercased (cached: several signals quote the same segment)."""
    text = " ".join(text.split())
    return text, text.lower()


def _snippet(text: str, key: tuple[str, ...] = (), limit: int = 90) -> str:
    """A short quote of `text`, around the first word of the matched phrase when it can be found."""
    text, lower = _one_line(text)
    if len(text) <= limit:
        return text
    start = lower.find(key[0]) if key and not key[0].startswith("<") else -1
    start = 0 if start < 30 else start - 30
    quote = text[start : start + limit - 2]
    return ("…" if start else "") + quote + ("…" if start + limit - 2 < len(text) else "")


def match_signals(segment_tokens: list[str]) -> tuple[list[tuple[str, str, tuple[str, ...]]], int]:
    """(dimension, signal, phrase) for every rubric phrase in a token list (once per phrase), and about
    how many tokens the phrases cover (a phrase inside a longer matched phrase is not counted twice)."""
    firsts = _FIRST_TOKENS.intersection(segment_tokens)
    if not firsts:
        return [], 0
    if len(firsts) > 1:  # text order (of first occurrence): the same evidence in every process
        firsts = dict.fromkeys(filter(firsts.__contains__, segment_tokens))
    # list.count per first token is quadratic in a long code block: there, count all tokens at once
    tally = Counter(segment_tokens).__getitem__ if len(firsts) > 8 else segment_tokens.count
    joined = None
    hits: list[tuple[str, str, tuple[str, ...]]] = []
    covered = 0
    for first in firsts:
        longer = _LONGER[first]
        if not longer:  # only one-token phrases start here: all of them are in
            hits.extend(_SINGLE_HITS[first])
            covered += tally(first)
            continue
        if joined is None:
            joined = " " + " ".join(segment_tokens) + " "
        counts: dict[str, int] = {}
        inside = 0
        for needle, length in longer:
            times = counts[needle] = joined.count(needle)
            covered += times * length
            inside += times
        for needle, key, dimension, name in _ENTRIES[first]:
            if needle is None or counts[needle]:
                hits.append((dimension, name, key))
        if first in _SINGLE:
            covered += max(0, tally(first) - inside)
    return hits, min(covered, len(segment_tokens))


# What a valid code block is evidence of by itself: Terraform is infrastructure as code even when the
# prose never says so; a pipeline file is a pipeline.
CODE_SIGNALS = {
    "hcl": (("automation", "infrastructure_as_code"),),
    "shell": (("automation", "scripted"),),
    "dockerfile": (("automation", "artifacts"),),
    "python": (("automation", "scripted"),),
}
_YAML_SIGNALS = (
    (("jobs:", "steps:"), ("automation", "ci_pipeline")),
    (("stages:", "script:"), ("automation", "ci_pipeline")),
    (("apiVersion:", "kind:"), ("automation", "config_management")),
    (("hosts:", "tasks:"), ("automation", "config_management")),
)


# Good practice the code checks found (BlockReport.facts), by the words in the fact.
_FACT_SIGNALS = (
    ("non-root", ("security", "non_root")),
    ("pinned", ("security", "pinning")),
    ("sets resources", ("reliability", "resource_guarantees")),
    ("probes", ("reliability", "probes")),
    ("health checks", ("reliability", "probes")),
    ("stops on errors", ("automation", "scripted")),
)


def annotate(segments: list[Segment]) -> None:
    """Attach the rubric matches to every segment (once per answer), plus what valid code blocks show."""
    for segment in segments:
        segment.hits, segment.covered = match_signals(segment.tokens)
        block = segment.block
        if block is None or not block.valid:
            continue
        for dimension, name in CODE_SIGNALS.get(block.kind, ()):
            segment.hits.append((dimension, name, (f"<{block.kind} block>",)))
        for fact in block.facts:
            for needle, (dimension, name) in _FACT_SIGNALS:
                if needle in fact:
                    segment.hits.append((dimension, name, (f"<{fact}>",)))
        if block.kind == "yaml":
            for needles, (dimension, name) in _YAML_SIGNALS:
                if all(n in segment.text for n in needles):
                    segment.hits.append((dimension, name, ("<yaml block>",)))


def score_dimensions(segments: list[Segment]) -> tuple[dict[str, float], dict[str, list[str]]]:
    """Score the five rubric dimensions from substantive segments: distinct signals, saturating."""
    found: dict[str, dict[str, tuple[str, tuple[str, ...]]]] = {d: {} for d in RUBRIC}
    phrases: dict[tuple[str, str], set[tuple[str, ...]]] = {}
    for segment in segments:
        if not segment.substantive:
            continue
        for dimension, name, key in segment.hits:
            found[dimension].setdefault(name, (segment.text, key))
            phrases.setdefault((dimension, name), set()).add(key)
    scores: dict[str, float] = {}
    evidence: dict[str, list[str]] = {}
    for dimension, hits in found.items():
        # A signal backed by several different phrases (readiness and liveness probes) is worth a bit more.
        total = sum(_WEIGHTS[(dimension, name)] * (1 + DEPTH_BONUS * (min(len(phrases[(dimension, name)]), 3) - 1))
                    for name in hits)
        scores[dimension] = 1.0 - math.exp(-total / SATURATION[dimension])
        evidence[dimension] = [f"{name}: \"{_snippet(text, key)}\"" for name, (text, key) in hits.items()]
    return scores, evidence


@lru_cache(maxsize=4096)
def expected_forms(expected: str) -> tuple[tuple[str, ...], ...]:
    """The token tuples an expected output is recognised by: itself and its synonyms."""
    key = phrase_key(expected)
    return (key, *SYNONYMS.get(key, ()))


_FILLER = frozenset(stem(w) for w in ("a", "an", "the", "of", "to", "for", "and", "or", "in", "on", "with", "by"))


def _joined(segment: Segment) -> str:
    """The segment's tokens as " a b c " so a phrase is found with one substring search."""
    if segment.joined is None:
        segment.joined = " " + " ".join(segment.tokens) + " "
    return segment.joined


class _Haystack:
    """Segments' tokens concatenated as " a b c |" so a phrase is found with one substring search, and
    mapped back to the segment it came from."""

    def __init__(self, segments: list[Segment]) -> None:
        self.segments = segments
        joined = [_joined(segment) for segment in segments]
        self.offsets = list(accumulate([len(part) + 1 for part in joined], initial=0))[:-1]
        self.text = "|".join([*joined, ""])

    def find(self, form: tuple[str, ...]) -> Segment | None:
        if not form:
            return None
        at = self.text.find(" " + " ".join(form) + " ")
        return None if at < 0 else self.segments[bisect_right(self.offsets, at) - 1]


def expected_credit(expected: str, counted: _Haystack) -> tuple[float, Segment | None]:
    """Credit in [0, 1] for one expected output and the segment that earned it.

    1.0 for the phrase (or a synonym) verbatim after normalisation; 0.8 when all its content words
    appear close together in one segment (0.6 when apart); half the share of its content words found
    in one segment otherwise (when at least half are there).
    """
    forms = expected_forms(expected)
    for form in forms:
        segment = counted.find(form)
        if segment is not None:
            return 1.0, segment
    content = [t for t in forms[0] if t not in _FILLER]
    needles = [f" {t} " for t in content]
    if not content or not any(needle in counted.text for needle in needles):
        return 0.0, None
    best, where = 0.0, None
    for segment in counted.segments:
        joined = _joined(segment)
        present = sum(needle in joined for needle in needles)
        if present < len(content) / 2:
            continue
        share = present / len(content)
        if share == 1.0:
            positions = sorted(segment.tokens.index(t) for t in content)
            credit = 0.8 if positions[-1] - positions[0] <= 2 * len(content) + 4 else 0.6
        elif len(content) >= 2:
            credit = 0.5 * share
        else:
            credit = 0.0
        if credit > best:
            best, where = credit, segment
    return best, where


def score_expected(expected_outputs: list[str], segments: list[Segment]) -> tuple[float, list[str], list[str]]:
    """Mean credit over the expected outputs; evidence per output; the outputs found only in non-prose."""
    if not expected_outputs:
        return 1.0, ["the task lists no expected outputs"], []
    credits, evidence, unsupported = [], [], []
    counted = _Haystack([s for s in segments if s.substantive or s.supported])
    bare = None
    for expected in expected_outputs:
        credit, where = expected_credit(expected, counted)
        credits.append(credit)
        if where is not None:
            evidence.append(f"{expected} ({credit:.1f}): \"{_snippet(where.text, expected_forms(expected)[0])}\"")
        else:
            evidence.append(f"{expected}: missing")
            if bare is None:
                bare = _Haystack([s for s in segments if not s.substantive and not s.supported])
            if any(bare.find(form) is not None for form in expected_forms(expected)):
                unsupported.append(expected)
    return sum(credits) / len(credits), evidence, unsupported
