"""Reward throughput, in two tiers. Parsing and rubric tier (validators off): answers scored per second on
one core (CPU time, best of three), for synthetic 1-6 KB answers with code blocks (all distinct, so no cache
helps) and the task set's reference answers; goal >= 1,000/s. Validator tier: fresh answers per second on
2 worker processes with every external validator (wall time, batches as a scoring pool sends them); goal
>= 100/s; and the same from the CPU the workers and their validator processes spent (what two free cores
would do: on a shared machine the wall time mostly measures the other jobs). Plus each validator's cost per block.

`--against REV` instead times this tree's parsing and rubric tier against git revision REV's reward in one
process, interleaved every 10 answers, so both builds see the same load (the old reward is the peer).
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GOAL = 1000.0
VALIDATOR_GOAL = 100.0
WORKERS = 2

_SENTENCES = [
    "Roll out the change with a canary at {n}% of traffic so that a bad build only reaches a few users.",
    "The readinessProbe on /readyz keeps pods out of the Service until the cache for {name} is warm.",
    "Store the database password in Secrets Manager and let the task role read only that secret.",
    "Alert on the error budget burn rate over 1h and 6h windows instead of paging on every {n} errors.",
    "Terraform keeps the {name} state in S3 with locking, and CI runs terraform plan on every pull request.",
    "Verify the rollout with kubectl rollout status, then watch p99 latency on the Grafana dashboard.",
    "If the new version misbehaves, roll back with helm rollback {name} to the previous revision.",
    "Backups run nightly and a restore test every week proves that the RPO of {n} minutes holds.",
    "Run the containers as a non-root user with a read-only root filesystem to limit what an attacker can do.",
    "A PodDisruptionBudget with minAvailable {n} keeps the service up while nodes are drained.",
    "Document the runbook next to the alert so the on-call engineer knows why it fired and what to check.",
    "Retries use exponential backoff with jitter and give up after {n} attempts to avoid a retry storm.",
]


def _yaml_block(rng: random.Random, name: str) -> str:
    return (
        "```yaml\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n"
        f"  name: {name}\n  labels: {{app: {name}, team: t{rng.randint(1, 99)}}}\nspec:\n"
        f"  replicas: {rng.randint(2, 9)}\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n"
        f"    metadata: {{labels: {{app: {name}}}}}\n    spec:\n"
        "      securityContext: {runAsNonRoot: true, runAsUser: 10001}\n      containers:\n"
        f"        - name: {name}\n          image: registry.example.com/{name}:1.{rng.randint(0, 40)}.{rng.randint(0, 9)}\n"
        f"          ports: [{{containerPort: {rng.randint(3000, 9000)}}}]\n"
        f"          resources: {{requests: {{cpu: {rng.randint(100, 900)}m, memory: {rng.randint(128, 1024)}Mi}}}}\n"
        f"          readinessProbe: {{httpGet: {{path: /readyz, port: http}}, periodSeconds: {rng.randint(2, 10)}}}\n"
        f"          livenessProbe: {{httpGet: {{path: /healthz, port: http}}, failureThreshold: {rng.randint(3, 6)}}}\n"
        "```\n"
    )


def _bash_block(rng: random.Random, name: str) -> str:
    return (
        "```bash\nset -euo pipefail\n"
        f"kubectl -n ns{rng.randint(1, 50)} rollout status deploy/{name} --timeout={rng.randint(60, 600)}s\n"
        f"for i in $(seq 1 {rng.randint(3, 9)}); do\n"
        f"  curl -fsS https://{name}.example.com/healthz && break\n"
        "  sleep $((i * 2))\ndone\n"
        "```\n"
    )


def _dockerfile_block(rng: random.Random, name: str) -> str:
    return (
        f"```dockerfile\nFROM python:3.12.{rng.randint(0, 7)}-slim AS build\nWORKDIR /src\nCOPY . .\n"
        f"RUN pip wheel --no-deps -w /wheels .\nFROM python:3.12.{rng.randint(0, 7)}-slim\n"
        f"COPY --from=build /wheels /wheels\nRUN pip install /wheels/*.whl && useradd -u {rng.randint(1000, 60000)} app\n"
        f"USER app\nCMD [\"{name}\"]\n```\n"
    )


def synthetic_answers(count: int = 400, seed: int = 0) -> list[str]:
    """Distinct markdown answers of 1-6 KB with prose, headings and yaml/bash/Dockerfile blocks."""
    rng = random.Random(seed)
    blocks = (_yaml_block, _bash_block, _dockerfile_block)
    answers = []
    for i in range(count):
        target = rng.randint(1000, 6000)
        name = f"svc-{i}-{rng.randint(100, 999)}"
        parts = [f"**Approach:** {rng.choice(_SENTENCES).format(n=rng.randint(1, 60), name=name)}\n"]
        while sum(map(len, parts)) < target:
            roll = rng.random()
            if roll < 0.25:
                parts.append("\n\n" + rng.choice(blocks)(rng, name) + "\n")  # a fence opens its own line
            elif roll < 0.35:
                parts.append(f"\n**{rng.choice(['Verify', 'Rollback', 'Monitoring', 'Security', 'Why'])}:** ")
            else:
                parts.append(rng.choice(_SENTENCES).format(n=rng.randint(1, 60), name=name) + " ")
        answers.append("".join(parts))
    return answers


def _best_of(repeats: int, measure) -> float:
    """The best of a few runs: on a shared machine the fastest run is the least disturbed one."""
    return max(measure() for _ in range(repeats))


# Caches keyed by an answer's content (a block, a script, a span): cleared before each timed run, so every run
# parses as fresh rollouts would. Per-process caches (compiled rubrics, stems, loaders) stay warm, as in training.
ANSWER_CACHES = ("_yaml_findings", "yaml_documents", "dockerfile_instructions", "parse_shell", "hcl_loads", "parse_hcl",
                 "parse_sql", "looks_like_command", "_one_line", "_bash_parses", "joined_expressions")


def _answer_caches() -> list:
    """The answer-content caches of the `core.rewards` modules now imported (whichever build that is)."""
    found = []
    for name, module in list(sys.modules.items()):
        if name.startswith("core.rewards.") and module is not None:
            found.extend(getattr(module, attr) for attr in ANSWER_CACHES if hasattr(getattr(module, attr, None), "cache_clear"))
    return list({id(f): f for f in found}.values())


def _fresh(caches: list) -> None:
    for cache in caches:
        cache.cache_clear()


def _throughput(pairs: list[tuple[str, object]]) -> float:
    """Parsing and rubric tier: CPU time per answer on one core, no external validators."""
    from core.rewards import score

    caches = _answer_caches()

    def once() -> float:
        _fresh(caches)  # every run parses as fresh rollouts would
        started = time.process_time()
        for answer, task in pairs:
            score(answer, task, validators=False)
        return len(pairs) / max(time.process_time() - started, 1e-9)

    return _best_of(3, once)


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished child processes (the validators it ran)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _score_chunk(chunk: list[tuple[str, dict]]) -> tuple[float, float]:
    """One worker's batch with every validator (runs in a pool process); returns its wall time and the CPU
    time it and its validator processes spent."""
    from core.rewards import score_batch

    started, cpu = time.perf_counter(), _cpu_seconds()
    score_batch(chunk)
    return time.perf_counter() - started, _cpu_seconds() - cpu


def _use_build(root: str) -> None:
    """Pool initializer: this worker scores with the `core` package under `root` (imported now, before the
    bench module puts this tree first on the path)."""
    sys.path.insert(0, root)
    import core.rewards  # noqa: F401  (the import is the point)


def _validator_pool(root: str | None = None):
    """WORKERS spawned processes (of the build under `root`, default this tree), warmed up: imports and
    validator start-up once per worker (an answer with a block for every validator, on every task with a
    rubric), as in a training run's long-lived scoring pool."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(max_workers=WORKERS, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_use_build if root else None, initargs=(root,) if root else ())
    answers = [f"{WARM_UP}\n{_yaml_block(random.Random(w), 'warm')}\n{_dockerfile_block(random.Random(w), 'warm')}"
               for w in range(WORKERS)]
    graded = [task.to_dict() for _, task in _rubric_pairs([""])[1]]  # every rubric compiled, as in a long run
    warm = [[(answer, task) for task in graded] for answer in answers]
    list(pool.map(_score_chunk, warm))
    return pool


