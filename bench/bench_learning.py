"""Does GRPO learn on a CPU? A short recipe on drills (tasks/families) with the built-in tiny model, beside a
no-learning control (learning rate 1e-12) on the same tasks in the same order, for seeds 0, 1 and 2; reports the
first-quarter and last-quarter mean reward (`critic/score/mean`) of both.

Each run is a real `devops-rl train --mode ci-fast --backend torch` in a subprocess whose task set is the drill
instances, written to a task YAML file in a temporary folder: the child points `tasks.DATA_DIR` at that folder
before the CLI starts, so the training code loads them exactly as it loads tasks/data (no change to core/training).
Both arms share the SFT warm-start (cached by tasks and settings). A learning outcome, not a test: run it with
`nice -n 19 python bench/bench_learning.py [--steps N]`; each run takes minutes on a loaded 2-core box.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SEEDS = (0, 1, 2)
CONTROL_LR = 1e-12
# The recipe: a few drill families, a few instances each, all of them training tasks (no validation split).
FAMILIES = ("drill-k8s-scale", "drill-inc-rollout-undo", "drill-db-index", "drill-cost-log-retention")
PER_FAMILY = 3
RECIPE = {"lr": 2e-4, "steps": 20, "sft_steps": 100, "response": 96, "n": 4, "families": FAMILIES, "per_family": PER_FAMILY}
GOAL_RATIO, GOAL_RISE = 1.5, 0.10  # issue 22: last quarter >= 1.5x the control's, and +0.10 over its own first


def write_drills(folder: Path, families: tuple[str, ...] = FAMILIES, per_family: int = PER_FAMILY) -> Path:
    """The recipe's tasks as `folder/drills.yaml` (instances 0..per_family-1 of each family, seed 0)."""
    sys.path.insert(0, str(REPO))
    from tasks.families import instances
    from tasks.families.validate import write_task_file

    folder.mkdir(parents=True, exist_ok=True)
    return write_task_file(instances(list(families), seed=0, per_family=per_family), folder / "drills.yaml")


def train_args(run_dir: Path, *, seed: int, lr: float, steps: int, sft_steps: int, response: int, n: int = 4,
               extra: tuple[str, ...] = ()) -> list[str]:
    sets = [f"actor_rollout_ref.actor.optim.lr={lr}", f"trainer.total_training_steps={steps}", "trainer.test_freq=-1",
            "trainer.save_freq=-1", "devops.val_fraction=0", f"devops.sft_warmstart_steps={sft_steps}",
            f"data.max_response_length={response}", f"actor_rollout_ref.rollout.n={n}", *extra]
    args = ["train", "--mode", "ci-fast", "--backend", "torch", "--seed", str(seed), "--run-dir", str(run_dir)]
    for item in sets:
        args += ["--set", item]
    return args


def run_child(task_dir: Path, args: list[str]) -> subprocess.CompletedProcess:
    """`devops-rl <args>` in a subprocess whose built-in task set is the YAML files of `task_dir`."""
    return subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(task_dir), "--", *args],
                          cwd=REPO, capture_output=True, text=True)


def quarter_means(run_dir: Path, key: str = "critic/score/mean") -> tuple[float, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    values = [row["data"][key] for row in rows if isinstance(row.get("data", {}).get(key), (int, float))]
    if len(values) < 4:
        raise RuntimeError(f"{run_dir}: {len(values)} steps logged {key}; need at least 4")
    quarter = len(values) // 4
    return sum(values[:quarter]) / quarter, sum(values[-quarter:]) / quarter


def learn(task_dir: Path, work: Path, seed: int, lr: float, recipe: dict) -> dict:
    run_dir = work / f"seed{seed}-lr{lr:g}"
    started = time.perf_counter()
    result = run_child(task_dir, train_args(run_dir, seed=seed, lr=lr, steps=recipe["steps"],
                                            sft_steps=recipe["sft_steps"], response=recipe["response"], n=recipe["n"]))
    if result.returncode != 0:
        raise RuntimeError(f"run seed {seed} lr {lr:g} failed ({result.returncode}): {result.stderr[-2000:]}")
    first, last = quarter_means(run_dir)
    return {"seed": seed, "lr": lr, "first": first, "last": last, "seconds": time.perf_counter() - started}


def run(recipe: dict | None = None, seeds: tuple[int, ...] = SEEDS, keep: Path | None = None) -> list[dict]:
    """The table's rows; `keep`: a folder where the run folders stay (else a temporary one)."""
    recipe = {**RECIPE, **(recipe or {})}
    rows = []
    with tempfile.TemporaryDirectory(prefix="devops-rl-learning-") as scratch:
        tmp = keep or scratch
        task_dir = write_drills(Path(tmp) / "tasks", tuple(recipe["families"]), recipe["per_family"]).parent
        for seed in seeds:
            arm = learn(task_dir, Path(tmp), seed, recipe["lr"], recipe)
            control = learn(task_dir, Path(tmp), seed, CONTROL_LR, recipe)
            ratio = arm["last"] / control["last"] if control["last"] > 0 else None
            met = (ratio is not None and ratio >= GOAL_RATIO) and arm["last"] - arm["first"] >= GOAL_RISE
            rows.append({"benchmark": "learning",
                         "figure": f"drills, {recipe['steps']} steps, seed {seed}: recipe (lr {recipe['lr']:g}) "
                                   f"first -> last quarter",
                         "value": round(arm["last"], 4), "unit": "", "ratio": round(ratio, 2) if ratio else None,
                         "peer": f"recipe first {arm['first']:.4f}; control (lr 1e-12) {control['first']:.4f} -> "
                                 f"{control['last']:.4f}",
                         "goal": f">= {GOAL_RATIO}x control and +{GOAL_RISE}: {'met' if met else 'not met'}"})
            rows.append({"benchmark": "learning", "figure": f"wall time of both runs, seed {seed}",
                         "value": round(arm["seconds"] + control["seconds"], 1), "unit": "s", "peer": "",
                         "ratio": None, "goal": ""})
    return rows


def _child(task_dir: str, args: list[str]) -> int:
    sys.path.insert(0, str(REPO))
    import tasks

    tasks.DATA_DIR = Path(task_dir)  # read at call time by load_tasks() and the tiny model's corpus
    from core.cli.main import main

    return main(args)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        sys.exit(_child(sys.argv[2], sys.argv[4:] if sys.argv[3:4] == ["--"] else sys.argv[3:]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=RECIPE["steps"])
    parser.add_argument("--lr", type=float, default=RECIPE["lr"])
    parser.add_argument("--sft-steps", type=int, default=RECIPE["sft_steps"])
    parser.add_argument("--response", type=int, default=RECIPE["response"], help="data.max_response_length")
    parser.add_argument("--n", type=int, default=RECIPE["n"], help="responses per prompt (the GRPO group)")
    parser.add_argument("--families", nargs="+", default=list(FAMILIES))
    parser.add_argument("--per-family", type=int, default=PER_FAMILY)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--keep", type=Path, help="keep the run folders here (to read their curves)")
    options = parser.parse_args()
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(Path(__file__).parent))
    from run_all import print_table

    print_table(run({"steps": options.steps, "lr": options.lr, "sft_steps": options.sft_steps, "n": options.n,
                     "response": options.response,
                     "families": options.families, "per_family": options.per_family},
                    tuple(options.seeds), options.keep))
