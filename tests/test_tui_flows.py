"""Pilot tests of the cockpit's v2 flows against real run folders: alerts from a run that goes NaN, collapses and
crashes; the sample inspector; comparing runs; honest status of failed and stopped runs; the metrics table and
chart controls; the Config edit box; the Dataset screen's reading order.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from devops_tui.app import CockpitApp
from tests.conftest import text_of, wait_for, write_eval_results, write_task_files

CRASHING_TRAINER = r'''
import math, os, signal, sys
from pathlib import Path
from core.runs import HealthMonitor, RunDirectory
run = RunDirectory.create(Path(sys.argv[1]), mode="ci-fast", backend="torch", config="trainer: {}\n",
                          run_id=sys.argv[2])
run.update_meta(total_steps=60)
health = HealthMonitor()
for step in range(1, 41):
    reward = 0.6 + 0.01 * (step % 3) if step <= 20 else 0.1 + 0.01 * (step % 3)  # learns, then collapses
    data = {"critic/score/mean": reward, "actor/pg_loss": None if step == 25 else 0.1, "actor/entropy": 2.0,
            "timing_s/step": 0.5, "training/total_steps": 60}
    run.log_metrics(step, data)
    health.add(step, data)
    for alert in health.poll_new():  # what the trainer does with every new alert
        run.event("alert", **alert.to_event())
os.kill(os.getpid(), signal.SIGKILL)  # dies without saying so: meta.json keeps "running"
'''


async def test_alerts_from_a_run_that_goes_nan_collapses_and_crashes(tmp_path):
    root = tmp_path / "runs"
    script = tmp_path / "crash.py"
    script.write_text(CRASHING_TRAINER)
    run_id = "20261130-170000-ci-fast-dead"
    subprocess.run([sys.executable, str(script), str(root), run_id], cwd=Path(__file__).resolve().parents[1],
                   timeout=120)
    run = root / run_id
    trainer_alerts = [json.loads(line)["check"] for line in (run / "events.jsonl").read_text().splitlines()
                      if '"alert"' in line]
    assert trainer_alerts == ["nan", "not_learning", "reward_collapse"]  # a flat start, then the fall
    app = CockpitApp(attach=run, runs_root=root)
    async with app.run_test(size=(120, 40)) as pilot:
        live = app.screen
        bar = live.query_one("#live-alerts")
        await wait_for(pilot, lambda: live.state.rows_seen == 40 and bar.display, what="the alerts")
        title = str(live.query_one("#live-title").render())
        assert "crashed at step 40" in title and "ETA" not in title and "step 40/60" in title
        lines = str(bar.render()).splitlines()
        assert lines[0].startswith("✖") and lines[1].startswith("✖")  # errors first: NaN at step 25, the crash
        assert "NaN/inf in actor/pg_loss at step 25" in lines[0] and "process" in lines[1]
        assert lines[2].startswith("⚠") and "critic/score/mean fell to" in lines[2]
        await pilot.press("x")  # acknowledged: errors and warnings leave the bar (issue 24: warnings held rows for good)
        await wait_for(pilot, lambda: not bar.display, what="acknowledged alerts")
        await pilot.press("a")
        await wait_for(pilot, lambda: live.query("AlertHistory"), what="the Alerts tab")
        history = live.query_one("AlertHistory")
        await wait_for(pilot, lambda: len(history.records) >= 4, what="the alert history")
        rows = sorted((r.alert.kind, r.source) for r in history.records)
        # One row per alert: the trainer's and the cockpit's own NaN check at step 25 are one (issue 24 item 6).
        assert rows == [("crashed", "cockpit"), ("nan", "trainer"), ("not_learning", "trainer"),
                        ("reward_collapse", "trainer")]
        shown = str(history.query_one("#alerts-table").render())
        assert "step 25  nan  actor/pg_loss" in shown and "NaN/inf in actor/pg_loss at step 25" in shown
    assert json.loads((run / "meta.json").read_text())["status"] == "running"  # the cockpit never writes there


def write_sample_run(root: Path) -> Path:
    """A finished run whose samples.jsonl holds whole groups with advantages and rubric criteria, as the trainer
    logs them, for three steps."""
    run = root / "20261130-170000-ci-fast-5a11"
    run.mkdir(parents=True)
    (run / "meta.json").write_text(json.dumps({"run_id": run.name, "status": "finished", "total_steps": 3}))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "data": {"critic/score/mean": s / 10}}) + "\n"
                                               for s in (1, 2, 3)))
    with open(run / "samples.jsonl", "w") as handle:
        for step in (1, 2, 3):
            samples = []
            for task, prompt in (("k8s-001", "Add readiness probes to the checkout Deployment"),
                                 (f"sec-00{step}", "Rotate a leaked password")):
                for answer, (reward, advantage) in enumerate(((0.2 * step, -0.7), (0.25 * step, 0.7))):
                    samples.append({
                        "task_id": task, "group": f"{step}-{task}", "prompt": prompt, "reward": reward,
                        "advantage": advantage, "response": f"answer {answer} at step {step}: readinessProbe on /readyz",
                        "breakdown": {
                            "final_reward": reward, "dimensions": {"reliability": 0.5, "security": 0.1},
                            "penalties": {"length": 0.05, "repetition": 0.0},
                            "evidence": {"reliability": ["probe: readinessProbe on /readyz"], "length": ["12 words"]},
                            "rubric": {"score": 0.5, "share": 0.7, "criteria": [
                                {"id": "probe-defined", "description": "a readiness probe", "weight": 0.6, "score": 1.0,
                                 "status": "passed", "forbid": False, "evidence": ["yaml: readinessProbe.httpGet"]},
                                {"id": "no-root", "description": "runs as non-root", "weight": 0.4, "score": 0.0,
                                 "status": "failed", "forbid": False, "evidence": []}]}}})
            handle.write(json.dumps({"step": step, "samples": samples}) + "\n")
    return run


async def test_sample_inspector_shows_an_answer_its_group_and_the_prompt_across_steps(tmp_path):
    run = write_sample_run(tmp_path / "runs")
    app = CockpitApp(attach=run, runs_root=tmp_path / "runs")
    async with app.run_test(size=(120, 40)) as pilot:
        live = app.screen
        await wait_for(pilot, lambda: live.state.rows_seen == 3, what="the run")
        await pilot.press("m")
        inspector = live.query_one("SampleInspector")
        body = inspector.query_one("#samples-body")
        await wait_for(pilot, lambda: inspector.step == 3 and "readinessProbe" in text_of(body), what="step 3")
        text = text_of(body)
        for expected in ("Add readiness probes to the checkout Deployment", "answer 0 at step 3", "advantage -0.70",
                         "probe-defined", "yaml: readinessProbe.httpGet", "no-root", "probe: readinessProbe",
                         "length", "-0.05", "group 3-k8s-001 (answer 1 of 2)"):
            assert expected in text, expected
        assert inspector.query_one("#samples-table").row_count == 4  # every answer of the step, both groups
        await pilot.press("left_square_bracket")
        await wait_for(pilot, lambda: inspector.step == 2 and "at step 2" in text_of(body), what="step 2")
        await pilot.press("v")  # the group: both answers to the prompt, best advantage first
        await wait_for(pilot, lambda: "2 answers" in str(body.render()), what="the group view")
        group = str(body.render())
        assert group.index("advantage +0.70") < group.index("advantage -0.70")
        await pilot.press("v")  # the same prompt over the run
        await wait_for(pilot, lambda: "in 3 steps" in text_of(body), what="the prompt across steps")
        across = text_of(body)
        assert "step 1: reward 0.250" in across and "step 3: reward 0.750" in across


async def test_compare_overlays_runs_diffs_configs_and_orders_eval_results_by_time(tmp_path):
    root = tmp_path / "runs"
    runs = []
    for name, lr, stamp in (("20261130-160000-ci-fast-c001", "1e-6", "20261130-171000"),
                            ("20261130-170000-ci-fast-c002", "2e-6", "20261130-161000")):
        run = root / name
        (run / "eval").mkdir(parents=True)
        (run / "meta.json").write_text(json.dumps({"run_id": name, "status": "finished"}))
        (run / "config.yaml").write_text(f"actor_rollout_ref:\n  actor:\n    optim:\n      lr: {lr}\ndata:\n  seed: 1\n")
        (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "data": {"critic/score/mean": s / 10}}) + "\n"
                                                   for s in range(1, 4)))
        write_eval_results(run / "eval" / f"eval_results_{stamp}.json", {"k8s-001": 0.4 if lr == "2e-6" else 0.7})
        runs.append(run)
    verl = tmp_path / "verl_metrics.jsonl"  # a verl file-logger JSONL from elsewhere
    verl.write_text("".join(json.dumps({"step": s, "data": {"critic/score/mean": 0.2}}) + "\n" for s in range(1, 6)))
    app = CockpitApp(runs_root=root)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        await wait_for(pilot, lambda: len(screen.rows) == 2, what="the runs")
        await pilot.press("space", "space", "c")  # mark both (the cursor moves down after a mark), compare
        await wait_for(pilot, lambda: app.screen.__class__.__name__ == "CompareScreen" and len(app.screen.runs) == 2,
                       what="the compare screen")
        compare = app.screen
        chart = compare.query_one("#compare-chart")
        await wait_for(pilot, lambda: chart.title == "critic/score/mean" and all(chart.chart._series),
                       what="overlaid curves")
        assert [s.values for s in chart.chart._series] == [[0.1, 0.2, 0.3], [0.1, 0.2, 0.3]]
        config = compare.query_one("#compare-config")
        rows = [[str(c) for c in config.get_row_at(i)] for i in range(config.row_count)]
        assert rows == [["actor_rollout_ref.actor.optim.lr", "1e-6", "2e-6"]]  # only what differs
        compare.query_one("#compare-add").focus()
        await pilot.press(*str(verl), "enter")
        await wait_for(pilot, lambda: len(compare.runs) == 3, what="the verl JSONL")
        assert compare.runs[-1].name == "verl_metrics" and compare.runs[-1].steps == 5
        evals = compare.query_one("#compare-eval")
        await wait_for(pilot, lambda: evals.row_count > 0, what="the eval comparison")
        title = str(compare.query_one("#compare-eval-title").render())
        # A is the older results file (run c002's, 16:10) although run c001 was marked first.
        assert title.index("c002") < title.index("c001")
        assert [str(c) for c in evals.get_row_at(0)] == ["mean reward", "0.400", "0.700", "+0.300"]


async def test_a_failed_launch_shows_why_in_runs_and_live_without_an_endless_bar(tmp_path):
    from devops_tui.launcher import LaunchedRun

    root = tmp_path / "runs"
    run = root / "20261130-170000-ci-fast-f001"
    console = tmp_path / "console.log"
    with open(console, "w") as out:  # `train` refusing its config before it writes a run folder
        process = subprocess.Popen([sys.executable, "-c", "import sys; print('error: data.train_batch_size: lots: "
                                    "not a number'); sys.exit(2)"], stdout=out)
    process.wait(30)
    app = CockpitApp(runs_root=root)
    async with app.run_test(size=(120, 40)) as pilot:
        app.register_launch(LaunchedRun(path=run, process=process, console=console))
        screen = app.screen
        await pilot.press("f5")
        await wait_for(pilot, lambda: [r.run_id for r in screen.rows] == [run.name], what="the failed launch")
        assert screen.rows[0].status_text == "failed: exit code 2: error: data.train_batch_size: lots: not a number"
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen.__class__.__name__ == "LiveScreen", what="the Live screen")
        live = app.screen
        await wait_for(pilot, lambda: "failed" in str(live.query_one("#live-title").render()), what="the header")
        assert not live.query_one("#live-progress").display
        assert "exited with code 2" in str(live.query_one("#live-alerts").render())


async def test_a_stopped_run_says_how_far_it_got_on_runs_and_live(tmp_path):
    root = tmp_path / "runs"
    run = root / "20261130-170000-ci-fast-5707"
    run.mkdir(parents=True)
    (run / "meta.json").write_text(json.dumps({"run_id": run.name, "status": "stopped", "total_steps": 12,
                                               "message": "stopped by SIGINT at step 12"}))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "data": {"critic/score/mean": 0.3,
                                                                                "training/total_steps": 21}}) + "\n"
                                               for s in range(1, 13)))
    app = CockpitApp(runs_root=root)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        await wait_for(pilot, lambda: len(screen.rows) == 1, what="the run")
        table = screen.query_one("#runs-table")
        assert [str(c) for c in table.get_row_at(0)][2:3] == ["stopped at 12 of 21"]
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen.__class__.__name__ == "LiveScreen" and app.screen.state.rows_seen == 12,
                       what="the Live screen")
        live = app.screen
        await wait_for(pilot, lambda: "stopped at 12 of 21" in str(live.query_one("#live-title").render()),
                       what="the header")
        bar = live.query_one("#live-progress")
        assert (bar.progress, bar.total) == (12, 21)  # not a full bar


async def test_metrics_table_filters_every_key_and_saves_csv(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "runs" / "20261130-170000-ci-fast-0c5v"
    run.mkdir(parents=True)
    (run / "meta.json").write_text(json.dumps({"run_id": run.name, "status": "finished"}))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "data": {
        "actor/entropy": 2.0 - s / 10, "actor/grad_norm": s * 1.5, "critic/score/mean": 0.1 * s}}) + "\n"
        for s in range(1, 6)))
    app = CockpitApp(attach=run, runs_root=tmp_path / "runs")
    async with app.run_test(size=(120, 40)) as pilot:
        live = app.screen
        await wait_for(pilot, lambda: live.state.rows_seen == 5, what="the run")
        await pilot.press("k")
        await wait_for(pilot, lambda: live.query("MetricsTable"), what="the Metrics tab")
        table = live.query_one("MetricsTable")
        await wait_for(pilot, lambda: len(table.rows) == 3, what="the metrics table")
        live.query_one("#metrics-filter").focus()
        await pilot.press(*"actor grad")
        await wait_for(pilot, lambda: len(table.rows) == 1, what="the filter")
        assert list(table.rows[0][:4]) == ["actor/grad_norm", "7.500", "1.500", "7.500"]
        assert "actor/grad_norm" in str(table.query_one("#metrics-table").render())
        await pilot.press("ctrl+s")
        saved = tmp_path / f"{run.name}-metrics.csv"
        await wait_for(pilot, saved.exists, what="the CSV")
    lines = saved.read_text().splitlines()
    assert lines[0].startswith("key,last,min,max") and lines[1].startswith("actor/grad_norm,7.5,1.5,7.5") and len(lines) == 2


async def test_chart_keys_change_smoothing_scale_and_zoom(tmp_path):
    run = write_sample_run(tmp_path / "runs")
    app = CockpitApp(attach=run, runs_root=tmp_path / "runs")
    async with app.run_test(size=(120, 40)) as pilot:
        live = app.screen
        await wait_for(pilot, lambda: live.query("#charts-rewards"), what="the charts")
        chart = live.query_one("#charts-rewards").charts[0]
        await wait_for(pilot, lambda: live.state.rows_seen == 3 and chart.draws > 0, what="the charts")
        await pilot.press("w", "g", "z")
        await wait_for(pilot, lambda: chart.view == live.view, what="the new view")
        assert (live.view.smoothing, live.view.log_scale, live.view.zoom) == (0.9, True, 0.5)


async def test_config_edit_box_follows_undo_and_preset_changes_and_a_missing_model_is_a_problem(tmp_path):
    app = CockpitApp(runs_root=tmp_path / "runs")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3")
        screen = app.screen
        await wait_for(pilot, lambda: bool(screen.keys), timeout=60, what="config keys")
        table, value = screen.query_one("#config-table"), screen.query_one("#config-value")
        key = "data.train_batch_size"
        table.move_cursor(row=screen.row_keys.index(key))
        screen.set_value(key, "2")
        await wait_for(pilot, lambda: value.value == "2", what="the new value")
        await pilot.press("ctrl+z")  # reset the key: the edit box shows the preset's value again
        await wait_for(pilot, lambda: value.value == str(screen.preset_values[key]), what="the reset value")
        screen.query_one("#config-preset").value = "default"
        await wait_for(pilot, lambda: screen.preset == "default" and value.value == str(screen.values[key]),
                       what="the preset's value")
        screen.set_value("actor_rollout_ref.model.path", str(tmp_path / "no-such-model"))
        await wait_for(pilot, lambda: not screen.checking, what="the model check")
        message = str(screen.query_one("#config-message").render())
        assert "no such model folder" in message and "valid" not in str(screen.query_one("#config-status").render())


async def test_dataset_starts_each_task_at_its_top_with_the_reward_first(tmp_path):
    folder = tmp_path / "tasks"
    write_task_files(folder)
    app = CockpitApp(runs_root=tmp_path / "runs", task_paths=[folder])
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2")
        screen = app.screen
        await wait_for(pilot, lambda: len(screen.tasks) == 4, what="tasks to load")
        breakdown, detail = screen.query_one("#task-breakdown"), screen.query_one("#dataset-detail")
        await wait_for(pilot, lambda: "reference answer reward" in str(breakdown.render()), what="the reward")
        assert breakdown.region.y < screen.query_one("#task-markdown").region.y  # above the task, not 60 lines down
        detail.scroll_end(animate=False)
        await wait_for(pilot, lambda: detail.scroll_y > 0, what="scrolled down")
        screen.query_one("#dataset-table").focus()
        await pilot.press("down")
        await wait_for(pilot, lambda: detail.scroll_y == 0, what="the next task at its top")
