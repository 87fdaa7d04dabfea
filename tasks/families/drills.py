"""Drills: families whose answer is one small artifact (a manifest fragment, a Dockerfile, a PromQL expression, a SQL
statement, a command line) checked exactly against the instance's values. Short answers, for small models and
curricula. Each has decisive criteria on the values and at least three mutants that each get one value wrong."""

from __future__ import annotations

import re
from typing import Any

from tasks.families.base import Choice, block, criterion, mutant

ONLY = "Answer with the artifact only, in one fenced code block."


def _re(text: Any) -> str:
    return re.escape(str(text))


# ---- kubernetes -------------------------------------------------------------------------------------------


def pdb(v: dict) -> dict:
    app, ns, replicas, k = v["app"], v["ns"], v["replicas"], v["at_most"]
    ref = block(
        "yaml",
        f"""
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {app}-pdb
  namespace: {ns}
spec:
  maxUnavailable: {k}
  selector:
    matchLabels:
      app: {app}
""",
    )
    return {
        "desc": f"The Deployment `{app}` in namespace `{ns}` runs {replicas} replicas whose pods carry the label "
        f"`app: {app}`. Write a PodDisruptionBudget so that a node drain takes down at most {k} of its pods "
        f"at a time. {ONLY}",
        "expected_outputs": ["PodDisruptionBudget", "maxUnavailable", "matchLabels"],
        "reference_answer": ref,
        "rubric": [
            criterion(
                "budget-value",
                f"The budget allows at most {k} voluntary disruptions of the {replicas} pods "
                f"(maxUnavailable {k} or minAvailable {replicas - k}).",
                {
                    "yaml": f"kind=='PodDisruptionBudget' && "
                    f"(spec.maxUnavailable == `{k}` || spec.minAvailable == `{replicas - k}`)"
                },
                2,
                True,
            ),
            criterion(
                "selects-app",
                f"The budget's selector matches the {app} pods by their app label.",
                {"yaml": f"kind=='PodDisruptionBudget' && spec.selector.matchLabels.app == '{app}'"},
                2,
                True,
            ),
            criterion(
                "namespace",
                f"The budget lives in namespace {ns}, next to the pods it protects.",
                {"yaml": f"kind=='PodDisruptionBudget' && metadata.namespace == '{ns}'"},
                1,
                True,
            ),
            criterion(
                "policy-v1",
                "The budget uses the policy/v1 API that current clusters serve.",
                {"yaml": "kind=='PodDisruptionBudget' && apiVersion == 'policy/v1'"},
                0.5,
            ),
        ],
        "mutants": [
            mutant(
                "budget-too-loose",
                f"maxUnavailable {k + 1} lets a drain take more than {k} pods at once.",
                (f"maxUnavailable: {k}", f"maxUnavailable: {k + 1}"),
            ),
            mutant(
                "wrong-selector",
                "The selector names another app, so the budget protects none of these pods.",
                (f"      app: {app}", f"      app: {app}-canary"),
            ),
            mutant(
                "wrong-namespace",
                "The budget sits in another namespace and selects nothing there.",
                (f"namespace: {ns}", "namespace: default"),
            ),
        ],
    }


def service(v: dict) -> dict:
    app, ns, port, target = v["app"], v["ns"], v["port"], v["target"]
    ref = block(
        "yaml",
        f"""
apiVersion: v1
kind: Service
metadata:
  name: {app}
  namespace: {ns}
spec:
  type: ClusterIP
  selector:
    app: {app}
  ports:
    - name: http
      port: {port}
      targetPort: {target}
""",
    )
    return {
        "desc": f"Expose the Deployment `{app}` (namespace `{ns}`, pods labelled `app: {app}`, container listening "
        f"on port {target}) inside the cluster on port {port}. Write the Service. {ONLY}",
        "expected_outputs": ["Service", "selector", "targetPort"],
        "reference_answer": ref,
        "rubric": [
            criterion(
                "ports",
                f"The Service listens on port {port} and forwards to the container's port {target}.",
                {"yaml": f"kind=='Service' && spec.ports[?port == `{port}` && targetPort == `{target}`]"},
                2,
                True,
            ),
            criterion(
                "selects-app",
                f"The selector matches the {app} pods.",
                {"yaml": f"kind=='Service' && spec.selector.app == '{app}'"},
                2,
                True,
            ),
            criterion(
                "namespace",
                f"The Service is in namespace {ns}.",
                {"yaml": f"kind=='Service' && metadata.namespace == '{ns}'"},
                1,
                True,
            ),
            criterion(
                "internal",
                "The Service stays inside the cluster (ClusterIP, not a LoadBalancer or NodePort).",
                {"yaml": "kind=='Service' && (spec.type == 'ClusterIP' || !(spec.type))"},
                0.5,
            ),
        ],
        "mutants": [
            mutant(
                "wrong-target-port",
                "traffic goes to a port the container does not listen on.",
                (f"targetPort: {target}", f"targetPort: {target + 1}"),
            ),
            mutant(
                "wrong-selector",
                "The selector matches no pod, so the Service has no endpoints.",
                (f"    app: {app}", f"    app: {app}-v2"),
            ),
            mutant(
                "wrong-port",
                "Clients call the agreed port and find nothing listening there.",
                (f"      port: {port}", f"      port: {port + 1}"),
            ),
        ],
    }


def hpa(v: dict) -> dict:
    app, low, high, cpu = v["app"], v["min"], v["min"] + v["extra"], v["cpu"]
    ref = block(
        "yaml",
        f"""
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {app}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {app}
  minReplicas: {low}
  maxReplicas: {high}
  metrics:
    - type: Resource
      resource:
        name: cpu
        target:
          type: Utilization
          averageUtilization: {cpu}
""",
    )
    return {
        "desc": f"Autoscale the Deployment `{app}` between {low} and {high} replicas, targeting {cpu}% average CPU "
        f"utilization. Write the HorizontalPodAutoscaler. {ONLY}",
        "expected_outputs": ["HorizontalPodAutoscaler", "minReplicas", "averageUtilization"],
        "reference_answer": ref,
        "rubric": [
            criterion(
                "bounds",
                f"minReplicas is {low} and maxReplicas is {high}.",
                {"yaml": f"kind=='HorizontalPodAutoscaler' && spec.minReplicas == `{low}` && spec.maxReplicas == `{high}`"},
                2,
                True,
            ),
            criterion(
                "target",
                f"The autoscaler scales the {app} Deployment.",
                {"yaml": f"kind=='HorizontalPodAutoscaler' && spec.scaleTargetRef.name == '{app}'"},
                2,
                True,
            ),
            criterion(
                "cpu-target",
                f"It targets {cpu}% average CPU utilization.",
                {
                    "yaml": "kind=='HorizontalPodAutoscaler' && spec.metrics[?resource.name == 'cpu' && "
                    f"resource.target.averageUtilization == `{cpu}`]"
                },
                2,
                True,
            ),
            criterion(
                "v2-api",
                "It uses the autoscaling/v2 API.",
                {"yaml": "kind=='HorizontalPodAutoscaler' && apiVersion == 'autoscaling/v2'"},
                0.5,
            ),
        ],
        "mutants": [
            mutant(
                "wrong-max",
                "maxReplicas differs from the ceiling asked for.",
                (f"maxReplicas: {high}", f"maxReplicas: {high + 2}"),
            ),
            mutant(
                "wrong-target",
                "The autoscaler targets a Deployment that does not exist.",
                (f"    name: {app}", f"    name: {app}-worker"),
            ),
            mutant(
                "wrong-cpu",
                "The CPU target differs from the one asked for.",
                (f"averageUtilization: {cpu}", f"averageUtilization: {cpu + 10}"),
            ),
        ],
    }


