"""The task splits as verl's RL parquet files (`data/train.parquet`, `data/val.parquet` in the run folder).

One row per task: `data_source`, `prompt` (chat messages with the agent's system prompt), `ability`,
`reward_model` {`style`, `ground_truth`} and `extra_info` {task id, type, difficulty, index, split}.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from core.errors import UserError
from core.files import atomic_path

log = logging.getLogger(__name__)

DATA_SOURCE_PREFIX = "devops/"  # verl groups validation metrics by data_source: one group per task type


TASKS_FILE = "tasks.json"  # beside the parquet files: each task and its reward weights once, by task id


def task_row(task, index: int, split: str, system_prompt: str, reward_weights: dict[str, float] | None = None,
             tasks_file: Path | None = None) -> dict:
    """One verl RL row for a task; `ground_truth` is JSON naming what the reward needs to grade an answer: the
    task id and the `tasks_file` that holds it (verl copies ground_truth into every rollout dump row, so the
    task itself is stored once), or without a `tasks_file` the task and its weights themselves."""
    from tasks import to_record

    record = to_record(task, system_prompt)
    ground_truth = ({"task_id": task.id, "tasks_file": str(Path(tasks_file).absolute())} if tasks_file is not None
                    else {"task": record["task"], "reward_weights": dict(reward_weights or {})})
    return {
        "data_source": DATA_SOURCE_PREFIX + task.type,
        "prompt": [{"role": m["role"], "content": m["content"]} for m in record["prompt"]],
        "ability": task.type,
        "reward_model": {"style": "rule", "ground_truth": json.dumps(ground_truth, ensure_ascii=False, sort_keys=True)},
        "extra_info": {
            "task_id": task.id,
            "type": task.type,
            "difficulty": task.difficulty,
            "index": index,
            "split": split,
        },
    }


def split_rows(cfg, tasks=None, tasks_file: Path | None = None) -> dict[str, list[dict]]:
    """{"train": rows, "val": rows} for the config's split (devops.tasks with their weights, seed, val_fraction,
    dedup_threshold, holdout) and per-type reward weights. A curriculum's stages are written one after the other,
    each with its weights: verl reads one train.parquet, so its stages are one mix there (docs/training.md)."""
    from core.training.curriculum import training_stages
    from tasks.prompt import system_prompt

    stages, val, _ = training_stages(cfg.devops, tasks)
    train = [t for stage in stages for t in stage.tasks]
    if len(stages) > 1:
        log.warning("verl reads one train.parquet: the %d curriculum stages are written in order as one mix "
                    "(stages switch at their steps only on the torch backend)", len(stages))
    if not train:
        raise UserError("tasks: no training tasks; add tasks to the task files (devops.tasks, see docs/tasks.md)")
    if not val:
        raise UserError(f"devops.val_fraction: {cfg.devops.val_fraction}: leaves no validation tasks, and verl "
                        "needs at least one; set devops.val_fraction=0.2 (or add tasks)")
    prompt = system_prompt()
    weights = cfg.devops.reward_weights
    return {
        split: [task_row(t, i, split, prompt, weights.get(t.type), tasks_file) for i, t in enumerate(chosen)]
        for split, chosen in (("train", train), ("val", val))
    }


def export_parquet(cfg, out_dir: Path, tasks=None) -> dict[str, Path]:
    """Write `train.parquet`, `val.parquet` and the `tasks.json` their ground truth names into `out_dir`
    (atomically); returns {"train": path, "val": path, "tasks": path}."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from core.files import write_atomic
    from tasks.sources import load_sources

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    chosen = load_sources(cfg.devops.tasks) if tasks is None else list(tasks)
    graded = list(chosen)
    if cfg.devops.curriculum:  # family instances and task files of the stages, graded from the same table
        from core.training.curriculum import distinct_tasks, training_stages

        known = {t.id for t in chosen}
        graded += [t for t in distinct_tasks(training_stages(cfg.devops, chosen)[0]) if t.id not in known]
    weights = cfg.devops.reward_weights
    table = {t.id: {"task": t.to_dict(), "reward_weights": dict(weights.get(t.type) or {})} for t in graded}
    write_atomic(out_dir / TASKS_FILE, json.dumps(table, ensure_ascii=False, sort_keys=True))
    written: dict[str, Path] = {"tasks": out_dir / TASKS_FILE}
    for split, rows in split_rows(cfg, chosen, out_dir / TASKS_FILE).items():
        path = out_dir / f"{split}.parquet"
        with atomic_path(path) as tmp:
            pq.write_table(pa.Table.from_pylist(rows), tmp)
        written[split] = path
        log.info("wrote %d %s rows to %s", len(rows), split, path)
    return written


def row_count(path: Path) -> int:
    """Rows of a parquet file (from its footer)."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows


def prompt_token_lengths(rows: list[dict], tokenizer) -> list[int]:
    """Each row's prompt in tokens as verl's agent loop builds it: the chat template with the generation prompt."""
    return [len(tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True,
                                              return_dict=False)) for row in rows]


def check_prompt_fit(cfg) -> None:
    """With `data.truncation: error`, UserError naming the longest prompt when it exceeds data.max_prompt_length
    (verl's agent loop would cut it from the left, system prompt first, with a warning in the log)."""
    if cfg.data.truncation != "error":
        return
    from transformers import AutoTokenizer

    from core.training.tiny_model import resolve_model_path

    model = cfg.actor_rollout_ref.model
    source = resolve_model_path(model.path) if model.path.startswith("builtin:") else model.path  # a hub id: as verl
    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=model.trust_remote_code)
    rows = [row for split in split_rows(cfg).values() for row in split]
    lengths = prompt_token_lengths(rows, tokenizer)
    longest = max(range(len(rows)), key=lengths.__getitem__)
    if lengths[longest] > cfg.data.max_prompt_length:
        raise UserError(f"data.max_prompt_length: {cfg.data.max_prompt_length}: task "
                        f"'{rows[longest]['extra_info']['task_id']}' has a {lengths[longest]}-token prompt (system "
                        f"prompt + task) and data.truncation is error; raise data.max_prompt_length to "
                        f"{lengths[longest]} or more, or set data.truncation=left")
