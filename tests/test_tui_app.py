"""Pilot tests of the cockpit's main flows, driving the real app against real run folders and processes.

A small producer process writes a run folder the way the trainer does (and stops on a real SIGINT);
the slow test launches a real `devops-rl train --mode ci-fast` from the Config screen.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devops_tui.app import CockpitApp

PRODUCER = r'''
import json, math, os, signal, sys, time
from pathlib import Path
run, steps, delay = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
run.mkdir(parents=True, exist_ok=True)
meta = {"run_id": run.name, "backend": "torch", "mode": "ci-fast", "status": "running", "pid": os.getpid(),
        "host": os.uname().nodename, "started_at": "2026-11-30T17:00:00+00:00", "total_steps": steps or None}
def write_meta(**changes):
    meta.update(changes)
    tmp = run / "meta.json.tmp"
    tmp.write_text(json.dumps(meta))
    os.replace(tmp, run / "meta.json")
def stop(signum, frame):
    with open(run / "events.jsonl", "a") as events:
        events.write(json.dumps({"event": "stopped"}) + "\n")
    write_meta(status="stopped")
    sys.exit(130)
signal.signal(signal.SIGINT, stop)
write_meta()
step = 0
with open(run / "metrics.jsonl", "a") as metrics, open(run / "train.log", "a") as log:
    while steps == 0 or step < steps:
        step += 1
        reward = 0.2 + 0.5 * (1 - math.exp(-step / 20))
        data = {"reward/final/mean": reward, "reward/security/mean": reward / 2, "actor/pg_loss": 0.1,
                "timing_s/step": delay, "perf/cpu_memory_used_gb": 1.0}
        metrics.write(json.dumps({"step": step, "data": data}) + "\n"); metrics.flush()
        log.write(f"step {step} reward {reward:.3f}\n"); log.flush()
        time.sleep(delay)
write_meta(status="finished")
'''


@pytest.fixture
def producer(tmp_path):
    """Start a producer writing `runs/<name>`; every process is stopped at the end of the test."""
    script = tmp_path / "producer.py"
    script.write_text(PRODUCER)
    started: list[subprocess.Popen] = []

    def start(run: Path, steps: int = 0, delay: float = 0.05) -> subprocess.Popen:
        process = subprocess.Popen([sys.executable, str(script), str(run), str(steps), str(delay)],
                                   start_new_session=True)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(10)


async def wait_for(pilot, condition, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)


def text_of(widget, width: int = 100) -> str:
    """What a Static shows, as plain text (a rich Table or Group rendered at `width`)."""
    from rich.console import Console

    console = Console(width=width, record=True, file=open(os.devnull, "w"))
    console.print(widget.content)
    return console.export_text()


def _meta(run: Path) -> dict:
    try:
        return json.loads((run / "meta.json").read_text())
    except (OSError, ValueError):
        return {}


async def test_attach_follows_a_folder_another_process_writes(tmp_path, producer):
    run = tmp_path / "runs" / "20261130-170000-ci-fast-0001"
    process = producer(run, steps=0, delay=0.05)
    app = CockpitApp(attach=run, runs_root=tmp_path / "runs")
    notices: list[str] = []

    def hook(message) -> None:
        if type(message).__name__ == "Notify":
            notices.append(message.notification.message)

    async with app.run_test(size=(120, 40), message_hook=hook) as pilot:
        live = app.screen
        await wait_for(pilot, lambda: (live.state.step or 0) >= 5, what="steps to arrive")
        first = live.state.step
        await wait_for(pilot, lambda: live.state.step >= first + 5, what="more steps to arrive")
        await wait_for(pilot, lambda: "step" in str(live.query_one("#live-title").render()), what="header")
        await wait_for(pilot, lambda: live.query("#charts-rewards"), what="the charts")
        chart = live.query_one("#charts-rewards").charts[0]
        await wait_for(pilot, lambda: chart.draws > 0 and len(chart._series[0] or []) >= 5, what="chart")
        assert "running" in str(live.query_one("#live-title").render())
        await pilot.press("l")
        await wait_for(pilot, lambda: live.query("#live-log"), what="the Log tab")
        log = live.query_one("#live-log")
        await wait_for(pilot, lambda: log.line_count >= 5, what="log lines")
        assert log.lines[-1].startswith("step ")
        with open(run / "events.jsonl", "a") as events:  # the trainer saves a checkpoint
            events.write(json.dumps({"time": "2026-11-30T17:00:05", "event": "checkpoint", "step": 7}) + "\n")
        await wait_for(pilot, lambda: "checkpoint: step 7" in notices, what="the checkpoint notice")
    assert process.poll() is None  # leaving the cockpit leaves a headless run alone


async def test_runs_screen_stops_a_headless_run_after_confirmation(tmp_path, producer):
    root = tmp_path / "runs"
    run = root / "20261130-170000-ci-fast-0002"
    process = producer(run, steps=0, delay=0.05)
    app = CockpitApp(runs_root=root)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        await wait_for(pilot, lambda: _meta(run).get("status") == "running", what="the run to start")
        await pilot.press("f5")
        await wait_for(pilot, lambda: [r.status for r in screen.rows] == ["running"], what="the running row")
        await pilot.press("s")
        await wait_for(pilot, lambda: app.screen.__class__.__name__ == "ConfirmScreen", what="the question")
        await pilot.press("escape")  # cancel first: nothing happens
        await wait_for(pilot, lambda: app.screen is screen, what="the question to close")
        assert process.poll() is None
        await pilot.press("s")
        await wait_for(pilot, lambda: app.screen.__class__.__name__ == "ConfirmScreen", what="the question")
        await pilot.click("#choice-stop")
        await wait_for(pilot, lambda: process.poll() is not None, what="the run to stop")
        assert process.returncode == 130 and _meta(run)["status"] == "stopped"
        await pilot.press("f5")
        await wait_for(pilot, lambda: [r.status for r in screen.rows] == ["stopped"], what="stopped row")


async def test_quitting_asks_before_stopping_a_run_started_here(tmp_path, producer):
    from devops_tui.launcher import LaunchedRun

    root = tmp_path / "runs"
    kept, stopped = root / "20261130-170000-ci-fast-0003", root / "20261130-170000-ci-fast-0004"
    for run, choice in ((kept, "leave"), (stopped, "stop")):
        process = producer(run, steps=0, delay=0.05)
        app = CockpitApp(runs_root=root)
        async with app.run_test(size=(100, 30)) as pilot:
            app.register_launch(LaunchedRun(path=run, process=process, console=tmp_path / "console.log"))
            await wait_for(pilot, lambda run=run: _meta(run).get("status") == "running", what="the run to start")
            await pilot.press("q")
            await wait_for(pilot, lambda app=app: app.screen.__class__.__name__ == "ConfirmScreen", what="the question")
            await pilot.click(f"#choice-{choice}")
            await wait_for(pilot, lambda app=app: app._exit_renderables is not None or not app.is_running, timeout=40,
                           what="the app to exit")
        if choice == "leave":
            assert process.poll() is None
            os.killpg(process.pid, signal.SIGINT)
            process.wait(10)
        else:
            assert process.wait(10) == 130 and _meta(run)["status"] == "stopped"


TASKS_YAML = """
- id: {id}
  type: {type}
  difficulty: {difficulty}
  desc: {desc}
  expected_outputs: [alpha output, beta output, gamma output]
  reference_answer: |
    Use **{keyword}** with a rollback plan, monitoring and alerts.
