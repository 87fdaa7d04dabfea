"""Tasks with a reference and no rubric: checks derived from the reference (issue 21, item 2), as a user meets them:
a wrong value the question fixes costs reward, a free mark leaves a value open, `tasks show` prints the checks,
a hand-written rubric wins, and a free mark on a line without a value is a one-line error.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from core.rewards import score
from core.rewards.rubric.derived import FreeMarkError, command_pattern, derive_rubric
from tests.conftest import REPO, assert_user_error, run_cli

EXAMPLE = REPO / "docs" / "examples" / "tasks-derived.yaml"


def _task(desc: str, reference: str, **extra) -> dict:
    return {"id": "t", "type": "kubernetes", "desc": desc, "expected_outputs": ["a manifest"],
            "reference_answer": reference, **extra}


def _yaml(body: str) -> str:
    return f"Here it is.\n\n```yaml\n{body.strip()}\n```\n"


def _example():
    from tasks import load_tasks

    (task,) = load_tasks([EXAMPLE])
    return task


def _rubric_score(answer: str, task) -> float:
    result = score(answer, task, validators=False)
    assert result.rubric["derived"] is True
    return result.rubric["score"]


def test_a_value_the_question_fixes_is_checked_on_the_users_own_task():
    task = _example()
    reference = task.reference_answer
    assert _rubric_score(reference, task) == 1.0
    for old, new in (("nginx:1.25", "nginx:1.24"), ("replicas: 3", "replicas: 4"), ("containerPort: 8080", "containerPort: 80"),
                     ("tier: frontend", "tier: backend")):
        wrong = reference.replace(old, new, 1)
        result = score(wrong, task, validators=False)
        assert result.final_reward < score(reference, task, validators=False).final_reward, old
        failed = [c for c in result.rubric["criteria"] if c["score"] < 1]
        assert [c["id"] for c in failed] == ["deployment-web-values"], old


def test_a_free_mark_leaves_the_value_open():
    desc = "Run `api` with 3 replicas and the image registry.example.com/api:2.1."
    body = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api{mark}
spec:
  replicas: 3{mark}
  template:
    spec:
      containers:
        - image: registry.example.com/api:2.1
"""
    marked = _task(desc, _yaml(body.format(mark="  # *")))
    plain = _task(desc, _yaml(body.format(mark="")))
    other = _yaml(body.format(mark="").replace("replicas: 3", "replicas: 5").replace("name: api", "name: api-v2"))
    assert _rubric_score(other, marked) == 1.0  # name and replicas are free
    assert _rubric_score(other, plain) < 1.0
    checks = json.dumps(derive_rubric(marked["reference_answer"], desc))
    assert "replicas" not in checks and "metadata.name" not in checks and "registry.example.com/api:2.1" in checks


def test_every_document_of_a_multi_document_block_gets_its_own_checks():
    desc = "Expose the `shop` Deployment (port 8080) through a Service `shop` on port 80."
    reference = _yaml("""
apiVersion: apps/v1
kind: Deployment
metadata: {name: shop}
spec:
  template:
    spec:
      containers: [{name: shop, ports: [{containerPort: 8080}]}]
---
apiVersion: v1
kind: Service
metadata: {name: shop}
spec:
  ports: [{port: 80, targetPort: 8080}]
""")
    task = _task(desc, reference)
    ids = [c["id"] for c in derive_rubric(reference, desc)]
    assert {"deployment-shop-present", "deployment-shop-values", "service-shop-present", "service-shop-values"} <= set(ids)
    without_service = reference.split("---")[0] + "```\n"
    result = score(without_service, task, validators=False)
    failed = {c["id"] for c in result.rubric["criteria"] if c["score"] < 1}
    assert failed == {"service-shop-present", "service-shop-values"}
    # the Service's port is checked on the Service: moving 80 to the Deployment does not pass
    moved = reference.replace("port: 80,", "port: 81,")
    assert _rubric_score(moved, task) < 1.0


