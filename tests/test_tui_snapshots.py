"""SVG snapshots of every cockpit screen and Live tab, at 120x40 and at 80x24, from frozen data.

Run folders, task files and eval results are written from fixed formulas, the clock is frozen, NVML is stubbed (no
GPU figures from this machine) and paths are relative; update with `pytest tests/test_tui_snapshots.py
--snapshot-update` and look at them.
"""

from __future__ import annotations

import json
import math
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from devops_tui.app import CockpitApp

STARTED = datetime(2026, 11, 30, 17, 0, tzinfo=UTC)
NOW = STARTED.timestamp() + 3 * 3600 + 120
DIMENSIONS = ("automation", "reliability", "security", "observability", "documentation", "expected_outputs")
RUN_ID = "20261130-170000-ci-fast-5e1f"
SIZES = [pytest.param((120, 40), id="120x40"), pytest.param((80, 24), id="80x24")]


def sample(step: int, task: str, group: str, answer: int, reward: float, advantage: float) -> dict:
    """One logged answer with its whole breakdown, as the torch trainer writes it."""
    return {
        "task_id": task, "group": group, "prompt": "Add readiness and liveness probes to the checkout Deployment.",
        "reward": reward, "advantage": advantage,
        "response": f"Step {step}, answer {answer}:\n```yaml\nreadinessProbe:\n  httpGet: {{path: /readyz, port: 8080}}\n```\n"
                    "Roll out with maxUnavailable 0 and watch the error rate.",
        "breakdown": {
            "final_reward": reward, "dimensions": {d: round(0.4 + 0.05 * i, 2) for i, d in enumerate(DIMENSIONS)},
            "penalties": {"repetition": 0.0, "length": 0.05},
            "evidence": {"reliability": ["probe: readinessProbe httpGet /readyz"], "length": ["41 words (under 60)"]},
            "rubric": {"score": 0.6, "share": 0.7, "criteria": [
                {"id": "readiness-probe", "description": "an HTTP readiness probe on the serving port", "weight": 0.5,
                 "score": 1.0, "status": "passed", "forbid": False, "evidence": ["yaml: readinessProbe.httpGet.path"]},
                {"id": "liveness-probe", "description": "a liveness probe that does not share the readiness path",
                 "weight": 0.3, "score": 0.5, "status": "partial", "forbid": False, "evidence": ["concept: liveness"]},
                {"id": "no-downtime", "description": "a rollout that keeps capacity", "weight": 0.2, "score": 0.0,
                 "status": "failed", "forbid": False, "evidence": []}]}},
    }


def write_run(folder: Path, *, steps: int = 40, status: str = "finished", run_id: str = RUN_ID,
              planned: int = 40) -> Path:
    """A ci-fast run with smooth, slightly noisy curves, samples, an alert and a log, written as the trainer does."""
    run = folder / run_id
    run.mkdir(parents=True)
    (run / "meta.json").write_text(json.dumps({
        "run_id": run_id, "backend": "torch", "mode": "ci-fast", "status": status, "pid": None,
        "host": "box", "started_at": STARTED.isoformat(), "total_steps": steps,
        "message": f"stopped by SIGINT at step {steps}" if status == "stopped" else None}))
    (run / "config.yaml").write_text(f"trainer:\n  total_training_steps: {planned}\nactor_rollout_ref:\n  actor:\n"
                                     f"    optim:\n      lr: {1e-6 if status == 'finished' else 2e-6}\n")
    with open(run / "metrics.jsonl", "w") as metrics:
        for step in range(1, steps + 1):
            trend = 0.25 + 0.45 * (1 - math.exp(-step / 12))
            data = {f"reward/{d}/mean": trend * (0.8 + 0.05 * i) + 0.04 * math.sin(step * (i + 1))
                    for i, d in enumerate(DIMENSIONS)}
            data.update({
                "reward/final/mean": trend + 0.02 * math.sin(step), "reward/rubric/mean": trend * 0.9,
                "reward/keyword_stuffing/mean": 0.05 * (1 + math.cos(step / 3)),
                "actor/pg_loss": 0.05 * math.sin(step / 2), "actor/ppo_kl": 0.0004 * step,
                "actor/entropy": 2.4 - step / 40, "actor/pg_clipfrac": 0.02 + 0.01 * math.sin(step),
                "actor/grad_norm": 0.8 + 0.3 * math.cos(step / 4), "actor/lr": 1e-4,
                "critic/score/mean": trend, "critic/score/max": trend + 0.2, "critic/score/min": trend - 0.2,
                "critic/score/zero_std_ratio": 0.5 * math.exp(-step / 10),
                "response_length/mean": 48 + step / 2, "response_length/max": 64,
                "response_length/clip_ratio": 0.3 * math.exp(-step / 15),
                "timing_s/step": 1.5, "timing_s/gen": 0.9, "timing_s/update_actor": 0.5,
                "perf/throughput": 820 + 30 * math.sin(step / 5), "perf/cpu_memory_used_gb": 1.2 + step / 400,
                "host/memory_used_gb": 11.0 + step / 100, "host/memory_total_gb": 23.5, "host/cpu_percent": 140 + step,
                "actor/perf/max_memory_allocated_gb": 1.6 + step / 200,
                "actor/perf/max_memory_reserved_gb": 1.9 + step / 200,
                "training/global_step": step, "training/epoch": 1, "training/total_steps": planned,
            })
            if step % 10 == 0:
                data["val/score/mean"] = trend - 0.05
            metrics.write(json.dumps({"step": step, "data": data}) + "\n")
    with open(run / "train.log", "w") as log:
        for step in range(1, steps + 1):
            log.write(f"2026-11-30 17:{step // 60:02d}:{step % 60:02d} | INFO | train_step:88 | step {step}/{planned}\n")
    with open(run / "samples.jsonl", "w") as handle:
        for step in range(max(1, steps - 2), steps + 1):
            samples = [sample(step, "k8s-001", f"{step}-0", i, 0.5 + 0.1 * i, 0.9 * (2 * i - 1)) for i in (0, 1)]
            samples += [sample(step, "sec-001", f"{step}-1", i, 0.3, 0.0) for i in (0, 1)]
            handle.write(json.dumps({"step": step, "samples": samples}) + "\n")
    events = [{"time": STARTED.isoformat(), "event": "started", "mode": "ci-fast", "backend": "torch"},
              {"time": STARTED.isoformat(), "event": "alert", "check": "clip_ratio", "level": "warning",
               "series": "response_length/clip_ratio", "step": 5, "value": 0.22,
               "message": "22% of answers cut at max_response_length (steps to 5): raise data.max_response_length"},
              {"time": STARTED.isoformat(), "event": status, "step": steps}]
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return run


