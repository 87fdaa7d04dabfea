#!/usr/bin/env bash
# GPU smoke test of the verl backend, offline, meant to finish in under ten minutes on one GPU: a probe of
# what verl needs, 2 GRPO steps (validation and a checkpoint at step 2), a resumed third step, and checks of
# the run folder after each run. Run it on a GPU box after `EXTRAS=gpu,test scripts/bootstrap.sh`.
#
#   scripts/gpu_smoke.sh [--model DIR] [--plan]
#
# --model DIR  a local model folder (default: a small Qwen2-shaped model with head_dim 64, built here)
# --plan       print the environment and commands it would run, then exit (no probe, no GPU needed)
# Knobs: GPUS (1), LR (1e-6), RUNS_DIR (a new folder under /tmp), PY (.venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."

export HF_HUB_OFFLINE=1 # nothing from a model hub: the model is built here or is a local folder
PY=${PY:-.venv/bin/python}
GPUS=${GPUS:-1}
LR=${LR:-1e-6} # the default preset's rate for real models; ci-fast's own 5e-5 is for the tiny model after its warm-start
STEPS=2
MODEL=""
PLAN=0
while [ $# -gt 0 ]; do
  case "$1" in
  --model)
    MODEL=${2:?--model needs a model folder}
    shift 2
    ;;
  --plan)
    PLAN=1
    shift
    ;;
  *)
    echo "gpu-smoke: unknown argument '$1'; use --model DIR or --plan" >&2
    exit 2
    ;;
  esac
done
RUNS=${RUNS_DIR:-/tmp/devops-rl-gpu-smoke.$$}
RUN_DIR="$RUNS/gpu-smoke"

# ci-fast's small batches; prompts of up to 1024 tokens checked before the run (truncation=error) so no
# system prompt is cut; vLLM without CUDA graphs (enforce_eager) starts in seconds.
common=(--backend verl --mode ci-fast --run-dir "$RUN_DIR"
  --set "actor_rollout_ref.actor.optim.lr=$LR" --set "trainer.n_gpus_per_node=$GPUS"
  --set "data.max_prompt_length=1024" --set "data.truncation=error"
  --set "trainer.save_freq=$STEPS" --set "trainer.test_freq=$STEPS"
  --set "verl_overrides.actor_rollout_ref.rollout.enforce_eager=true")
resume=(train "${common[@]}" --resume --set "trainer.total_training_steps=$((STEPS + 1))")

if [ "$PLAN" = 1 ]; then
  echo "HF_HUB_OFFLINE=$HF_HUB_OFFLINE"
  echo "devops-rl train ${common[*]} --model ${MODEL:-<$PY -m core.training.verl_backend.smoke model>} --set trainer.total_training_steps=$STEPS"
  echo "devops-rl ${resume[*]}"
  exit 0
fi

echo "gpu-smoke: probe"
started=$(date +%s)
if ! "$PY" -m core.training.verl_backend.smoke probe; then
  echo "gpu-smoke: stopped before training; nothing was run" >&2
  exit 2
fi
echo "gpu-smoke: probe took $(($(date +%s) - started)) s"

if [ -z "$MODEL" ]; then
  MODEL=$("$PY" -m core.training.verl_backend.smoke model)
  echo "gpu-smoke: built model $MODEL"
elif [ ! -f "$MODEL/config.json" ]; then
  echo "gpu-smoke: --model $MODEL: no config.json there; pass a save_pretrained folder" >&2
  exit 2
fi
mkdir -p "$RUNS"

phase() { # phase NAME COMMAND...: run it, say how long it took
  local name=$1 began
  shift
  began=$(date +%s)
  echo "gpu-smoke: $name: $*"
  "$@"
  echo "gpu-smoke: $name took $(($(date +%s) - began)) s"
}

phase "train $STEPS steps" "$PY" -m core.cli.main train "${common[@]}" --model "$MODEL" --set "trainer.total_training_steps=$STEPS"
phase "check" "$PY" -m core.training.verl_backend.smoke check "$RUN_DIR" "$STEPS"
phase "resume for step $((STEPS + 1))" "$PY" -m core.cli.main "${resume[@]}"
phase "check" "$PY" -m core.training.verl_backend.smoke check "$RUN_DIR" "$((STEPS + 1))" "$STEPS"
"$PY" -m core.cli.main tail "$RUN_DIR" --no-log
echo "gpu-smoke: OK in $(($(date +%s) - started)) s ($RUN_DIR)"