def test_shell_commands_are_checked_by_program_subcommand_flags_and_fixed_values():
    desc = "Scale the `web` Deployment in namespace `shop` to 5 replicas and wait for the rollout."
    reference = ("```bash\nset -euo pipefail\necho scaling\nkubectl scale deployment web --replicas=5 -n shop\n"
                 "kubectl rollout status deployment/web -n shop --timeout=120s\n```\n")
    task = _task(desc, reference)
    (criterion,) = derive_rubric(reference, desc)
    patterns = criterion["check"]["shell"]
    assert patterns == ["kubectl scale deployment web --replicas=5 -n=shop",
                        "kubectl rollout status deployment/web -n=shop --timeout"]  # echo and set are glue
    assert _rubric_score(reference, task) == 1.0
    assert _rubric_score(reference.replace("--replicas=5", "--replicas=4"), task) < 1.0
    assert _rubric_score(reference.replace("-n shop", "-n staging", 1), task) < 1.0
    assert _rubric_score(reference.replace("--timeout=120s", "--timeout=5m"), task) == 1.0  # not fixed by the question
    assert command_pattern(("grep", "-q", "web"), desc) is None


def test_a_hand_written_rubric_wins_over_derived_checks():
    from tasks import get_task

    task = get_task("k8s-001")
    assert task.rubric and task.reference_answer
    result = score(task.reference_answer, task, validators=False)
    assert result.rubric["derived"] is False
    assert [c["id"] for c in result.rubric["criteria"]] == [c["id"] for c in task.rubric]
    shown = run_cli("tasks", "show", "k8s-001", "--json")
    assert shown.returncode == 0 and "derived_rubric" not in json.loads(shown.stdout)


def test_a_task_with_nothing_to_derive_keeps_the_six_dimensions():
    task = _task("Explain blue-green deployments.", "Blue-green keeps two environments and switches traffic.")
    result = score("Two environments, one switch of traffic.", task, validators=False)
    assert result.rubric["score"] is None and result.rubric["derived"] is False


def test_tasks_show_prints_the_derived_checks_of_a_user_task_file():
    shown = run_cli("tasks", "show", "web-deploy", "--tasks", str(EXAMPLE))
    assert shown.returncode == 0, shown.stderr
    assert "Checks derived from the reference" in shown.stdout
    assert "deployment-web-values" in shown.stdout
    assert "spec.template.spec.containers[].image | [?@ == 'nginx:1.25']" in shown.stdout
    as_json = run_cli("tasks", "show", "web-deploy", "--tasks", str(EXAMPLE), "--json")
    derived = json.loads(as_json.stdout)["derived_rubric"]
    assert [c["id"] for c in derived] == ["deployment-web-present", "deployment-web-values"]


@pytest.mark.parametrize("line, fragment", [
    ("spec:  # *", "holds no value"),
    ("kind: Deployment  # *", "cannot be free"),
])
def test_a_free_mark_on_a_line_without_a_value_is_a_one_line_error(tmp_path: Path, line: str, fragment: str):
    text = EXAMPLE.read_text(encoding="utf-8")
    key = line.split(":")[0] + ":"
    bad = re.sub(rf"^(\s*){re.escape(key)}.*$", lambda m: m.group(1) + line, text, count=1, flags=re.M)
    assert bad != text
    path = tmp_path / "bad.yaml"
    path.write_text(bad, encoding="utf-8")
    error = assert_user_error(run_cli("tasks", "show", "web-deploy", "--tasks", str(path)), fragment, "bad.yaml")
    assert "reference_answer" in error


def test_a_free_mark_in_a_shell_block_is_refused():
    reference = "```bash\nkubectl scale deployment web --replicas=5  # *\n```\n"
    with pytest.raises(FreeMarkError, match="YAML values only"):
        derive_rubric(reference, "Scale web to 5.")


def test_the_worked_example_of_the_docs_is_the_example_file():
    docs = (REPO / "docs" / "tasks.md").read_text(encoding="utf-8")
    section = docs.split("## Tasks without a rubric: checks derived from the reference", 1)[1]
    block = re.search(r"````yaml\n(.*?)````", section, re.S).group(1)  # four backticks: it holds a fence
    assert block == EXAMPLE.read_text(encoding="utf-8")
    assert _example().id == "web-deploy"


def test_a_name_the_question_fixes_must_stand_whole_and_as_often_as_in_the_reference():
    desc = "Write an alert for the `cart-api` job: its 5xx ratio over 5 minutes above 2% pages."
    body = """
groups:
  - name: cart-api
    rules:
      - alert: CartApiErrors
        expr: sum(rate(http_requests_total{job="cart-api",code=~"5.."}[5m])) / sum(rate(http_requests_total{job="cart-api"}[5m])) > 0.02
        labels: {severity: page}
"""
    task = _task(desc, _yaml(body), type="observability")
    reference = task["reference_answer"]
    assert _rubric_score(reference, task) == 1.0
    other_job = reference.replace('job="cart-api"', 'job="cart-api-v2"')  # another job that holds the name
    assert _rubric_score(other_job, task) < 1.0
    one_of_two = reference.replace('job="cart-api"}', 'job="payments"}')  # the denominator counts another job
    assert _rubric_score(one_of_two, task) < 1.0
    assert score(one_of_two, task, validators=False).final_reward < score(reference, task, validators=False).final_reward
    spaced = reference.replace('{job="cart-api",code', '{ job = "cart-api", code')  # honest spelling differences pass
    assert _rubric_score(spaced, task) == 1.0


