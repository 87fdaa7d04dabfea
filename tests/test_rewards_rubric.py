"""The per-task rubric: every check kind passes, partly passes and fails where a reviewer would say so;
alternatives, forbidden patterns, substance rules and rubric validation (`tasks validate`).

Over 450 lines on purpose: each check kind's cases are whole answers written out, so a case reads as the text the
reward sees; the kinds share `one()` and the filler prose at the top.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import tasks
from core.rewards import score
from core.rewards.rubric import rubric_problems

FILLER = [
    {"id": "f1", "description": "Filler criterion one for the rubric size rule.", "weight": 0.1, "check": {"concept": ["zzyzx alpha"]}},
    {"id": "f2", "description": "Filler criterion two for the rubric size rule.", "weight": 0.1, "check": {"concept": ["zzyzx beta"]}},
    {"id": "f3", "description": "Filler criterion three for the rubric size rule.", "weight": 0.1, "check": {"concept": ["zzyzx gamma"]}},
]


def one(check: dict, answer: str, *, task_type: str = "kubernetes") -> dict:
    """The result of a single criterion with `check` on `answer` (the fillers never match)."""
    task = {"id": "t1", "type": task_type, "expected_outputs": ["x"],
            "rubric": [{"id": "crit", "description": "The criterion under test holds.", "weight": 10, "check": check}, *FILLER]}
    return score(answer, task, validators=False).rubric["criteria"][0]


DEPLOYMENT = """\
The rollout keeps capacity, and the probes gate traffic:

```yaml
apiVersion: apps/v1
kind: Deployment
metadata: {name: api}
spec:
  replicas: 3
  strategy: {rollingUpdate: {maxUnavailable: 0, maxSurge: 1}}
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers:
        - name: api
          image: registry.example.com/api:1.2.3
          readinessProbe: {httpGet: {path: /readyz, port: 8080}}
```
"""


# --- yaml (JMESPath) --------------------------------------------------------------------------------


def test_yaml_query_passes_partly_passes_and_fails():
    assert one({"yaml": "spec.template.spec.containers[?readinessProbe]"}, DEPLOYMENT)["status"] == "passed"
    partial = one({"yaml": ["spec.template.spec.containers[?readinessProbe]", "spec.template.spec.containers[?livenessProbe]"]},
                  DEPLOYMENT)
    assert partial["status"] == "partial" and partial["score"] == 0.5
    assert "no YAML document has" in partial["evidence"][1]
    assert one({"yaml": "spec.strategy.rollingUpdate.maxUnavailable == `0`"}, DEPLOYMENT)["status"] == "passed"
    assert one({"yaml": "kind=='StatefulSet'"}, DEPLOYMENT)["status"] == "failed"


def test_yaml_in_prose_or_a_broken_block_does_not_count():
    prose = "Add a readinessProbe to the containers of the Deployment spec template so traffic waits for warm pods."
    assert one({"yaml": "spec.template.spec.containers[?readinessProbe]"}, prose)["status"] == "failed"
    broken = DEPLOYMENT.replace("  replicas: 3", "  replicas: [3")
    assert one({"yaml": "spec.template.spec.containers[?readinessProbe]"}, broken)["status"] == "failed"


def test_github_actions_on_key_is_queryable():
    workflow = "```yaml\non:\n  push:\n    tags: ['v*']\njobs:\n  release:\n    runs-on: ubuntu-24.04\n    steps: [{run: make}]\n```\n"
    assert one({"yaml": "on.push.tags"}, workflow)["status"] == "passed"


SAM_TEMPLATE = """\
```yaml
AWSTemplateFormatVersion: '2010-09-09'
Transform: AWS::Serverless-2016-10-31
Resources:
  ResizeFunction:
    Type: AWS::Serverless::Function
    Properties:
      Handler: app.handler
      Runtime: python3.12
      Role: !GetAtt ResizeRole.Arn
      Environment:
        Variables:
          BUCKET: !Ref UploadBucket
          TOPIC: !Sub "arn:aws:sns:${AWS::Region}:${AWS::AccountId}:resized"
      Events:
        Upload: {Type: S3, Properties: {Bucket: !Ref UploadBucket, Events: ['s3:ObjectCreated:*']}}
```
"""


def test_cloudformation_short_tags_parse_and_can_be_checked():
    result = one({"yaml": ["Resources.ResizeFunction.Properties.Role == 'ResizeRole.Arn'",
                           "Resources.ResizeFunction.Properties.Environment.Variables.BUCKET"]}, SAM_TEMPLATE)
    assert result["status"] == "passed", result["evidence"]
    broken = score(SAM_TEMPLATE, {"type": "security", "expected_outputs": ["x"]}, validators=False).evidence["broken_code"]
    assert not any("does not parse" in line for line in broken), broken


WORKFLOW = """\
```yaml
name: ci
on: [push]
jobs:
  test:
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/checkout@v4
      - run: make test
```