@pytest.fixture
def frozen(tmp_path, monkeypatch):
    """A working folder with runs, task files and eval results; relative paths keep snapshots stable."""
    from core.training import sysmon

    monkeypatch.setattr(sysmon, "_nvml", lambda: None)  # no GPU figures from the machine the tests run on
    monkeypatch.chdir(tmp_path)
    runs = Path("runs")
    run = write_run(runs)
    write_run(runs, steps=12, status="stopped", run_id="20261130-160000-ci-fast-0a2b", planned=21)
    (run / "eval").mkdir()
    from core.agent.results import summarize

    for stamp, base in (("20261130-171500", 0.41), ("20261130-180500", 0.58)):
        results = [{"task_id": task_id, "type": task_type, "difficulty": difficulty, "reward": round(base + shift, 3),
                    "breakdown": {"final_reward": base + shift,
                                  "dimensions": {d: round(base + shift + 0.02 * i, 3) for i, d in enumerate(DIMENSIONS)},
                                  "penalties": {"repetition": 0.0, "length": round(0.1 - base / 10, 3)}}}
                   for task_id, task_type, difficulty, shift in (("k8s-001", "kubernetes", "easy", 0.05),
                                                                 ("k8s-002", "kubernetes", "hard", -0.1),
                                                                 ("sec-001", "security", "medium", 0.02 * (base > 0.5)))]
        settings = {"model": "runs/20261130-170000-ci-fast-5e1f/checkpoints/global_step_40", "max_tokens": 512,
                    "temperature": 0.0 if base > 0.5 else 0.7, "split": "val"}
        (run / "eval" / f"eval_results_{stamp}.json").write_text(json.dumps({
            "settings": settings, "summary": summarize(results, wall_time_s=12.0), "results": results}))
    tasks = Path("tasks")
    tasks.mkdir()
    for task_type, ids in (("kubernetes", ("k8s-001", "k8s-002")), ("security", ("sec-001",))):
        (tasks / f"{task_type}.yaml").write_text("".join(
            f"- id: {task_id}\n  type: {task_type}\n  difficulty: {'easy' if task_id.endswith('1') else 'hard'}\n"
            f"  desc: Make the {task_type} setup of service {task_id} safe to roll out and roll back.\n"
            "  expected_outputs: [rollback plan, health checks, alerting]\n"
            "  reference_answer: |\n    **Plan:** add health checks, a rollback plan and alerting on errors.\n"
            for task_id in ids))
    return {"runs": runs, "run": run, "tasks": tasks}


def make_app(frozen, **kwargs) -> CockpitApp:
    return CockpitApp(runs_root=frozen["runs"], clock=lambda: NOW, task_paths=[frozen["tasks"]], **kwargs)