"""


def write_task_files(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    specs = [
        ("k8s-001", "kubernetes", "easy", "Add readiness probes to a Deployment", "readinessProbe"),
        ("k8s-002", "kubernetes", "hard", "Roll out a canary with Argo Rollouts", "canary"),
        ("sec-001", "security", "medium", "Rotate a leaked database password", "rotation"),
        ("ci-001", "ci_cd", "easy", "Cache pip downloads in GitHub Actions", "actions/cache"),
    ]
    files = []
    for task_type in ("kubernetes", "security", "ci_cd"):
        path = folder / f"{task_type}.yaml"
        path.write_text("".join(TASKS_YAML.format(id=i, type=t, difficulty=d, desc=desc, keyword=k)
                                for i, t, d, desc, k in specs if t == task_type))
        files.append(path)
    return files


async def test_dataset_filters_by_type_difficulty_and_text(tmp_path):
    folder = tmp_path / "tasks"
    write_task_files(folder)
    (folder / "broken.yaml").write_text("- id: bad\n  type: nonsense\n")
    app = CockpitApp(runs_root=tmp_path / "runs", task_paths=[folder])
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("2")
        screen = app.screen
        await wait_for(pilot, lambda: len(screen.tasks) == 4, what="tasks to load")
        problems = str(screen.query_one("#dataset-problems").render())
        assert "broken.yaml" in problems  # a broken file is reported, the good ones still load
        screen.query_one("#filter-type").value = "kubernetes"
        await wait_for(pilot, lambda: [t.id for t in screen.shown] == ["k8s-001", "k8s-002"], what="type filter")
        screen.query_one("#filter-difficulty").value = "hard"
        await wait_for(pilot, lambda: [t.id for t in screen.shown] == ["k8s-002"], what="difficulty filter")
        await pilot.press("escape")
        await pilot.press("slash")
        await pilot.press(*"rotate")
        await wait_for(pilot, lambda: [t.id for t in screen.shown] == ["sec-001"], what="text filter")
        table = screen.query_one("#dataset-table")
        assert table.row_count == 1
        assert "4 tasks" in str(screen.query_one("#dataset-count").render())
        breakdown = str(screen.query_one("#task-breakdown").render())  # the reference answer, really scored
        from core.rewards import DIMENSIONS

        assert "reference answer reward" in breakdown and all(d in breakdown for d in DIMENSIONS)


async def test_help_lists_every_key_with_its_id(tmp_path):
    app = CockpitApp(runs_root=tmp_path / "runs")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: app.screen.__class__.__name__ == "HelpScreen", what="help")
        table = app.screen.query_one("#help-table")
        ids = {table.get_row_at(i)[3] for i in range(table.row_count)}
        assert {"app.quit", "app.help", "runs.stop", "live.stop", "config.launch", "dataset.search"} <= ids
        await pilot.press("escape")
        assert app.screen.__class__.__name__ == "RunsScreen"


def write_eval_results(path: Path, rewards: dict[str, float]) -> None:
    """An eval results file as `devops-rl eval` writes it (its summary made by the eval's own code)."""
    from core.agent.results import summarize

    results = [{"task_id": task_id, "type": task_id.split("-")[0], "difficulty": "easy", "reward": reward,
                "breakdown": {"final_reward": reward, "dimensions": {"security": reward, "automation": reward / 2},
                              "penalties": {"repetition": 0.0}}}
               for task_id, reward in rewards.items()]
    path.write_text(json.dumps({"summary": summarize(results), "results": results}))


async def test_results_shows_a_summary_and_compares_two_files(tmp_path):
    run = tmp_path / "runs" / "20261130-170000-ci-fast-0005"
    (run / "eval").mkdir(parents=True)
    (run / "meta.json").write_text(json.dumps({"run_id": run.name, "status": "finished"}))
    write_eval_results(run / "eval" / "eval_results_20261130-170100.json", {"k8s-001": 0.4, "sec-001": 0.6})
    write_eval_results(run / "eval" / "eval_results_20261130-171000.json", {"k8s-001": 0.7, "sec-001": 0.5})
    app = CockpitApp(runs_root=tmp_path / "runs")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: len(app.screen.rows) == 1, what="the run row")
        await pilot.press("e")
        await wait_for(pilot, lambda: app.screen.__class__.__name__ == "ResultsScreen"
                       and len(app.screen.files) == 2, what="results files")
        screen = app.screen
        table = screen.query_one("#results-table")
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert rows[0] == ["mean reward", "0.600"]  # the newest file is shown first
        assert ["  k8s", "0.700"] in rows and ["by type", ""] in rows
        files = screen.query_one("#results-files")
        files.focus()
        await pilot.press("up")
        await pilot.press("c")
        await pilot.press("down")
        await wait_for(pilot, lambda: len(table.columns) == 4, what="the compare table")
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert rows[0] == ["mean reward", "0.500", "0.600", "+0.100"]
        assert ["  k8s", "0.400", "0.700", "+0.300"] in rows
        assert ["  sec-001", "0.600", "0.500", "-0.100"] in rows  # regressed most


