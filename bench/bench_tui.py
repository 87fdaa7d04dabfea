"""Cockpit smoothness: event-loop lag of the Live screen under a fast producer, first paint, memory.

A producer process appends 20 steps/s and 1,000 log lines/s to a run folder for 30 s while the app
(headless, 120x40) follows it; the peer is the same app redrawing on every message instead of once a second.
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
sys.path.insert(0, str(ROOT))

DURATION_S = float(os.environ.get("BENCH_TUI_SECONDS", "30"))
HISTORY_ROWS = 100_000
LAG_GOAL_MS = 50.0
PAINT_GOAL_S = 1.5
PAINT_ROUNDS = 3  # median: a shared machine's load swings single start-ups a lot

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
        m.write(json.dumps({"step": step, "data": {k: math.sin(step / 50 + i) for i, k in enumerate(keys)}}) + "\n")
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
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _lag_run(folder: Path, eager: bool) -> dict:
    """Follow a producer for DURATION_S; `eager` redraws every chart on every message (the peer)."""
    from devops_tui.app import CockpitApp
    from devops_tui.screens.live import LiveScreen

    run = folder / ("eager" if eager else "cockpit")
    run.mkdir()
    script = folder / "producer.py"
    script.write_text(PRODUCER)
    app = CockpitApp(attach=run, runs_root=folder)
    lags: list[float] = []
    rss: list[float] = []
    original = LiveScreen.on_run_data_ready
    if eager:
        def redraw_every_message(screen, message) -> None:
            original(screen, message)
            screen._drawn_version = -1
            screen.redraw()

        LiveScreen.on_run_data_ready = redraw_every_message  # type: ignore[method-assign]
    try:
        return await _follow_producer(app, run, script, lags, rss)
    finally:
        LiveScreen.on_run_data_ready = original  # type: ignore[method-assign]


async def _follow_producer(app, run: Path, script: Path, lags: list[float], rss: list[float]) -> dict:
    async with app.run_test(size=(120, 40)) as pilot:
        live = app.screen
        producer = subprocess.Popen([sys.executable, str(script), str(run), str(DURATION_S)])
        started = time.perf_counter()
        next_rss = started + 5
        try:
            while producer.poll() is None:
                before = time.perf_counter()
                await asyncio.sleep(0.01)
                lags.append(time.perf_counter() - before - 0.01)
                if time.perf_counter() >= next_rss:
                    rss.append(_rss_mb())
                    next_rss += 5
        finally:
            producer.wait(30)
        await pilot.pause(1.0)
        steps, log_lines, redraws = live.state.step, live.query_one("#live-log").line_count, live.redraws
    return {"lags": lags, "rss": rss, "steps": steps, "log_lines": log_lines, "redraws": redraws,
            "seconds": time.perf_counter() - started}


def _write_history(run: Path, rows: int) -> None:
    run.mkdir()
    dims = ("automation", "reliability", "security", "observability", "documentation", "expected_outputs")
    keys = [f"reward/{d}/mean" for d in dims] + ["reward/final/mean", "actor/pg_loss", "actor/ppo_kl",
                                                 "actor/entropy", "actor/grad_norm", "critic/score/mean",
                                                 "timing_s/step", "perf/throughput"]
    (run / "meta.json").write_text(json.dumps({"run_id": run.name, "status": "finished", "total_steps": rows}))
    with open(run / "metrics.jsonl", "w") as handle:
        for step in range(1, rows + 1):
            data = {k: round(math.sin(step / 500 + i), 5) for i, k in enumerate(keys)}
            handle.write(json.dumps({"step": step, "data": data}) + "\n")


async def _first_paint(run: Path) -> tuple[float, int]:
    from devops_tui.app import CockpitApp

    started = time.perf_counter()
    app = CockpitApp(attach=run, runs_root=run.parent)
    async with app.run_test(size=(120, 40)) as pilot:
        chart = app.screen.query_one("#chart-reward-0")
        while not (chart.draws and chart._series[0] is not None and len(chart._series[0])):
            await pilot.pause(0.01)
        painted = time.perf_counter() - started
        points = len(chart._series[0])
    return painted, points


def run() -> list[dict]:
    from core.runs import read_jsonl

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rss_start = _rss_mb()
        ours = asyncio.run(_lag_run(folder, eager=False))
        peer = asyncio.run(_lag_run(folder, eager=True))
        history = folder / "history"
        _write_history(history, HISTORY_ROWS)
        size_mb = (history / "metrics.jsonl").stat().st_size / 2**20
        paints = [asyncio.run(_first_paint(history)) for _ in range(PAINT_ROUNDS)]
        paint_s, points = statistics.median(p[0] for p in paints), paints[0][1]
        read_started = time.perf_counter()
        read_jsonl(history / "metrics.jsonl")
        read_all_s = time.perf_counter() - read_started
    ms = lambda v: round(v * 1000, 1)  # noqa: E731
    p50, p95, worst = (_percentile(ours["lags"], q) for q in (0.5, 0.95, 1.0))
    peer_p95 = _percentile(peer["lags"], 0.95)
    growth = ours["rss"][-1] - ours["rss"][0] if len(ours["rss"]) > 1 else 0.0
    lines = ours["log_lines"]
    rows = [
        {"benchmark": "tui", "figure": f"Live lag p50 ({DURATION_S:.0f}s, 20 steps/s + 1k lines/s)", "value": ms(p50),
         "unit": "ms", "peer": f"redraw-every-message p50 {ms(_percentile(peer['lags'], 0.5))} ms", "ratio": None,
         "goal": None},
        {"benchmark": "tui", "figure": "Live lag p95", "value": ms(p95), "unit": "ms",
         "peer": f"redraw-every-message p95 {ms(peer_p95)} ms",
         "ratio": round(peer_p95 / p95, 2) if p95 > 0 else None, "goal": f"< {LAG_GOAL_MS:.0f} ms"},
        {"benchmark": "tui", "figure": "Live lag max", "value": ms(worst), "unit": "ms",
         "peer": f"redraw-every-message max {ms(max(peer['lags']))} ms", "ratio": None, "goal": None},
        {"benchmark": "tui", "figure": "steps / log lines shown / redraws", "value": ours["steps"], "unit": "steps",
         "peer": f"{lines} lines kept, {ours['redraws']} redraws (peer {peer['redraws']})", "ratio": None,
         "goal": "all steps"},
        {"benchmark": "tui", "figure": f"first paint, {HISTORY_ROWS:,} rows ({size_mb:.0f} MB), median of {PAINT_ROUNDS}", "value": round(paint_s, 2),
         "unit": "s", "peer": f"read_jsonl of the whole file {read_all_s:.2f} s ({points} points drawn)",
         "ratio": round(read_all_s / paint_s, 2), "goal": f"< {PAINT_GOAL_S} s"},
        {"benchmark": "tui", "figure": "RSS at the end (both lag runs + first paints)", "value": round(_rss_mb(), 0), "unit": "MB",
         "peer": f"at start {rss_start:.0f} MB; growth over the run {growth:+.1f} MB "
                 f"({DURATION_S * 1000:,.0f} log lines written)", "ratio": None, "goal": "bounded"},
    ]
    load = os.getloadavg()[0]
    rows.append({"benchmark": "tui", "figure": "machine load average (1 min) at the end", "value": round(load, 2),
                 "unit": "", "peer": f"{os.cpu_count()} CPUs", "ratio": None, "goal": None})
    return rows


if __name__ == "__main__":
    from run_all import print_table

    print_table(run())
