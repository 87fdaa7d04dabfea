"""The rubric's relation checks (core/rewards/rubric/relations.py), decisive criteria and mutants: each relation
holds on a correct artifact and fails on the one wrong decision it exists to catch."""

from __future__ import annotations

import textwrap

import pytest

from core.errors import UserError
from core.rewards import score
from core.rewards.parse.artifacts import Artifacts
from core.rewards.parse.text import analyse
from core.rewards.rubric import DECISIVE_CAP, RubricError, compile_check
from core.rewards.rubric.relations import RELATIONS, duration_seconds, scaled_value, selector_matches, thresholds


def run(name: str, answer: str, **arguments) -> tuple[float, list[str]]:
    return RELATIONS[name](Artifacts(analyse(textwrap.dedent(answer))), **arguments)


def yaml_answer(body: str) -> str:
    return "Apply this:\n\n```yaml\n" + textwrap.dedent(body).strip() + "\n```\n"


DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: cart-api}
spec:
  replicas: 4
  strategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 0, maxSurge: 1}}
  selector: {matchLabels: {app: cart-api}}
  template:
    metadata: {labels: {app: cart-api, tier: web}}
    spec:
      containers:
        - name: api
          image: cart-api:2.8.1
          ports: [{containerPort: 3000}]
          readinessProbe: {httpGet: {path: /readyz, port: 3000}}
          livenessProbe: {httpGet: {path: /healthz, port: 3000}}
