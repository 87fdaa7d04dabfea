"""Pilot tests of what a new user hit in the cockpit (issue 24) and of the Config screen's checks running off the
UI thread: each drives the real app the way a user types, against real run folders.
"""

from __future__ import annotations

import threading

from devops_tui.app import CockpitApp
from tests.conftest import wait_for


def burst(app, keys: list[tuple[str, str]]) -> None:
    """Keys as a terminal delivers a fast burst: all queued at once (`pilot.press` waits after each key)."""
    from textual import events

    for key, character in keys:
        event = events.Key(key, character)
        event.set_sender(app)
        app._driver.send_message(event)


async def open_config(pilot):
    await pilot.press("3")
    screen = pilot.app.screen
    await wait_for(pilot, lambda: bool(screen.keys) and not getattr(screen, "checking", False), timeout=60, what="config keys")
    return screen


async def edit(pilot, screen, key: str, text: str) -> None:
    table = screen.query_one("#config-table")
    table.focus()
    table.move_cursor(row=screen.row_keys.index(key))
    await pilot.press("enter")
    screen.query_one("#config-value").value = ""
    await pilot.press(*text, "enter")
    await wait_for(pilot, lambda: not getattr(screen, "checking", False), what="the edit to be checked")


async def test_a_refused_edit_does_not_block_launch_and_a_refused_launch_says_why(tmp_path, monkeypatch):
    """Issue 24 item 1: after `data.train_batch_size=abc` was refused the config in force is valid, so ctrl+l
    launches; a launch refused names the problem instead of 'fix the config problems first'."""
    import devops_tui.launcher as launcher
    from core.errors import UserError

    launched = []

    def refuse(mode, runs_root, **kwargs):
        launched.append(mode)
        raise UserError(f"{runs_root}/x: pid 1 on box is writing this run; one writer per run folder")

    monkeypatch.setattr(launcher, "launch", refuse)
    app = CockpitApp(runs_root=tmp_path / "runs")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_config(pilot)
        await edit(pilot, screen, "data.train_batch_size", "abc")
        assert "valid" in str(screen.query_one("#config-status").render())
        await pilot.press("ctrl+l")
        await wait_for(pilot, lambda: launched, what="the launch to be tried")
        assert "not applied" in str(screen.query_one("#config-message").render())
        await wait_for(pilot, lambda: any("one writer per run folder" in n.message for n in app._notifications),
                       what="the refusal")
        assert app.screen is screen  # still here, not crashed
        await pilot.press("ctrl+z")  # undoing the refused edit clears its message
        assert "not applied" not in str(screen.query_one("#config-message").render())
        await edit(pilot, screen, "actor_rollout_ref.rollout.n", "1")
        await pilot.press("ctrl+l")
        await wait_for(pilot, lambda: any("not launched: actor_rollout_ref.rollout.n" in n.message
                                          for n in app._notifications), what="the named problem")
        assert len(launched) == 1


async def test_config_checks_run_off_the_ui_thread(tmp_path, monkeypatch):
    """Issue 23 item 3: validation (it reads the task set) runs in a worker; the screen shows its outcome."""
    import core.training.config as config

    threads = []
    real = config.validate

    def validate(cfg, *args, **kwargs):
        threads.append(threading.current_thread())
        return real(cfg, *args, **kwargs)

    monkeypatch.setattr(config, "validate", validate)
    app = CockpitApp(runs_root=tmp_path / "runs")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_config(pilot)
        await edit(pilot, screen, "actor_rollout_ref.actor.optim.lr", "2e-6")
        assert "optim.lr" in str(screen.query_one("#config-diff").render())
    assert len(threads) >= 2 and threading.main_thread() not in threads


async def test_a_key_burst_after_enter_goes_whole_into_the_edit_box(tmp_path):
    """Issue 24 item 9: Enter then `5e-5` typed at once replaces the value (it was garbled into `5-0.0`)."""
    app = CockpitApp(runs_root=tmp_path / "runs")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_config(pilot)
        table, value = screen.query_one("#config-table"), screen.query_one("#config-value")
        table.focus()
        table.move_cursor(row=screen.row_keys.index("actor_rollout_ref.actor.optim.lr"))
        burst(app, [("enter", "\r"), ("5", "5"), ("e", "e"), ("minus", "-"), ("5", "5")])
        await wait_for(pilot, lambda: value.value == "5e-5", what=f"5e-5 in the box (it holds {value.value!r})")
        assert app.screen is screen


