"""The execution tier's cost per answer: for every task with an executed criterion, its reference and mutants
run through the engine uncached (wall time, the cache cleared before each run), then once more from the cache;
the peer is the whole reward of the same answers with the cache warm (the tier's cost next to the rest).
Goal from issue 20: >= 30 fresh answers/s on 2 cores on a realistic mix. Per engine the figure is
2 / (mean seconds per answer); the mix is every task's reference and mutants (the audit's answers, 29% of the tasks
with an executed criterion), shuffled, the whole reward in 2 worker processes, every cache cleared before each answer.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GOAL = 30.0
CORES = 2


def _runs():
    """(engine, artifact text, scenario, task, answer) for every executed criterion and answer of the task set."""
    from core.rewards.audit import apply_mutant
    from core.rewards.engines import ENGINES
    from core.rewards.parse.artifacts import Artifacts
    from core.rewards.parse.text import analyse
    from core.rewards.rubric import compile_check
    from core.rewards.rubric.checks import AnyOf, RunCheck
    from tasks import load_tasks

    out = []
    for task in load_tasks():
        answers = [task.reference_answer] + [apply_mutant(task.reference_answer, m) for m in task.mutants]
        for criterion in task.rubric:
            check = compile_check(criterion["check"], criterion["id"])
            for run in [c for c in (check.checks if isinstance(check, AnyOf) else [check]) if isinstance(c, RunCheck)]:
                for answer in answers:
                    artifact = ENGINES[run.engine].artifact(Artifacts(analyse(answer)), run.scenario)
                    if artifact is not None:
                        out.append((run.engine, artifact.text, run.scenario, task, answer))
    return out


def _fresh_score(job: tuple[str, str]) -> float:
    """Seconds for the whole reward of one answer, the engine and validator caches cleared first (a worker)."""
    from core.rewards import score
    from core.rewards.checks.validators import clear_cache
    from core.rewards.engines import CACHE
    from tasks import load_tasks

    answer, task_id = job
    if not _TASKS:  # once per worker
        _TASKS.update((t.id, t) for t in load_tasks())
    task = _TASKS[task_id]
    CACHE.clear()
    clear_cache()
    started = time.perf_counter()
    score(answer, task)
    return time.perf_counter() - started


_TASKS: dict = {}  # task id -> task, in each worker


def _mix() -> list[dict]:
    """The whole reward, execution tier on, on the audit's answers in CORES worker processes, wall time."""
    import multiprocessing
    import random

    from core.rewards.audit import apply_mutant
    from tasks import load_tasks

    jobs = [(answer, task.id) for task in load_tasks()
            for answer in [task.reference_answer] + [apply_mutant(task.reference_answer, m) for m in task.mutants]]
    random.Random(0).shuffle(jobs)
    with multiprocessing.get_context("spawn").Pool(CORES) as pool:
        pool.map(_fresh_score, jobs[:CORES * 4], chunksize=1)  # imports, parsers and task files in each worker
        started = time.perf_counter()
        seconds = pool.map(_fresh_score, jobs, chunksize=4)
        wall = time.perf_counter() - started
    rate = len(jobs) / wall
    return [{"benchmark": "engines", "figure": f"realistic mix: fresh answers/s on {CORES} processes, whole reward "
             f"({len(jobs)} reference and mutant answers of every task, wall)", "value": rate, "unit": "/s",
             "peer": GOAL, "ratio": rate / GOAL, "goal": f">= {GOAL:g}"},
            {"benchmark": "engines", "figure": "realistic mix: ms per answer, median / 95th percentile",
             "value": statistics.median(seconds) * 1000,
             "peer": statistics.quantiles(seconds, n=20)[-1] * 1000, "unit": "ms"}]


def run() -> list[dict]:
    from core.rewards import score
    from core.rewards.engines import CACHE, engine_missing, run_engine

    runs = _runs()
    rows = []
    for engine in sorted({r[0] for r in runs}):
        if engine_missing(engine):
            rows.append({"benchmark": "engines", "figure": f"{engine}: not installed ({engine_missing(engine)})"})
            continue
        mine = [r for r in runs if r[0] == engine]
        fresh = []
        for _, text, scenario, _, _ in mine:
            CACHE.clear()
            started = time.perf_counter()
            run_engine(engine, text, scenario)
            fresh.append(time.perf_counter() - started)
        for _, text, scenario, _, _ in mine:  # fill the cache
            run_engine(engine, text, scenario)
        started = time.perf_counter()
        for _, text, scenario, _, _ in mine:
            run_engine(engine, text, scenario)
        cached = (time.perf_counter() - started) / len(mine)
        started = time.perf_counter()
        for *_, task, answer in mine:
            score(answer, task)
        whole = (time.perf_counter() - started) / len(mine)
        mean = statistics.mean(fresh)
        rows += [
            {"benchmark": "engines", "figure": f"{engine}: ms per fresh answer ({len(mine)} answers, wall)",
             "value": mean * 1000, "unit": "ms", "peer": whole * 1000,
             "ratio": mean / whole if whole else None, "goal": "peer: the whole reward, cache warm"},
            {"benchmark": "engines", "figure": f"{engine}: fresh answers/s on {CORES} cores",
             "value": CORES / mean, "unit": "/s", "goal": f">= {GOAL:g}"},
            {"benchmark": "engines", "figure": f"{engine}: ms per cached answer", "value": cached * 1000, "unit": "ms"},
            {"benchmark": "engines", "figure": f"{engine}: slowest fresh answer", "value": max(fresh) * 1000,
             "unit": "ms"},
        ]
    return rows + _mix()


if __name__ == "__main__":
    from run_all import print_table

    print_table(run())