"""


def with_deployment(extra: str, deployment: str = DEPLOYMENT) -> str:
    return yaml_answer(deployment + "---\n" + textwrap.dedent(extra))


# ---- selectors ------------------------------------------------------------------------------------------


def test_label_selectors_follow_kubernetes_semantics():
    labels = {"app": "cart-api", "tier": "web"}
    assert selector_matches({"app": "cart-api"}, labels)  # a Service's plain map
    assert selector_matches({"matchLabels": {"app": "cart-api"},
                             "matchExpressions": [{"key": "tier", "operator": "In", "values": ["web", "api"]}]}, labels)
    assert not selector_matches({"matchLabels": {"app": "cart"}}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["web"]}]}, labels)
    assert selector_matches({"matchExpressions": [{"key": "canary", "operator": "DoesNotExist"}]}, labels)
    assert selector_matches({}, labels)  # the empty selector selects every pod


def test_a_service_whose_selector_matches_no_pod_fails():
    good = "apiVersion: v1\nkind: Service\nmetadata: {name: cart-api}\nspec: {selector: {app: cart-api}, ports: [{port: 80}]}\n"
    assert run("selector_matches", with_deployment(good), kind="Service") == (1.0, [
        "Service/cart-api selects the pods of Deployment/cart-api"])
    value, evidence = run("selector_matches", with_deployment(good.replace("app: cart-api}", "app: cart}")), kind="Service")
    assert value == 0.0 and "selects no pod" in evidence[0]
    assert run("selector_matches", with_deployment(good), kind="Service", workload="other")[0] == 0.0


# ---- disruption budgets and rollouts --------------------------------------------------------------------


PDB = ("apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {{name: cart-api}}\nspec:\n  {field}\n"
       "  selector: {{matchLabels: {{app: cart-api}}}}\n")


@pytest.mark.parametrize(("field", "allowed"), [("minAvailable: 3", 1), ("maxUnavailable: 1", 1), ("minAvailable: '50%'", 2),
                                                 ("maxUnavailable: '25%'", 1), ("minAvailable: 4", 0),
                                                 ("minAvailable: '100%'", 0), ("maxUnavailable: 0", 0)])
def test_pdb_disruptions_allowed_use_the_documented_rounding(field, allowed):
    value, evidence = run("pdb_allows_disruption", with_deployment(PDB.format(field=field)))
    assert f"allows {allowed} disruption(s) of 4 pods" in evidence[0]
    assert value == (1.0 if allowed >= 1 else 0.0)


def test_a_pdb_that_selects_nothing_cannot_protect_anything():
    broken = PDB.format(field="minAvailable: 3").replace("app: cart-api}}", "app: checkout}}")
    value, evidence = run("pdb_allows_disruption", with_deployment(broken))
    assert value == 0.0 and "selects no workload" in evidence[0]
    assert run("pdb_allows_disruption", with_deployment(PDB.format(field="maxUnavailable: 2")), at_most=1)[0] == 0.0


def test_percentages_round_as_the_controllers_do():
    assert scaled_value("25%", 10, round_up=True) == 3 and scaled_value("25%", 10, round_up=False) == 2
    assert scaled_value(2, 10, round_up=True) == 2 and scaled_value("x%", 10, round_up=True) is None


@pytest.mark.parametrize(("strategy", "holds"), [
    ("{maxUnavailable: 0, maxSurge: 1}", True),
    ("{maxUnavailable: 0, maxSurge: 0}", False),        # can never progress
    ("{maxUnavailable: 2, maxSurge: 0}", False),        # only 2 of 4 available, the task needs 3
    ("{maxUnavailable: '25%', maxSurge: '25%'}", True),  # 25% of 4 rounds down to 1 unavailable: 3 stay
])
def test_a_rollout_progresses_and_keeps_the_capacity_asked_for(strategy, holds):
    deployment = DEPLOYMENT.replace("{maxUnavailable: 0, maxSurge: 1}", strategy)
    assert run("rollout_progresses", yaml_answer(deployment), min_available=3)[0] == (1.0 if holds else 0.0)


def test_recreate_never_keeps_capacity():
    deployment = DEPLOYMENT.replace("strategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 0, maxSurge: 1}}",
                                    "strategy: {type: Recreate}")
    assert run("rollout_progresses", yaml_answer(deployment), keep_full_capacity=True)[0] == 0.0


# ---- probes, HPA, values --------------------------------------------------------------------------------


def test_liveness_must_not_be_the_readiness_check_or_call_a_dependency():
    assert run("liveness_independent", yaml_answer(DEPLOYMENT), dependencies=["redis"])[0] == 1.0
    same = DEPLOYMENT.replace("livenessProbe: {httpGet: {path: /healthz", "livenessProbe: {httpGet: {path: /readyz")
    value, evidence = run("liveness_independent", yaml_answer(same))
    assert value == 0.0 and "is the readiness check" in evidence[0]
    redis = DEPLOYMENT.replace("livenessProbe: {httpGet: {path: /healthz, port: 3000}}",
                               "livenessProbe: {exec: {command: [redis-cli, ping]}}")
    assert run("liveness_independent", yaml_answer(redis), dependencies=["redis"])[0] == 0.0


def test_hpa_bounds():
    hpa = ("apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: cart-api}\n"
           "spec: {scaleTargetRef: {kind: Deployment, name: cart-api}, minReplicas: 3, maxReplicas: 12}\n")
    assert run("hpa_bounds", with_deployment(hpa), min_replicas=3)[0] == 1.0
    assert run("hpa_bounds", with_deployment(hpa.replace("maxReplicas: 12", "maxReplicas: 3")))[0] == 0.0
    assert run("hpa_bounds", with_deployment(hpa.replace("name: cart-api}, min", "name: cart}, min")))[0] == 0.0


def test_the_tasks_own_values_must_be_in_the_artifacts_not_only_in_prose():
    answer = with_deployment("apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n")
    assert run("values_present", answer, values=["cart-api", 3000, "shop"])[0] == 1.0
    prose = "We deploy cart-api on port 3000.\n\n" + yaml_answer(DEPLOYMENT.replace("cart-api", "web").replace("3000", "8080"))
    value, evidence = run("values_present", prose, values=["cart-api", 3000])
    assert value == 0.0 and evidence == ["cart-api: not in any artifact", "3000: not in any artifact"]


# ---- alerts, retention, RBAC, NetworkPolicy -------------------------------------------------------------


RULES = """\
groups:
  - name: checkout
    rules:
      - alert: CheckoutErrorRate
        expr: sum(rate(http_requests_total{code=~"5.."}[5m])) / sum(rate(http_requests_total[5m])) > 0.05
        for: 5m
        labels: {severity: page}
