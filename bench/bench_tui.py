"""Cockpit responsiveness, measured side by side with the cockpit before v2 (issue 14) in the same run.

- keys: a producer appends 20 steps/s and 1,000 log lines/s to a run folder while the headless app (120x40) follows
  it and a key is pressed every 50 ms; each key's time until the app has handled it and its screen is idle;
  also the event loop's lag. The old cockpit has fewer keys: both are measured on the keys they share.
- first paint of every screen after start (the screen drawn, its data loading behind an indicator) and when its
  data is in; attaching to 100,000 metric rows; memory.

The old cockpit is commit OLD_COCKPIT exported with `git archive` into a temporary folder; each measurement runs
in its own process (`bench_tui.py --measure CODE_DIR`) so the two never share imports.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OLD_COCKPIT = os.environ.get("BENCH_TUI_OLD", "42d155f")  # main before issue 14's cockpit v2
DURATION_S = float(os.environ.get("BENCH_TUI_SECONDS", "30"))
HISTORY_ROWS = 100_000
KEY_GOAL_MS = 100.0
PAINT_GOAL_S = 0.5
ATTACH_GOAL_S = 1.5
ROUNDS = 3  # median: a shared machine's load swings single start-ups a lot
SHARED_KEYS = ("r", "t", "y", "m", "l")  # Live keys both cockpits have
NEW_KEYS = SHARED_KEYS + ("k", "a", "w", "g", "z")
SCREENS = ("runs", "dataset", "config", "live", "results", "compare")

PRODUCER = r'''
import json, math, os, sys, time
run, duration = sys.argv[1], float(sys.argv[2])
dims = ("automation", "reliability", "security", "observability", "documentation", "expected_outputs")
keys = [f"reward/{d}/mean" for d in dims] + ["reward/final/mean", "actor/pg_loss", "actor/ppo_kl", "actor/entropy",
        "actor/pg_clipfrac", "actor/grad_norm", "critic/score/mean", "critic/score/max", "critic/score/min",
        "response_length/mean", "timing_s/step", "timing_s/gen", "perf/throughput", "perf/cpu_memory_used_gb"]
meta = {"run_id": os.path.basename(run), "status": "running", "pid": os.getpid(), "host": os.uname().nodename,
        "total_steps": 100000, "mode": "ci-fast", "backend": "torch"}
open(os.path.join(run, "meta.json"), "w").write(json.dumps(meta))
start, step = time.perf_counter(), 0
with open(os.path.join(run, "metrics.jsonl"), "a") as m, open(os.path.join(run, "train.log"), "a") as log, \
        open(os.path.join(run, "samples.jsonl"), "a") as s:
    while time.perf_counter() - start < duration:
        step += 1
        m.write(json.dumps({"step": step, "data": {k: 0.5 + 0.4 * math.sin(step / 50 + i) for i, k in enumerate(keys)}}) + "\n")
        m.flush()
        log.write("".join(f"2026-11-30 17:00:00 | DEBUG | loop:1 | step {step} line {i} " + "x" * 60 + "\n"
                          for i in range(50)))
        log.flush()
        s.write(json.dumps({"step": step, "samples": [{"task_id": "t", "response": "r" * 400, "reward": 0.5}]}) + "\n")
        s.flush()
        time.sleep(max(0.0, start + step / 20 - time.perf_counter()))
'''


def _rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else math.nan


# ---- measurements (run in a child process, against the new or the old code) ---------------------------


TAB_OF_KEY = {"r": "tab-rewards", "t": "tab-training", "y": "tab-system", "m": "tab-samples", "l": "tab-log",
              "k": "tab-metrics", "a": "tab-alerts"}


async def _press(app, key: str) -> float:
    """Seconds from a key event reaching the app until its effect is on screen: the tab it selects is active (or
    the chart view it changes is set) and the screen has refreshed. Pilot's `press` also waits for the whole
    process to go idle, which a streaming run never does, so the key event is sent as the terminal driver does."""
    from textual import events

    screen = app.screen
    tabs = screen.query_one("#live-tabs")
    view = getattr(screen, "view", None)
    if key in TAB_OF_KEY:
        done = lambda: tabs.active == TAB_OF_KEY[key]  # noqa: E731
    else:
        done = lambda: screen.view is not view  # noqa: E731
    started = time.perf_counter()
    event = events.Key(key, key)
    event.set_sender(app)
    app._driver.send_message(event)
    while not done():
        await asyncio.sleep(0.001)
    painted = asyncio.Event()
    screen.call_after_refresh(painted.set)
    await painted.wait()
    return time.perf_counter() - started


async def _leave_input(app) -> None:
    """Esc, untimed, when a key left the focus in an input box (the Metrics tab's filter takes what is typed), as a
    user does before the next screen key; the old cockpit never focuses one, so both press the same keys."""
    from textual import events
    from textual.widgets import Input

    if not isinstance(app.focused, Input):
        return
    event = events.Key("escape", None)
    event.set_sender(app)
    app._driver.send_message(event)
    while isinstance(app.focused, Input):
        await asyncio.sleep(0.001)


async def _keys_while_streaming(folder: Path, keys: tuple[str, ...]) -> dict:
    """Press keys every 50 ms while a producer streams: the keys both cockpits have for the first half of the
    stream (the same sequence for both), then `keys` (all of this cockpit's); each press's time and the lag."""
    from devops_tui.app import CockpitApp

    run = folder / "streaming"
    run.mkdir()
    script = folder / "producer.py"
    script.write_text(PRODUCER)
    app = CockpitApp(attach=run, runs_root=folder)
    presses: dict[str, list[float]] = {}
    lags: list[float] = []
    rss: list[float] = []
    async with app.run_test(size=(120, 40)) as pilot:
        live = app.screen
        producer = subprocess.Popen([sys.executable, str(script), str(run), str(DURATION_S)])
        next_rss = time.perf_counter() + 5
        i = 0
        try:
            halfway = time.perf_counter() + DURATION_S / 2
            while producer.poll() is None:
                phase = SHARED_KEYS if time.perf_counter() < halfway else keys
                key = phase[i % len(phase)]
                i += 1
                presses.setdefault(key if phase is SHARED_KEYS else f"all:{key}", []).append(await _press(app, key))
                await _leave_input(app)
                before = time.perf_counter()
                await asyncio.sleep(0.05)
                lags.append(time.perf_counter() - before - 0.05)
                if time.perf_counter() >= next_rss:
                    rss.append(_rss_mb())
                    next_rss += 5
        finally:
            producer.wait(30)
        await pilot.pause(1.0)
        steps = live.state.step
    return {"presses": presses, "lags": lags, "rss": rss, "steps": steps}


async def _screen_paint(mode: str, folder: Path, started: float) -> tuple[float, float]:
    """(first paint, data in) of one screen, in seconds from `started` (the cockpit imported, the app not made)."""
    from devops_tui.app import CockpitApp

    run = folder / "runs" / "20261130-170000-ci-fast-0001"
    app = CockpitApp(runs_root=folder / "runs", attach=run if mode == "live" else None)
    async with app.run_test(size=(120, 40)) as pilot:
        if mode == "results":
            app.switch_mode("runs")
            await pilot.pause(0)
            app.switch_mode("results")
            app.get_screen_stack("results")[0].show_run(run)
        elif mode == "compare":
            app.compare_runs([run, folder / "runs" / "20261130-160000-ci-fast-0002"])
        elif mode != "live":
            app.switch_mode(mode)
        painted = asyncio.Event()
        while app.screen.__class__.__name__.lower().removesuffix("screen") != mode:
            await pilot.pause(0.005)
        app.screen.call_after_refresh(painted.set)
        await painted.wait()
        first = time.perf_counter() - started
        screen = app.screen
        ready = {"runs": lambda: len(screen.rows) == 2, "dataset": lambda: len(screen.tasks) > 100,
                 "config": lambda: bool(screen.keys), "live": lambda: (screen.state.step or 0) >= 40,
                 "results": lambda: len(screen.files) == 1, "compare": lambda: len(getattr(screen, "runs", [])) == 2}[mode]
        while not ready():
            await pilot.pause(0.01)
        return first, time.perf_counter() - started


def _paint_in_new_process(mode: str, folder: Path) -> tuple[float, float, float]:
    """(first paint, data in) from the app's start, and the cockpit's import time, in a fresh process."""
    code = sys.path[0]  # this measuring process's code folder (new or old cockpit)
    result = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--paint", code, mode, str(folder)],
                            cwd=code, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PYTHONPATH": code, "HF_HUB_OFFLINE": "1"})
    if result.returncode != 0:
        raise RuntimeError(f"first paint of {mode} failed:\n{result.stderr[-3000:]}")
    return tuple(json.loads(result.stdout.strip().splitlines()[-1]))


def _write_run(run: Path, rows: int, *, status: str = "finished") -> None:
    run.mkdir(parents=True)
    dims = ("automation", "reliability", "security", "observability", "documentation", "expected_outputs")
    keys = [f"reward/{d}/mean" for d in dims] + ["reward/final/mean", "actor/pg_loss", "actor/ppo_kl",
                                                 "actor/entropy", "actor/grad_norm", "critic/score/mean",
                                                 "timing_s/step", "perf/throughput"]
    (run / "meta.json").write_text(json.dumps({"run_id": run.name, "status": status, "total_steps": rows,
                                               "mode": "ci-fast", "backend": "torch"}))
    with open(run / "metrics.jsonl", "w") as handle:
        for step in range(1, rows + 1):
            data = {k: round(math.sin(step / 500 + i), 5) for i, k in enumerate(keys)}
            handle.write(json.dumps({"step": step, "data": data}) + "\n")


def _first_chart(screen):
    """The Live screen's final-reward chart: in the Rewards panel, or (the old cockpit) its own widget."""
    panels = screen.query("#charts-rewards")
    if panels:
        return panels.first().charts[0]
    charts = screen.query("#chart-reward-0")
    return charts.first() if charts else None


async def _attach(run: Path) -> float:
    """Seconds from start until the Live screen's first chart shows the history."""
    from devops_tui.app import CockpitApp

    started = time.perf_counter()
    app = CockpitApp(attach=run, runs_root=run.parent)
    async with app.run_test(size=(120, 40)) as pilot:
        while (chart := _first_chart(app.screen)) is None:  # the charts are mounted right after the first paint
            await pilot.pause(0.01)
        while not (chart.draws and chart._series[0] is not None and len(chart._series[0])):
            await pilot.pause(0.01)
        return time.perf_counter() - started


def measure(keys: tuple[str, ...]) -> dict:
    """Every figure of the code importable from the working folder (this process's sys.path)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rss_start = _rss_mb()
        streaming = asyncio.run(_keys_while_streaming(folder, keys))
        screens = folder / "screens"
        _write_run(screens / "runs" / "20261130-170000-ci-fast-0001", 40)
        _write_run(screens / "runs" / "20261130-160000-ci-fast-0002", 20, status="stopped")
        (screens / "runs" / "20261130-170000-ci-fast-0001" / "eval").mkdir()
        (screens / "runs" / "20261130-170000-ci-fast-0001" / "eval" / "eval_results_20261130-171500.json").write_text(
            json.dumps({"summary": {"mean_reward": 0.5, "count": 1, "failures": 0}, "results": [],
                        "settings": {"model": "tiny", "max_tokens": 64}}))
        from devops_tui.app import CockpitApp

        paints = {}
        for mode in (m for m in SCREENS if m in CockpitApp.MODES):  # the old cockpit has no Compare screen
            # Each start in a fresh process: imports and caches (verl's key tree for the Config screen) start cold.
            rounds = [_paint_in_new_process(mode, screens) for _ in range(ROUNDS)]
            paints[mode] = tuple(statistics.median(r[i] for r in rounds) for i in range(3))
        history = folder / "history"
        _write_run(history, HISTORY_ROWS)
        attach = statistics.median(asyncio.run(_attach(history)) for _ in range(ROUNDS))
    return {"streaming": streaming, "paints": paints, "attach": attach, "rss_start": rss_start, "rss_end": _rss_mb()}


# ---- the side-by-side table -------------------------------------------------------------------------


def _run_measure(code: Path, keys: tuple[str, ...]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--measure", str(code), ",".join(keys)],
                            cwd=code, env=env, capture_output=True, text=True, timeout=3600)
    if result.returncode != 0:
        raise RuntimeError(f"measuring {code} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _old_code(folder: Path) -> Path | None:
    """The old cockpit's code exported from git, or None when the commit is not in this clone."""
    target = folder / "old"
    target.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", OLD_COCKPIT, "core", "devops_tui", "tasks"],
                             capture_output=True)
    if archive.returncode != 0:
        return None
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target


def _key_times(result: dict, keys: tuple[str, ...], phase: str = "") -> list[float]:
    return [t for k in keys for t in result["streaming"]["presses"].get(phase + k, [])]


def run() -> list[dict]:
    ms = lambda v: round(v * 1000, 1)  # noqa: E731
    new = _run_measure(ROOT, NEW_KEYS)
    with tempfile.TemporaryDirectory() as tmp:
        old_code = _old_code(Path(tmp))
        old = _run_measure(old_code, SHARED_KEYS) if old_code is not None else None
    rows = []

    def row(figure, value, unit, peer=None, ratio=None, goal=None):
        rows.append({"benchmark": "tui", "figure": figure, "value": value, "unit": unit, "peer": peer,
                     "ratio": ratio, "goal": goal})

    shared_new, shared_old = _key_times(new, SHARED_KEYS), _key_times(old, SHARED_KEYS) if old else []
    p95_new = _percentile(shared_new, 0.95)
    p95_old = _percentile(shared_old, 0.95) if old else None
    row(f"key p95, Live keys both have ({'/'.join(SHARED_KEYS)}), 20 steps/s + 1k lines/s, first half", ms(p95_new), "ms",
        f"old cockpit {ms(p95_old)} ms" if old else "old cockpit not measured",
        round(p95_old / p95_new, 2) if old and p95_new else None, f"< {KEY_GOAL_MS:.0f} ms")
    all_new = _key_times(new, NEW_KEYS, "all:")
    slowest = max(NEW_KEYS, key=lambda k: _percentile(new["streaming"]["presses"].get(f"all:{k}", []), 0.95))
    row(f"key p50 / p95, every Live key ({len(NEW_KEYS)} keys, {len(all_new)} presses, second half)",
        f"{ms(_percentile(all_new, 0.5))} / {ms(_percentile(all_new, 0.95))}", "ms",
        f"slowest: {slowest} (p95 {ms(_percentile(new['streaming']['presses'][f'all:{slowest}'], 0.95))} ms)",
        None, f"< {KEY_GOAL_MS:.0f} ms")
    lag_new = _percentile(new["streaming"]["lags"], 0.95)
    lag_old = _percentile(old["streaming"]["lags"], 0.95) if old else None
    row("event-loop lag p95 while pressing keys", ms(lag_new), "ms",
        f"old cockpit {ms(lag_old)} ms" if old else None, None, None)
    row("steps shown after the stream", new["streaming"]["steps"], "steps",
        f"old cockpit {old['streaming']['steps']}" if old else None, None, f"{int(DURATION_S * 20)} (all)")
    imports = statistics.median(p[2] for p in new["paints"].values())
    old_imports = statistics.median(p[2] for p in old["paints"].values()) if old else None
    row("import of the cockpit (devops_tui.app), fresh process", round(imports, 2), "s",
        f"old cockpit {old_imports:.2f} s" if old else None, None, None)
    for mode in SCREENS:
        first, ready, _ = new["paints"][mode]
        old_paint = (old or {}).get("paints", {}).get(mode)
        has_old = old_paint is not None and not (mode == "compare")
        row(f"{mode}: first paint after the app starts; data in (median of {ROUNDS})", f"{first:.2f}; {ready:.2f}", "s",
            f"old cockpit {old_paint[0]:.2f}; {old_paint[1]:.2f} s" if has_old else "(new screen)" if mode == "compare"
            else None, round(old_paint[0] / first, 2) if has_old and first else None, f"< {PAINT_GOAL_S} s")
    row(f"attach to {HISTORY_ROWS:,} metric rows: first chart (median of {ROUNDS})", round(new["attach"], 2), "s",
        f"old cockpit {old['attach']:.2f} s" if old else None,
        round(old["attach"] / new["attach"], 2) if old else None, f"< {ATTACH_GOAL_S} s")
    rss = new["streaming"]["rss"]
    row("RSS at the end of the measuring process", round(new["rss_end"]), "MB",
        f"growth while streaming {rss[-1] - rss[0]:+.1f} MB" if len(rss) > 1 else None, None, "bounded")
    row("machine load average (1 min) at the end", round(os.getloadavg()[0], 2), "", f"{os.cpu_count()} CPUs")
    return rows


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--measure":
        sys.path.insert(0, sys.argv[2])
        print(json.dumps(measure(tuple(sys.argv[3].split(",")))))
    elif len(sys.argv) > 1 and sys.argv[1] == "--paint":
        sys.path.insert(0, sys.argv[2])
        began = time.perf_counter()
        import devops_tui.app  # noqa: F401 - timed on its own: the import is the same whatever the screen

        imported = time.perf_counter() - began
        print(json.dumps([*asyncio.run(_screen_paint(sys.argv[3], Path(sys.argv[4]), time.perf_counter())), imported]))
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from run_all import print_table

        print_table(run())