def test_a_shell_variable_with_a_fixed_value_is_read_where_it_is_used():
    desc = "Restart the `orders-api` Deployment in namespace `shop` and wait for the rollout."
    reference = ("```bash\nNS=shop\nDEPLOY=orders-api\nkubectl -n \"$NS\" rollout restart deployment/$DEPLOY\n"
                 "kubectl -n \"$NS\" rollout status \"deployment/${DEPLOY}\" --timeout=120s\n```\n")
    task = _task(desc, reference)
    (criterion,) = derive_rubric(reference, desc)
    assert "kubectl rollout restart deployment/orders-api -n=shop" in criterion["check"]["shell"]
    assert _rubric_score(reference, task) == 1.0
    written_out = ("```bash\nkubectl rollout restart deployment/orders-api -n shop\n"
                   "kubectl rollout status deployment/orders-api -n shop --timeout=5m\n```\n")
    assert _rubric_score(written_out, task) == 1.0  # the same commands without variables
    for old, new in (("NS=shop", "NS=staging"), ("DEPLOY=orders-api", "DEPLOY=orders-apx")):
        wrong = reference.replace(old, new)
        assert score(wrong, task, validators=False).final_reward < score(reference, task, validators=False).final_reward, old
    # a variable set twice (or in a loop) has no one value: it is left as written
    twice = reference.replace("NS=shop\n", "NS=shop\nNS=staging\n")
    assert _rubric_score(twice, task) < 1.0


def test_a_short_flag_asked_with_its_value_needs_that_value():
    from core.rewards.rubric.checks import _has_flag

    assert _has_flag(("kubectl", "get", "pods", "-n", "prod"), "-n=prod")
    assert _has_flag(("kubectl", "get", "pods", "-n=prod"), "-n=prod")
    assert _has_flag(("kubectl", "get", "pods", "-nprod"), "-n=prod")
    assert not _has_flag(("kubectl", "get", "pods", "-n", "staging"), "-n=prod")
    assert _has_flag(("curl", "-fsSLk", "https://x"), "-k")  # a flag without a value still reads short groups
    desc = "List the pods of namespace `prod`."
    reference = "```bash\nkubectl get pods -n=prod\n```\n"
    task = _task(desc, reference)
    assert _rubric_score("```bash\nkubectl get pods -n prod\n```\n", task) == 1.0
    assert _rubric_score("```bash\nkubectl get pods -n staging\n```\n", task) < 1.0


def test_a_short_name_the_question_writes_as_code_is_checked_inside_an_expression():
    desc = "We have `http_requests_total` (labels `service`, `code`). Record the 5xx ratio of the checkout service."
    body = """
groups:
  - name: slo
    rules:
      - record: service:errors:ratio5m
        expr: sum(rate(http_requests_total{service="checkout",code=~"5.."}[5m])) / sum(rate(http_requests_total{service="checkout"}[5m]))
"""
    task = _task(desc, _yaml(body), type="observability")
    reference = task["reference_answer"]
    assert _rubric_score(reference, task) == 1.0
    other_label = reference.replace('code=~"5.."', 'status=~"5.."')  # `code` is the label the question names
    assert score(other_label, task, validators=False).final_reward < score(reference, task, validators=False).final_reward


def test_a_name_written_with_its_kind_meets_a_shell_pattern():
    desc = "Roll back `orders-api` to its previous version."
    task = _task(desc, "```bash\nkubectl rollout undo deploy orders-api\n```\n")
    assert derive_rubric(task["reference_answer"], desc)[0]["check"]["shell"] == ["kubectl rollout undo orders-api"]
    assert _rubric_score("```bash\nkubectl rollout undo deploy/orders-api\n```\n", task) == 1.0
    assert _rubric_score("```bash\nkubectl rollout undo deploy/orders-api-v2\n```\n", task) < 1.0