async def test_config_edit_shows_the_validation_message(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # ctrl+s saves into the working folder
    app = CockpitApp(runs_root=tmp_path / "runs")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3")
        screen = app.screen
        await wait_for(pilot, lambda: bool(screen.keys), what="config keys")
        message = screen.query_one("#config-message")
        table, value = screen.query_one("#config-table"), screen.query_one("#config-value")

        async def edit(key: str, text: str) -> None:
            table.focus()
            table.move_cursor(row=screen.row_keys.index(key))
            await pilot.press("enter")  # Enter on a key moves to its value field
            assert screen.focused is value and value.value == str(screen.values[key])
            value.value = ""
            await pilot.press(*text, "enter")
            await wait_for(pilot, lambda: screen.focused is table, what="the edit to be applied")

        await wait_for(pilot, lambda: "valid" in str(message.render()), what="the first validation")
        assert not message.has_class("-error")
        await edit("data.train_batch_size", "lots")
        assert "train_batch_size" in str(message.render()) and message.has_class("-error")
        assert screen.values["data.train_batch_size"] == screen.preset_values["data.train_batch_size"]
        batch = screen.values["data.train_batch_size"]
        await edit("actor_rollout_ref.actor.ppo_mini_batch_size", str(batch * 4))
        assert "ppo_mini_batch_size" in str(message.render()) and message.has_class("-error")
        await edit("actor_rollout_ref.actor.ppo_mini_batch_size", str(batch))
        await edit("actor_rollout_ref.actor.optim.lr", "2e-6")
        assert not message.has_class("-error")
        assert "optim.lr" in str(screen.query_one("#config-diff").render())
        await pilot.press("ctrl+s")
        saved = tmp_path / f"devops-rl-{screen.preset}.yaml"
        await wait_for(pilot, saved.exists, what="the saved YAML")
        from core.training.config import load_config

        assert load_config(screen.preset, saved).actor_rollout_ref.actor.optim.lr == pytest.approx(2e-6)


def _train_is_built() -> bool:
    result = subprocess.run([sys.executable, "-m", "core.cli.main", "train", "--help"], capture_output=True,
                            text=True, timeout=60)
    return result.returncode == 0 and "not built yet" not in result.stdout


@pytest.mark.slow
async def test_launch_a_ci_fast_run_and_watch_steps_arrive(tmp_path):
    if not _train_is_built():
        pytest.skip("'devops-rl train' is not built yet")
    app = CockpitApp(runs_root=tmp_path / "runs")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3")
        screen = app.screen
        await wait_for(pilot, lambda: bool(screen.keys), what="config keys")
        assert screen.preset == "ci-fast"
        # The smallest real run (CI machines are shared): 2 prompts x 2 answers of 16 tokens per step.
        for key, value in (("data.train_batch_size", "2"), ("actor_rollout_ref.actor.ppo_mini_batch_size", "2"),
                           ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "2"),
                           ("actor_rollout_ref.rollout.n", "2"), ("data.max_response_length", "16")):
            screen.set_value(key, value)
        assert not screen.error and not screen.problems, (screen.error, screen.problems)
        await pilot.press("ctrl+l")
        await wait_for(pilot, lambda: len(app.launched) == 1, what="the launch")
        (launched,) = app.launched.values()
        live = app.screen
        assert live.__class__.__name__ == "LiveScreen"

        def steps() -> int:
            if not launched.alive() and live.state.rows_seen < 2:
                raise AssertionError("training exited early:\n" + "\n".join(launched.console_tail(20)))
            return live.state.rows_seen

        await wait_for(pilot, lambda: steps() >= 2, timeout=900, what="two training steps")
        assert live.state.reward_key() is not None
        await pilot.press("s")
        await wait_for(pilot, lambda: app.screen.__class__.__name__ == "ConfirmScreen", what="the question")
        await pilot.click("#choice-stop")
        await wait_for(pilot, lambda: not launched.alive(), timeout=120, what="the run to stop")
        await wait_for(pilot, lambda: live.state.meta.get("status") in ("stopped", "finished"), timeout=10,
                       what="the final status")


