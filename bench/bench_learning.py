"""Does ci-fast learn? The mean reward (and the task rubric's score) of the first and last quarter of a
24-step ci-fast run for seeds 0, 1 and 2 on the built-in tiny model, each in a real `devops-rl train` subprocess.

A learning outcome, not a test: on a loaded 2-core box each run takes minutes, and how far the reward rises
depends on the reward and the preset. `make demo` runs the same recipe with all its steps and validation.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEPS, SEEDS = 24, (0, 1, 2)
GOAL = 1.2  # last quarter's mean reward over the first quarter's, for every seed


def _quarter_means(rows: list[dict], key: str) -> tuple[float, float] | None:
    values = [row["data"][key] for row in rows if isinstance(row["data"].get(key), (int, float))]
    if len(values) < 4:
        return None
    quarter = len(values) // 4
    return sum(values[:quarter]) / quarter, sum(values[-quarter:]) / quarter


def learn(seed: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "rise"
        started = time.perf_counter()
        result = subprocess.run(
            [sys.executable, "-m", "core.cli.main", "train", "--mode", "ci-fast", "--backend", "torch", "--seed", str(seed),
             "--set", f"trainer.total_training_steps={STEPS}", "--set", "trainer.test_freq=-1",
             "--set", "trainer.save_freq=-1", "--run-dir", str(run_dir)],
            cwd=REPO, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"ci-fast run with seed {seed} failed ({result.returncode}): {result.stderr[-2000:]}")
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
        return {"seconds": time.perf_counter() - started, "steps": len(rows),
                "reward": _quarter_means(rows, "critic/score/mean"), "rubric": _quarter_means(rows, "reward/rubric/mean")}


def run() -> list[dict]:
    rows = []
    for seed in SEEDS:
        out = learn(seed)
        for name, key in (("mean reward", "reward"), ("task rubric score", "rubric")):
            if out[key] is None:
                continue
            first, last = out[key]
            rows.append({"benchmark": "learning",
                         "figure": f"ci-fast {out['steps']} steps, seed {seed}: {name}, last quarter",
                         "value": round(last, 4), "unit": "", "peer": f"first quarter {first:.4f}",
                         "ratio": round(last / first, 2) if first > 0 else None,
                         "goal": f">= {GOAL}x" if key == "reward" else ""})
        rows.append({"benchmark": "learning",
                     "figure": f"ci-fast run wall time, seed {seed} (its SFT warm-start included when not cached yet)",
                     "value": round(out["seconds"], 1), "unit": "s", "peer": "", "ratio": None, "goal": ""})
    return rows


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(Path(__file__).parent))
    from run_all import print_table

    print_table(run())
