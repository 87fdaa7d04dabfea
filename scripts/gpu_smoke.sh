#!/usr/bin/env bash
# GPU smoke test of the verl backend: a few verl GRPO steps with a small model, then checks of the run folder.
# Run on a GPU box after `EXTRAS=gpu,test scripts/bootstrap.sh`. Knobs: MODEL, STEPS, GPUS, RUNS_DIR, RAY_ADDRESS.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
STEPS=${STEPS:-2}
GPUS=${GPUS:-1}
export DEVOPS_RL_RUNS_DIR=${RUNS_DIR:-$(mktemp -d /tmp/devops-rl-gpu-smoke.XXXXXX)}
RUN_DIR="$DEVOPS_RL_RUNS_DIR/gpu-smoke"

echo "gpu-smoke: verl available? $("$PY" -c 'from core.training.verl_backend.detect import verl_available; print(verl_available())')"
"$PY" -m core.cli.main config verl --preset ci-fast --set "actor_rollout_ref.model.path=$MODEL" >/dev/null

args=(train --backend verl --mode ci-fast --model "$MODEL" --run-dir "$RUN_DIR"
      --set "trainer.total_training_steps=$STEPS" --set "trainer.save_freq=$STEPS" --set "trainer.test_freq=$STEPS"
      --set "trainer.n_gpus_per_node=$GPUS" --set "data.max_prompt_length=1536" --set "data.max_response_length=256"
      --set "data.truncation=left")
[ -n "${RAY_ADDRESS:-}" ] && args+=(--ray-address "$RAY_ADDRESS")
echo "gpu-smoke: devops-rl ${args[*]}"
started=$(date +%s)
"$PY" -m core.cli.main "${args[@]}"
echo "gpu-smoke: training took $(( $(date +%s) - started )) s"

"$PY" - "$RUN_DIR" "$STEPS" <<'EOF'
import json, sys
from pathlib import Path

from core.rewards import DIMENSIONS, PENALTIES
from core.runs import RunDirectory, read_jsonl

run, steps = RunDirectory.open(sys.argv[1]), int(sys.argv[2])
problems = []
meta = run.meta()
if meta["status"] != "finished":
    problems.append(f"status is {meta['status']}: {meta.get('message')}")
metrics = read_jsonl(run.metrics_path)
if [r["step"] for r in metrics if r["step"] > 0] != list(range(1, steps + 1)):
    problems.append(f"metrics steps {[r['step'] for r in metrics]}, expected 1..{steps}")
for record in metrics:
    data = record["data"]
    if record["step"] == 0:
        continue  # verl's validation before training
    for key in ("actor/pg_loss", "critic/score/mean", "response_length/mean", "timing_s/step",
                *(f"reward/{name}/mean" for name in (*DIMENSIONS, *PENALTIES, "final"))):
        if key not in data:
            problems.append(f"step {record['step']}: no {key}")
    if not any(k.startswith("gpu/0/") for k in data):
        problems.append(f"step {record['step']}: no NVML figures (gpu/0/...)")
events = [e["event"] for e in read_jsonl(run.events_path)]
for kind in ("started", "checkpoint", "validation", "finished"):
    if kind not in events:
        problems.append(f"no '{kind}' event (events: {events})")
for path in ("verl/config.yaml", "data/train.parquet", "data/val.parquet", f"checkpoints/global_step_{steps}",
             "checkpoints/latest_checkpointed_iteration.txt"):
    if not (run.path / path).exists():
        problems.append(f"missing {path}")
if not read_jsonl(run.samples_path):
    problems.append("no samples")
print("\n".join(f"gpu-smoke: FAIL {p}" for p in problems) or f"gpu-smoke: OK ({run.path})")
sys.exit(1 if problems else 0)
EOF
"$PY" -m core.cli.main tail "$RUN_DIR" --no-log
