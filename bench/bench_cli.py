"""Start-up cost of the CLI: `devops-rl --help` against `python -c "import typer"`, side by side.

Runs are interleaved so both commands see the same machine load; the figure is the median wall time.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROUNDS = 15
GOAL = 1.5


def _time(cmd: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return time.perf_counter() - started


def run() -> list[dict]:
    cli = str(Path(sys.executable).with_name("devops-rl"))
    ours = [cli, "--help"]
    peer = [sys.executable, "-c", "import typer"]
    _time(ours), _time(peer)  # warm the file cache
    ours_s, peer_s = [], []
    for _ in range(ROUNDS):
        ours_s.append(_time(ours))
        peer_s.append(_time(peer))
    ours_med, peer_med = statistics.median(ours_s), statistics.median(peer_s)
    return [{
        "benchmark": "cli",
        "figure": "devops-rl --help (median wall)",
        "value": round(ours_med * 1000, 1),
        "unit": "ms",
        "peer": f"import typer: {peer_med * 1000:.1f} ms",
        "ratio": round(ours_med / peer_med, 2),
        "goal": f"<= {GOAL}x",
    }]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    from run_all import print_table

    print_table(run())