def _validator_wall(pool, pairs: list[tuple[str, object]]) -> tuple[float, float]:
    """Seconds the pool takes for fresh answers with every validator, in batches of 32 (a GRPO step's rollouts
    spread over the pool), and the CPU seconds its workers and their validator processes spent."""
    jobs = [(answer, task.to_dict()) for answer, task in pairs]
    started = time.perf_counter()
    chunks = list(pool.map(_score_chunk, [jobs[i:i + 32] for i in range(0, len(jobs), 32)]))
    return time.perf_counter() - started, sum(cpu for _, cpu in chunks)


def _validator_tier(pairs: list[tuple[str, object]]) -> tuple[float, float]:
    """Fresh answers per second on WORKERS processes, every validator on, after a warm-up: by wall time, and
    by CPU time (answers per second WORKERS free cores would score)."""
    pool = _validator_pool()
    try:
        wall, cpu = _validator_wall(pool, pairs)
        return len(pairs) / wall, WORKERS * len(pairs) / cpu
    finally:
        pool.shutdown()


def _validator_costs(answers: list[str]) -> list[dict]:
    """Milliseconds per block for each validator, on the synthetic answers' blocks, in one batch each."""
    from core.rewards.checks import validators as v
    from core.rewards.parse.code_blocks import check_block, split_fences

    blocks = [v.Block(r.kind, p.body) for a in answers for p in split_fences(a) if p.lang
              for r in [check_block(p)] if r.valid]
    rows = []
    for name in v.VALIDATORS:
        wanted = [b for b in blocks if v._wanted(name, b)][:120]
        if not wanted:
            continue
        if not v.available(name):
            rows.append({"benchmark": "reward", "figure": f"validator {name}: not installed (skipped)", "value": None,
                         "unit": "ms/block", "goal": "-"})
            continue
        v.clear_cache()
        started = time.perf_counter()
        v.prefetch(wanted, only=[name])
        ms = (time.perf_counter() - started) * 1000 / len(wanted)
        rows.append({"benchmark": "reward", "figure": f"validator {name}: {len(wanted)} {wanted[0].kind} blocks, one batch",
                     "value": round(ms, 2), "unit": "ms/block", "peer": None, "yardstick": "",
                     "ratio": None, "goal": "budget 10 ms/answer/core"})
    return rows


