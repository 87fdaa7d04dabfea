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
from tests.conftest import wait_for, write_eval_results, write_task_files

REPO = Path(__file__).resolve().parents[1]

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
        assert log.lines_written[-1].startswith("step ")
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
            await wait_for(pilot, lambda: screen.focused is table and not screen.checking, what="the edit to be applied")

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
        await wait_for(pilot, lambda: not screen.checking, what="the config check")
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


def test_attach_waits_for_a_run_that_does_not_exist_yet_then_draws_it(tmp_path):
    """`tui --attach RUN` opened just before `train` makes RUN: a countdown on the terminal, then the run."""
    import pty
    import select

    runs = tmp_path / "runs"
    runs.mkdir()
    run = runs / "20261130-170000-ci-fast-0010"
    pid, fd = pty.fork()
    if pid == 0:
        os.environ.update({"TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30", "DEVOPS_RL_RUNS_DIR": str(runs)})
        os.execv(sys.executable, [sys.executable, "-m", "core.cli.main", "tui", "--attach", str(run), "--wait", "120"])
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
        read_until(b"s left (Ctrl-C to stop)")
        run.mkdir()
        (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "data": {"reward/final/mean": s / 10}})
                                                   + "\n" for s in (1, 2)))
        (run / "meta.json").write_text(json.dumps({"run_id": run.name, "status": "finished", "total_steps": 2}))
        read_until(b"step 2/2")
        # Keep draining the terminal while the app quits: a full pty buffer would block its last paint
        # (and so its exit) forever. A 'q' read before the screen took focus is repeated.
        deadline = time.monotonic() + 90
        status = None
        next_q = 0.0
        while status is None:
            assert time.monotonic() < deadline, f"'q' did not quit the app: {output[-400:]!r}"
            if time.monotonic() >= next_q:
                os.write(fd, b"q")
                next_q = time.monotonic() + 5
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    output += os.read(fd, 65536)
                except OSError:
                    pass
            done, raw = os.waitpid(pid, os.WNOHANG)
            if done:
                status = raw
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(fd)


def test_attach_gives_up_after_its_wait_in_one_line_and_ctrl_c_stops_it(tmp_path):
    env = {**os.environ, "DEVOPS_RL_RUNS_DIR": str(tmp_path / "runs"), "HF_HUB_OFFLINE": "1"}
    missing = str(tmp_path / "runs" / "not-yet")
    done = subprocess.run([sys.executable, "-m", "core.cli.main", "tui", "--attach", missing, "--wait", "0.5"],
                          capture_output=True, text=True, env=env, timeout=120, cwd=REPO)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "waited 0.5 s" in errors[0] and "Traceback" not in done.stderr
    assert "waiting up to 0.5 s" in done.stderr
    child = subprocess.Popen([sys.executable, "-m", "core.cli.main", "tui", "--attach", missing, "--wait", "300"],
                             stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        assert "waiting up to 300 s" in child.stderr.readline()
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=60) == 130
        rest = child.stderr.read()
        assert "Traceback" not in rest and "error:" not in rest and not (tmp_path / "runs" / "not-yet").exists()
    finally:
        child.kill()
        child.wait()