"""


def test_durations_and_thresholds_are_read_as_prometheus_does():
    assert duration_seconds("1h30m") == 5400 and duration_seconds("35d") == 35 * 86400 and duration_seconds("5x") is None
    assert thresholds("sum(rate(a[5m])) / sum(rate(b[5m])) > 14.4 * 0.001") == [(">", pytest.approx(0.0144))]
    assert thresholds("up == 0 and on() vector(1)") == [("==", 0.0)]


def test_an_alert_that_waits_longer_than_the_outage_never_fires():
    assert run("alert_for_within", yaml_answer(RULES), max="10m")[0] == 1.0
    assert run("alert_for_within", yaml_answer(RULES.replace("for: 5m", "for: 30m")), max="10m")[0] == 0.0
    assert run("alert_for_within", yaml_answer(RULES), max="10m", alert="^Latency")[0] == 0.0  # no such alert


def test_a_ratio_alert_compared_with_a_percentage_can_never_fire():
    assert run("alert_threshold", yaml_answer(RULES), low=0.001, high=0.5)[0] == 1.0
    value, evidence = run("alert_threshold", yaml_answer(RULES.replace("> 0.05", "> 5")), low=0.001, high=0.5)
    assert value == 0.0 and "> 5" in evidence[0]


def test_retention_in_the_tasks_units():
    hcl = ('Backups:\n\n```hcl\nresource "aws_db_instance" "main" {\n  backup_retention_period = 35\n}\n```\n')
    assert run("retention_days", hcl, min=35)[0] == 1.0
    assert run("retention_days", hcl.replace("= 35", "= 1"), min=35)[0] == 0.0
    assert run("retention_days", "Run `aws logs put-retention-policy --log-group-name app --retention-in-days 30` now.",
               min=30)[0] == 1.0
    assert run("retention_days", yaml_answer("storage:\n  tsdb:\n    retention: 15d\n"), min=30, key="retention")[0] == 0.0


def test_rbac_without_escalation_verbs():
    role = ("apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: deployer, namespace: shop}\n"
            "rules:\n  - apiGroups: [apps]\n    resources: [deployments]\n    verbs: [get, list, patch]\n")
    assert run("rbac_least_privilege", yaml_answer(role))[0] == 1.0
    value, evidence = run("rbac_least_privilege", yaml_answer(role.replace("patch]", "patch, escalate, bind]")))
    assert value == 0.0 and "escalate" in evidence[0]
    binding = "---\nkind: ClusterRoleBinding\nmetadata: {name: deployer}\n"
    assert run("rbac_least_privilege", yaml_answer(role + binding), namespaced=True)[0] == 0.0


POLICY = """\
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: db, namespace: data}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress:
    - from:
        - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: shop}}
          podSelector: {matchLabels: {app: cart-api}}
