"""Seconds per GRPO step of the native torch backend against TRL's GRPOTrainer, side by side in one run.

Same built-in tiny model, same 4 prompts x n=4, 64 new tokens, one PPO epoch, same reward; each side runs
in its own process (so peak RSS is its own) and reports the median step, generation and update tokens/s.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROMPTS, N, NEW_TOKENS, LR = 4, 4, 64, 1e-4
WARMUP, STEPS = 1, 4
GOAL = 1.5


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _records():
    from tasks import load_tasks, split_tasks, to_record
    from tasks.prompt import system_prompt

    train, _ = split_tasks(load_tasks(), 0.2, 0)
    return [to_record(t, system_prompt()) for t in train[:PROMPTS]]


def native_side() -> dict:
    from core.runs import RunDirectory, read_jsonl
    from core.training.native import NativeTrainer
    from core.training.train import config_for_mode

    overrides = [
        f"data.train_batch_size={PROMPTS}", f"actor_rollout_ref.rollout.n={N}", f"data.max_response_length={NEW_TOKENS}",
        "data.max_prompt_length=2048", "data.shuffle=false", f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={PROMPTS * N}", "actor_rollout_ref.actor.ppo_epochs=1",
        f"actor_rollout_ref.actor.optim.lr={LR}", "actor_rollout_ref.actor.use_kl_loss=false",
        "actor_rollout_ref.actor.clip_ratio_high=0.28", "actor_rollout_ref.actor.loss_agg_mode=token-mean",
        f"trainer.total_training_steps={WARMUP + STEPS}", "trainer.save_freq=-1", "trainer.test_freq=-1",
        "trainer.val_before_train=false", "devops.sft_warmstart_steps=0", "devops.device=cpu", "devops.samples_per_step=0",
    ]
    cfg = config_for_mode("ci-fast", overrides=overrides, backend="torch")
    with tempfile.TemporaryDirectory() as tmp:
        run = RunDirectory.create(Path(tmp), mode="bench", backend="torch", config=cfg)
        trainer = NativeTrainer(cfg, mode="bench", run_dir=run)
        records = _records()
        # The same 4 prompts every step, as on the TRL side.
        original = trainer._prepare

        def prepare() -> None:
            original()
            trainer.stream.take = lambda count: records[:count]

        trainer._prepare = prepare
        trainer.run()
        rows = [r["data"] for r in read_jsonl(run.metrics_path)][WARMUP:]
    step = [r["timing_s/step"] for r in rows]
    gen = [r["timing_s/gen"] for r in rows]
    update = [r["timing_s/update_actor"] for r in rows]
    reward = [r["timing_s/reward"] for r in rows]
    resp_tokens = [r["response_length/mean"] * PROMPTS * N for r in rows]
    all_tokens = [r["perf/total_num_tokens"] for r in rows]
    return {
        "step_s": statistics.median(step),
        "gen_tok_s": sum(resp_tokens) / sum(gen),
        "update_tok_s": sum(all_tokens) / sum(update),
        "peak_rss_mb": _peak_rss_mb(),
        "share": {"gen": sum(gen) / sum(step), "update": sum(update) / sum(step), "reward": sum(reward) / sum(step)},
    }


def trl_side() -> dict:
    import warnings

    warnings.filterwarnings("ignore")
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from core.rewards import score
    from core.training.tiny_model import ensure_tiny_model

    model_path = ensure_tiny_model()
    records = _records()
    rows = [{"prompt": r["prompt"], "task_json": json.dumps(r["task"])} for r in records] * (WARMUP + STEPS)

    def reward(completions, task_json, **_):
        return [score(c[0]["content"] if isinstance(c, list) else c, json.loads(t)).final_reward
                for c, t in zip(completions, task_json)]

    times: list[float] = []
    gen_times: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *args, **kwargs):
            self.started = time.perf_counter()

        def on_step_end(self, *args, **kwargs):
            times.append(time.perf_counter() - self.started)

    with tempfile.TemporaryDirectory() as tmp:
        args = GRPOConfig(
            output_dir=tmp, per_device_train_batch_size=PROMPTS * N, num_generations=N, max_completion_length=NEW_TOKENS,
            num_iterations=1, beta=0.0, learning_rate=LR, temperature=1.0, top_p=1.0, epsilon=0.2, epsilon_high=0.28,
            loss_type="dapo", use_cpu=True, report_to="none", logging_steps=1, save_strategy="no",
            max_steps=WARMUP + STEPS, bf16=False, seed=0, disable_tqdm=True, shuffle_dataset=False,
        )
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        tokenizer.padding_side = "left"
        trainer = GRPOTrainer(model=str(model_path), reward_funcs=reward, args=args, train_dataset=Dataset.from_list(rows),
                              processing_class=tokenizer, callbacks=[StepTimer()])
        generate = trainer._generate

        def timed_generate(*a, **k):
            started = time.perf_counter()
            try:
                return generate(*a, **k)
            finally:
                gen_times.append(time.perf_counter() - started)

        trainer._generate = timed_generate
        trainer.train()
        logs = [h for h in trainer.state.log_history if "completions/mean_length" in h]
    step, gen = times[WARMUP:], gen_times[WARMUP:]
    lengths = [h["completions/mean_length"] * PROMPTS * N for h in logs][WARMUP:]
    totals = [h["num_tokens"] for h in logs]
    per_step_tokens = [b - a for a, b in zip(totals, totals[1:])][WARMUP - 1 :]  # num_tokens is cumulative; WARMUP >= 1
    update = [s - g for s, g in zip(step, gen)]
    return {
        "step_s": statistics.median(step),
        "gen_tok_s": sum(lengths) / sum(gen),
        "update_tok_s": sum(per_step_tokens) / sum(update),
        "peak_rss_mb": _peak_rss_mb(),
    }


def _side(name: str) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.setdefault("DEVOPS_RL_CACHE_DIR", str(Path(tempfile.gettempdir()) / "devops-rl-bench-cache"))
    env.setdefault("DEVOPS_RL_LOG_DIR", tempfile.mkdtemp(prefix="devops-rl-bench-logs-"))
    out = subprocess.run([sys.executable, __file__, "--side", name], cwd=REPO, env=env, capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{name} side failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run() -> list[dict]:
    ours, trl = _side("native"), _side("trl")
    ratio = trl["step_s"] / ours["step_s"]
    share = ours["share"]
    return [
        {"benchmark": "grpo", "figure": f"seconds per GRPO step ({PROMPTS}x{N}, {NEW_TOKENS} tok)",
         "value": round(ours["step_s"], 3), "unit": "s", "peer": f"TRL GRPOTrainer: {trl['step_s']:.3f} s",
         "ratio": round(ratio, 2), "goal": f">= {GOAL}x faster"},
        {"benchmark": "grpo", "figure": "generation tokens/s", "value": round(ours["gen_tok_s"], 1), "unit": "tok/s",
         "peer": f"TRL: {trl['gen_tok_s']:.1f}", "ratio": round(ours["gen_tok_s"] / trl["gen_tok_s"], 2), "goal": ""},
        {"benchmark": "grpo", "figure": "update tokens/s (prompt+response)", "value": round(ours["update_tok_s"], 1),
         "unit": "tok/s", "peer": f"TRL: {trl['update_tok_s']:.1f}",
         "ratio": round(ours["update_tok_s"] / trl["update_tok_s"], 2), "goal": ""},
        {"benchmark": "grpo", "figure": "peak RSS", "value": round(ours["peak_rss_mb"], 0), "unit": "MB",
         "peer": f"TRL: {trl['peak_rss_mb']:.0f} MB", "ratio": round(ours["peak_rss_mb"] / trl["peak_rss_mb"], 2), "goal": ""},
        {"benchmark": "grpo", "figure": "native step: gen / update / reward share", "value":
         f"{share['gen']:.0%} / {share['update']:.0%} / {share['reward']:.0%}", "unit": "", "peer": "", "ratio": None,
         "goal": ""},
    ]


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    if len(sys.argv) == 3 and sys.argv[1] == "--side":
        result = native_side() if sys.argv[2] == "native" else trl_side()
        print(json.dumps(result))
    else:
        sys.path.insert(0, str(Path(__file__).parent))
        from run_all import print_table

        print_table(run())