def _command(cmd: str, desc: str, outputs: list[str], checks: list[tuple[str, str, str, str, str]], tool: str) -> dict:
    """A command-line drill: `checks` are (criterion id, description, regex, mutant find, mutant replace); each
    regex is decisive and the mutant breaks it. `tool` is the shell check of the command's program."""
    rubric = [criterion("runs-tool", f"The answer runs `{tool}` as a command.", {"shell": tool}, 1)]
    mutants = []
    # Each value is read on a line that runs the tool, so another command of the answer cannot lend it.
    on_tool_line = "^(?=[^\\n]*" + "[^\\n]*".join(rf"\b{re.escape(word)}\b" for word in tool.split()) + ")[^\\n]*"
    for cid, description, regex, find, replace in checks:
        rubric.append(criterion(cid, description, {"pattern": on_tool_line + regex}, 2, True))
        mutants.append(
            mutant(f"wrong-{cid}", f"The command gets this wrong: {description[0].lower()}{description[1:]}", (find, replace))
        )
    return {
        "desc": f"{desc} Answer with the command only, in one fenced code block.",
        "expected_outputs": outputs,
        "reference_answer": block("bash", cmd),
        "rubric": rubric,
        "mutants": mutants,
    }


def scale_cmd(v: dict) -> dict:
    app, ns, n = v["app"], v["ns"], v["replicas"]
    return _command(
        f"kubectl scale deployment/{app} --replicas={n} -n {ns}",
        f"Scale the Deployment `{app}` in namespace `{ns}` to {n} replicas with one kubectl command.",
        ["kubectl scale", "--replicas", "namespace"],
        [
            ("replicas", f"It sets exactly {n} replicas.", rf"--replicas[= ]{n}\b", f"--replicas={n}", f"--replicas={n + 1}"),
            (
                "deployment",
                f"It scales the {app} Deployment.",
                rf"(deployment|deploy)(/|\s+){_re(app)}\b",
                f"deployment/{app}",
                f"deployment/{app}x",
            ),
            ("namespace", f"It targets namespace {ns}.", rf"(-n|--namespace)[= ]{_re(ns)}\b", f"-n {ns}", "-n default"),
        ],
        "kubectl scale",
    )


def rollout_undo(v: dict) -> dict:
    app, ns, rev = v["app"], v["ns"], v["revision"]
    return _command(
        f"kubectl rollout undo deployment/{app} --to-revision={rev} -n {ns}",
        f"The latest rollout of `{app}` (namespace `{ns}`) is failing; revision {rev} was the last good one. Roll "
        "the Deployment back to it with one kubectl command.",
        ["kubectl rollout undo", "--to-revision", "namespace"],
        [
            (
                "revision",
                f"It rolls back to revision {rev}.",
                rf"--to-revision[= ]{rev}\b",
                f"--to-revision={rev}",
                f"--to-revision={rev + 1}",
            ),
            (
                "deployment",
                f"It rolls back the {app} Deployment.",
                rf"(deployment|deploy)(/|\s+){_re(app)}\b",
                f"deployment/{app}",
                f"deployment/{app}x",
            ),
            ("namespace", f"It targets namespace {ns}.", rf"(-n|--namespace)[= ]{_re(ns)}\b", f"-n {ns}", "-n default"),
        ],
        "kubectl rollout undo",
    )


def logs_cmd(v: dict) -> dict:
    app, ns, since, container = v["app"], v["ns"], v["since"], v["container"]
    return _command(
        f"kubectl logs deployment/{app} -c {container} --since={since} -n {ns}",
        f"Read the last {since} of logs of the `{container}` container of the Deployment `{app}` in namespace "
        f"`{ns}` with one kubectl command.",
        ["kubectl logs", "--since", "container"],
        [
            (
                "since",
                f"It reads the last {since} of logs.",
                rf"--since[= ]{_re(since)}\b",
                f"--since={since}",
                "--since=24h" if since != "24h" else "--since=1m",
            ),
            (
                "container",
                f"It reads the {container} container.",
                rf"(-c|--container)[= ]{_re(container)}\b",
                f"-c {container}",
                "-c istio-proxy",
            ),
            ("namespace", f"It targets namespace {ns}.", rf"(-n|--namespace)[= ]{_re(ns)}\b", f"-n {ns}", "-n default"),
        ],
        "kubectl logs",
    )


def _container(app: str, body: str) -> str:
    return f"containers:\n  - name: {app}\n    image: registry.acme.io/{app}:1.0.0\n" + "\n".join(
        "    " + line for line in body.strip("\n").splitlines()
    )


def resources(v: dict) -> dict:
    app, cpu, mem = v["app"], v["cpu"], v["mem"]
    limit = 2 * mem
    ref = block(
        "yaml",
        _container(
            app,
            f"""
resources:
  requests:
    cpu: {cpu}m
    memory: {mem}Mi
  limits:
    memory: {limit}Mi
""",
        ),
    )
    sel = f"containers[?name == '{app}']"
    return {
        "desc": f"Give the container `{app}` a request of {cpu}m CPU and {mem}Mi memory and a memory limit of "
        f"{limit}Mi (no CPU limit). Write the container's entry of the pod spec's `containers` list. {ONLY}",
        "expected_outputs": ["resources", "requests", "limits"],
        "reference_answer": ref,
        "rubric": [
            criterion(
                "cpu-request",
                f"The CPU request is {cpu}m.",
                {"yaml": f"{sel}.resources.requests.cpu | [?@ == '{cpu}m']"},
                2,
                True,
            ),
            criterion(
                "memory-request",
                f"The memory request is {mem}Mi.",
                {"yaml": f"{sel}.resources.requests.memory | [?@ == '{mem}Mi']"},
                2,
                True,
            ),
            criterion(
                "memory-limit",
                f"The memory limit is {limit}Mi.",
                {"yaml": f"{sel}.resources.limits.memory | [?@ == '{limit}Mi']"},
                2,
                True,
            ),
            criterion(
                "no-cpu-limit",
                "There is no CPU limit (it throttles a bursty service).",
                {"forbid": {"yaml": f"{sel}.resources.limits.cpu"}},
                1,
            ),
            criterion("named", f"The entry is the {app} container.", {"yaml": sel}, 0.5),
        ],
        "mutants": [
            mutant("cpu-wrong", "The CPU request is not the one asked for.", (f"cpu: {cpu}m", f"cpu: {cpu + 50}m")),
            mutant("mem-wrong", "The memory request is not the one asked for.", (f"memory: {mem}Mi", f"memory: {mem + 64}Mi")),
            mutant(
                "limit-wrong",
                "The memory limit equals the request, not the limit asked for.",
                (f"memory: {limit}Mi", f"memory: {mem}Mi"),
            ),
        ],
    }


def probe(v: dict) -> dict:
    app, path, port, period, failures = v["app"], v["path"], v["port"], v["period"], v["failures"]
    ref = block(
        "yaml",
        _container(
            app,
            f"""
readinessProbe:
  httpGet:
    path: {path}
    port: {port}
  periodSeconds: {period}
  failureThreshold: {failures}
""",
        ),
    )
    sel = f"containers[?name == '{app}'].readinessProbe"
    return {
        "desc": f"The container `{app}` serves its readiness check on `{path}`, port {port}. Add a readinessProbe "
        f"that checks it every {period} seconds and marks the pod unready after {failures} failures. Write "
        f"the container's entry of the pod spec's `containers` list. {ONLY}",
        "expected_outputs": ["readinessProbe", "httpGet", "failureThreshold"],
        "reference_answer": ref,
        "rubric": [
            criterion(
                "endpoint",
                f"The probe calls {path} on port {port}.",
                {"yaml": f"{sel} | [?httpGet.path == '{path}' && httpGet.port == `{port}`]"},
                2,
                True,
            ),
            criterion(
                "period", f"It probes every {period} seconds.", {"yaml": f"{sel} | [?periodSeconds == `{period}`]"}, 1.5, True
            ),
            criterion(
                "threshold",
                f"It marks the pod unready after {failures} failures.",
                {"yaml": f"{sel} | [?failureThreshold == `{failures}`]"},
                1.5,
                True,
            ),
            criterion("readiness", "It is a readiness probe (not only a liveness probe).", {"yaml": sel}, 0.5),
        ],
        "mutants": [
            mutant(
                "wrong-port",
                "The probe checks a port nothing listens on, so the pod never gets ready.",
                (f"port: {port}", f"port: {port + 1}"),
            ),
            mutant(
                "wrong-period",
                "The probe runs at another interval than asked.",
                (f"periodSeconds: {period}", f"periodSeconds: {period + 20}"),
            ),
            mutant(
                "wrong-threshold",
                "The pod is marked unready after a different number of failures.",
                (f"failureThreshold: {failures}", f"failureThreshold: {failures + 3}"),
            ),
        ],
    }