def test_docs_list_every_key_of_the_cockpit():
    from devops_tui.screens.help import binding_rows

    docs = (Path(__file__).resolve().parents[1] / "docs" / "tui.md").read_text()
    missing = [row[3] for row in binding_rows(CockpitApp) if f"`{row[3]}`" not in docs]
    assert not missing, f"docs/tui.md does not list: {missing}"


async def test_keys_can_be_remapped_from_a_keymap_file(tmp_path):
    from core.errors import UserError
    from devops_tui.app import load_keymap

    bad = tmp_path / "bad.yaml"
    bad.write_text("app.help: [h\n")
    with pytest.raises(UserError, match="bad.yaml"):
        load_keymap(bad)
    good = tmp_path / "keys.yaml"
    good.write_text("app.help: h\n")
    app = CockpitApp(runs_root=tmp_path / "runs", keymap=load_keymap(good))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("h")
        await wait_for(pilot, lambda: app.screen.__class__.__name__ == "HelpScreen", what="help on the new key")


def test_the_real_command_draws_in_a_terminal_and_restores_it_on_quit(tmp_path):
    """`devops-rl tui --attach RUN` on a pseudo-terminal: it draws the run, quits on q, leaves the alt screen."""
    import pty
    import select

    run = tmp_path / "runs" / "20261130-170000-ci-fast-0009"
    run.mkdir(parents=True)
    (run / "meta.json").write_text(json.dumps({"run_id": run.name, "status": "finished", "total_steps": 3}))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "data": {"reward/final/mean": s / 10}}) + "\n"
                                               for s in (1, 2, 3)))
    pid, fd = pty.fork()
    if pid == 0:  # the child: the real command, on a 100x30 terminal
        os.environ.update({"TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30",
                           "DEVOPS_RL_RUNS_DIR": str(tmp_path / "runs")})
        os.execv(sys.executable, [sys.executable, "-m", "core.cli.main", "tui", "--attach", run.name])
    output = b""

    def read_until(marker: bytes, timeout: float = 60.0) -> None:
        nonlocal output
        deadline = time.monotonic() + timeout
        while marker not in output:
            assert time.monotonic() < deadline, f"no {marker!r} in the output: {output[-400:]!r}"
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    output += os.read(fd, 65536)
                except OSError:
                    break

    try:
        read_until(b"step 3/3")
        os.write(fd, b"q")
        read_until(b"\x1b[?1049l")  # the alternate screen is left: the shell's screen is back
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(fd)