def _yaml_only(answers: list[str]) -> float:
    """The peer: PyYAML (libyaml) safe_load_all of the same answers' yaml blocks, nothing else."""
    import yaml

    from core.rewards.parse.code_blocks import split_fences

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    blocks = [[p.body for p in split_fences(a) if p.lang == "yaml"] for a in answers]

    def once() -> float:
        started = time.process_time()
        for answer_blocks in blocks:
            for body in answer_blocks:
                list(yaml.load_all(body, Loader=loader))
        return len(answers) / max(time.process_time() - started, 1e-9)

    return _best_of(3, once)


# Loads every parser once (bashlex builds its yacc tables on import: half a second) before any timing.
WARM_UP = ("Warm up:\n\n```bash\nfor n in a b; do\n  kubectl drain \"$n\"\ndone\n```\n\n"
           "```hcl\nresource \"aws_s3_bucket\" \"b\" {\n  bucket = \"b\"\n}\n```\n\n```sql\nSELECT 1;\n```\n")


def _rubric_pairs(answers: list[str]) -> tuple[list, list]:
    """(synthetic answer, task) pairs over the tasks that have a rubric, and those tasks' references."""
    import tasks

    graded = [t for t in tasks.load_tasks() if t.rubric] or tasks.load_tasks()
    return [(a, graded[i % len(graded)]) for i, a in enumerate(answers)], [(t.reference_answer, t) for t in graded]


def run() -> list[dict]:
    from core.rewards import score

    synthetic = synthetic_answers()
    pairs, references = _rubric_pairs(synthetic)
    for task in {t.id: t for _, t in pairs}.values():  # imports, parsers, weights file, compiled rubrics
        score(WARM_UP, task, validators=False)
    kb = sum(len(a) for a in synthetic) / len(synthetic) / 1024
    rows = []
    for figure, data in (
        (f"parsing+rubric tier, answers/s/core, synthetic 1-6 KB with code (mean {kb:.1f} KB)", pairs),
        (f"parsing+rubric tier, answers/s/core, {len(references)} reference answers", references),
    ):
        value = _throughput(data)
        rows.append({"benchmark": "reward", "figure": figure, "value": round(value, 1), "unit": "answers/s",
                     "peer": GOAL, "yardstick": "goal 1,000/s on one core", "ratio": round(value / GOAL, 2),
                     "goal": ">= 1000"})
    fresh = synthetic_answers(count=256, seed=1)  # blocks no earlier run has seen
    tiers = _validator_tier(_rubric_pairs(fresh)[0])
    for how, tier in zip(("wall time", "CPU time"), tiers):
        rows.append({"benchmark": "reward", "value": round(tier, 1), "unit": "answers/s", "peer": VALIDATOR_GOAL,
                     "figure": f"validator tier, fresh answers/s on {WORKERS} processes (all validators), {how}",
                     "yardstick": f"goal 100/s on {WORKERS} cores", "ratio": round(tier / VALIDATOR_GOAL, 2), "goal": ">= 100"})
    rows.extend(_validator_costs(fresh))
    peer = _yaml_only(synthetic)
    rows.append({"benchmark": "reward", "figure": "peer: PyYAML safe_load_all of the same yaml blocks only",
                 "value": round(peer, 1), "unit": "answers/s", "peer": round(rows[0]["value"], 1),
                 "yardstick": "reward answers/s (row 1)", "ratio": round(rows[0]["value"] / peer, 2),
                 "goal": "share of the budget YAML alone takes"})
    return rows