def rolling(v: dict) -> dict:
    app, replicas, surge, unavailable = v["app"], v["replicas"], v["surge"], v["unavailable"]
    ref = block(
        "yaml",
        f"""
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {app}
spec:
  replicas: {replicas}
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: {surge}
      maxUnavailable: {unavailable}
""",
    )
    return {
        "desc": f"The Deployment `{app}` runs {replicas} replicas. Set its rolling update so a rollout adds at most "
        f"{surge} extra pods and never has more than {unavailable} pods unavailable. Write the Deployment's "
        f"metadata and spec.replicas/spec.strategy only (leave the pod template out). {ONLY}",
        "expected_outputs": ["RollingUpdate", "maxSurge", "maxUnavailable"],
        "reference_answer": ref,
        "rubric": [
            criterion(
                "surge",
                f"maxSurge is {surge}.",
                {"yaml": f"kind=='Deployment' && spec.strategy.rollingUpdate.maxSurge == `{surge}`"},
                2,
                True,
            ),
            criterion(
                "unavailable",
                f"maxUnavailable is {unavailable}.",
                {"yaml": f"kind=='Deployment' && spec.strategy.rollingUpdate.maxUnavailable == `{unavailable}`"},
                2,
                True,
            ),
            criterion(
                "replicas",
                f"The Deployment keeps {replicas} replicas.",
                {"yaml": f"kind=='Deployment' && spec.replicas == `{replicas}`"},
                1,
                True,
            ),
            criterion("named", f"It is the {app} Deployment.", {"yaml": f"kind=='Deployment' && metadata.name == '{app}'"}, 0.5),
        ],
        "mutants": [
            mutant(
                "surge-wrong",
                "The rollout adds more extra pods than the cluster has room for.",
                (f"maxSurge: {surge}", f"maxSurge: {surge + 2}"),
            ),
            mutant(
                "unavailable-wrong",
                "More pods are unavailable during the rollout than allowed.",
                (f"maxUnavailable: {unavailable}", f"maxUnavailable: {unavailable + 2}"),
            ),
            mutant(
                "replicas-wrong",
                "The edit changes the replica count as a side effect.",
                (f"replicas: {replicas}", f"replicas: {replicas - 1}"),
            ),
        ],
    }


def cronjob(v: dict) -> dict:
    name, minute, hour, retries, deadline = v["name"], v["minute"], v["hour"], v["retries"], v["deadline"]
    schedule = f"{minute} {hour} * * *"
    ref = block(
        "yaml",
        f"""
apiVersion: batch/v1
kind: CronJob
metadata:
  name: {name}
spec:
  schedule: "{schedule}"
  concurrencyPolicy: Forbid
  jobTemplate:
    spec:
      backoffLimit: {retries}
      activeDeadlineSeconds: {deadline}
      template:
        spec:
          restartPolicy: Never
          containers:
            - name: {name}
              image: registry.acme.io/{name}:1.0.0
""",
    )
    return {
        "desc": f"Run the batch job `{name}` every day at {hour:02d}:{minute:02d} (cluster time) as a Kubernetes "
        f"CronJob: never two runs at once, at most {retries} retries, and kill a run after {deadline} seconds. "
        f"{ONLY}",
        "expected_outputs": ["CronJob", "schedule", "concurrencyPolicy", "backoffLimit"],
        "reference_answer": ref,
        "rubric": [
            criterion(
                "schedule",
                f"The schedule is '{schedule}'.",
                {"yaml": f"kind=='CronJob' && spec.schedule == '{schedule}'"},
                2,
                True,
            ),
            criterion(
                "no-overlap",
                "concurrencyPolicy is Forbid, so two runs never overlap.",
                {"yaml": "kind=='CronJob' && spec.concurrencyPolicy == 'Forbid'"},
                1.5,
                True,
            ),
            criterion(
                "retries",
                f"backoffLimit is {retries}.",
                {"yaml": f"kind=='CronJob' && spec.jobTemplate.spec.backoffLimit == `{retries}`"},
                1.5,
                True,
            ),
            criterion(
                "deadline",
                f"activeDeadlineSeconds is {deadline}.",
                {"yaml": f"kind=='CronJob' && spec.jobTemplate.spec.activeDeadlineSeconds == `{deadline}`"},
                1.5,
                True,
            ),
        ],
        "mutants": [
            mutant(
                "schedule-swapped",
                "Minute and hour are swapped, so the job runs at another time.",
                (
                    f'schedule: "{schedule}"',
                    f'schedule: "{hour} {minute} * * *"' if hour != minute else f'schedule: "{minute} {(hour + 1) % 24} * * *"',
                ),
            ),
            mutant(
                "overlap-allowed",
                "Allow lets a slow run overlap the next one.",
                ("concurrencyPolicy: Forbid", "concurrencyPolicy: Allow"),
            ),
            mutant(
                "retries-wrong",
                "The job retries more often than asked.",
                (f"backoffLimit: {retries}", f"backoffLimit: {retries + 4}"),
            ),
        ],
    }


# ---- ci_cd ------------------------------------------------------------------------------------------------


def gha_schedule(v: dict) -> dict:
    target, minute, hour, timeout = v["target"], v["minute"], v["hour"], v["timeout"]
    cron = f"{minute} {hour} * * *"
    ref = block(
        "yaml",
        f"""
name: nightly-{target}
on:
  schedule:
    - cron: "{cron}"
jobs:
  {target}:
    runs-on: ubuntu-latest
    timeout-minutes: {timeout}
    steps:
      - uses: actions/checkout@v4
      - run: make {target}
""",
    )
    return {
        "desc": f"Write a GitHub Actions workflow that runs `make {target}` every day at {hour:02d}:{minute:02d} UTC "
        f"on ubuntu-latest and cancels the job after {timeout} minutes. {ONLY}",
        "expected_outputs": ["schedule", "cron", "timeout-minutes"],
        "reference_answer": ref,
        "rubric": [
            criterion(
                "cron",
                f"The schedule's cron is '{cron}' ({hour:02d}:{minute:02d} UTC).",
                {"yaml": f"on.schedule[?cron == '{cron}']"},
                2,
                True,
            ),
            criterion(
                "timeout",
                f"The job's timeout-minutes is {timeout}.",
                {"yaml": f'values(jobs)[?"timeout-minutes" == `{timeout}`]'},
                2,
                True,
            ),
            criterion(
                "runs-target",
                f"A step runs make {target}.",
                {"yaml": f"values(jobs)[].steps[] | [?run == 'make {target}']"},
                2,
                True,
            ),
            criterion("runner", "The job runs on ubuntu-latest.", {"yaml": "values(jobs)[?\"runs-on\" == 'ubuntu-latest']"}, 0.5),
        ],
        "mutants": [
            mutant(
                "cron-hour-wrong",
                "The job runs at another hour than asked.",
                (f'cron: "{cron}"', f'cron: "{minute} {(hour + 1) % 24} * * *"'),
            ),
            mutant(
                "timeout-wrong",
                "The timeout differs from the one asked for.",
                (f"timeout-minutes: {timeout}", f"timeout-minutes: {timeout + 30}"),
            ),
            mutant("target-wrong", "The step runs another make target.", (f"run: make {target}", "run: make all")),
        ],
    }