async def test_f12_saves_what_the_screen_shows_as_svg(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = CockpitApp(runs_root=tmp_path / "runs")
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("f12")
        await wait_for(pilot, lambda: list(tmp_path.glob("*.svg")), what="the SVG")
    (svg,) = tmp_path.glob("*.svg")
    assert svg.read_text().startswith("<svg") and "runs" in svg.read_text()


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
    assert trainer_alerts == ["nan", "reward_collapse"]
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
        await pilot.press("x")  # acknowledged: the errors leave the bar, the warning stays
        await wait_for(pilot, lambda: not str(bar.render()).startswith("✖"), what="acknowledged errors")
        assert "fell to" in str(bar.render())
        await pilot.press("a")
        await wait_for(pilot, lambda: live.query("AlertHistory"), what="the Alerts tab")
        history = live.query_one("AlertHistory")
        await wait_for(pilot, lambda: len(history.records) >= 4, what="the alert history")
        rows = {(r.alert.kind, r.source) for r in history.records}
        assert {("nan", "trainer"), ("reward_collapse", "trainer"), ("crashed", "cockpit"), ("nan", "cockpit")} <= rows
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
        await wait_for(pilot, lambda: inspector.step == 3 and "readinessProbe" in str(body.render()), what="step 3")
        text = str(body.render())
        for expected in ("Add readiness probes to the checkout Deployment", "answer 0 at step 3", "advantage -0.70",
                         "probe-defined", "yaml: readinessProbe.httpGet", "no-root", "probe: readinessProbe",
                         "length", "-0.05", "group 3-k8s-001 (answer 1 of 2)"):
            assert expected in text, expected
        assert inspector.query_one("#samples-table").row_count == 4  # every answer of the step, both groups
        await pilot.press("left_square_bracket")
        await wait_for(pilot, lambda: inspector.step == 2 and "at step 2" in str(body.render()), what="step 2")
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
        assert value.value == "2"
        await pilot.press("ctrl+z")  # reset the key: the edit box shows the preset's value again
        await wait_for(pilot, lambda: value.value == str(screen.preset_values[key]), what="the reset value")
        screen.query_one("#config-preset").value = "default"
        await wait_for(pilot, lambda: screen.preset == "default" and value.value == str(screen.values[key]),
                       what="the preset's value")
        screen.set_value("actor_rollout_ref.model.path", str(tmp_path / "no-such-model"))
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
