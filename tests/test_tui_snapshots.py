"""SVG snapshots of every cockpit screen at 120x40 and the Live screen at 80x24, from frozen data.

Run folders, task files and eval results are written from fixed formulas, the clock is frozen and
paths are relative; update with `pytest tests/test_tui_snapshots.py --snapshot-update` and look at them.
"""

from __future__ import annotations

import json
import math
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from devops_tui.app import CockpitApp

STARTED = datetime(2026, 11, 30, 17, 0, tzinfo=timezone.utc)
NOW = STARTED.timestamp() + 3 * 3600 + 120
DIMENSIONS = ("automation", "reliability", "security", "observability", "documentation", "expected_outputs")
RUN_ID = "20261130-170000-ci-fast-5e1f"


def write_run(folder: Path, *, steps: int = 40, status: str = "finished", run_id: str = RUN_ID) -> Path:
    """A finished ci-fast run with smooth, slightly noisy curves, written as the trainer writes it."""
    run = folder / run_id
    run.mkdir(parents=True)
    (run / "meta.json").write_text(json.dumps({
        "run_id": run_id, "backend": "torch", "mode": "ci-fast", "status": status, "pid": None,
        "host": "box", "started_at": STARTED.isoformat(), "total_steps": steps}))
    with open(run / "metrics.jsonl", "w") as metrics:
        for step in range(1, steps + 1):
            trend = 0.25 + 0.45 * (1 - math.exp(-step / 12))
            data = {f"reward/{d}/mean": trend * (0.8 + 0.05 * i) + 0.04 * math.sin(step * (i + 1))
                    for i, d in enumerate(DIMENSIONS)}
            data.update({
                "reward/final/mean": trend + 0.02 * math.sin(step),
                "reward/keyword_stuffing/mean": 0.05 * (1 + math.cos(step / 3)),
                "actor/pg_loss": 0.05 * math.sin(step / 2), "actor/ppo_kl": 0.0004 * step,
                "actor/entropy": 2.4 - step / 40, "actor/pg_clipfrac": 0.02 + 0.01 * math.sin(step),
                "actor/grad_norm": 0.8 + 0.3 * math.cos(step / 4), "actor/lr": 1e-4,
                "critic/score/mean": trend, "critic/score/max": trend + 0.2, "critic/score/min": trend - 0.2,
                "response_length/mean": 48 + step / 2, "response_length/max": 64,
                "timing_s/step": 1.5, "timing_s/gen": 0.9, "timing_s/update_actor": 0.5,
                "perf/throughput": 820 + 30 * math.sin(step / 5), "perf/cpu_memory_used_gb": 1.2 + step / 400,
                "training/global_step": step, "training/epoch": 1,
            })
            metrics.write(json.dumps({"step": step, "data": data}) + "\n")
    with open(run / "train.log", "w") as log:
        for step in range(1, steps + 1):
            log.write(f"2026-11-30 17:{step // 60:02d}:{step % 60:02d} | INFO | train_step:88 | step {step}/{steps}\n")
    sample = {"step": steps, "samples": [{
        "task_id": "k8s-001", "prompt": "Add readiness probes", "reward": 0.71,
        "response": "Use a readinessProbe on /readyz\nand a livenessProbe on /healthz.",
        "breakdown": {"final_reward": 0.71, "dimensions": {d: 0.7 for d in DIMENSIONS},
                      "penalties": {"repetition": 0.0, "length": 0.05}}}]}
    (run / "samples.jsonl").write_text(json.dumps(sample) + "\n")
    (run / "events.jsonl").write_text(json.dumps({"time": STARTED.isoformat(), "event": "finished"}) + "\n")
    return run


@pytest.fixture
def frozen(tmp_path, monkeypatch):
    """A working folder with runs, task files and eval results; relative paths keep snapshots stable."""
    monkeypatch.chdir(tmp_path)
    runs = Path("runs")
    run = write_run(runs)
    write_run(runs, steps=12, status="stopped", run_id="20261130-160000-ci-fast-0a2b")
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
        (run / "eval" / f"eval_results_{stamp}.json").write_text(json.dumps({
            "summary": summarize(results, wall_time_s=12.0), "results": results}))
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


async def until(pilot, condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "snapshot data did not arrive"
        await pilot.pause(0.05)


async def live_ready(pilot) -> None:
    live = pilot.app.screen
    await until(pilot, lambda: live.state.rows_seen == 40 and bool(live.state.samples))
    live.redraw()
    await pilot.pause(0.2)


def test_live_screen_120x40(snap_compare, frozen):
    assert snap_compare(make_app(frozen, attach=frozen["run"]), terminal_size=(120, 40), run_before=live_ready)


def test_live_screen_80x24(snap_compare, frozen):
    assert snap_compare(make_app(frozen, attach=frozen["run"]), terminal_size=(80, 24), run_before=live_ready)


def test_live_training_tab_120x40(snap_compare, frozen):
    async def training(pilot):
        await live_ready(pilot)
        await pilot.press("t")
        await pilot.pause(0.2)

    assert snap_compare(make_app(frozen, attach=frozen["run"]), terminal_size=(120, 40), run_before=training)


def test_runs_screen_120x40(snap_compare, frozen):
    async def listed(pilot):
        await until(pilot, lambda: len(pilot.app.screen.rows) == 2)
        await pilot.pause(0.1)

    assert snap_compare(make_app(frozen), terminal_size=(120, 40), run_before=listed)


def test_dataset_screen_120x40(snap_compare, frozen, monkeypatch):
    # The reward is tuned by its own tests; this snapshot is about layout, so its numbers are frozen.
    import core.rewards
    from types import SimpleNamespace

    fixed = SimpleNamespace(final_reward=0.615, dimensions={d: round(0.5 + 0.05 * i, 2) for i, d in enumerate(DIMENSIONS)},
                            penalties={"repetition": 0.0, "length": 0.05})
    monkeypatch.setattr(core.rewards, "score", lambda answer, task: fixed)

    async def loaded(pilot):
        await pilot.press("2")
        await until(pilot, lambda: len(pilot.app.screen.tasks) == 3)
        await pilot.pause(0.3)

    assert snap_compare(make_app(frozen), terminal_size=(120, 40), run_before=loaded)


def test_config_screen_120x40(snap_compare, frozen):
    pytest.importorskip("core.training.config")

    async def shaped(pilot):
        await pilot.press("3")
        screen = pilot.app.screen
        await until(pilot, lambda: bool(screen.keys))
        screen.set_value("actor_rollout_ref.actor.optim.lr", "2e-4")
        await until(pilot, lambda: "model" in str(screen.query_one("#config-doctor").render()), timeout=60)
        await pilot.pause(0.2)

    assert snap_compare(make_app(frozen), terminal_size=(120, 40), run_before=shaped)


def test_results_screen_120x40(snap_compare, frozen):
    async def compared(pilot):
        await until(pilot, lambda: len(pilot.app.screen.rows) == 2)
        await pilot.press("e")
        await until(pilot, lambda: len(getattr(pilot.app.screen, "files", [])) == 2)
        await pilot.press("up", "c", "down")
        await pilot.pause(0.2)

    assert snap_compare(make_app(frozen), terminal_size=(120, 40), run_before=compared)


def test_help_screen_120x40(snap_compare, frozen):
    assert snap_compare(make_app(frozen), terminal_size=(120, 40), press=["question_mark"])
