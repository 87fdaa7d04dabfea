"""The reward on the real task set: calibration of every reference answer against degraded variants,
the contract (keys, ranges, determinism, dict tasks), property tests and one test per penalty.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tasks
from core.errors import UserError
from core.rewards import DIMENSIONS, PENALTIES, RewardBreakdown, calculate_devops_reward, score, weights_for
from core.rewards.checks.signals import rubric_keywords

OFF_TOPIC = (
    "Sourdough bread needs patience more than skill. Feed the starter twice a day for a week until it doubles "
    "within six hours of feeding, then mix flour and water and let the dough rest for an hour before adding salt. "
    "Stretch and fold the dough every half hour during bulk fermentation, which takes four to six hours at room "
    "temperature. Shape it gently, proof it overnight in the fridge, and bake it in a preheated Dutch oven: twenty "
    "minutes with the lid on, then twenty-five without, until the crust is deep brown. Let it cool for an hour "
    "before slicing, because the crumb is still setting.\n\n"
) * 4


def degraded_variants(task: tasks.Task) -> dict[str, str]:
    """The answers a reward must rank below the reference: each is a way to fail or to game it."""
    reference = task.reference_answer or ""
    salad_terms = rubric_keywords() + list(task.expected_outputs)
    return {
        "empty": "",
        "off-topic": OFF_TOPIC,
        "truncated to 20%": reference[: len(reference) // 5],
        "reference x5": "\n\n".join([reference] * 5),
        "keyword salad": ", ".join(salad_terms),
        "keyword salad as bullets": "\n".join(f"- {term}" for term in salad_terms),
        "keyword salad as words": " ".join(salad_terms),
    }


@pytest.fixture(scope="module")
def all_tasks() -> list[tasks.Task]:
    loaded = tasks.load_tasks()
    assert loaded, "tasks/data holds no tasks"
    return loaded


@pytest.fixture(scope="module")
def reference_scores(all_tasks) -> dict[str, object]:
    """Each task's reference answer scored once for the module."""
    return {t.id: score(t.reference_answer, t) for t in all_tasks}


@pytest.fixture(scope="module")
def probe_task(all_tasks) -> tasks.Task:
    """A Kubernetes task with a rich reference answer, for the penalty tests."""
    return next(t for t in all_tasks if t.id == "k8s-001")


def test_every_reference_scores_at_least_0_6_and_above_each_degraded_variant(all_tasks, reference_scores):
    failures = []
    for task in all_tasks:
        reference = reference_scores[task.id].final_reward
        if reference < 0.6:
            failures.append(f"{task.id}: reference {reference:.3f} < 0.6")
        for name, answer in degraded_variants(task).items():
            degraded = score(answer, task).final_reward
            if degraded >= reference:
                failures.append(f"{task.id}: {name} {degraded:.3f} >= reference {reference:.3f}")
    assert not failures, "\n".join(failures)


def test_a_reference_beats_other_types_references_on_its_own_task(all_tasks, reference_scores):
    """Good DevOps prose about something else must not score like an answer to this task."""
    by_type = {}
    for task in all_tasks:
        by_type.setdefault(task.type, []).append(task)
    losses, pairs = [], 0
    for task in all_tasks:
        own = reference_scores[task.id].final_reward
        for other_type, others in sorted(by_type.items()):
            if other_type == task.type:
                continue
            other = others[len(task.id) % len(others)]
            pairs += 1
            if score(other.reference_answer, task).final_reward >= own:
                losses.append(f"{task.id}: {other.id}'s reference scores as high")
    assert len(losses) <= pairs * 0.02, "\n".join(losses)


def test_breakdown_has_every_dimension_and_penalty_in_range(probe_task):
    result = score(probe_task.reference_answer, probe_task)
    assert isinstance(result, RewardBreakdown)
    data = result.to_dict()
    assert list(data) == ["final_reward", "dimensions", "penalties", "evidence", "rubric"]
    assert list(data["dimensions"]) == list(DIMENSIONS)
    assert list(data["penalties"]) == list(PENALTIES)
    assert all(0.0 <= v <= 1.0 for v in data["dimensions"].values())
    assert all(v >= 0.0 for v in data["penalties"].values())
    assert set(data["evidence"]) == set(DIMENSIONS) | set(PENALTIES)
    assert any("readinessProbe" in line for line in data["evidence"]["expected_outputs"])
    assert calculate_devops_reward(probe_task.reference_answer, probe_task) == result.final_reward