async def until(pilot, condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "snapshot data did not arrive"
        await pilot.pause(0.05)


async def live_ready(pilot) -> None:
    live = pilot.app.screen
    await until(pilot, lambda: live.state.rows_seen == 40 and live.query("#charts-rewards"))
    panel = live.query_one("#charts-rewards")
    live.redraw()
    await until(pilot, lambda: panel.charts[0].draws > 0 and live.query("#live-log"))


async def live_tab(pilot, key: str, ready) -> None:
    await live_ready(pilot)
    await pilot.press(key)
    live = pilot.app.screen
    await until(pilot, lambda: ready(live))
    live.redraw()
    await pilot.wait_for_scheduled_animations()


LIVE_TABS = {
    "rewards": ("r", lambda live: live.query_one("#charts-rewards").charts[-1].draws > 0),
    "training": ("t", lambda live: live.query("#charts-training") and live.query_one("#charts-training").charts[0].draws),
    "system": ("y", lambda live: live.query("#charts-system") and live.query_one("#charts-system").charts[0].draws),
    "samples": ("m", lambda live: live.query("SampleInspector") and live.query_one("SampleInspector").step == 40),
    "metrics": ("k", lambda live: live.query("MetricsTable") and len(live.query_one("MetricsTable").rows) > 30),
    "alerts": ("a", lambda live: live.query("AlertHistory") and len(live.query_one("AlertHistory").records) >= 1),
    "log": ("l", lambda live: live.query_one("#live-log").line_count == 40),
}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("tab", list(LIVE_TABS))
def test_live_screen(snap_compare, frozen, tab, size):
    key, ready = LIVE_TABS[tab]

    async def shown(pilot):
        await live_tab(pilot, key, ready)

    assert snap_compare(make_app(frozen, attach=frozen["run"]), terminal_size=size, run_before=shown)


@pytest.mark.parametrize("size", SIZES)
def test_runs_screen(snap_compare, frozen, size):
    async def listed(pilot):
        await until(pilot, lambda: len(pilot.app.screen.rows) == 2)
        await pilot.press("space")  # one run marked for comparison

    assert snap_compare(make_app(frozen), terminal_size=size, run_before=listed)


@pytest.mark.parametrize("size", SIZES)
def test_dataset_screen(snap_compare, frozen, monkeypatch, size):
    # The reward is tuned by its own tests; this snapshot is about layout, so its numbers are frozen.
    from types import SimpleNamespace

    import core.rewards

    fixed = SimpleNamespace(final_reward=0.615, dimensions={d: round(0.5 + 0.05 * i, 2) for i, d in enumerate(DIMENSIONS)},
                            penalties={"repetition": 0.0, "length": 0.05})
    monkeypatch.setattr(core.rewards, "score", lambda answer, task: fixed)

    async def loaded(pilot):
        await pilot.press("2")
        screen = pilot.app.screen
        await until(pilot, lambda: len(screen.tasks) == 3
                    and "0.615" in str(screen.query_one("#task-breakdown").render()))
        await pilot.wait_for_scheduled_animations()

    assert snap_compare(make_app(frozen), terminal_size=size, run_before=loaded)


@pytest.mark.parametrize("size", SIZES)
def test_config_screen(snap_compare, frozen, size):

    async def shaped(pilot):
        await pilot.press("3")
        screen = pilot.app.screen
        await until(pilot, lambda: bool(screen.keys), timeout=60)
        screen.set_value("actor_rollout_ref.actor.optim.lr", "2e-4")
        await until(pilot, lambda: not screen.checking and "optim.lr" in str(screen.query_one("#config-diff").render()))
        await until(pilot, lambda: "model" in str(screen.query_one("#config-doctor").render()), timeout=60)

    assert snap_compare(make_app(frozen), terminal_size=size, run_before=shaped)


@pytest.mark.parametrize("size", SIZES)
def test_results_screen(snap_compare, frozen, size):
    async def compared(pilot):
        await until(pilot, lambda: len(pilot.app.screen.rows) == 2)
        await pilot.press("e")
        screen = pilot.app.screen
        await until(pilot, lambda: len(getattr(screen, "files", [])) == 2)
        await pilot.press("down", "c", "up")  # the newer picked first: A is still the older one
        await until(pilot, lambda: len(screen.query_one("#results-table").columns) == 4)

    assert snap_compare(make_app(frozen), terminal_size=size, run_before=compared)


@pytest.mark.parametrize("size", SIZES)
def test_compare_screen(snap_compare, frozen, size):
    async def compared(pilot):
        await until(pilot, lambda: len(pilot.app.screen.rows) == 2)
        await pilot.press("space", "space", "c")
        await until(pilot, lambda: pilot.app.screen.__class__.__name__ == "CompareScreen"
                    and len(pilot.app.screen.runs) == 2)
        chart = pilot.app.screen.query_one("#compare-chart")
        await until(pilot, lambda: chart.chart.draws > 0 and all(chart.chart._series))

    assert snap_compare(make_app(frozen), terminal_size=size, run_before=compared)


@pytest.mark.parametrize("size", SIZES)
def test_help_screen(snap_compare, frozen, size):
    assert snap_compare(make_app(frozen), terminal_size=size, press=["question_mark"])