"""


def test_networkpolicy_peers_are_anded_within_one_item_and_ored_across_items():
    args = {"namespace": "shop", "pod_labels": {"app": "cart-api"}}
    assert run("networkpolicy_peers", yaml_answer(POLICY), **args)[0] == 1.0
    split = POLICY.replace("\n          podSelector:", "\n        - podSelector:")  # two items: OR, not AND
    value, evidence = run("networkpolicy_peers", yaml_answer(split), **args)
    assert value == 0.0 and "no single `from` item" in evidence[-1]
    every = POLICY.replace("{matchLabels: {kubernetes.io/metadata.name: shop}}", "{}").replace(
        "\n          podSelector: {matchLabels: {app: cart-api}}", "")
    value, evidence = run("networkpolicy_peers", yaml_answer(every))
    assert value == 0.0 and "every namespace" in evidence[0]


# ---- the format -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "message"), [
    ({"relation": "selector_match"}, "unknown relation 'selector_match'"),
    ({"relation": {"name": "pdb_allows_disruption", "replica": 3}}, "unknown argument 'replica'"),
    ({"relation": {"name": "alert_for_within"}}, "missing argument(s) max"),
    ({"relation": 3}, "relation takes a name"),
])
def test_relation_mistakes_in_a_rubric_are_named(spec, message):
    with pytest.raises(RubricError, match=message.replace("(", r"\(").replace(")", r"\)")):
        compile_check(spec, "rubric[0]")


TASK = {
    "id": "t-1", "type": "kubernetes", "desc": "Add health checks to the cart-api Deployment (port 3000, 4 replicas).",
    "expected_outputs": ["readinessProbe", "livenessProbe", "maxUnavailable"],
    "rubric": [
        {"id": "liveness-independent", "description": "The livenessProbe is not the readiness check.", "weight": 2,
         "decisive": True, "check": {"relation": "liveness_independent"}},
        {"id": "readiness", "description": "A readinessProbe gates traffic to the pods.", "weight": 2,
         "check": {"yaml": "spec.template.spec.containers[?readinessProbe]"}},
        {"id": "capacity", "description": "The rollout keeps full capacity during deploys.",
         "check": {"relation": {"name": "rollout_progresses", "keep_full_capacity": True}}},
        {"id": "port", "description": "The probes target the cart-api port 3000.",
         "check": {"relation": {"name": "values_present", "values": ["cart-api", 3000]}}},
    ],
}


def test_a_failed_decisive_criterion_caps_the_reward_whatever_else_holds():
    good = score(yaml_answer(DEPLOYMENT), TASK)
    assert good.rubric["capped_by"] is None and good.rubric["decisive_cap"] == 1.0
    wrong = score(yaml_answer(DEPLOYMENT.replace("path: /healthz", "path: /readyz")), TASK)
    assert wrong.rubric["capped_by"] == "liveness-independent"
    assert wrong.final_reward <= DECISIVE_CAP < good.final_reward
    assert [c["decisive"] for c in wrong.rubric["criteria"]] == [True, False, False, False]


def test_decisive_must_be_a_boolean():
    with pytest.raises(UserError, match="key 'decisive'"):
        score("x", {**TASK, "rubric": [{**TASK["rubric"][0], "decisive": "yes"}, *TASK["rubric"][1:]]})


def test_mutants_are_validated_against_the_reference(tmp_path):
    from tasks import validate_task_files

    reference = "Use this:\n\n" + yaml_answer(DEPLOYMENT)
    task = {**TASK, "difficulty": "easy", "reference_answer": reference, "mutants": [
        {"id": "liveness-is-readiness", "why": "Liveness calls the readiness check, so slow Redis restarts pods.",
         "edit": [{"find": "path: /healthz", "replace": "path: /readyz"}]},
        {"id": "not-there", "why": "An edit whose text the reference does not have.",
         "edit": [{"find": "path: /nowhere", "replace": "x"}]},
        {"id": "no-op", "why": "An edit that changes nothing at all in the text.",
         "edit": [{"find": "path: /healthz", "replace": "path: /healthz"}]},
        {"id": "x", "why": "short", "edit": []},
    ]}
    import yaml

    path = tmp_path / "tasks.yaml"
    path.write_text(yaml.safe_dump([task], sort_keys=False))
    problems = validate_task_files([path])
    assert any("'not-there'" in p and "not in the reference answer" in p for p in problems)
    assert any("'no-op'" in p and "unchanged" in p for p in problems)
    assert any("mutants[3]" in p and "key 'id'" in p for p in problems)
    assert any("mutants[3]" in p and "key 'why'" in p for p in problems)
    assert not any("liveness-is-readiness" in p for p in problems)
    assert all(p.startswith(f"{path}:") for p in problems)


def test_the_audit_scores_every_mutant_against_the_reference():
    from core.rewards.audit import apply_mutant, audit
    from tasks import Task

    reference = "Use this:\n\n" + yaml_answer(DEPLOYMENT) + "\nVerify with `kubectl rollout status deploy/cart-api`."
    mutant = {"id": "liveness-is-readiness", "why": "Liveness calls the readiness check, so slow Redis restarts pods.",
              "edit": [{"find": "path: /healthz", "replace": "path: /readyz"}]}
    assert "path: /healthz" not in apply_mutant(reference, mutant)
    task = Task(id="t-1", type="kubernetes", difficulty="easy", desc=TASK["desc"],
                expected_outputs=tuple(TASK["expected_outputs"]), reference_answer=reference,
                rubric=tuple(TASK["rubric"]), mutants=(mutant,))
    row = audit([task]).rows[0]
    assert row.mutants["liveness-is-readiness"] <= DECISIVE_CAP
    assert not any("mutant" in failure for failure in row.failures)