PY_VERSIONS = Choice(
    (
        ("3.10", "3.11"),
        ("3.11", "3.12"),
        ("3.10", "3.11", "3.12"),
        ("3.9", "3.10"),
        ("3.12", "3.13"),
        ("3.11", "3.12", "3.13"),
        ("3.9", "3.10", "3.11"),
    )
)


def gha_matrix(v: dict) -> dict:
    versions, os_name = v["versions"], v["os"]
    listed = ", ".join(f'"{x}"' for x in versions)
    ref = block(
        "yaml",
        f"""
name: tests
on:
  pull_request:
jobs:
  test:
    runs-on: {os_name}
    strategy:
      fail-fast: false
      matrix:
        python-version: [{listed}]
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: ${{{{ matrix.python-version }}}}
      - run: pip install -r requirements.txt
      - run: pytest -q
""",
    )
    want = "[" + ", ".join(f'"{x}"' for x in versions) + "]"
    return {
        "desc": f"Write a GitHub Actions workflow that runs `pytest` on pull requests on {os_name} for Python "
        f"{', '.join(versions)} (a matrix; one failing version must not cancel the others). {ONLY}",
        "expected_outputs": ["matrix", "python-version", "fail-fast"],
        "reference_answer": ref,
        "rubric": [
            criterion(
                "versions",
                f"The matrix is exactly Python {', '.join(versions)}, written as strings.",
                {"yaml": f'values(jobs)[?strategy.matrix."python-version" == `{want}`]'},
                2.5,
                True,
            ),
            criterion(
                "no-fail-fast",
                "fail-fast is false, so every version reports.",
                {"yaml": 'values(jobs)[?strategy."fail-fast" == `false`]'},
                1.5,
                True,
            ),
            criterion(
                "runner",
                f"The job runs on {os_name}.",
                {"yaml": f"values(jobs)[?\"runs-on\" == '{os_name}' && strategy.matrix]"},
                1,
                True,
            ),
            criterion("pytest", "A step runs pytest.", {"shell": "pytest"}, 1),
        ],
        "mutants": [
            mutant(
                "version-dropped",
                "One of the requested Python versions is not tested.",
                (f"python-version: [{listed}]", f'python-version: ["{versions[0]}"]'),
            ),
            mutant(
                "fail-fast-on",
                "fail-fast true cancels the other versions on the first failure.",
                ("fail-fast: false", "fail-fast: true"),
            ),
            mutant(
                "runner-wrong",
                "The job runs on another operating system than asked.",
                (f"runs-on: {os_name}", "runs-on: windows-latest"),
            ),
        ],
    }


# ---- containers -------------------------------------------------------------------------------------------

RUNTIMES = Choice(
    (
        ("python:3.12-slim", "pip install --no-cache-dir -r requirements.txt", '["python", "-m", "app"]'),
        ("python:3.11-slim", "pip install --no-cache-dir -r requirements.txt", '["python", "-m", "app"]'),
        ("node:20-alpine", "npm ci --omit=dev", '["node", "server.js"]'),
        ("node:22-alpine", "npm ci --omit=dev", '["node", "server.js"]'),
        ("ruby:3.3-slim", "bundle install --without development test", '["bundle", "exec", "puma"]'),
    )
)


def dockerfile(v: dict) -> dict:
    (image, install, cmd), port, uid = v["runtime"], v["port"], v["uid"]
    ref = block(
        "dockerfile",
        f"""
FROM {image}
WORKDIR /app
COPY . .
RUN {install}
EXPOSE {port}
USER {uid}
CMD {cmd}
""",
    )
    return {
        "desc": f"Write a Dockerfile for an app on the `{image}` base image that installs its dependencies with "
        f"`{install}`, listens on port {port} and runs as the non-root user id {uid}. {ONLY}",
        "expected_outputs": ["FROM", "EXPOSE", "USER"],
        "reference_answer": ref,
        "rubric": [
            criterion("base", f"The image is built FROM {image}.", {"dockerfile": f"FROM ^{_re(image)}$"}, 2, True),
            criterion("port", f"It exposes port {port}.", {"dockerfile": f"EXPOSE ^{port}$"}, 1.5, True),
            criterion("user", f"The final stage runs as user {uid}.", {"dockerfile": f"final USER ^{uid}$"}, 2, True),
            criterion("install", "It installs the dependencies in a RUN step.", {"dockerfile": f"RUN ^{_re(install)}"}, 1),
        ],
        "mutants": [
            mutant(
                "base-wrong",
                "The base image is another tag than the one asked for.",
                (f"FROM {image}", f"FROM {image.split(':')[0]}:latest"),
            ),
            mutant(
                "port-wrong", "The image exposes another port than the app listens on.", (f"EXPOSE {port}", f"EXPOSE {port + 1}")
            ),
            mutant("runs-as-root", "The container runs as root instead of the given user.", (f"USER {uid}", "USER root")),
        ],
    }


def healthcheck(v: dict) -> dict:
    port, path, interval, retries = v["port"], v["path"], v["interval"], v["retries"]
    ref = block(
        "dockerfile",
        f"""
FROM nginx:1.27-alpine
COPY site/ /usr/share/nginx/html/
HEALTHCHECK --interval={interval}s --timeout=3s --retries={retries} \\
  CMD wget -q -O /dev/null http://localhost:{port}{path} || exit 1
USER nginx
""",
    )
    return {
        "desc": f"An nginx:1.27-alpine image serves `site/` and answers health checks on `http://localhost:{port}"
        f"{path}`. Write its Dockerfile with a HEALTHCHECK that calls that URL every {interval} seconds and "
        f"marks the container unhealthy after {retries} failures. {ONLY}",
        "expected_outputs": ["HEALTHCHECK", "interval", "retries"],
        "reference_answer": ref,
        "rubric": [
            criterion(
                "url",
                f"The health check calls localhost:{port}{path}.",
                {"dockerfile": f"HEALTHCHECK localhost:{port}{_re(path)}\\b"},
                2,
                True,
            ),
            criterion(
                "interval",
                f"It runs every {interval} seconds.",
                {"dockerfile": f"HEALTHCHECK --interval[= ]{interval}s\\b"},
                1.5,
                True,
            ),
            criterion(
                "retries",
                f"It fails after {retries} retries.",
                {"dockerfile": f"HEALTHCHECK --retries[= ]{retries}\\b"},
                1.5,
                True,
            ),
            criterion("nonroot", "The container does not run as root.", {"dockerfile": "final USER ^(?!root\\b|0\\b)"}, 0.5),
        ],
        "mutants": [
            mutant(
                "url-wrong",
                "The check calls a port nothing listens on, so the container is always unhealthy.",
                (f"localhost:{port}", f"localhost:{port + 1}"),
            ),
            mutant(
                "interval-wrong",
                "The check runs at another interval.",
                (f"--interval={interval}s", f"--interval={interval * 4}s"),
            ),
            mutant(
                "retries-wrong",
                "The container is marked unhealthy after another number of failures.",
                (f"--retries={retries}", f"--retries={retries + 5}"),
            ),
        ],
    }


def docker_run(v: dict) -> dict:
    app, host, port, mem, tag = v["app"], v["host"], v["port"], v["mem"], v["tag"]
    image = f"registry.acme.io/{app}:{tag}"
    return _command(
        f"docker run -d --name {app} -p {host}:{port} --memory {mem}m --restart unless-stopped {image}",
        f"Start `{image}` in the background as a container named `{app}`, publish its port {port} on host port "
        f"{host}, cap its memory at {mem} MiB and restart it unless stopped.",
        ["docker run", "--memory", "--restart"],
        [
            (
                "ports",
                f"It publishes container port {port} on host port {host}.",
                rf"(-p|--publish)[= ]{host}:{port}\b",
                f"-p {host}:{port}",
                f"-p {port}:{host}",
            ),
            (
                "memory",
                f"It caps memory at {mem} MiB.",
                rf"(-m|--memory)[= ]{mem}(m|M|mb|MB)\b",
                f"--memory {mem}m",
                f"--memory {mem * 2}m",
            ),
            ("image", f"It runs the {tag} tag of the image.", rf"{_re(image)}(\s|$)", image, f"registry.acme.io/{app}:latest"),
        ],
        "docker run",
    )