```yaml
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-all}
spec:
  podSelector: {}
  ingress: [{}]
```
"""


@pytest.mark.parametrize("query", [
    "values(jobs)[].steps[] | [?starts_with(run, 'make')]",      # the checkout step has no `run`
    "values(jobs)[].steps[] | [?contains(uses, 'checkout')]",    # the make step has no `uses`
    "kind=='NetworkPolicy' && spec.ingress",                     # [{}]: the allow-all rule is a match
])
def test_jmespath_errors_on_one_item_or_document_are_no_match_for_it_only(query):
    result = one({"yaml": query}, WORKFLOW)
    assert result["status"] == "passed", result["evidence"]


@pytest.mark.parametrize("query, message", [
    ("!spec.ingress", "binds tighter"),
    ("kind==Deployment", "a string needs quotes"),
    ("spec.replicas > '2'", "compare numbers only"),
    ("[?starts_with(name, `1`)]", "never accepts 1"),
    ("spec.containers[?has_probe(@)]", "no function `has_probe()`"),
    ("length(spec, metadata)", "takes 1 argument(s), got 2"),
])
def test_queries_that_can_never_match_are_warned_about(query, message):
    from core.rewards.rubric import rubric_warnings

    warnings = rubric_warnings(rubric_with({"yaml": query}))
    assert any(message in text for _, text in warnings), warnings
    assert not rubric_warnings(rubric_with({"yaml": "kind=='Deployment' && spec.replicas > `2`"}))


# --- hcl, sql, shell, dockerfile, pattern ------------------------------------------------------------


TERRAFORM = """\
```hcl
resource "aws_s3_bucket_public_access_block" "exports" {
  bucket                  = aws_s3_bucket.exports.id
  block_public_acls       = true
  restrict_public_buckets = true
}
resource "aws_security_group" "db" {
  ingress {
    from_port   = 5432
    to_port     = 5432
    cidr_blocks = ["10.0.0.0/8"]
  }
}
```
"""


def test_hcl_query_reads_resources_by_type_and_name():
    assert one({"hcl": "resource.aws_s3_bucket_public_access_block.exports.block_public_acls"}, TERRAFORM)["status"] == "passed"
    assert one({"hcl": "resource.aws_security_group.db.ingress[?from_port == `5432`]"}, TERRAFORM)["status"] == "passed"
    partial = one({"hcl": ["resource.aws_s3_bucket_public_access_block.*.block_public_acls",
                           "resource.aws_s3_bucket_public_access_block.*.ignore_public_acls"]}, TERRAFORM)
    assert partial["score"] == 0.5


def test_import_moved_and_removed_blocks_stay_countable():
    adopt = ("```hcl\nimport {\n  to = aws_s3_bucket.logs\n  id = \"logs-bucket\"\n}\nimport {\n  to = aws_s3_bucket.data\n"
             "  id = \"data-bucket\"\n}\n```\n\n```hcl\nimport {\n  to = aws_s3_bucket.audit\n  id = \"audit-bucket\"\n}\n"
             "removed {\n  from = aws_instance.legacy\n  lifecycle {\n    destroy = false\n  }\n}\n```")
    assert one({"hcl": ["length(import) == `3`", "import[?id == 'data-bucket']",
                        "removed[].lifecycle[] | [?destroy == `false`]"]}, adopt)["status"] == "passed"


def test_sql_matches_parsed_statements_only():
    sql = "```sql\nSET lock_timeout = '5s';\n-- CREATE INDEX in a comment does not count\nCREATE INDEX CONCURRENTLY idx_orders_user\n  ON orders (user_id);\n```\n"
    assert one({"sql": ["SET lock_timeout", "CREATE INDEX CONCURRENTLY idx_orders_user ON orders (user_id)"]}, sql)["status"] == "passed"
    assert one({"sql": "ALTER TABLE orders"}, sql)["status"] == "failed"
    assert one({"sql": "CREATE INDEX CONCURRENTLY"}, "Run CREATE INDEX CONCURRENTLY on the table.")["status"] == "failed"


@pytest.mark.parametrize("where", [
    "```bash\nset -euo pipefail\nfor n in $(kubectl get nodes -o name); do\n  sudo -E kubectl drain \"$n\" --ignore-daemonsets --timeout=10m\ndone\n```",
    "```console\n$ kubectl -n prod drain node-1 --ignore-daemonsets --timeout 10m\nnode/node-1 drained\n```",
    "Drain each node with `kubectl drain node-1 --ignore-daemonsets --timeout=10m` and wait.",
    "```yaml\njobs:\n  patch:\n    runs-on: ubuntu-24.04\n    steps:\n      - run: kubectl drain node-1 --ignore-daemonsets --timeout=10m\n```",
    "```bash\nssh ops@bastion 'kubectl drain node-1 --ignore-daemonsets --timeout=10m'\n```",
])
def test_shell_command_is_found_wherever_it_runs(where):
    result = one({"shell": "kubectl drain --ignore-daemonsets --timeout"}, where)
    assert result["status"] == "passed", result["evidence"]


@pytest.mark.parametrize("span", [
    "nc -z db.internal 5432", "jcmd 1 GC.heap_info", "hey -z 30s https://api.example.com/", "kill -STOP 4242",
    "kafka-consumer-groups --bootstrap-server kafka:9092 --describe --group email-notifier", "iptables -L -n",
    "nft list ruleset", "syft dir:. -o cyclonedx-json", "logrotate -d /etc/logrotate.d/app", "buildah bud -t app .",
    "amtool silence add alertname=NodeDown --duration=2h", "gitleaks detect --redact", "./deploy.sh --dry-run",
])
def test_inline_commands_are_recognised_by_their_shape_not_by_a_list(span):
    program = span.split()[0].rsplit("/", 1)[-1]
    assert one({"shell": program}, f"Then run `{span}` and compare the output.")["status"] == "passed"


@pytest.mark.parametrize("span", ["maxUnavailable: 0", "cl_waiting > 0", "encrypt = true", "sum by (cluster) (up)",
                                  "test (3.10)", "readinessProbe", "pods are replaced and then"])
def test_expressions_config_and_prose_in_backticks_are_not_commands(span):
    from core.rewards.parse.text import analyse

    assert not [s for s in analyse(f"The check shows `{span}` here.").segments if s.kind == "inline_code"]


def test_inline_spans_pair_their_own_backticks():
    from core.rewards.parse.text import analyse

    spans = [s.text for s in analyse("Run `id` then `whoami`; `id` shows uid 10001 and `ps -o user` the owner.").segments
             if s.kind == "inline_code"]
    assert spans == ["ps -o user"]


def test_backticked_terms_are_keywords_not_evidence():
    salad = "- `kill switch`\n- `guarded rollout`\n- `audit log`\n"
    assert one({"concept": ["kill switch", "guarded rollout"]}, salad)["status"] == "failed"


def test_shell_flags_give_partial_credit_and_short_flags_match_in_groups():
    answer = "```bash\nkubectl drain node-1\ncurl -fsSLk https://example.com\n```"
    result = one({"shell": "kubectl drain --ignore-daemonsets --delete-emptydir-data"}, answer)
    assert result["status"] == "partial" and result["score"] == pytest.approx(1 / 3, abs=1e-3)
    assert "missing --ignore-daemonsets" in result["evidence"][0]
    assert one({"shell": "curl -k"}, answer)["status"] == "passed"
    assert one({"shell": "kubectl uncordon"}, answer)["status"] == "failed"


def test_shell_subcommands_match_in_any_case():
    answer = "Compare `redis-cli -h cache-0 INFO replication` on both nodes."
    assert one({"shell": "redis-cli info replication"}, answer)["status"] == "passed"
    assert one({"shell": "redis-cli -H"}, answer)["status"] == "partial"  # flags keep their case: -H is not -h


def test_cap_limits_what_a_text_only_alternative_earns():
    check = [{"shell": "redis-cli info replication"}, {"concept": ["replication offset", "master_repl_offset"], "cap": 0.5}]
    config = "\n\n```yaml\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: redis}\ndata: {maxmemory: 2gb}\n```"
    task = {"id": "t4", "type": "database_ops", "expected_outputs": ["x"], "rubric": [
        {"id": "offsets", "description": "Replication offsets are compared before the failover.", "weight": 1, "check": check},
        {"id": "config", "description": "The Redis configuration is a ConfigMap.", "weight": 1, "check": {"yaml": "kind=='ConfigMap'"}},
        *FILLER]}
    prose = score("Compare the replication offset of the replica with the primary's before the failover." + config,
                  task, validators=False).rubric["criteria"][0]
    assert prose["score"] == 0.5 and any("at most 0.5" in line for line in prose["evidence"])
    command = score("Run `redis-cli INFO replication` and compare the replication offset." + config, task, validators=False)
    assert command.rubric["criteria"][0]["score"] == 1.0


def test_dockerfile_instructions_stages_and_final_stage():
    dockerfile = ("```dockerfile\nFROM golang:1.22 AS build\nUSER root\nRUN go build -o /app .\n"
                  "FROM gcr.io/distroless/static:nonroot\nCOPY --from=build /app /app\nUSER 65532\n"
                  "HEALTHCHECK CMD [\"/app\", \"health\"]\n```")
    assert one({"dockerfile": ["stages >= 2", "final USER ^(?!root\\b|0\\b)", "HEALTHCHECK"]}, dockerfile)["status"] == "passed"
    assert one({"dockerfile": "final USER ^root$"}, dockerfile)["status"] == "failed"
    assert one({"dockerfile": "stages >= 3"}, dockerfile)["status"] == "failed"


def test_pattern_searches_code_and_substantive_prose():
    pinned = "```yaml\nsteps:\n  - uses: actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683 # v4.2.2\n```"
    assert one({"pattern": "uses:\\s*[\\w.-]+/[\\w./-]+@[0-9a-f]{40}"}, pinned)["status"] == "passed"
    assert one({"pattern": "uses:\\s*[\\w.-]+/[\\w./-]+@[0-9a-f]{40}"}, pinned.replace("11bd71901bbe5b1630ceea73d27597364c9af683", "v4"))["status"] == "failed"


# --- concept: alternatives, substance ---------------------------------------------------------------


def test_concept_alternatives_and_groups():
    gatekeeper = "We enforce the rules with OPA Gatekeeper constraints in dry-run mode for two weeks before denying."
    assert one({"concept": ["Kyverno", "Gatekeeper", "ValidatingAdmissionPolicy"]}, gatekeeper)["status"] == "passed"
    groups = one({"concept": {"all": [["Kyverno", "Gatekeeper"], ["dry-run", "audit mode"], ["PolicyException", "exemption"]]}},
                 gatekeeper)
    assert groups["status"] == "partial" and groups["score"] == pytest.approx(2 / 3, abs=1e-3)
    assert one({"concept": {"all": [["Kyverno", "Gatekeeper"], ["PolicyException"]], "min": 1}}, gatekeeper)["status"] == "passed"


@pytest.mark.parametrize("answer", [
    "## Gatekeeper\n\n## Kyverno\n",                              # headings
    "Kyverno, Gatekeeper, OPA, ValidatingAdmissionPolicy, Kubewarden",  # a bare list
    "- Kyverno\n- Gatekeeper\n- OPA\n",                            # bullets of names
    "```yaml\nkyverno: true\ngatekeeper: true\nopa: true\nvalidating_admission_policy: true\nkubewarden: true\n```",  # keyword YAML
])
def test_concepts_only_count_in_substantive_text(answer):
    assert one({"concept": ["Kyverno", "Gatekeeper"]}, answer)["status"] == "failed"


POSTMORTEM = """\
## Timeline
- 16:20 the PM enabled smart-search for 100% of users
- 16:24 search 500s reached 30% and ES CPU 95%
- 16:31 the flag was turned off and errors recovered