def test_a_plain_mapping_task_scores_like_the_task(probe_task):
    mapping = {"type": probe_task.type, "expected_outputs": list(probe_task.expected_outputs),
               "rubric": [dict(c) for c in probe_task.rubric]}
    assert score(probe_task.reference_answer, mapping) == score(probe_task.reference_answer, probe_task)
    assert score(probe_task.reference_answer, probe_task.to_dict()).final_reward == score(
        probe_task.reference_answer, probe_task).final_reward


def test_a_task_without_type_is_a_user_error_naming_the_key():
    with pytest.raises(UserError, match="'type'"):
        score("answer", {"id": "x", "expected_outputs": ["a"]})
    with pytest.raises(UserError, match="'expected_outputs'"):
        score("answer", {"id": "x", "type": "kubernetes", "expected_outputs": "readinessProbe"})


def test_weights_follow_the_task_type_and_overrides_renormalise(probe_task):
    security = weights_for("security")
    observability = weights_for("observability")
    assert security["security"] > observability["security"]
    assert observability["observability"] > security["observability"]
    assert abs(sum(weights_for("unknown-type").values()) - 1.0) < 1e-9
    only_security = score(probe_task.reference_answer, probe_task, weights={name: 0.0 for name in DIMENSIONS} | {"security": 1.0})
    plain = score(probe_task.reference_answer, probe_task)
    rubric = plain.rubric["score"]
    expected = 0.7 * rubric + 0.3 * rubric * plain.dimensions["security"] - sum(plain.penalties.values())
    assert only_security.final_reward == pytest.approx(expected, abs=1e-3)
    with pytest.raises(UserError, match="unknown reward dimension 'securty'"):
        score("x", probe_task, weights={"securty": 1.0})


def test_expected_outputs_match_across_wording(probe_task):
    task = {"type": "kubernetes", "expected_outputs": ["readinessProbe", "PodDisruptionBudget", "maxUnavailable"]}
    answer = ("The Deployment gets a readiness probe on /readyz so that traffic only goes to warm pods, "
              "and a PDB keeps two replicas up during node drains. The rolling update uses max unavailable "
              "of zero because capacity is tight.")
    result = score(answer, task)
    assert result.dimensions["expected_outputs"] == 1.0, result.evidence["expected_outputs"]
    listed = score("readinessProbe, PodDisruptionBudget, maxUnavailable", task)
    assert listed.dimensions["expected_outputs"] == 0.0
    assert listed.penalties["keyword_stuffing"] > 0


# --- properties -------------------------------------------------------------------------------------

_fragments = st.sampled_from([
    "```yaml\napiVersion: v1\nkind: Pod\n", "```\n", "```bash\nset -euo pipefail\nkubectl get pods\n```\n",
    "readinessProbe ", "**Verify:** ", "# Title\n", "- item\n", "password: hunter22\n", "curl x | bash\n",
    "AKIAABCDEFGHIJKLMNOP ", "\x00", "é ü 漢字 ", "|a|b|\n", "    ", "\n\n", "because we use Terraform. ",
    "```dockerfile\nFROM python\n```\n", "{{ .Values.x }}", "\t", "`kubectl drain node-1`",
])
_answers = st.one_of(st.text(max_size=400), st.lists(st.one_of(_fragments, st.text(max_size=30)), max_size=40).map("".join))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answer=_answers, task_type=st.sampled_from(tasks.TASK_TYPES + ("unknown",)),
       expected=st.lists(st.text(min_size=1, max_size=20), max_size=6))
def test_score_never_raises_stays_in_range_and_is_deterministic(answer, task_type, expected):
    task = {"type": task_type, "expected_outputs": expected}
    first = score(answer, task)
    assert 0.0 <= first.final_reward <= 1.0
    assert all(0.0 <= v <= 1.0 for v in first.dimensions.values())
    assert all(v >= 0.0 for v in first.penalties.values())
    assert score(answer, task) == first


# --- penalties: each triggers on its hack and not on the reference -----------------------------------


def test_references_carry_almost_no_penalty(all_tasks, reference_scores, probe_task):
    assert not any(reference_scores[probe_task.id].penalties.values())
    heavy = [(t.id, name, v) for t in all_tasks for name, v in reference_scores[t.id].penalties.items() if v > 0.1]
    assert not heavy