async def test_confirm_dialogs_press_the_highlighted_answer_and_say_when_cancelled(tmp_path):
    """Issue 24 item 2: Enter presses the highlighted button (Stop run was styled primary while Enter pressed the
    focused Cancel); arrows move the highlight, y/n/Esc answer, and a cancel is acknowledged."""
    from textual.widgets import Button

    from devops_tui.screens.confirm import ConfirmScreen

    app = CockpitApp(runs_root=tmp_path / "runs")
    answers = []
    async with app.run_test(size=(100, 30)) as pilot:
        for keys, expected in ((["enter"], "stop"), (["right", "enter"], "cancel"), (["right", "left", "enter"], "stop"),
                               (["y"], "stop"), (["n"], None), (["escape"], None)):
            dialog = ConfirmScreen("Stop run x?", choices=[("stop", "Stop run"), ("cancel", "Cancel")], default="stop")
            app.push_screen(dialog, answers.append)
            await wait_for(pilot, lambda dialog=dialog: app.screen is dialog and dialog.highlighted, what="the dialog")
            primary = [b.id for b in dialog.query(Button).results(Button) if b.variant == "primary"]
            assert primary == [f"choice-{dialog.highlighted}"]  # what looks chosen is what Enter presses
            await pilot.press(*keys)
            await wait_for(pilot, lambda dialog=dialog: app.screen is not dialog, what=f"{keys} to answer")
            assert answers[-1] == expected, keys

        from devops_tui.actions import confirm_and_stop

        confirm_and_stop(app, tmp_path / "runs" / "r1", {"status": "running", "pid": 1})
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the stop question")
        await pilot.press("n")
        await wait_for(pilot, lambda: any("not stopped: r1" in n.message for n in app._notifications),
                       what="the cancel to be acknowledged")


def screen_text(app, region) -> str:
    """The characters the terminal shows in `region` (what a user reads, after clipping)."""
    strips = app.screen._compositor.render_strips()
    return "\n".join(strips[y].text[region.x:region.right] for y in range(region.y, region.bottom))


async def open_live(pilot, tab_key: str | None = None):
    live = pilot.app.screen
    await wait_for(pilot, lambda: live.state.rows_seen > 0 and live.query("#charts-rewards"), what="the run's rows")
    if tab_key:
        await pilot.press(tab_key)
    return live


async def test_escape_leaves_an_input_and_the_metrics_tab_takes_what_is_typed(tmp_path):
    """Issue 24 item 3: typing `entropy` on the Metrics tab filters (its `e` opened Results); Esc leaves the box
    and the screen keys work again (1-6 were typed into it)."""
    from tests.test_tui_snapshots import write_run

    run = write_run(tmp_path / "runs")
    app = CockpitApp(runs_root=tmp_path / "runs", attach=run)
    async with app.run_test(size=(120, 40)) as pilot:
        live = await open_live(pilot, "k")
        table = live.query_one("MetricsTable")
        await wait_for(pilot, lambda: len(table.rows) > 30, what="the metrics table")
        await pilot.press(*"entropy")
        assert app.screen is live and table.words == "entropy"
        await wait_for(pilot, lambda: [row[0] for row in table.rows] == ["actor/entropy"], what="the filtered rows")
        await pilot.press("escape", "1")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "RunsScreen", what="1 to reach the Runs screen")
        assert table.words == "entropy"


async def test_metrics_tab_first_paint_shows_whole_names_and_every_column(tmp_path):
    """Issue 24 item 4: the first paint cut keys to 12 characters and left out mean and step."""
    from tests.conftest import text_of
    from tests.test_tui_snapshots import write_run

    run = write_run(tmp_path / "runs")
    app = CockpitApp(runs_root=tmp_path / "runs", attach=run)
    async with app.run_test(size=(120, 40)) as pilot:
        live = await open_live(pilot, "k")
        table = live.query_one("MetricsTable")
        await wait_for(pilot, lambda: len(table.rows) > 30, what="the metrics table")
        await pilot.pause(0.2)
        shown = text_of(live.query_one("#metrics-table"), width=120)
        assert "actor/perf/max_memory_allocated_gb" in shown and "mean" in shown.splitlines()[0]