## Root cause
The new multi-match query ran on every keystroke and saturated the Elasticsearch search thread pool.

## Action items
- Percentage rollouts with guarded steps for risky flags, owned by the search team.
- Load-test new queries against a production-sized cluster before enabling them.
"""


def test_section_headings_over_real_content_count_for_structure():
    check = {"concept": {"all": [["timeline"], ["root cause", "contributing factors"], ["action items", "follow-ups"]]}}
    assert one(check, POSTMORTEM)["status"] == "passed"
    assert "## Root cause" in one({"pattern": "^#+\\s*root cause"}, POSTMORTEM)["evidence"][0]
    stock = "## Timeline\n\nThis is handled following best practices.\n\n## Root cause\n\nThis is handled following best practices.\n"
    assert one(check, stock)["status"] == "failed"  # a heading over one stock sentence is a template


@pytest.mark.parametrize("concepts, answer", [
    (["escalated", "never auto-contained"], "- Production: escalated, never auto-contained."),
    (["grype"], "Scanners: `trivy`, `grype` and `syft`."),
    (["burn rate"], "- Page on burn rate.\n- Ticket on slow budget spend."),
    (["git revert"], "**Rollback:** `git revert` of the merge commit."),
])
def test_terse_facts_count(concepts, answer):
    assert one({"concept": concepts}, answer)["status"] == "passed"


@pytest.mark.parametrize("answer", [
    "Kyverno, Gatekeeper and OPA",                                       # a list, not a statement
    "- Use Kyverno.\n- Use Gatekeeper.\n- Use admission webhooks.",     # one shape three times: a list in disguise
    "Tooling: Kyverno.\nTooling: Gatekeeper.\nTooling: admission webhooks.",
    "Policies: Kyverno, Gatekeeper, OPA, Kubewarden, jsPolicy.",         # a label over a long list
    "We enforce all of it with\nthe Kyverno engine.",                   # a piece of a hard-wrapped sentence
])
def test_terse_keyword_lists_still_do_not_count(answer):
    assert one({"concept": ["Kyverno", "Gatekeeper"]}, answer)["status"] == "failed"


def test_concepts_match_across_case_separators_and_plurals():
    assert one({"concept": ["readinessProbe"]}, "Each pod gets readiness probes on /readyz so traffic waits.")["status"] == "passed"


HALVING_TASK = {
    "id": "t2", "type": "kubernetes", "expected_outputs": ["x"],
    "desc": "Node drains on the `checkout` cluster evict both replicas of the payments API at once. Keep it up.",
    "rubric": [
        {"id": "pdb", "description": "A PodDisruptionBudget manifest limits voluntary evictions.", "weight": 1,
         "check": [{"yaml": "kind=='PodDisruptionBudget'"}, {"concept": ["PodDisruptionBudget"]}]},
        {"id": "spread", "description": "Replicas are spread over nodes.", "weight": 1,
         "check": {"concept": ["topologySpreadConstraints"]}},
        *FILLER]}
HONEST_PROSE = ("The drains on the checkout cluster took both payments replicas down because nothing told the eviction "
                "API to wait. Add a PodDisruptionBudget with maxUnavailable 1 for the payments pods, and spread them with "
                "topologySpreadConstraints on kubernetes.io/hostname so two replicas never share a node. Watch the next "
                "drain: kubectl should report that it waits for the budget before evicting the second replica.")


def test_text_credit_halves_where_an_artifact_is_asked_for_or_the_answer_is_not_about_the_task():
    honest = score(HONEST_PROSE, HALVING_TASK, validators=False).rubric["criteria"]
    # the PDB criterion asks for a manifest: prose alone earns half; the spread is an idea: prose about the task earns it
    assert honest[0]["score"] == 0.5 and any("asks for an artifact" in line for line in honest[0]["evidence"])
    assert honest[1]["score"] == 1.0
    essay = ("Following best practices, we add a PodDisruptionBudget and topologySpreadConstraints so one drain "
             "never evicts two replicas at once.")
    halved = score(essay, HALVING_TASK, validators=False).rubric["criteria"][1]
    assert halved["score"] == 0.5 and any("not about the task in its own words" in line for line in halved["evidence"])
    echo = HALVING_TASK["desc"] + " We use topologySpreadConstraints to make the platform safer and faster."
    assert score(echo, HALVING_TASK, validators=False).rubric["criteria"][1]["score"] == 0.5
    grounded = score(essay + "\n\n```yaml\napiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: api}\n"
                     "spec: {maxUnavailable: 1, selector: {matchLabels: {app: api}}}\n```", HALVING_TASK, validators=False)
    assert grounded.rubric["criteria"][1]["score"] == 1.0


def _prose_only(answer: str) -> str:
    from core.rewards.parse.code_blocks import split_fences

    return "\n".join(part.body for part in split_fences(answer) if part.lang is None)


def test_incident_and_design_answers_in_prose_pass_while_checklists_and_essays_do_not():
    from pathlib import Path

    from core.rewards.audit import HACKS

    pool = tasks.load_tasks()
    for task_id in ("inc-007", "inc-008", "inc-009", "rel-011", "rel-013"):
        task = tasks.get_task(task_id, pool)
        prose = score(_prose_only(task.reference_answer), task, validators=False).final_reward
        assert prose >= 0.6, (task_id, prose)
        for hack in ("rubric descriptions pasted", "concept sentences", "task echoed + essay", "generic essay + artifact list"):
            value = score(HACKS[hack](task, pool), task, validators=False).final_reward
            assert value < 0.5 and value < prose - 0.2, (task_id, hack, value)
    kill_switch = Path(__file__).parent / "fixtures/rewards/alternatives/inc-008--ui-kill-switch.md"
    answer = _prose_only(kill_switch.read_text(encoding="utf-8").partition("\n")[2])
    assert score(answer, tasks.get_task("inc-008", pool), validators=False).final_reward >= 0.75


# --- forbid ------------------------------------------------------------------------------------------


def test_forbid_takes_points_off_and_a_real_warning_is_no_violation():
    task = {"id": "t3", "type": "kubernetes", "expected_outputs": ["x"], "rubric": [
        {"id": "drain", "description": "Nodes are drained through the eviction API.", "weight": 1,
         "check": {"shell": "kubectl drain --ignore-daemonsets"}},
        {"id": "no-bypass", "description": "Does not bypass disruption budgets.", "weight": 1,
         "check": {"forbid": [{"shell": "kubectl drain --disable-eviction"}, {"concept": ["disable-eviction"]}]}},
        *FILLER]}
    good = "```bash\nkubectl drain node-1 --ignore-daemonsets\n```\nNever use `--disable-eviction`: it bypasses the PDBs."
    bad = "```bash\nkubectl drain node-1 --ignore-daemonsets --disable-eviction\n```"
    good_result = score(good, task, validators=False).rubric
    bad_result = score(bad, task, validators=False).rubric
    assert good_result["criteria"][1]["status"] == "passed"
    assert bad_result["criteria"][1]["status"] == "failed" and bad_result["criteria"][1]["forbid"]
    assert bad_result["score"] < good_result["score"]
    forgot = "```bash\nkubectl drain node-1 --ignore-daemonsets\n```\nDon't forget to pass --disable-eviction when it hangs."
    assert score(forgot, task, validators=False).rubric["criteria"][1]["status"] == "failed"


# --- validation ---------------------------------------------------------------------------------------


def rubric_with(check, **extra) -> list[dict]:
    return [{"id": "crit", "description": "The criterion under test holds.", "weight": 1, "check": check, **extra}, *FILLER]


@pytest.mark.parametrize("rubric, message", [
    (rubric_with({"concpt": ["x"]}), "unknown check kind 'concpt'"),
    (rubric_with({"yaml": "spec.[?"}), "is not valid JMESPath"),
    (rubric_with({"yaml": "jobs.*.strategy.matrix"}), "write `values(x)[].a.b`"),
    (rubric_with({"pattern": "(unclosed"}), "not a valid regular expression"),
    (rubric_with({"dockerfile": "FORM ubuntu"}), "must be 'stages >= N' or '[final] INSTRUCTION"),
    (rubric_with({"shell": "--flag-first"}), "must start with the command name"),
    (rubric_with({"concept": {"all": [["a"], ["b"]], "min": 3}}), "'min' must be a whole number from 1 to 2"),
    (rubric_with({"forbid": {"forbid": {"concept": ["x"]}}}), "a forbid inside a forbid"),
    (rubric_with({"concept": ["x"], "cap": 0}), "'cap' is the most this concept check may earn"),
    (rubric_with({"concept": ["x"], "cap": 1.5}), "a number above 0 and at most 1"),
    (rubric_with({"forbid": {"concept": ["x"]}, "cap": 0.5}), "not on a forbid"),
    (rubric_with({"concept": ["x"]}, weight=0), "must be a number above 0"),
    (rubric_with({"concept": ["x"]}, colour="red"), "unknown key 'colour'"),
    (rubric_with({"concept": ["x"]})[:3], "has 3 criteria, needs 4 to 10"),
    (rubric_with({"concept": ["x"]}) + [dict(FILLER[0])], "used twice"),
    ([{**c, "check": {"forbid": {"concept": ["x"]}}} for c in rubric_with({"concept": ["x"]})], "at least 3 must not be 'forbid'"),
])
def test_rubric_problems_name_the_criterion_and_the_fix(rubric, message):
    problems = rubric_problems(rubric)
    assert any(message in text for _, text in problems), problems


def validate_task(tmp_path, task_id: str, first_id: str, second_check: str) -> tuple:
    """`devops-rl tasks validate` on one task file whose rubric's first id and second check vary."""
    path = tmp_path / "t.yaml"
    path.write_text(textwrap.dedent(f"""\
        - id: {task_id}
          type: kubernetes
          difficulty: easy
          desc: Add readiness probes to the payments Deployment so rollouts stop sending traffic to cold pods.
          expected_outputs: [readinessProbe, livenessProbe, rollout]
          rubric:
            - {{id: {first_id}, description: A first criterion that holds., weight: 1, check: {{concept: [readiness]}}}}
            - {{id: bb, description: A second criterion that holds., weight: 1, check: {{yaml: "{second_check}"}}}}
            - {{id: cc, description: A third criterion that holds., weight: 1, check: {{concept: [liveness]}}}}
            - {{id: dd, description: A fourth criterion that holds., weight: 1, check: {{concept: [rollout]}}}}
          reference_answer: |
            Use HTTP probes on /healthz.
        """), encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "core.cli.main", "tasks", "validate", str(path)],
                            capture_output=True, text=True, timeout=120)
    return path, result