def test_keyword_stuffing_bare_buzzword_list(probe_task):
    stuffed = probe_task.reference_answer + "\n\nKeywords: " + ", ".join(rubric_keywords()[:80])
    result = score(stuffed, probe_task)
    assert result.penalties["keyword_stuffing"] > 0.1
    assert result.final_reward < score(probe_task.reference_answer, probe_task).final_reward
    assert any("keyword lists" in line for line in result.evidence["keyword_stuffing"])


def test_keyword_stuffing_dense_sentences_do_not_count(probe_task):
    dense = "We use " + " and ".join(rubric_keywords()[:40]) + "."
    result = score(dense, probe_task)
    assert result.penalties["keyword_stuffing"] > 0
    assert sum(result.dimensions[d] for d in DIMENSIONS[:5]) < 0.5


def test_keyword_stuffing_expected_outputs_pasted_without_substance(probe_task):
    pasted = (OFF_TOPIC[:600] + "\n\nCovered: " + ", ".join(probe_task.expected_outputs))
    result = score(pasted, probe_task)
    assert result.dimensions["expected_outputs"] == 0.0
    assert any("expected outputs only in bare lists" in line for line in result.evidence["keyword_stuffing"])


def test_repetition_of_paragraphs(probe_task):
    result = score("\n\n".join([probe_task.reference_answer] * 3), probe_task)
    assert result.penalties["repetition"] > 0.3
    assert any("repeats" in line for line in result.evidence["repetition"])


def test_code_that_repeats_its_own_structure_is_not_repetition():
    windows = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")
    rules = "\n".join(
        f"      - record: slo:sli_error:ratio_rate{w}\n"
        f"        expr: sum(rate(http_requests_total{{job=\"checkout\",code=~\"5..\"}}[{w}])) / "
        f"sum(rate(http_requests_total{{job=\"checkout\"}}[{w}]))\n"
        f"        labels: {{slo: checkout-availability, team: payments}}" for w in windows)
    answer = ("Recording rules for the multi-window burn-rate alerts of the checkout SLO:\n\n```yaml\ngroups:\n"
              "  - name: checkout-slo\n    rules:\n" + rules + "\n```\n\nThe page alert pairs 5m with 1h at 14.4x burn.")
    result = score(answer, {"type": "observability", "expected_outputs": ["recording rules"]}, validators=False)
    assert result.penalties["repetition"] == 0.0, result.evidence["repetition"]
    block = answer[answer.index("```yaml"):answer.index("```\n\nThe") + 3]
    pasted = score(answer + "\n\n" + "\n\n".join([block] * 3), {"type": "observability", "expected_outputs": ["x"]},
                   validators=False)
    assert pasted.penalties["repetition"] > 0.3 and any("pasted again" in line for line in pasted.evidence["repetition"])


def test_degenerate_text(probe_task):
    for garbage in ("a" * 2000, "lorem " * 400, "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo" * 40, "!@#$%^&*() 123 " * 100):
        result = score(garbage, probe_task)
        assert result.penalties["degenerate"] > 0, garbage[:20]
        assert result.final_reward < 0.1


def test_length_far_too_short_and_padded(probe_task):
    assert score("Add probes to the deployment.", probe_task).penalties["length"] > 0.2
    filler = " ".join(f"Paragraph {i} restates that the team cares about quality {i} times over." for i in range(220))
    padded = score(probe_task.reference_answer + "\n\n" + filler, probe_task)
    assert padded.penalties["length"] > 0
    assert padded.final_reward < score(probe_task.reference_answer, probe_task).final_reward


BAD_BLOCKS = {
    "yaml does not parse": "```yaml\nspec:\n  replicas: 3\n   template: [oops\n```",
    "no resources requests/limits": (
        "```yaml\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    spec:\n"
        "      containers:\n        - name: web\n          image: nginx:1.27\n```"),
    "is not pinned": "```dockerfile\nFROM python:latest\nCOPY . /app\nCMD [\"python\", \"/app/main.py\"]\n```",
    "runs as root": "```dockerfile\nFROM python:3.12-slim\nCOPY . /app\nCMD [\"python\", \"/app/main.py\"]\n```",
    "without 'set -euo pipefail'": "```bash\n#!/bin/bash\nfor n in a b; do\n  kubectl drain \"$n\"\ndone\n```",
    "never closed": "```yaml\napiVersion: v1\nkind: ConfigMap\n",
    "unbalanced if/fi": "```bash\nset -euo pipefail\nfor n in a b; do\n  kubectl drain \"$n\"\n```",
}