# ---- infrastructure_as_code -------------------------------------------------------------------------------


def tf_variable(v: dict) -> dict:
    name, default, low, high = v["name"], v["default"], v["low"], v["low"] + v["span"]
    default = min(max(default, low), high)
    ref = block(
        "hcl",
        f"""
variable "{name}" {{
  type        = number
  default     = {default}
  description = "How many {name.replace("_", " ")} the service runs"

  validation {{
    condition     = var.{name} >= {low} && var.{name} <= {high}
    error_message = "{name} must be between {low} and {high}."
  }}
}}
""",
    )
    return {
        "desc": f"Declare a Terraform input variable `{name}`: a number, default {default}, that must be between "
        f"{low} and {high} (a validation block). {ONLY}",
        "expected_outputs": ["variable", "validation", "default"],
        "reference_answer": ref,
        "rubric": [
            criterion("default", f"The default is {default}.", {"hcl": f"variable.{name}.default == `{default}`"}, 2, True),
            criterion(
                "bounds",
                f"The validation accepts exactly {low} to {high}.",
                {"pattern": rf"var\.{name}\s*>=\s*{low}\b[\s\S]*var\.{name}\s*<=\s*{high}\b"},
                2,
                True,
            ),
            criterion("typed", "The variable is typed as a number.", {"hcl": f"variable.{name}.type == 'number'"}, 1, True),
            criterion(
                "validation",
                "A validation block with an error message guards it.",
                {"hcl": f"variable.{name}.validation[].error_message"},
                1,
            ),
        ],
        "mutants": [
            mutant(
                "default-wrong",
                "The default differs from the value asked for.",
                (f"default     = {default}", f"default     = {high + 1}"),
            ),
            mutant(
                "upper-bound-wrong",
                "The validation lets values above the upper bound through.",
                (f"var.{name} <= {high}", f"var.{name} <= {high * 10}"),
            ),
            mutant(
                "typed-string",
                "A string type accepts any text and breaks the arithmetic.",
                ("type        = number", "type        = string"),
            ),
        ],
    }


def tf_bucket(v: dict) -> dict:
    bucket, team, days = v["bucket"], v["team"], v["days"]
    res = bucket.replace("-", "_")
    ref = block(
        "hcl",
        f"""
resource "aws_s3_bucket" "{res}" {{
  bucket = "{bucket}"
  tags = {{
    team = "{team}"
  }}
}}

resource "aws_s3_bucket_versioning" "{res}" {{
  bucket = aws_s3_bucket.{res}.id
  versioning_configuration {{
    status = "Enabled"
  }}
}}

resource "aws_s3_bucket_lifecycle_configuration" "{res}" {{
  bucket = aws_s3_bucket.{res}.id
  rule {{
    id     = "expire-noncurrent"
    status = "Enabled"
    filter {{}}
    noncurrent_version_expiration {{
      noncurrent_days = {days}
    }}
  }}
}}
""",
    )
    return {
        "desc": f"In Terraform (AWS provider 5), create the S3 bucket `{bucket}` tagged `team = {team}`, with "
        f"versioning on and old (noncurrent) versions expired after {days} days. {ONLY}",
        "expected_outputs": ["aws_s3_bucket", "aws_s3_bucket_versioning", "noncurrent_version_expiration"],
        "reference_answer": ref,
        "rubric": [
            criterion(
                "bucket",
                f"An aws_s3_bucket is named {bucket}.",
                {"hcl": f"resource.aws_s3_bucket.*.bucket | [?@ == '{bucket}']"},
                2,
                True,
            ),
            criterion(
                "versioning",
                "Versioning is Enabled on it.",
                {"hcl": "values(resource.aws_s3_bucket_versioning)[].versioning_configuration[] | [?status == 'Enabled']"},
                2,
                True,
            ),
            criterion(
                "noncurrent-days",
                f"Noncurrent versions expire after {days} days.",
                {"pattern": rf"noncurrent_days\s*=\s*{days}\b"},
                2,
                True,
            ),
            criterion(
                "tagged",
                f"The bucket is tagged team = {team}.",
                {"hcl": f"values(resource.aws_s3_bucket)[].tags.team | [?@ == '{team}']"},
                0.5,
            ),
        ],
        "mutants": [
            mutant(
                "bucket-name-wrong",
                "The bucket has another name than the one asked for.",
                (f'bucket = "{bucket}"', f'bucket = "{bucket}-tmp"'),
            ),
            mutant(
                "versioning-suspended",
                "Suspended versioning keeps no old versions.",
                ('status = "Enabled"', 'status = "Suspended"'),
            ),
            mutant(
                "days-wrong",
                "Old versions are kept for another number of days.",
                (f"noncurrent_days = {days}", f"noncurrent_days = {days + 1}"),
            ),
        ],
    }


def tf_sg_rule(v: dict) -> dict:
    port, cidr, name = v["port"], v["cidr"], v["app"].replace("-", "_")
    ref = block(
        "hcl",
        f"""
resource "aws_vpc_security_group_ingress_rule" "{name}" {{
  security_group_id = aws_security_group.{name}.id
  description       = "{v["app"]} from the internal network"
  ip_protocol       = "tcp"
  from_port         = {port}
  to_port           = {port}
  cidr_ipv4         = "{cidr}"
}}
""",
    )
    return {
        "desc": f"Allow TCP port {port} into the security group `aws_security_group.{name}` from `{cidr}` only, "
        f"with one `aws_vpc_security_group_ingress_rule` in Terraform. {ONLY}",
        "expected_outputs": ["aws_vpc_security_group_ingress_rule", "from_port", "cidr_ipv4"],
        "reference_answer": ref,
        "rubric": [
            criterion(
                "port",
                f"The rule opens exactly TCP {port} (from_port and to_port {port}).",
                {"hcl": f"resource.aws_vpc_security_group_ingress_rule.* | [?from_port == `{port}` && to_port == `{port}`]"},
                2,
                True,
            ),
            criterion(
                "source",
                f"The source is {cidr} only.",
                {"hcl": f"resource.aws_vpc_security_group_ingress_rule.* | [?cidr_ipv4 == '{cidr}']"},
                2,
                True,
            ),
            criterion(
                "protocol",
                "The protocol is tcp.",
                {"hcl": "resource.aws_vpc_security_group_ingress_rule.* | [?ip_protocol == 'tcp']"},
                1,
                True,
            ),
            criterion(
                "group",
                f"The rule attaches to aws_security_group.{name}.",
                {"pattern": rf"security_group_id\s*=\s*aws_security_group\.{name}\.id"},
                1,
            ),
        ],
        "mutants": [
            mutant(
                "port-range",
                "The rule opens a range of ports instead of the one asked for.",
                (f"to_port           = {port}", f"to_port           = {port + 100}"),
            ),
            mutant(
                "source-wrong",
                "The rule admits a network other than the one asked for.",
                (f'cidr_ipv4         = "{cidr}"', 'cidr_ipv4         = "10.255.0.0/16"'),
            ),
            mutant(
                "protocol-all",
                "Protocol -1 opens every protocol, not only TCP.",
                ('ip_protocol       = "tcp"', 'ip_protocol       = "-1"'),
            ),
        ],
    }


# ---- observability ----------------------------------------------------------------------------------------


def _rule(alert: str, expr: str, duration: str, severity: str = "page") -> str:
    return block(
        "yaml",
        f"""
groups:
  - name: {alert.lower()}
    rules:
      - alert: {alert}
        expr: {expr}
        for: {duration}
        labels:
          severity: {severity}
        annotations:
          summary: "{alert} is firing"
""",
    )


def _camel(app: str) -> str:
    return "".join(part.capitalize() for part in app.split("-"))


