"""Defects of the check engine that punished honest answers, fixed in the engine rather than task by task: a key
written without a value, multi-line PromQL, JSON inside CLI arguments, a key's other spelling, a VPC endpoint
policy read as a public bucket, and shellcheck reading `ping -M do` as a loop keyword.
"""

from __future__ import annotations

import pytest

from core.rewards import score
from core.rewards.checks.dangers import find_dangers
from core.rewards.checks.validators import _binary
from core.rewards.parse.artifacts import Artifacts
from core.rewards.parse.text import analyse
from core.rewards.rubric import compile_rubric, evaluate
from core.rewards.rubric.compile import key_spellings
from core.rewards.rubric.scoring import joined_expressions

DESCRIPTION = "What the criterion asks of the answer, long enough for a judge's checklist"


def scores(answer: str, *checks: dict) -> list[float]:
    """The score of each check (as a rubric criterion) on the answer."""
    rubric = [{"id": f"c{at}", "description": DESCRIPTION, "weight": 1, "check": check} for at, check in enumerate(checks)]
    rubric += [{"id": f"pad{at}", "description": DESCRIPTION, "weight": 1, "check": {"concept": ["zzzz"]}}
               for at in range(max(0, 4 - len(rubric)))]
    analysis = analyse(answer)
    _, results = evaluate(compile_rubric(rubric), Artifacts(analysis), analysis.segments)
    return [r.score for r in results[:len(checks)]]


WORKFLOW = """Run the tests on every pull request:

```yaml
name: ci
on:
  pull_request:
  push:
    branches: [main]
jobs:
  test:
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/checkout@v4
      - run: make test
```
"""


def test_a_key_written_without_a_value_is_present():
    assert scores(WORKFLOW, {"yaml": "on.pull_request"}, {"yaml": "on.push.branches"}) == [1.0, 1.0]
    # it stays empty for JMESPath itself: `!x` and comparisons read it as an empty value
    assert scores(WORKFLOW, {"yaml": "!(on.pull_request) && name == 'ci'"}, {"yaml": "on.pull_request == `{}`"}) == [1.0, 1.0]
    assert scores(WORKFLOW, {"yaml": "on.schedule"}) == [0.0]


ALERT = """Page only when both windows burn:

```yaml
groups:
  - name: slo
    rules:
      - alert: CheckoutErrorBudgetBurn
        expr: |
          sum(rate(http_requests_total{job="checkout",code=~"5.."}[5m])) / sum(rate(http_requests_total{job="checkout"}[5m])) > 14.4 * 0.001
          and
          sum(rate(http_requests_total{job="checkout",code=~"5.."}[1h])) / sum(rate(http_requests_total{job="checkout"}[1h])) > 14.4 * 0.001
          unless on(job)
          up{job="checkout"} == 0
        for: 2m
```
"""


def test_a_promql_operator_on_the_next_line_is_read_with_its_expression():
    assert scores(ALERT, {"pattern": r"\[5m\]\)\) > 14\.4 \* 0\.001 and sum"}, {"pattern": r"== 0\s*$"},
                  {"pattern": r"0\.001 unless on\(job\) up"}) == [1.0, 1.0, 1.0]
    assert joined_expressions("a: 1\nb: 2") == "a: 1\nb: 2"
    assert "- run: x" in joined_expressions("steps:\n  - run: x\n  - run: y")  # a YAML list is not an operator


LIFECYCLE = """Expire the logs after 35 days:

```bash
aws s3api put-bucket-lifecycle-configuration --bucket acme-logs \\
  --lifecycle-configuration '{"Rules": [{"ID": "expire", "Status": "Enabled", "Filter": {}, "Expiration": {"Days": 35}}]}'
```
"""


