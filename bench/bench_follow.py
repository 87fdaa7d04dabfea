"""How fast a new step reaches the screen: `devops-rl tail --follow` vs coreutils `tail -F`, and read speed.

Latency: this process appends a step to a run's metrics.jsonl and times until the follower prints it
(both followers read the same folder, interleaved). Throughput: `read_jsonl` vs a bare json.loads loop.
"""

from __future__ import annotations

import json
import os
import queue
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEPS = 25
LINES = 200_000
LATENCY_GOAL_S = 1.0


def _reader(proc: subprocess.Popen) -> queue.Queue:
    lines: queue.Queue = queue.Queue()

    def pump():
        for line in proc.stdout:
            lines.put((time.perf_counter(), line))  # stamped on arrival, so two followers are timed independently

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _wait_for(lines: queue.Queue, needle: str, timeout: float = 30.0) -> float:
    """The arrival time of the first line containing `needle`."""
    deadline = time.monotonic() + timeout
    while True:
        arrived, line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
        if needle in line:
            return arrived


def _latencies() -> tuple[list[float], list[float]]:
    sys.path.insert(0, str(REPO))
    from core.runs import RunDirectory, append_jsonl
    from core.training.config import load_config

    root = Path(tempfile.mkdtemp(prefix="bench-follow-"))
    env = {**os.environ, "DEVOPS_RL_RUNS_DIR": str(root), "HF_HUB_OFFLINE": "1"}
    run = RunDirectory.create(root, mode="bench", backend="torch", config=load_config("ci-fast"), run_id="bench")
    ours = subprocess.Popen([sys.executable, "-m", "core.cli.main", "tail", "bench", "--follow", "--no-log"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    peer = subprocess.Popen(["tail", "-F", "-n", "0", str(run.metrics_path)], stdout=subprocess.PIPE, text=True)
    ours_lines, peer_lines = _reader(ours), _reader(peer)
    ours_s, peer_s = [], []
    try:
        append_jsonl(run.metrics_path, {"step": 0, "data": {"critic/score/mean": 0.5}})  # both followers are up
        _wait_for(ours_lines, " 0.5")
        _wait_for(peer_lines, '"step": 0')
        pauses = random.Random(0)
        for step in range(1, STEPS + 1):
            time.sleep(pauses.uniform(0, 0.5))  # land anywhere in the follower's poll cycle, as a trainer would
            reward = 0.001 * step + 0.1234
            started = time.perf_counter()
            append_jsonl(run.metrics_path, {"step": step, "data": {"critic/score/mean": reward}})
            ours_s.append(_wait_for(ours_lines, f"{reward:.4g}") - started)
            peer_s.append(_wait_for(peer_lines, f'"step": {step},') - started)
        run.set_status("finished")
        ours.wait(timeout=30)
    finally:
        for proc in (ours, peer):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc.stdout.close()
        shutil.rmtree(root, ignore_errors=True)
    return ours_s, peer_s


def _read_speed() -> tuple[float, float]:
    from core.runs import read_jsonl

    folder = Path(tempfile.mkdtemp(prefix="bench-read-"))
    path = folder / "metrics.jsonl"
    data = {f"actor/metric_{i}": i * 0.5 for i in range(20)}
    path.write_text("".join(json.dumps({"step": s, "data": data}) + "\n" for s in range(LINES)))
    try:
        started = time.perf_counter()
        assert len(read_jsonl(path)) == LINES
        ours = time.perf_counter() - started
        started = time.perf_counter()
        assert len([json.loads(line) for line in path.read_text().splitlines()]) == LINES
        peer = time.perf_counter() - started
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return LINES / ours, LINES / peer


def run() -> list[dict]:
    rows = []
    if shutil.which("tail"):
        ours_s, peer_s = _latencies()
        ours_med = statistics.median(ours_s)
        rows.append({
            "benchmark": "follow",
            "figure": "new step -> printed by tail --follow (median)",
            "value": round(ours_med * 1000, 1),
            "unit": "ms",
            "peer": f"coreutils tail -F (inotify, raw lines): {statistics.median(peer_s) * 1000:.1f} ms",
            "ratio": round(ours_med / LATENCY_GOAL_S, 2),
            "goal": f"< {LATENCY_GOAL_S:.0f} s (ratio = value / goal)",
        })
        rows.append({
            "benchmark": "follow",
            "figure": f"new step -> printed (worst of {len(ours_s)})",
            "value": round(max(ours_s) * 1000, 1),
            "unit": "ms",
            "peer": f"tail -F: {max(peer_s) * 1000:.1f} ms",
            "ratio": round(max(ours_s) / LATENCY_GOAL_S, 2),
            "goal": f"< {LATENCY_GOAL_S:.0f} s",
        })
    ours_rate, peer_rate = _read_speed()
    rows.append({
        "benchmark": "follow",
        "figure": f"read_jsonl, {LINES:,} metric lines",
        "value": round(ours_rate),
        "unit": "lines/s",
        "peer": f"bare json.loads loop: {peer_rate:,.0f} lines/s",
        "ratio": round(ours_rate / peer_rate, 2),
        "goal": ">= 0.8x",
    })
    return rows


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    from run_all import print_table

    print_table(run())