@pytest.mark.parametrize("problem", list(BAD_BLOCKS))
def test_broken_code_blocks(problem, probe_task):
    result = score(probe_task.reference_answer + "\n\n" + BAD_BLOCKS[problem], probe_task)
    assert result.penalties["broken_code"] > 0
    assert any(problem in line for line in result.evidence["broken_code"]), result.evidence["broken_code"]


@pytest.mark.parametrize("block", [
    "```bash\nset -euo pipefail\nping -M do -s 1472 -c 3 10.0.2.15\n```",   # `do` is ping's argument
    "```bash\nset -euo pipefail\necho done; printf 'if you see this, retry\\n'\n```",
])
def test_keywords_used_as_arguments_are_not_unbalanced_shell(block, probe_task):
    result = score(probe_task.reference_answer + "\n\n" + block, probe_task, validators=False)
    assert not any("unbalanced" in line for line in result.evidence["broken_code"]), result.evidence["broken_code"]


def test_hardcoded_secrets_cost_security(probe_task):
    clean = score(probe_task.reference_answer, probe_task)
    leaked = score(probe_task.reference_answer + "\n\n```bash\nexport AWS_ACCESS_KEY_ID=AKIAZ3X7Q2L5M8N4P6R1\n"
                   "export DB_PASSWORD=hunter2hunter2\n```\n", probe_task)
    assert leaked.penalties["hardcoded_secret"] >= 0.3
    assert leaked.dimensions["security"] < clean.dimensions["security"]
    referenced = score(probe_task.reference_answer + "\n\n```bash\nexport DB_PASSWORD=\"$(vault kv get -field=pw db)\"\n"
                       "PGPASSWORD=${DB_PASSWORD} psql -h db\n```\n", probe_task)
    assert referenced.penalties["hardcoded_secret"] == 0


@pytest.mark.parametrize("advice", [
    "Install the agent with `curl -sSL https://get.example.com/install.sh | sudo bash` on every node.",
    "If the volume is not writable, run `chmod -R 777 /data` and restart the pod.",
    "For the internal registry just call it with `requests.get(url, verify=False)` to skip the certificate.",
    "Set `privileged: true` in the securityContext so the container can mount the disk.",
])
def test_dangerous_advice_costs_security(advice, probe_task):
    clean = score(probe_task.reference_answer, probe_task)
    result = score(probe_task.reference_answer + "\n\n" + advice, probe_task)
    assert result.penalties["dangerous_advice"] > 0
    assert result.dimensions["security"] < clean.dimensions["security"]
    warned = score(probe_task.reference_answer + "\n\nNever do this: " + advice, probe_task)
    assert warned.penalties["dangerous_advice"] == 0


@pytest.mark.parametrize("block", [
    "```yaml\n" + "- " * 3000 + "x\n```",
    "```json\n" + "[" * 100_000 + "]" * 100_000 + "\n```",
    "```python\n" + "(" * 300 + ")" * 300 + "\n```",
])
def test_pathologically_nested_code_is_broken_code_not_a_crash(block):
    result = score(block, {"type": "kubernetes", "expected_outputs": ["x"]})
    assert result.penalties["broken_code"] > 0
    assert 0.0 <= result.final_reward <= 1.0


def test_the_breakdown_is_the_same_in_every_process(probe_task):
    """Evidence and scores must not depend on hash randomisation (set order) between processes."""
    import json
    import os
    import subprocess
    import sys

    code = ("import json, tasks; from core.rewards import score; t = tasks.get_task('k8s-001'); "
            "print(json.dumps(score(t.reference_answer, t).to_dict(), sort_keys=True))")
    outputs = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True,
                       env={**os.environ, "PYTHONHASHSEED": seed}).stdout
        for seed in ("1", "2", "3")
    }
    assert len(outputs) == 1
    assert json.loads(outputs.pop()) == json.loads(json.dumps(score(probe_task.reference_answer, probe_task).to_dict()))


def test_only_the_final_answer_of_a_reasoning_model_is_graded(probe_task):
    reference = score(probe_task.reference_answer, probe_task)
    thought = "<think>\nreadinessProbe livenessProbe maybe chmod 777? " * 20 + "</think>\n"
    assert score(thought + probe_task.reference_answer, probe_task) == reference
    assert score("<think>\n" + probe_task.reference_answer, probe_task).final_reward == 0.0