def test_json_arguments_of_cli_calls_are_documents_the_yaml_checks_read():
    analysis = analyse(LIFECYCLE)
    labels = [label for label, _ in Artifacts(analysis).documents]
    assert labels == ["aws s3api put-bucket-lifecycle-configuration --lifecycle-configuration JSON"]
    assert scores(LIFECYCLE, {"yaml": "Rules[?Expiration.Days == `35`]"}, {"yaml": "Rules[?Expiration.Days == `1`]"}) == [1.0, 0.0]
    inline = "Set it with `aws s3api put-bucket-policy --bucket b --policy='{\"Statement\": []}'`."
    assert [label for label, _ in Artifacts(analyse(inline)).documents] == ["aws s3api put-bucket-policy --policy JSON"]


SLO = """Route the page with the tool's CRD:

```yaml
apiVersion: sloth.slok.dev/v1
kind: PrometheusServiceLevel
metadata: {name: checkout}
spec:
  service: checkout
  slos:
    - name: availability
      objective: 99.9
      alerting:
        pageAlert: {labels: {severity: page}}
        ticketAlert: {labels: {severity: ticket}}
```
"""


def test_a_query_key_matches_the_other_spelling_of_the_same_setting():
    assert scores(SLO, {"yaml": "spec.slos[].alerting.page_alert"}, {"yaml": "spec.slos[].alerting.pageAlert"},
                  {"yaml": "spec.slos[].alerting.warning_alert"}) == [1.0, 1.0, 0.0]
    snake = SLO.replace("pageAlert", "page_alert")
    assert scores(snake, {"yaml": "spec.slos[].alerting.pageAlert"}) == [1.0]
    assert key_spellings("values(jobs)[].steps[?starts_with(run, 'make_test')]") == []  # functions and literals stay


ENDPOINT = """Reach S3 privately, only for our buckets:

```hcl
data "aws_iam_policy_document" "s3_endpoint" {
  statement {
    effect = "Allow"
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    actions   = ["s3:GetObject", "s3:PutObject"]
    resources = ["arn:aws:s3:::acme-exports/*"]
  }
}

resource "aws_vpc_endpoint" "s3" {
  vpc_id            = aws_vpc.main.id
  service_name      = "com.amazonaws.eu-west-1.s3"
  vpc_endpoint_type = "Gateway"
  policy            = data.aws_iam_policy_document.s3_endpoint.json
}
```

Or: `aws ec2 modify-vpc-endpoint --vpc-endpoint-id vpce-0abc --policy-document '{"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::acme-exports/*"}]}'`
"""


def test_a_vpc_endpoint_policy_with_principal_star_is_not_a_public_bucket():
    analysis = analyse(ENDPOINT)
    assert find_dangers(analysis, Artifacts(analysis)) == []
    bucket = (ENDPOINT.replace('aws_vpc_endpoint" "s3', 'aws_s3_bucket_policy" "s3')
              .replace("ec2 modify-vpc-endpoint --vpc-endpoint-id vpce-0abc --policy-document",
                       "s3api put-bucket-policy --bucket acme-exports --policy"))
    analysis = analyse(bucket)
    found = find_dangers(analysis, Artifacts(analysis))
    assert any("aws_iam_policy_document.s3_endpoint" in f for f in found)
    assert any("put-bucket-policy --policy JSON" in f for f in found)


def test_ping_with_path_mtu_discovery_is_not_broken_code():
    if _binary("shellcheck") is None:
        pytest.skip("shellcheck is not installed")
    answer = ("Check the path MTU from the node:\n\n```bash\n#!/usr/bin/env bash\nset -euo pipefail\n"
              "ping -M do -s 1472 -c 3 10.0.0.1\n```\n")
    result = score(answer, {"type": "networking", "expected_outputs": []})
    assert result.penalties["broken_code"] == 0.0, result.evidence["broken_code"]
    broken = score(answer.replace("ping", "rm -rf $dir/\nping"), {"type": "networking", "expected_outputs": []})
    assert any("SC2115" in line for line in broken.evidence["broken_code"])  # shellcheck did run