async def test_the_warm_start_shows_in_the_header_and_on_the_charts(tmp_path):
    """Issue 24 item 5: for the ~85 s of the SFT warm-start the header said `step -/? ETA -` and every chart
    `waiting for data`; the trainer's `warmstart` events now show as `warm-start 312/600, loss 0.41`."""
    import json
    import os

    from core.training.sft import warmstart_reporter

    class Folder:  # the one method of RunDirectory the reporter uses, writing the same line
        def __init__(self, path):
            self.path = path

        def event(self, kind, **fields):
            with open(self.path / "events.jsonl", "a") as out:
                out.write(json.dumps({"time": "2026-11-30T17:00:00+00:00", "event": kind, **fields}) + "\n")

    run = tmp_path / "runs" / "20261130-170000-ci-fast-warm"
    run.mkdir(parents=True)
    (run / "meta.json").write_text(json.dumps({"run_id": run.name, "backend": "torch", "mode": "ci-fast",
                                               "status": "running", "pid": os.getpid(), "host": os.uname().nodename}))
    report = warmstart_reporter(Folder(run))
    report({"step": 312, "total_steps": 600, "loss": 0.4123})
    app = CockpitApp(runs_root=tmp_path / "runs", attach=run)
    async with app.run_test(size=(120, 40)) as pilot:
        live = app.screen
        title = live.query_one("#live-title")
        await wait_for(pilot, lambda: "warm-start 312/600, loss 0.41" in str(title.render()), what="the header")
        assert "step -/?" not in str(title.render()) and "ETA" not in str(title.render())
        await wait_for(pilot, lambda: live.query("#charts-rewards"), what="the charts")
        panel = live.query_one("#charts-rewards")
        live.redraw()
        await wait_for(pilot, lambda: panel.charts[0].draws > 0, what="a chart drawing")
        assert panel.charts[0].waiting == "warm-start 312/600, loss 0.41"
        lines = panel.charts[0].lines(50, 8, panel._styles(), panel.rich_style, app.theme)
        assert any("warm-start 312/600" in line.text for line in lines)


async def test_80x24_sample_table_keeps_reward_and_advantage_digits_and_routine_events_do_not_toast(tmp_path):
    """Issue 24 item 7: at 80x24 the table lost the advantage column and showed every reward as `0.0` (at 120
    columns the advantage read `-0.`); checkpoint, validation and alert toasts covered half the detail pane."""
    import json

    from tests.test_tui_snapshots import write_run

    run = write_run(tmp_path / "runs")
    for size in ((80, 24), (120, 40)):
        app = CockpitApp(runs_root=tmp_path / "runs", attach=run)
        async with app.run_test(size=size) as pilot:
            live = await open_live(pilot, "m")
            inspector = live.query_one("SampleInspector")
            await wait_for(pilot, lambda inspector=inspector: inspector.step == 40, what="the samples")
            await pilot.pause(0.2)
            table = inspector.query_one("#samples-table")
            shown = screen_text(app, table.content_region)
            assert "0.500" in shown and "-0.90" in shown and "+0.90" in shown, (size, shown)
            if size == (80, 24):
                with open(run / "events.jsonl", "a") as events:
                    for event in ({"event": "checkpoint", "step": 40, "path": "x"},
                                  {"event": "validation", "step": 40, "score": 0.5, "n": 4},
                                  {"event": "alert", "check": "clip_ratio", "level": "warning", "step": 40,
                                   "series": "response_length/clip_ratio", "message": "cut"},
                                  {"event": "stopped", "step": 40}):
                        events.write(json.dumps(event) + "\n")
                await wait_for(pilot, lambda app=app: any("stopped" in n.message for n in app._notifications),
                               what="the stop notice")
                assert [n.message for n in app._notifications] == ["stopped: step 40"]


async def test_compare_tabs_have_keys_and_three_runs_fit_at_120_columns(tmp_path):
    """Issue 24 item 8: no key reached Curves / Config diff / Eval; with three runs the third config column was
    off-screen at 120 columns; the legend cut the first run's value."""
    from tests.test_tui_snapshots import write_run

    root = tmp_path / "runs"
    runs = [write_run(root, run_id=f"20261130-17000{i}-ci-fast-000{i}", status=status)
            for i, status in enumerate(("finished", "stopped", "finished"))]
    app = CockpitApp(runs_root=root)
    async with app.run_test(size=(120, 40)) as pilot:
        app.compare_runs(runs)
        screen = app.screen
        await wait_for(pilot, lambda: type(app.screen).__name__ == "CompareScreen" and len(app.screen.runs) == 3,
                       what="three runs")
        screen = app.screen
        tabs = screen.query_one("#compare-tabs")
        chart = screen.query_one("#compare-chart")
        await wait_for(pilot, lambda: chart.chart.draws > 0 and all(chart.chart._series), what="the chart")
        legend = screen_text(app, chart.region)
        assert legend.count("0.684") == 3, legend  # every run's latest reward, the first one's too
        for key, tab in (("f", "tab-config"), ("v", "tab-eval"), ("c", "tab-curves"), ("f", "tab-config")):
            await pilot.press(key)
            await wait_for(pilot, lambda tab=tab: tabs.active == tab, what=f"{key} to open {tab} ({app.focused})")
        table = screen.query_one("#compare-config")
        await wait_for(pilot, lambda: table.row_count > 0, what="the config diff")
        await pilot.pause(0.2)
        shown = screen_text(app, table.region)
        assert all(run.name[-8:] in shown for run in runs), shown