@pytest.mark.parametrize("where", ["comments", "yaml value"])
def test_keywords_hidden_in_code_do_not_count(where, probe_task):
    terms = [t for t in rubric_keywords() if '"' not in t]
    if where == "comments":
        block = "```yaml\nname: x\n" + "".join(f"# {' '.join(terms[i:i + 6])}\n" for i in range(0, len(terms), 6)) + "```\n"
    else:
        block = "```yaml\nnotes: '" + " ".join(terms) + "'\n```\n"
    result = score("Here is the plan for the team, with the config below.\n\n" + block, probe_task)
    assert result.penalties["keyword_stuffing"] > 0.2, result.evidence["keyword_stuffing"]
    assert result.final_reward < 0.1


SHELL_SCRIPTS = [
    "set -euo pipefail\nfor i in $(seq 1 5); do\n  curl -fsS https://x/healthz && break\n  sleep 0\ndone",
    "if [ -f x ]; then echo a; elif [ -d y ]; then echo b; else echo c; fi",
    "while read -r n; do kubectl drain \"$n\" --ignore-daemonsets; done < nodes.txt",
    "NODES=$(kubectl get nodes -o name | grep worker)\necho \"$(date) start\" | tee -a log 2>&1",
    ("for n in $(kubectl get nodes -o name); do\n  if kubectl describe \"$n\" | grep -q Ready; then\n"
     "    echo \"$n ok\"\n  fi\ndone"),
    "docker build -t app:${{ github.sha }} . && docker push app:${{ github.sha }}",
    "export KUBECONFIG=$(mktemp) X=${Y:-z}; echo 'single \"double\"' \"a\\\"b\" \\$HOME >&2",
    "POD=$(kubectl get pods -o jsonpath='{.items[0].metadata.name}')\nkubectl logs \"$POD\" > \"logs/$(date +%s).txt\"",
]


def _bashlex_split(text: str):
    import bashlex

    from core.rewards.parse.commands import _walk_bash

    commands, pipelines = [], []
    for node in bashlex.parse(text):
        _walk_bash(node, commands, pipelines)
    return ([tuple(c) for c in commands if c], [tuple(map(tuple, p)) for p in pipelines if len(p) > 1])


def _fast_split(text: str):
    from core.rewards.parse import shell

    commands, pipelines = shell.split(text)
    return ([tuple(c) for c in commands if c], [tuple(map(tuple, p)) for p in pipelines if len(p) > 1])


@pytest.mark.parametrize("script", SHELL_SCRIPTS)
def test_the_fast_shell_splitter_gives_bashlex_s_commands(script):
    assert _fast_split(script) == _bashlex_split(script)


def test_the_fast_shell_splitter_agrees_with_bashlex_on_random_scripts():
    """Where the splitter accepts a script, bashlex parses it to the same commands; the rest goes to bashlex."""
    import random

    from core.rewards.parse import shell

    rng = random.Random(7)
    words = ["kubectl", "get", "-n", "prod", "$x", '"$x"', "'a b'", "${V:-d}", "a=b", "--k=v", "$(date)", '"$(date +%s)"',
             "x$(echo y)z", "\\$HOME", "10", "done", "then", "fi", "if", "do", "in", "for", "a#b", "{}", "}", "$(a | b)",
             '"$(a && b)"', "$(kubectl get pods -o jsonpath='{.a}')", '"a $(b "c d") e"', "${{ g.s }}"]
    redirects = ["> out", "2>&1", "< in", ">> log", "&> all", ">&2"]

    def command() -> str:
        parts = [rng.choice(words) for _ in range(rng.randint(1, 4))]
        if rng.random() < 0.2:
            parts.append(rng.choice(redirects))
        return " ".join(parts)

    def block(depth: int = 0) -> str:
        out = []
        for _ in range(rng.randint(1, 3)):
            roll = rng.random()
            if depth < 2 and roll < 0.15:
                out.append(f"if {command()}; then\n{block(depth + 1)}\nfi")
            elif depth < 2 and roll < 0.3:
                out.append(f"for i in {command()}; do\n{block(depth + 1)}\ndone")
            else:
                out.append(command())
            out.append(rng.choice([" ; ", " && ", " || ", " | ", " & ", "\n"]))
        return "".join(out[:-1])

    accepted = 0
    for _ in range(600):
        script = block()
        try:
            fast = _fast_split(script)
        except shell.Unsupported:
            continue
        accepted += 1
        assert fast == _bashlex_split(script), script
    assert accepted > 100