def error_ratio_alert(v: dict) -> dict:
    app, pct, duration, window = v["app"], v["pct"], v["for"], v["window"]
    alert = f"{_camel(app)}HighErrorRatio"
    ratio = pct / 100
    expr = (
        f'sum(rate(http_requests_total{{job="{app}",code=~"5.."}}[{window}])) / '
        f'sum(rate(http_requests_total{{job="{app}"}}[{window}])) > {ratio:g}'
    )
    ref = _rule(alert, expr, duration)
    return {
        "desc": f"Write a Prometheus alerting rule `{alert}` that fires when more than {pct}% of the requests of job "
        f"`{app}` (`http_requests_total`, label `code`) return 5xx, over a {window} rate window, for "
        f"{duration}. {ONLY}",
        "expected_outputs": ["alert", "expr", "for"],
        "reference_answer": ref,
        "rubric": [
            criterion(
                "ratio",
                f"The expression divides the 5xx rate of {app} by all its requests.",
                {
                    "yaml": f"groups[].rules[] | [?alert == '{alert}' && contains(expr, '/') && contains(expr, '5..') "
                    f"&& contains(expr, 'job=\"{app}\"')]"
                },
                2,
                True,
            ),
            criterion(
                "threshold",
                f"The ratio is compared with {ratio:g} ({pct}%).",
                {"relation": {"name": "alert_threshold", "low": ratio, "high": ratio, "alert": alert}},
                2,
                True,
            ),
            criterion(
                "for",
                f"The alert waits for {duration}.",
                {"yaml": f"groups[].rules[] | [?alert == '{alert}' && for == '{duration}']"},
                1.5,
                True,
            ),
            criterion("window", f"The rate window is {window}.", {"pattern": rf"\[{window}\]"}, 1),
        ],
        "mutants": [
            mutant("threshold-wrong", "The alert fires at ten times the ratio asked for.", (f"> {ratio:g}", f"> {ratio * 10:g}")),
            mutant(
                "raw-count",
                "Without the division it pages on a raw error rate, not a ratio.",
                (f' / sum(rate(http_requests_total{{job="{app}"}}[{window}]))', ""),
            ),
            mutant("for-wrong", "The alert waits far longer than asked.", (f"for: {duration}", "for: 2h")),
        ],
    }


def latency_alert(v: dict) -> dict:
    app, quantile, ms, duration = v["app"], v["quantile"], v["ms"], v["for"]
    alert = f"{_camel(app)}SlowRequests"
    seconds = ms / 1000
    expr = (
        f'histogram_quantile({quantile}, sum by (le) (rate(http_request_duration_seconds_bucket{{job="{app}"}}[5m]))) '
        f"> {seconds:g}"
    )
    ref = _rule(alert, expr, duration, "ticket")
    pct = f"p{round(float(quantile) * 100, 1):g}"
    return {
        "desc": f"Write a Prometheus alerting rule `{alert}` that fires when the {pct} latency of job `{app}` "
        f"(histogram `http_request_duration_seconds`) is above {ms} ms for {duration}. {ONLY}",
        "expected_outputs": ["histogram_quantile", "alert", "for"],
        "reference_answer": ref,
        "rubric": [
            criterion(
                "quantile",
                f"The expression takes the {quantile} quantile of the {app} histogram by le.",
                {
                    "yaml": f"groups[].rules[] | [?alert == '{alert}' && contains(expr, 'histogram_quantile({quantile},') "
                    f"&& contains(expr, '_bucket') && contains(expr, 'job=\"{app}\"')]"
                },
                2,
                True,
            ),
            criterion(
                "threshold",
                f"The threshold is {seconds:g} seconds ({ms} ms), in the histogram's unit.",
                {"relation": {"name": "alert_threshold", "low": seconds, "high": seconds, "alert": alert}},
                2,
                True,
            ),
            criterion(
                "for",
                f"The alert waits for {duration}.",
                {"yaml": f"groups[].rules[] | [?alert == '{alert}' && for == '{duration}']"},
                1.5,
                True,
            ),
            criterion("by-le", "The buckets are summed by le before the quantile.", {"pattern": r"by\s*\(\s*le\s*\)"}, 1),
        ],
        "mutants": [
            mutant(
                "milliseconds", "The threshold is in milliseconds but the histogram is in seconds.", (f"> {seconds:g}", f"> {ms}")
            ),
            mutant(
                "quantile-wrong",
                "The alert watches the median, not the quantile asked for.",
                (f"histogram_quantile({quantile},", "histogram_quantile(0.5,"),
            ),
            mutant("for-wrong", "The alert waits far longer than asked.", (f"for: {duration}", "for: 3h")),
        ],
    }


def promql_saturation(v: dict) -> dict:
    app, ns, window, by = v["app"], v["ns"], v["window"], v["by"]
    expr = f'sum by ({by}) (rate(container_cpu_usage_seconds_total{{namespace="{ns}",container="{app}"}}[{window}]))'
    ref = block("promql", expr)
    return {
        "desc": f"Write a PromQL expression for the CPU cores used by the `{app}` containers in namespace `{ns}`, "
        f"per {by}, from `container_cpu_usage_seconds_total` over a {window} window. {ONLY}",
        "expected_outputs": ["rate", "container_cpu_usage_seconds_total", "sum by"],
        "reference_answer": ref,
        "rubric": [
            criterion(
                "rate",
                f"It takes rate() of the counter over [{window}].",
                {"pattern": rf"rate\(\s*container_cpu_usage_seconds_total\{{[^}}]*\}}\[{window}\]\s*\)"},
                2,
                True,
            ),
            criterion(
                "selects",
                f"It selects namespace {ns} and container {app}.",
                {"pattern": [rf'namespace\s*=\s*"{_re(ns)}"', rf'container\s*=\s*"{_re(app)}"']},
                2,
                True,
            ),
            criterion("grouping", f"It sums by {by}.", {"pattern": rf"sum\s+by\s*\(\s*{by}\s*\)"}, 1.5, True),
            criterion(
                "metric", "It reads container_cpu_usage_seconds_total.", {"pattern": r"container_cpu_usage_seconds_total"}, 0.5
            ),
        ],
        "mutants": [
            mutant(
                "window-wrong",
                "The rate window is another one than asked.",
                (f"[{window}]", "[1h]" if window != "1h" else "[1m]"),
            ),
            mutant("namespace-wrong", "It selects another namespace.", (f'namespace="{ns}"', 'namespace="default"')),
            mutant(
                "grouping-wrong",
                "It sums over another label than asked.",
                (f"sum by ({by})", "sum by (node)" if by != "node" else "sum by (pod)"),
            ),
        ],
    }


# ---- security ---------------------------------------------------------------------------------------------

VERB_SETS = Choice((("get", "list"), ("get", "list", "watch"), ("get",), ("list", "watch")))
RESOURCES = Choice(("pods", "configmaps", "services", "deployments", "jobs", "events"))


def rbac_role(v: dict) -> dict:
    ns, role, verbs, resource = v["ns"], v["role"], v["verbs"], v["resource"]
    group = '"apps"' if resource == "deployments" else '"batch"' if resource == "jobs" else '""'
    listed = ", ".join(verbs)
    ref = block(
        "yaml",
        f"""
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {role}
  namespace: {ns}
rules:
  - apiGroups: [{group}]
    resources: ["{resource}"]
    verbs: [{listed}]
""",
    )
    want = "[" + ", ".join(f'"{x}"' for x in verbs) + "]"
    return {
        "desc": f"Write a Kubernetes Role `{role}` in namespace `{ns}` that allows only {listed} on {resource} "
        f"(least privilege: nothing else). {ONLY}",
        "expected_outputs": ["Role", "verbs", "resources"],
        "reference_answer": ref,
        "rubric": [
            criterion(
                "verbs",
                f"The rule grants exactly the verbs {listed}.",
                {"yaml": f"kind=='Role' && rules[?verbs == `{want}`]"},
                2,
                True,
            ),
            criterion(
                "resource",
                f"The rule covers {resource} only.",
                {"yaml": f"kind=='Role' && rules[?resources == `[\"{resource}\"]`]"},
                2,
                True,
            ),
            criterion(
                "namespace",
                f"The Role is namespaced in {ns}.",
                {"yaml": f"kind=='Role' && metadata.namespace == '{ns}'"},
                1.5,
                True,
            ),
            criterion(
                "least-privilege",
                "No wildcard or escalating verb is granted.",
                {"relation": {"name": "rbac_least_privilege", "namespaced": True}},
                1,
            ),
        ],
        "mutants": [
            mutant("verbs-wildcard", "A wildcard verb grants write and delete too.", (f"verbs: [{listed}]", 'verbs: ["*"]')),
            mutant(
                "resource-wrong",
                "The rule covers another resource than asked.",
                (f'resources: ["{resource}"]', 'resources: ["secrets"]'),
            ),
            mutant(
                "namespace-wrong", "The Role lives in another namespace than asked.", (f"namespace: {ns}", "namespace: default")
            ),
        ],
    }