async def test_long_log_lines_wrap_instead_of_being_cut(tmp_path):
    """Issue 24 item 9: log lines were cut at the right edge."""
    from tests.test_tui_snapshots import write_run

    run = write_run(tmp_path / "runs")
    with open(run / "train.log", "a") as log:
        log.write("2026-11-30 17:01:00 | WARNING | check:12 | " + "a long warning " * 12 + "END-OF-LINE\n")
    app = CockpitApp(runs_root=tmp_path / "runs", attach=run)
    async with app.run_test(size=(80, 24)) as pilot:
        live = await open_live(pilot, "l")
        await wait_for(pilot, lambda: live.query("#live-log") and live.query_one("#live-log").records == 41,
                       what="the log")
        await pilot.pause(0.3)
        assert "END-OF-LINE" in screen_text(app, live.query_one("#live-log").region), screen_text(app, app.screen.region)


def test_rubric_evidence_wraps_under_itself_not_at_column_zero():
    """Issue 24 item 9: a long evidence line of a rubric criterion wrapped to column 0."""
    from rich.console import Console

    from devops_tui.widgets.inspector import answer_text

    evidence = "yaml: readinessProbe.httpGet.path /readyz on port 8080 " * 3 + "LAST"
    sample = {"task_id": "k8s-001", "reward": 0.5, "response": "ok", "breakdown": {
        "final_reward": 0.5, "dimensions": {}, "penalties": {},
        "rubric": {"score": 0.6, "criteria": [{"id": "readiness-probe", "score": 1.0, "status": "passed",
                                               "description": "an HTTP readiness probe", "evidence": [evidence]}]}}}
    console = Console(width=60, record=True, file=open("/dev/null", "w"))
    console.print(answer_text(sample, 3, [sample]))
    lines = console.export_text().splitlines()
    first = next(i for i, line in enumerate(lines) if "yaml: readinessProbe" in line)
    last = next(i for i, line in enumerate(lines) if "LAST" in line)
    assert last > first and all(line.startswith("      ") for line in lines[first:last + 1]), lines


async def test_every_screen_names_itself_and_its_tab(tmp_path):
    """Issue 24 item 9: no screen showed its own name."""
    from tests.test_tui_snapshots import write_run

    run = write_run(tmp_path / "runs")
    app = CockpitApp(runs_root=tmp_path / "runs", attach=run)
    async with app.run_test(size=(80, 24)) as pilot:
        live = await open_live(pilot, "t")
        bar = live.query_one("#title-bar")
        await wait_for(pilot, lambda: "4 Live › Training" in str(bar.render()), what="the Live title")
        for key, name in (("1", "1 Runs"), ("2", "2 Dataset"), ("3", "3 Config"), ("5", "5 Results"),
                          ("6", "6 Compare")):
            await pilot.press(key)
            await wait_for(pilot, lambda name=name: app.screen.query("#title-bar")
                           and name in str(app.screen.query_one("#title-bar").render()), what=name)
            if name == "6 Compare":
                await pilot.press("f")
                await wait_for(pilot, lambda: "6 Compare › Config diff" in str(app.screen.query_one("#title-bar")
                                                                                .render()), what="the compare tab")


def test_the_warm_start_reports_a_progress_line_every_tenth_and_events_at_most_every_2s(caplog):
    """Issue 24 item 5: a progress line in the CLI (train's console shows INFO lines) and bounded events."""
    import logging

    from core.training.sft import warmstart_reporter

    events = []

    class Folder:
        def event(self, kind, **fields):
            events.append((kind, fields))

    report = warmstart_reporter(Folder())
    with caplog.at_level(logging.INFO, logger="core.training.sft"):
        for step in range(1, 601):
            report({"step": step, "total_steps": 600, "loss": 1.0 / step})
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("warm-start ")]
    assert lines[0] == "warm-start 60/600, loss 0.02" and len(lines) == 10 and lines[-1].startswith("warm-start 600/600")
    assert [fields["step"] for _, fields in events] == [1, 600]  # a fast loop: the first step, then the last
