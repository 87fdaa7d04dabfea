"""Cost of the verl backend's own layers, each beside the verl operation it wraps, measured in the same run:
config composition + validate_config, the metrics pump against verl's FileLogger, the reward adapter.

CPU only (what a GPU box adds is verl's own time). Medians over interleaved rounds.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROUNDS = 7
PUMP_STEPS = 500

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _median_s(fn, rounds: int = ROUNDS) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _compose_rows() -> list[dict]:
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from core.training.config import load_config
    from core.training.verl_backend.compose import compose_verl_config, verl_config_dir

    cfg = load_config("single-gpu")
    overrides = ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.name=vllm",
                 "actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct", "trainer.n_gpus_per_node=1",
                 "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
                 "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1"]

    def verl_alone():  # what `python -m verl.trainer.main_ppo <overrides>` does before training
        with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
            config = compose(config_name="ppo_trainer", overrides=overrides)
        import contextlib
        import io
        import warnings

        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))

    ours, peer = [], []
    verl_alone(), compose_verl_config(cfg)  # warm imports
    for _ in range(ROUNDS):
        ours.append(_median_s(lambda: compose_verl_config(cfg), 1))
        peer.append(_median_s(verl_alone, 1))
    o, p = statistics.median(ours), statistics.median(peer)
    return [{"benchmark": "verl", "figure": "compose + validate_config (single-gpu)", "value": round(o * 1000, 1),
             "unit": "ms", "peer": f"verl Hydra compose + validate_config: {p * 1000:.1f} ms",
             "ratio": round(o / p, 2), "goal": "<= 1.5x"}]


def _pump_rows() -> list[dict]:
    from verl.utils.tracking import FileLogger

    from core.runs import RunDirectory
    from core.training.config import load_config
    from core.training.verl_backend.follow import MetricsPump

    data = {f"metric/{i}/mean": float(i) for i in range(120)}  # a verl step logs about this many keys
    with tempfile.TemporaryDirectory() as tmp:
        run = RunDirectory.create(Path(tmp), mode="bench", backend="verl", config=load_config("ci-fast"))
        verl_dir = run.path / "verl"
        verl_dir.mkdir()
        os.environ["VERL_FILE_LOGGER_PATH"] = str(verl_dir / "metrics.jsonl")
        writer = FileLogger("bench", "bench")
        started = time.perf_counter()
        for step in range(1, PUMP_STEPS + 1):
            writer.log(dict(data), step)
        write_s = time.perf_counter() - started
        writer.finish()
        pump = MetricsPump(run, verl_dir)
        started = time.perf_counter()
        copied = pump.poll()
        pump_s = time.perf_counter() - started
    assert copied == PUMP_STEPS
    return [{"benchmark": "verl", "figure": f"pump {PUMP_STEPS} steps into the run folder",
             "value": round(pump_s * 1000 / PUMP_STEPS, 3),
             "unit": "ms/step", "peer": f"verl FileLogger write: {write_s * 1000 / PUMP_STEPS:.3f} ms/step",
             "ratio": round(pump_s / write_s, 2), "goal": "< 1 s/step (a verl step takes many s)"}]


def _reward_rows() -> list[dict]:
    from core.rewards import score
    from core.training.verl_backend.data import task_row
    from core.training.verl_backend.reward_fn import compute_score
    from tasks import load_tasks

    tasks = [t for t in load_tasks() if t.reference_answer][:20]
    rows = [task_row(t, i, "train", "s") for i, t in enumerate(tasks)]

    def ours():
        for task, row in zip(tasks, rows):
            compute_score(row["data_source"], task.reference_answer, row["reward_model"]["ground_truth"], row["extra_info"])

    def peer():
        for task in tasks:
            score(task.reference_answer, task)

    ours(), peer()
    o, p = _median_s(ours), _median_s(peer)
    return [{"benchmark": "verl", "figure": "compute_score adapter per answer", "value": round(o * 1000 / len(tasks), 3),
             "unit": "ms", "peer": f"core.rewards.score: {p * 1000 / len(tasks):.3f} ms", "ratio": round(o / p, 2),
             "goal": "<= 1.2x"}]


def run() -> list[dict]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return [*_compose_rows(), *_pump_rows(), *_reward_rows()]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    from run_all import print_table

    print_table(run())