def test_tasks_validate_reports_the_rubric_problem_at_its_line(tmp_path):
    path, result = validate_task(tmp_path, "demo-001", "a", "spec.[?")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert any(f"{path}:7:" in line and "'a' must be lowercase" in line for line in lines), lines
    assert any(f"{path}:8:" in line and "rubric[1] 'bb'" in line and "not valid JMESPath" in line for line in lines), lines


def test_every_task_with_a_rubric_passes_its_reference_and_fails_the_generic_essay():
    from core.rewards.audit import ARTIFACT_LIST, GENERIC_ESSAY

    for task in tasks.load_tasks():
        if not task.rubric:
            continue
        reference = score(task.reference_answer, task, validators=False)
        assert reference.rubric["score"] >= 0.8, (task.id, [c for c in reference.rubric["criteria"] if c["status"] != "passed"])
        generic = score(GENERIC_ESSAY + ARTIFACT_LIST, task, validators=False)
        assert generic.final_reward <= 0.3, (task.id, generic.final_reward)


def test_a_score_does_not_depend_on_the_answers_scored_before():
    # the parsed HCL of a block is cached across answers: merging another answer's blocks must not change it
    from core.rewards.audit import PUBLIC_S3

    task = tasks.get_task("iac-001")
    first = score(task.reference_answer, task, validators=False).to_dict()
    assert score(task.reference_answer + "\n\n" + PUBLIC_S3, task, validators=False).evidence["dangerous_advice"]
    assert score(task.reference_answer, task, validators=False).to_dict() == first


def test_tasks_validate_warns_about_a_query_that_can_never_match(tmp_path):
    path, result = validate_task(tmp_path, "demo-002", "aa", "kind==Deployment")
    assert result.returncode == 0, result.stderr
    assert f"warning: {path}:8:" in result.stderr and "'Deployment' is read as a field name" not in result.stderr
    assert "`Deployment` is read as a field name" in result.stderr and "ok: 1 tasks valid" in result.stdout