def netpol(v: dict) -> dict:
    ns, app, client, port = v["ns"], v["app"], v["client"], v["port"]
    if client == app:
        client = f"{app}-client"
    ref = block(
        "yaml",
        f"""
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {app}-ingress
  namespace: {ns}
spec:
  podSelector:
    matchLabels:
      app: {app}
  policyTypes: [Ingress]
  ingress:
    - from:
        - podSelector:
            matchLabels:
              app: {client}
      ports:
        - protocol: TCP
          port: {port}
""",
    )
    return {
        "desc": f"In namespace `{ns}`, allow ingress to the pods labelled `app: {app}` only from the pods labelled "
        f"`app: {client}` of the same namespace, on TCP port {port}. Write the NetworkPolicy. {ONLY}",
        "expected_outputs": ["NetworkPolicy", "podSelector", "ingress"],
        "reference_answer": ref,
        "rubric": [
            criterion(
                "target",
                f"The policy applies to the {app} pods.",
                {"yaml": f"kind=='NetworkPolicy' && spec.podSelector.matchLabels.app == '{app}'"},
                2,
                True,
            ),
            criterion(
                "source",
                f"Ingress is allowed only from the {client} pods.",
                {"yaml": f"kind=='NetworkPolicy' && spec.ingress[].from[] | [?podSelector.matchLabels.app == '{client}']"},
                2,
                True,
            ),
            criterion(
                "port",
                f"Only TCP port {port} is open.",
                {"yaml": f"kind=='NetworkPolicy' && spec.ingress[].ports[] | [?port == `{port}`]"},
                1.5,
                True,
            ),
            criterion(
                "namespace", f"The policy lives in {ns}.", {"yaml": f"kind=='NetworkPolicy' && metadata.namespace == '{ns}'"}, 1
            ),
        ],
        "mutants": [
            mutant(
                "target-wrong",
                "The policy selects other pods, so these stay open.",
                (f"      app: {app}", f"      app: {app}-db"),
            ),
            mutant(
                "source-wrong",
                "Another client is admitted instead of the one asked for.",
                (f"              app: {client}", "              app: debug-shell"),
            ),
            mutant(
                "port-wrong",
                "The policy opens another port than the one the service uses.",
                (f"port: {port}", f"port: {port + 1}"),
            ),
        ],
    }


def trivy_cmd(v: dict) -> dict:
    image, tag, severity = v["image"], v["tag"], v["severity"]
    ref_image = f"{image}:{tag}"
    return _command(
        f"trivy image --severity {severity} --exit-code 1 --ignore-unfixed {ref_image}",
        f"In CI, scan the image `{ref_image}` with Trivy and fail the job (exit code 1) on {severity} "
        "vulnerabilities that have a fix.",
        ["trivy image", "--severity", "--exit-code"],
        [
            (
                "severity",
                f"It reports {severity} only.",
                rf"--severity[= ]{_re(severity)}(\s|$)",
                f"--severity {severity}",
                "--severity LOW",
            ),
            ("exit-code", "It exits 1 on findings so the job fails.", r"--exit-code[= ]1\b", "--exit-code 1", "--exit-code 0"),
            ("image", f"It scans {ref_image}.", rf"{_re(ref_image)}(\s|$)", ref_image, f"{image}:latest"),
        ],
        "trivy image",
    )


# ---- cost_optimization ------------------------------------------------------------------------------------


def log_retention(v: dict) -> dict:
    app, days = v["app"], v["days"]
    group = f"/ecs/{app}"
    return _command(
        f"aws logs put-retention-policy --log-group-name {group} --retention-in-days {days}",
        f"The CloudWatch log group `{group}` keeps logs forever and costs too much. Keep {days} days with one AWS CLI command.",
        ["put-retention-policy", "--retention-in-days", "--log-group-name"],
        [
            (
                "days",
                f"It keeps {days} days.",
                rf"--retention-in-days[= ]{days}\b",
                f"--retention-in-days {days}",
                f"--retention-in-days {days + 2}",
            ),
            (
                "group",
                f"It sets the policy on {group}.",
                rf"--log-group-name[= ]{_re(group)}(\s|$)",
                f"--log-group-name {group}",
                f"--log-group-name /ecs/{app}-old",
            ),
            (
                "put-policy",
                "It sets a retention policy (not a deletion).",
                r"aws\s+logs\s+put-retention-policy\b",
                "aws logs put-retention-policy",
                "aws logs delete-retention-policy",
            ),
        ],
        "aws logs put-retention-policy",
    )


def s3_lifecycle(v: dict) -> dict:
    bucket, prefix, ia, expire = v["bucket"], v["prefix"], v["ia"], v["ia"] + v["extra"]
    ref = block(
        "json",
        f"""
{{
  "Rules": [
    {{
      "ID": "{prefix}-tiering",
      "Status": "Enabled",
      "Filter": {{"Prefix": "{prefix}/"}},
      "Transitions": [{{"Days": {ia}, "StorageClass": "STANDARD_IA"}}],
      "Expiration": {{"Days": {expire}}}
    }}
  ]
}}
""",
    )
    return {
        "desc": f"Objects under `{prefix}/` in the bucket `{bucket}` are rarely read after {ia} days and useless "
        f"after {expire}. Write the lifecycle configuration JSON for `aws s3api put-bucket-lifecycle-"
        f"configuration`: move them to STANDARD_IA after {ia} days and delete them after {expire}. {ONLY}",
        "expected_outputs": ["Transitions", "STANDARD_IA", "Expiration"],
        "reference_answer": ref,
        "rubric": [
            criterion(
                "transition",
                f"Objects move to STANDARD_IA after {ia} days.",
                {"yaml": f"Rules[].Transitions[] | [?Days == `{ia}` && StorageClass == 'STANDARD_IA']"},
                2,
                True,
            ),
            criterion(
                "expiration", f"Objects expire after {expire} days.", {"yaml": f"Rules[?Expiration.Days == `{expire}`]"}, 2, True
            ),
            criterion(
                "prefix",
                f"The rule is limited to the {prefix}/ prefix.",
                {"yaml": f"Rules[?Filter.Prefix == '{prefix}/']"},
                1.5,
                True,
            ),
            criterion("enabled", "The rule is Enabled.", {"yaml": "Rules[?Status == 'Enabled']"}, 1),
        ],
        "mutants": [
            mutant(
                "transition-wrong",
                "Objects move to infrequent access at another age than asked.",
                (f'"Days": {ia},', f'"Days": {ia + 5},'),
            ),
            mutant(
                "expire-wrong",
                "Objects are deleted at another age than asked.",
                (f'"Days": {expire}}}', f'"Days": {expire * 2}}}'),
            ),
            mutant(
                "prefix-wrong",
                "The rule applies to the whole bucket, not only the prefix.",
                (f'"Prefix": "{prefix}/"', '"Prefix": ""'),
            ),
        ],
    }


# ---- database_ops -----------------------------------------------------------------------------------------