def _score_of(root: Path):
    """`score` and the answer-content caches of the `core` package under `root` (imported afresh, every
    module the reward uses loaded before the caches are collected)."""
    for name in [m for m in sys.modules if m == "core" or m.startswith("core.")]:
        del sys.modules[name]
    sys.path.insert(0, str(root))
    try:
        from core.rewards import score

        score(WARM_UP, {"type": "kubernetes", "expected_outputs": ["x"]})
    finally:
        sys.path.remove(str(root))
    return score, _answer_caches()


def _rules_only(score):
    """The parsing and rubric tier of a build: `validators=False` where the build has external validators."""
    import functools
    import inspect

    return functools.partial(score, validators=False) if "validators" in inspect.signature(score).parameters else score


def compare(revision: str, rounds: int = 4) -> list[dict]:
    """This tree's reward against `revision`'s, interleaved in one process (the peer is the old build)."""
    import io
    import subprocess
    import tarfile
    import tempfile

    repo = Path(__file__).resolve().parents[1]
    archive = subprocess.run(["git", "-C", str(repo), "archive", revision, "core"], check=True,
                             capture_output=True).stdout
    pairs, references = _rubric_pairs(synthetic_answers())
    data_sets = (
        ("synthetic 1-6 KB with code, tasks with a rubric", pairs),
        (f"{len(references)} reference answers (tasks with a rubric)", references),
    )
    rows = []
    with tempfile.TemporaryDirectory() as old_root:  # kept until the end: the old build may import lazily
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(old_root, filter="data")
        builds = {"old": _score_of(Path(old_root)), "new": _score_of(repo)}
        builds = {name: (_rules_only(fn), cache) for name, (fn, cache) in builds.items()}
        for score, _ in builds.values():
            for _, task in references:
                score(WARM_UP, task)
        for figure, data in data_sets:
            spent = {"old": 0.0, "new": 0.0}
            for rnd in range(rounds):
                for _, caches in builds.values():
                    _fresh(caches)
                for start in range(0, len(data), 10):
                    for name in ("old", "new") if (start // 10 + rnd) % 2 == 0 else ("new", "old"):
                        score = builds[name][0]
                        started = time.process_time()
                        for answer, task in data[start : start + 10]:
                            score(answer, task)
                        spent[name] += time.process_time() - started
            old, new = (rounds * len(data) / spent[name] for name in ("old", "new"))
            rows.append({"benchmark": "reward", "figure": f"answers/s, {figure}", "value": round(new, 1),
                         "unit": "answers/s", "peer": round(old, 1), "yardstick": f"same run at {revision}",
                         "ratio": round(new / old, 2), "goal": "> 1"})
        rows.extend(_compare_validator_tier(old_root, revision))
    return rows


def _compare_validator_tier(old_root: str, revision: str, rounds: int = 2, count: int = 128) -> list[dict]:
    """The validator tier of both builds side by side: one warm pool each, the same fresh answers per round
    (new ones every round, so no validator cache helps), the order alternating; by wall and by CPU time."""
    pools = {"old": _validator_pool(old_root), "new": _validator_pool()}
    spent = {("old", "wall time"): 0.0, ("new", "wall time"): 0.0, ("old", "CPU time"): 0.0, ("new", "CPU time"): 0.0}
    try:
        for rnd in range(rounds):
            pairs = _rubric_pairs(synthetic_answers(count=count, seed=100 + rnd))[0]
            for name in ("old", "new") if rnd % 2 == 0 else ("new", "old"):
                wall, cpu = _validator_wall(pools[name], pairs)
                spent[(name, "wall time")] += wall
                spent[(name, "CPU time")] += cpu / WORKERS  # the seconds WORKERS free cores would take
    finally:
        for pool in pools.values():
            pool.shutdown()
    rows = []
    for how in ("wall time", "CPU time"):
        old, new = (rounds * count / spent[(name, how)] for name in ("old", "new"))
        rows.append({"benchmark": "reward", "value": round(new, 1), "unit": "answers/s", "peer": round(old, 1),
                     "figure": f"validator tier, fresh answers/s on {WORKERS} processes (all validators), {how}",
                     "yardstick": f"same run at {revision}", "ratio": round(new / old, 2), "goal": "> 1"})
    return rows


if __name__ == "__main__":
    import argparse

    from run_all import print_table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", metavar="REV", help="time this tree against a git revision, interleaved")
    args = parser.parse_args()
    print_table(compare(args.against) if args.against else run())