def _sql(statement: str, desc: str, outputs: list[str], checks: list[tuple[str, str, str, str, str]]) -> dict:
    """A SQL drill: `checks` are (criterion id, description, SQL fragment, mutant find, mutant replace); each
    fragment is decisive (sqlglot's normalised statement must contain it) and the mutant breaks it."""
    rubric, mutants = [], []
    for cid, description, fragment, find, replace in checks:
        rubric.append(criterion(cid, description, {"sql": fragment}, 2, True))
        mutants.append(
            mutant(f"wrong-{cid}", f"The statement gets this wrong: {description[0].lower()}{description[1:]}", (find, replace))
        )
    rubric.append(criterion("one-statement", "The answer is a SQL statement in a sql code block.", {"pattern": r";\s*$"}, 0.5))
    return {
        "desc": f"{desc} Answer with the SQL only, in one fenced code block.",
        "expected_outputs": outputs,
        "reference_answer": block("sql", statement),
        "rubric": rubric,
        "mutants": mutants,
    }


def sql_index(v: dict) -> dict:
    table, column = v["table"], v["column"]
    name = f"idx_{table}_{column}"
    return _sql(
        f"CREATE INDEX CONCURRENTLY {name} ON {table} ({column});",
        f"PostgreSQL: queries on `{table}` filter by `{column}` and are slow. Add the index `{name}` without "
        "blocking writes to the table.",
        ["CREATE INDEX", "CONCURRENTLY", name],
        [
            (
                "concurrently",
                "It builds the index CONCURRENTLY so writes are not blocked.",
                "CREATE INDEX CONCURRENTLY",
                "CONCURRENTLY ",
                "",
            ),
            ("column", f"The index is on {table} ({column}).", f"ON {table.upper()} ({column.upper()})", f"({column})", "(id)"),
            ("name", f"The index is named {name}.", f"INDEX CONCURRENTLY {name.upper()} ON", f"{name} ", f"{name}_tmp "),
        ],
    )


def sql_grant(v: dict) -> dict:
    role, schema = v["role"], v["schema"]
    return _sql(
        f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role};",
        f"PostgreSQL: give the role `{role}` read-only access to every existing table of the schema `{schema}`.",
        ["GRANT SELECT", "ALL TABLES IN SCHEMA", role],
        [
            ("privilege", "It grants SELECT only.", "GRANT SELECT ON", "GRANT SELECT", "GRANT ALL"),
            (
                "schema",
                f"It covers all tables of schema {schema}.",
                f"ALL TABLES IN SCHEMA {schema.upper()}",
                f"SCHEMA {schema}",
                "SCHEMA public" if schema != "public" else "SCHEMA sales",
            ),
            ("role", f"It grants to {role}.", f"TO {role.upper()}", f"TO {role}", "TO PUBLIC"),
        ],
    )


def sql_purge(v: dict) -> dict:
    table, days = v["table"], v["days"]
    return _sql(
        f"DELETE FROM {table} WHERE created_at < NOW() - INTERVAL '{days} days';",
        f"PostgreSQL: delete the rows of `{table}` whose `created_at` is older than {days} days (the retention policy).",
        ["DELETE FROM", "created_at", "INTERVAL"],
        [
            (
                "table",
                f"It deletes from {table}.",
                f"DELETE FROM {table.upper()} WHERE",
                f"FROM {table}",
                f"FROM {table}_archive",
            ),
            ("interval", f"It keeps exactly {days} days.", f"INTERVAL '{days} DAYS'", f"'{days} days'", f"'{days + 1} days'"),
            (
                "older",
                "It deletes the older rows (created_at <), not the newer ones.",
                "CREATED_AT < NOW()",
                "created_at <",
                "created_at >",
            ),
        ],
    )


def pg_dump(v: dict) -> dict:
    db, host, user = v["db"], v["host"], v["user"]
    out = f"/backups/{db}.dump"
    return _command(
        f"pg_dump -h {host} -U {user} -d {db} -Fc -f {out}",
        f"Back up the PostgreSQL database `{db}` on host `{host}` as user `{user}` in pg_dump's custom format to `{out}`.",
        ["pg_dump", "-Fc", "custom format"],
        [
            ("database", f"It dumps the {db} database.", rf"(-d|--dbname)[= ]{_re(db)}(\s|$)", f"-d {db}", "-d postgres"),
            (
                "format",
                "It writes the custom format (-Fc), which pg_restore can restore selectively.",
                r"(-Fc|-F\s*c|--format[= ]c(ustom)?)\b",
                "-Fc",
                "-Fp",
            ),
            ("host", f"It connects to {host}.", rf"(-h|--host)[= ]{_re(host)}(\s|$)", f"-h {host}", "-h localhost"),
        ],
        "pg_dump",
    )


# ---- networking -------------------------------------------------------------------------------------------


def ingress(v: dict) -> dict:
    host, path, app, port = v["host"], v["path"], v["app"], v["port"]
    ref = block(
        "yaml",
        f"""
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {app}
spec:
  ingressClassName: nginx
  tls:
    - hosts: [{host}]
      secretName: {app}-tls
  rules:
    - host: {host}
      http:
        paths:
          - path: {path}
            pathType: Prefix
            backend:
              service:
                name: {app}
                port:
                  number: {port}
""",
    )
    return {
        "desc": f"Route `https://{host}{path}` (and everything under it) to the Service `{app}` on port {port} "
        f"with an nginx Ingress, TLS from the secret `{app}-tls`. {ONLY}",
        "expected_outputs": ["Ingress", "pathType", "backend"],
        "reference_answer": ref,
        "rubric": [
            criterion(
                "host", f"The rule matches host {host}.", {"yaml": f"kind=='Ingress' && spec.rules[?host == '{host}']"}, 2, True
            ),
            criterion(
                "path",
                f"Path {path} is a Prefix match.",
                {"yaml": f"kind=='Ingress' && spec.rules[].http.paths[] | [?path == '{path}' && pathType == 'Prefix']"},
                1.5,
                True,
            ),
            criterion(
                "backend",
                f"The backend is Service {app} port {port}.",
                {
                    "yaml": f"kind=='Ingress' && spec.rules[].http.paths[] | [?backend.service.name == '{app}' && "
                    f"backend.service.port.number == `{port}`]"
                },
                2,
                True,
            ),
            criterion(
                "tls", f"TLS uses the secret {app}-tls.", {"yaml": f"kind=='Ingress' && spec.tls[?secretName == '{app}-tls']"}, 1
            ),
        ],
        "mutants": [
            mutant(
                "host-wrong",
                "The rule matches another host, so requests fall through.",
                (f"    - host: {host}", f"    - host: www.{host}"),
            ),
            mutant(
                "exact-path", "An Exact path does not route the paths under the prefix.", ("pathType: Prefix", "pathType: Exact")
            ),
            mutant("port-wrong", "The backend port differs from the Service's port.", (f"number: {port}", f"number: {port + 1}")),
        ],
    }


def sg_cli(v: dict) -> dict:
    group, port, cidr = v["group"], v["port"], v["cidr"]
    return _command(
        f"aws ec2 authorize-security-group-ingress --group-id {group} --protocol tcp --port {port} --cidr {cidr}",
        f"Open TCP port {port} of the security group `{group}` to `{cidr}` only, with one AWS CLI command.",
        ["authorize-security-group-ingress", "--port", "--cidr"],
        [
            ("port", f"It opens port {port}.", rf"--port[= ]{port}(\s|$)", f"--port {port}", f"--port {port}-{port + 100}"),
            ("cidr", f"It admits {cidr} only.", rf"--cidr[= ]{_re(cidr)}(\s|$)", f"--cidr {cidr}", "--cidr 10.0.0.0/8"),
            (
                "group",
                f"It changes {group}.",
                rf"--group-id[= ]{_re(group)}(\s|$)",
                f"--group-id {group}",
                "--group-id sg-0000000000000000",
            ),
        ],
        "aws ec2 authorize-security-group-ingress",
    )
